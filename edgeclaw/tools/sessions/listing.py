"""`sessions_list` and `sessions_history`: the conversations this device keeps.

A remote caller sees only its own sessions, and those of the subagents its
session started; the local CLI and the serial console (a person at the board)
see them all. "Its own": an MQTT caller's sessions are keyed on its proven
identity ("mqtt:NAME:SESSION"), so it sees those of that identity only, never
another caller's by naming them; other channels see their channel's sessions.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from edgeclaw.errors import ToolRefused
from edgeclaw.store.sessions import SessionStore
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

LOCAL_CHANNELS = ("cli", "console")
MAX_SCANNED = 2000  # a remote caller's own sessions are found among this many of its channel's newest


# The session that started a subagent's session, or None for any other session.
ParentOf = Callable[[str], "str | None"]


def _own_prefix(ctx: ToolContext) -> str:
    """What the keys of the caller's own sessions start with: its identity for an MQTT caller (its
    sessions are "mqtt:NAME:SESSION"), else its channel."""
    if ctx.channel == "mqtt" and ctx.caller.startswith("mqtt:"):
        return f"{ctx.caller}:"
    return f"{ctx.channel}:"


def _visible(ctx: ToolContext, session_key: str, parent_of: ParentOf | None = None) -> bool:
    return (
        ctx.channel in LOCAL_CHANNELS
        or session_key == ctx.session_key
        or session_key.startswith(_own_prefix(ctx))
        or (parent_of is not None and parent_of(session_key) == ctx.session_key)
    )


class SessionsListTool(Tool):
    name = "sessions_list"
    observes_only = True
    group = "sessions"
    description = "List conversation sessions, newest first, with message counts and last activity."
    parameters = {
        "type": "object",
        "properties": {
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "default 20"}
        },
        "additionalProperties": False,
    }

    def __init__(self, store: SessionStore) -> None:
        self._store = store

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        channel = None if ctx.channel in LOCAL_CHANNELS else ctx.channel
        limit = args.get("limit", 20)
        summaries = self._store.list(limit if channel is None else MAX_SCANNED, channel)
        if channel is not None:
            own = _own_prefix(ctx)
            summaries = [s for s in summaries if s.key == ctx.session_key or s.key.startswith(own)][:limit]
        rows = [s.as_dict() for s in summaries]
        lines = [f"{r['session']}  {r['messages']} messages  last {r['last_activity']}" for r in rows] or [
            "no sessions"
        ]
        return ToolResult(for_llm=json.dumps(rows), for_user="\n".join(lines))


class SessionsHistoryTool(Tool):
    name = "sessions_history"
    observes_only = True
    group = "sessions"
    description = "The last messages of a session (default: the current one)."
    parameters = {
        "type": "object",
        "properties": {
            "session": {"type": "string", "description": "session key; default the current session"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 200, "description": "default 20"},
        },
        "additionalProperties": False,
    }

    def __init__(self, store: SessionStore, parent_of: ParentOf | None = None) -> None:
        self._store = store
        self.parent_of = parent_of  # set once subagents exist (daemon.agent_tools)

    async def check(self, args: Args, ctx: ToolContext) -> None:
        key = args.get("session") or ctx.session_key
        if not _visible(ctx, key, self.parent_of):
            raise ToolRefused(f"session {key!r} belongs to another channel")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        key = args.get("session") or ctx.session_key
        rows = self._store.load(key)[-args.get("limit", 20) :]
        items = []
        for _, body in rows:
            data = json.loads(body)
            items.append(
                {
                    k: v
                    for k, v in data.items()
                    if k in ("role", "content", "tool_calls", "name", "is_error") and v not in ("", [], False)
                }
            )
        if not items:
            return ToolResult(for_llm=json.dumps([]), for_user=f"session {key} has no messages")
        lines = [f"[{i['role']}] {i.get('content') or json.dumps(i.get('tool_calls'))}"[:300] for i in items]
        return ToolResult(for_llm=json.dumps(items, ensure_ascii=False), for_user="\n".join(lines))
