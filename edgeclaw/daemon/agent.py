"""Build the agent loop from the runtime: providers from config, one shared HTTP client."""

from __future__ import annotations

from edgeclaw.agent.loop import AgentLoop
from edgeclaw.agent.prompt import PromptBuilder
from edgeclaw.agent.providers.base import Provider
from edgeclaw.agent.providers.chain import ProviderChain, RetryPolicy
from edgeclaw.agent.providers.http import SharedClient
from edgeclaw.daemon.runtime import Runtime
from edgeclaw.tools.process import ProcessTool


def shared_agent(runtime: Runtime) -> AgentLoop:
    """The daemon's one agent loop, built on first use and shared by every channel."""
    if runtime._agent is None:
        runtime._agent = build_agent(runtime)
    return runtime._agent


def build_agent(runtime: Runtime) -> AgentLoop:
    config = runtime.config
    providers: list[Provider] = []
    if config.agent.providers:
        # One client for every provider: connection pooling, and a single place to close.
        client = SharedClient()
        runtime.on_close(client.aclose)
        for name in config.agent.providers:
            providers.append(_provider(name, runtime, client))
    chain = ProviderChain(
        providers,
        RetryPolicy(
            attempts=config.agent.provider_attempts, max_retry_after_s=config.agent.max_retry_after_s
        ),
    )
    facts = {
        "device": runtime.device_id,
        "board": f"{runtime.board.name} ({runtime.board.description})" if runtime.board.description else "",
        "soc": runtime.board.soc,
        "workspace": str(runtime.workspace),
    }
    memory = runtime.memory
    prompt = PromptBuilder(
        runtime.workspace,
        facts,
        config.agent.system_prompt,
        context=memory.prompt if memory is not None else None,
        budget_chars=config.memory.prompt_chars,
    )
    agent = AgentLoop(
        runtime.registry,
        runtime.sessions,
        chain,
        prompt,
        max_iterations=config.agent.max_iterations,
        history_budget_tokens=config.agent.history_budget_tokens,
        history_max_messages=config.agent.history_max_messages,
        facts={"device": runtime.device_id, "board": runtime.board.name},
    )
    process = runtime.registry.get("process")
    if isinstance(process, ProcessTool):
        agent.session_end_hooks.append(process.manager.end_session)
    runtime.on_close(agent.shutdown)
    return agent


def _provider(name: str, runtime: Runtime, client: SharedClient) -> Provider:
    cfg = runtime.config.providers[name]
    api_key = runtime.secrets.get(f"providers.{name}", "")
    kwargs = {
        "model": cfg.model,
        "base_url": cfg.base_url,
        "api_key": api_key,
        "timeout_s": cfg.timeout_s,
        "max_tokens": cfg.max_tokens,
        "scrub": runtime.registry.scrubber.scrub,  # every configured secret stays out of request bodies
    }
    if cfg.kind == "anthropic":
        from edgeclaw.agent.providers.anthropic import AnthropicProvider

        return AnthropicProvider(name, client, **kwargs)  # type: ignore[arg-type]
    from edgeclaw.agent.providers.openai import OpenAIProvider

    return OpenAIProvider(name, client, **kwargs)  # type: ignore[arg-type]
