"""Register the agents, subagents, sessions and messaging tools, and the notification services.

The tools are registered with the rest of the registry (so `tools list`,
policies and `tool call` know them); what they drive is built later with the
agent loop (`daemon.agent`): the subagent manager and the loop are reached
through the agent service when a call comes, and are absent in `edgeclaw tool call`,
where the spawning tools say so.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

from edgeclaw.config.schema import Config
from edgeclaw.tool_groups import AGENT_TOOLS
from edgeclaw.tools.sessions.listing import SessionsHistoryTool

if TYPE_CHECKING:
    from edgeclaw.daemon.agent_service import AgentService
    from edgeclaw.store.sessions import SessionStore
    from edgeclaw.tools.base import Tool
    from edgeclaw.tools.outlets import Outlets
    from edgeclaw.tools.registry import Registry
    from edgeclaw.tools.sessions.agents import AgentInfo
    from edgeclaw.tools.sessions.send import SessionInbox
    from edgeclaw.tools.sessions.subagents import SubagentControl


def agent_infos(config: Config) -> list[AgentInfo]:
    """Every agent the config defines, "main" first, as agents_list shows them."""
    from edgeclaw.daemon.memory_build import agent_types
    from edgeclaw.tools.sessions.agents import AgentInfo

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


def install_agent_tools(
    config: Config, registry: Registry, sessions: SessionStore, outlets: Outlets, agent: AgentService
) -> None:
    """The agent tools, driving `agent`'s loop and subagents (in the daemon, built on first use)."""
    t = config.tools
    timeout = t.subagents.timeout_s

    def control() -> SubagentControl | None:
        agent.on_demand()
        return agent.subagents

    def inbox() -> SessionInbox | None:
        return agent.on_demand()

    def build() -> list[Tool]:
        from edgeclaw.tools.messaging.message import MessageTool
        from edgeclaw.tools.sessions.agents import AgentsListTool
        from edgeclaw.tools.sessions.delegate import DelegateTool
        from edgeclaw.tools.sessions.send import SessionsSendTool
        from edgeclaw.tools.sessions.subagents import SpawnAliasTool, SpawnTool, SubagentsTool

        infos = agent_infos(config)
        return [
            SpawnTool(control, timeout_s=timeout),
            SpawnAliasTool(control, timeout_s=timeout),
            SubagentsTool(control, timeout_s=timeout),
            DelegateTool(control, timeout_s=timeout),
            AgentsListTool(lambda: infos),
            SessionsSendTool(sessions, outlets, inbox, send_scope=t.sessions.send_scope),
            MessageTool(outlets, send_scope=t.sessions.send_scope),
        ]

    registry.register_deferred(AGENT_TOOLS, build)
    history = registry.get("sessions_history")
    if isinstance(history, SessionsHistoryTool):
        history.parent_of = lambda key: parent_session(agent, key)


def parent_session(agent: AgentService, session_key: str) -> str | None:
    """The session that started the subagent whose session this is (its parent reads its history)."""
    from edgeclaw.agent.subagents import SESSION_PREFIX

    if not session_key.startswith(SESSION_PREFIX):
        return None
    if agent.subagents is None:
        agent.on_demand()  # in the daemon: the manager comes with the loop, built on demand
    if agent.subagents is None:
        return None
    row = agent.subagents.store.by_session(session_key)
    return row.parent_session if row is not None else None


def install_notifiers(
    config: Config,
    secrets: Mapping[str, str],
    outlets: Outlets,
    on_close: Callable[[Callable[[], Awaitable[None]]], None],
) -> None:
    """Pushover and ntfy as outlets of the `message` tool, when configured."""
    n = config.notify
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
        outlets.register("pushover", pushover)
        on_close(pushover.aclose)
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
        outlets.register("ntfy", ntfy)
        on_close(ntfy.aclose)
