"""`session_status`: what the runtime knows about the calling session, in real figures."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Protocol

from edgeclaw.tools.audit import ToolStats
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.ratelimit import RateLimiter


class SessionFacts(Protocol):
    """Whatever keeps conversations (the agent's session store) can add its own figures."""

    def describe(self, session_key: str) -> dict[str, Any]: ...


class SessionStatusTool(Tool):
    name = "session_status"
    observes_only = True
    group = "sessions"
    description = (
        "Status of the current session: who is calling and over which channel, tool calls made and "
        "failed, rate-limit calls left, last activity, and the conversation's figures when known."
    )
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(
        self,
        stats: ToolStats,
        limiter: RateLimiter,
        facts: SessionFacts | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._stats = stats
        self._limiter = limiter
        self._facts = facts
        self._clock = clock

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        counters = self._stats.sessions.get(ctx.session_key)
        status: dict[str, Any] = {
            "session": ctx.session_key,
            "channel": ctx.channel,
            "chat_id": ctx.chat_id or None,
            "peer_kind": ctx.peer_kind,
            "agent": ctx.agent_id,
            "provider": ctx.provider or None,
            "subagent_depth": ctx.subagent_depth,
            "tool_calls": counters.calls if counters else 0,
            "tool_errors": counters.errors if counters else 0,
            "last_tool": counters.last_tool if counters else None,
            "last_activity": _iso(counters.last_activity) if counters and counters.last_activity else None,
            "caller": ctx.identity,
            # Calls this caller could make right now (its bucket and its channel's), and the limits.
            "rate_limit_remaining": self._limiter.remaining(ctx.identity, ctx.channel),
            "rate_limit": self._limiter.describe(),
        }
        if self._facts is not None:
            status.update(self._facts.describe(ctx.session_key))
        lines = [f"{k}: {v}" for k, v in status.items() if v is not None]
        return ToolResult(for_llm=json.dumps(status, sort_keys=False), for_user="\n".join(lines))


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))
