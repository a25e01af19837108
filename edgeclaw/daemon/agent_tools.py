"""Register the agents, subagents, sessions and messaging tools, and the notification services.

The tools are registered with the rest of the registry (so `tools list`,
policies and `tool call` know them); what they drive is built later with the
agent loop (`daemon.agent`): the subagent manager and the loop are reached
through the runtime when a call comes, and are absent in `edgeclaw tool call`,
where the spawning tools say so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from edgeclaw.config.schema import Config
from edgeclaw.daemon.tool_families import AGENT_TOOLS
from edgeclaw.tools.sessions import SessionsHistoryTool

if TYPE_CHECKING:
    from edgeclaw.daemon.runtime import Runtime
    from edgeclaw.tools.agents import AgentInfo
    from edgeclaw.tools.base import Tool
    from edgeclaw.tools.sessions_send import SessionInbox
    from edgeclaw.tools.subagents import SubagentControl


def agent_infos(config: Config) -> list[AgentInfo]:
    """Every agent the config defines, "main" first, as agents_list shows them."""
    from edgeclaw.daemon.memory_build import agent_types
    from edgeclaw.tools.agents import AgentInfo

    types = agent_types(config)
    base = config.agent
    names = ["main", *(n for n in config.agents if n != "main")]
    infos = []
    for name in names:
        named = config.agents.get(name)
        answers = tuple(
            f"channel {r.channel}" if r.channel else f"sessions {r.session}"
            for r in base.routes
            if r.agent == name
        )
        if name == "main":
            answers += ("everything no route sends elsewhere",)
        infos.append(
            AgentInfo(
                name=name,
                description=(named.description if named else "")
                or ("the default agent" if name == "main" else ""),
                type=types.get(name, "open"),
                providers=tuple(
                    named.providers if named is not None and named.providers is not None else base.providers
                ),
                max_iterations=(
                    named.max_iterations
                    if named is not None and named.max_iterations is not None
                    else base.max_iterations
                ),
                answers=answers,
            )
        )
    return infos


def install_agent_tools(runtime: Runtime) -> None:
    config = runtime.config
    t = config.tools
    timeout = t.subagents.timeout_s

    def on_demand() -> None:
        # In the daemon the loop is built by the first thing that needs it (`daemon.agent_service`).
        if runtime._agent is None and runtime.agent_factory is not None:
            runtime.agent_factory()

    def control() -> SubagentControl | None:
        on_demand()
        return runtime.subagents

    def inbox() -> SessionInbox | None:
        on_demand()
        return runtime._agent

    def build() -> list[Tool]:
        from edgeclaw.tools.agents import AgentsListTool
        from edgeclaw.tools.messaging.delegate import DelegateTool
        from edgeclaw.tools.messaging.message import MessageTool
        from edgeclaw.tools.sessions_send import SessionsSendTool
        from edgeclaw.tools.subagents import SpawnAliasTool, SpawnTool, SubagentsTool

        infos = agent_infos(config)
        return [
            SpawnTool(control, timeout_s=timeout),
            SpawnAliasTool(control, timeout_s=timeout),
            SubagentsTool(control, timeout_s=timeout),
            DelegateTool(control, timeout_s=timeout),
            AgentsListTool(lambda: infos),
            SessionsSendTool(runtime.sessions, runtime.outlets, inbox, send_scope=t.sessions.send_scope),
            MessageTool(runtime.outlets, send_scope=t.sessions.send_scope),
        ]

    runtime.registry.register_deferred(AGENT_TOOLS, build)
    history = runtime.registry.get("sessions_history")
    if isinstance(history, SessionsHistoryTool):
        history.parent_of = lambda key: parent_session(runtime, key)
    install_notifiers(runtime)


def parent_session(runtime: Runtime, session_key: str) -> str | None:
    """The session that started the subagent whose session this is (its parent reads its history)."""
    from edgeclaw.agent.subagents import SESSION_PREFIX

    if not session_key.startswith(SESSION_PREFIX):
        return None
    if runtime.subagents is None and runtime.agent_factory is not None:
        runtime.agent_factory()  # in the daemon: the manager comes with the loop, built on demand
    if runtime.subagents is None:
        return None
    row = runtime.subagents.store.by_session(session_key)
    return row.parent_session if row is not None else None


def install_notifiers(runtime: Runtime) -> None:
    """Pushover and ntfy as outlets of the `message` tool, when configured."""
    n = runtime.config.notify
    secrets = runtime.secrets
    if n.pushover is not None:
        from edgeclaw.backends.notify import PushoverNotifier, PushoverSettings

        p = n.pushover
        pushover = PushoverNotifier(
            PushoverSettings(
                token=secrets.get("notify.pushover.token", ""),
                user=secrets.get("notify.pushover.user", ""),
                devices=tuple(p.devices),
                base_url=p.base_url,
                timeout_s=p.timeout_s,
            )
        )
        runtime.outlets.register("pushover", pushover)
        runtime.on_close(pushover.aclose)
    if n.ntfy is not None:
        from edgeclaw.backends.notify import NtfyNotifier, NtfySettings

        c = n.ntfy
        ntfy = NtfyNotifier(
            NtfySettings(
                server=c.server,
                topics=tuple(c.topics),
                token=secrets.get("notify.ntfy.token", ""),
                timeout_s=c.timeout_s,
            )
        )
        runtime.outlets.register("ntfy", ntfy)
        runtime.on_close(ntfy.aclose)
