"""`sessions_list` and `sessions_history`: the conversations this device keeps.

A remote caller sees only the sessions of its own channel, and those of the
subagents its session started; the local CLI and the serial console (a person
at the board) see them all.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from edgeclaw.errors import ToolRefused
from edgeclaw.store.sessions import SessionStore
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

LOCAL_CHANNELS = ("cli", "console")


# The session that started a subagent's session, or None for any other session.
ParentOf = Callable[[str], "str | None"]


def _visible(ctx: ToolContext, session_key: str, parent_of: ParentOf | None = None) -> bool:
    return (
        ctx.channel in LOCAL_CHANNELS
        or session_key == ctx.session_key
        or session_key.startswith(f"{ctx.channel}:")
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
        rows = [s.as_dict() for s in self._store.list(args.get("limit", 20), channel)]
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
