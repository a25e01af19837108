"""Build the agent loop from the runtime: providers from config, one shared HTTP client.

Every agent ("main" from [agent], the named ones from [agents.NAME]) is an
`AgentSpec` of the one loop; providers are built once and shared by the
chains that name them (with one health record each, as `/status` shows).
`agent_by_name` is how other parts of the daemon (scheduled jobs) run a turn
under a named agent.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeclaw.agent.loop import AgentLoop, AgentRoute, AgentSpec, NamedAgent, UnknownAgent
from edgeclaw.agent.prompt import PromptBuilder
from edgeclaw.agent.providers.base import Provider
from edgeclaw.agent.providers.chain import ProviderChain, ProviderHealth, RetryPolicy
from edgeclaw.agent.providers.http import SharedClient
from edgeclaw.agent.providers.model_info import ModelInfo, ProviderModel
from edgeclaw.agent.subagents import SubagentLimits, SubagentManager
from edgeclaw.agent.tool_selection import board_vocabulary
from edgeclaw.config.schema import NamedAgentConfig
from edgeclaw.daemon.providers import provider_from_config as _provider
from edgeclaw.daemon.runtime import Runtime
from edgeclaw.store.subagents import SubagentStore
from edgeclaw.tools.memory.context import reads_disk
from edgeclaw.tools.runtime.process import ProcessTool


def shared_agent(runtime: Runtime) -> AgentLoop:
    """The daemon's one agent loop, built on first use and shared by every channel."""
    if runtime.agent.loop is None:
        runtime.agent.loop = build_agent(runtime)
    return runtime.agent.loop


def agent_by_name(runtime: Runtime, name: str) -> NamedAgent:
    """One of the daemon's agents, by its name ("main" or an [agents.NAME]), on the shared loop.

    Raises UnknownAgent, naming the configured agents, for any other name.
    """
    loop = shared_agent(runtime)
    if name not in loop.agents:
        raise UnknownAgent(f"no agent named {name!r} (configured: {', '.join(sorted(loop.agents))})")
    return NamedAgent(loop, name)


def build_agent(runtime: Runtime) -> AgentLoop:
    config = runtime.config
    built: dict[str, Provider] = {}
    clients: list[SharedClient] = []
    health: dict[str, ProviderHealth] = {}
    retry = RetryPolicy(
        attempts=config.agent.provider_attempts, max_retry_after_s=config.agent.max_retry_after_s
    )

    def chain_of(names: list[str]) -> ProviderChain:
        for name in names:
            if name not in built:
                if not clients:
                    # One client for every provider: connection pooling, and a single place to close.
                    clients.append(SharedClient())
                    runtime.on_close(clients[0].aclose)
                built[name] = _provider(
                    name, config, runtime.secrets, runtime.registry.scrubber.scrub, clients[0]
                )
        return ProviderChain([built[n] for n in names], retry, health=health)

    facts = {
        "device": runtime.device_id,
        "board": f"{runtime.board.name} ({runtime.board.description})" if runtime.board.description else "",
        "soc": runtime.board.soc,
        "workspace": str(runtime.workspace),
    }
    memory = MemoryPrompt(runtime) if runtime.memory_service.factory is not None else None

    def spec(name: str, named: NamedAgentConfig) -> AgentSpec:
        base = config.agent
        prompt = PromptBuilder(
            runtime.local,  # the administrator's context files; never the workspace's
            facts,
            named.system_prompt if named.system_prompt is not None else base.system_prompt,
            context=memory,
            budget_chars=config.memory.prompt_chars,
            # Only "main" takes the local directory's context files; a named agent's are its stored ones.
            disk_files=reads_disk(name),
        )
        return AgentSpec(
            name,
            chain_of(named.providers if named.providers is not None else base.providers),
            prompt,
            named.max_iterations if named.max_iterations is not None else base.max_iterations,
            named.description,
        )

    main = spec("main", config.agents.get("main", NamedAgentConfig()))
    agent = AgentLoop(
        runtime.registry,
        runtime.sessions,
        main.chain,
        main.prompt,
        max_iterations=main.max_iterations,
        history_budget_tokens=config.agent.history_budget_tokens,
        history_max_messages=config.agent.history_max_messages,
        facts={"device": runtime.device_id, "board": runtime.board.name},
    )
    agent.agents["main"].description = main.description or "the default agent"
    for name, named in config.agents.items():
        if name != "main":
            agent.add_agent(spec(name, named))
    if built:
        agent.model_info = model_info(runtime, list(built), clients[0])
        agent.tool_vocabulary = board_vocabulary(runtime.board)
    agent.routes = [AgentRoute(r.agent, r.channel, r.session) for r in config.agent.routes]
    agent.outlets = runtime.outlets
    if runtime.mcp is not None:
        agent.status_sources.append(runtime.mcp.status_lines)
    process = runtime.registry.get("process")
    if isinstance(process, ProcessTool):
        agent.session_end_hooks.append(process.manager.end_session)
    runtime.on_close(agent.shutdown)
    if runtime.agent.subagents is None:
        runtime.agent.subagents = build_subagents(runtime, agent)
    if runtime.agent.loop is None:
        runtime.agent.loop = agent  # sessions_send's turns go to this loop
    return agent


class MemoryPrompt:
    """The memory's sections of the system prompt, the memory built by the first prompt that asks
    for them, not by the loop: a loop built to answer a slash command, or on a device with no model,
    does not load and open the memory store (about 1.7 MiB) for nothing."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def context_sections(
        self, agent_id: str, user: str, disk: Callable[[str], str | None]
    ) -> list[tuple[str, str]]:
        return self._runtime.memory_service.require().prompt.context_sections(agent_id, user, disk)


def build_subagents(runtime: Runtime, agent: AgentLoop) -> SubagentManager:
    """The subagent manager on this loop: limits from [tools.subagents], state in the database;
    children a previous run left are reported when the channels are up (`Runtime.ready`), running
    ones get the shutdown grace (`Runtime.drain`)."""
    s = runtime.config.tools.subagents
    manager = SubagentManager(
        agent,
        SubagentStore(lambda: runtime.db),
        SubagentLimits(
            max_concurrent=s.max_concurrent,
            max_children=s.max_children,
            max_depth=s.max_depth,
            max_iterations=s.max_iterations,
            timeout_s=s.timeout_s,
            archive_after_s=s.archive_after_s,
            announce_debounce_s=s.announce_debounce_s,
        ),
    )
    runtime.on_ready(manager.recover)
    runtime.on_drain(manager.drain)
    runtime.on_close(manager.aclose)
    return manager


def model_info(runtime: Runtime, names: list[str], client: SharedClient) -> ModelInfo:
    """Each provider's context size: `context_tokens`, else its server's answer (asked on first use);
    also what `doctor` asks a reachable provider's server."""
    info = ModelInfo(client.get)
    for name in names:
        cfg = runtime.config.providers[name]
        info.add(
            ProviderModel(
                name,
                cfg.kind,
                cfg.model,
                cfg.base_url,
                answer_tokens=cfg.max_tokens,
                context_tokens=cfg.context_tokens,
                api_key=runtime.secrets.get(f"providers.{name}", ""),
            )
        )
    return info
