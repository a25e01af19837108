"""`sessions_send`: put a message into another session, as a notice or as a user turn.

A *notice* is filed in the target conversation's history (its next turn sees
it) and shown on its channel when someone is there. A *turn* is answered
there and then by the agent that answers that session, and its reply is
delivered on that session's channel; the tool returns at once.

Within the policy: by default only sessions of the caller's own channel
(`[tools.sessions] send_scope`), never the caller's own session or a
subagent's, and a turn runs with no more tools than the sender has (the
sender's tools are its ceiling), whatever the target channel would allow.
Always denied to subagents.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from edgeclaw.errors import ToolRefused
from edgeclaw.store.sessions import SessionStore
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.messaging.message import check_session_scope, origin_of
from edgeclaw.tools.outlets import DeliveryFailed, Outlets, channel_of

SUBAGENT_SESSIONS = "subagent:"


class SessionInbox(Protocol):
    """The agent loop's side: start a turn nobody waits for, its reply delivered on the session's channel."""

    def submit(self, session_key: str, text: str, sender: ToolContext) -> None: ...


class SessionsSendTool(Tool):
    name = "sessions_send"
    group = "sessions"
    description = (
        "Send a message into another conversation session on this device (sessions_list shows them): "
        "mode 'notice' files it there for its next turn and shows it; mode 'turn' has that session's "
        "agent answer it now, on that session's channel."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "session": {"type": "string", "minLength": 1, "maxLength": 256},
            "text": {"type": "string", "minLength": 1, "maxLength": 8000},
            "mode": {"type": "string", "enum": ["notice", "turn"], "description": "default notice"},
        },
        "required": ["session", "text"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        sessions: SessionStore,
        outlets: Outlets,
        inbox: Callable[[], SessionInbox | None],
        *,
        send_scope: str = "channel",
    ) -> None:
        self._sessions = sessions
        self._outlets = outlets
        self._inbox = inbox
        self._scope = send_scope

    async def check(self, args: Args, ctx: ToolContext) -> None:
        target = args["session"]
        if target == ctx.session_key:
            raise ToolRefused("that is this session; answer here instead")
        if target.startswith(SUBAGENT_SESSIONS):
            raise ToolRefused("a subagent's session takes no messages; use subagents steer")
        check_session_scope(target, ctx, self._scope)
        if self._sessions.summary(target) is None and not self._outlets.has_session(target):
            raise ToolRefused(f"no session {target!r} (sessions_list shows the sessions there are)")
        if args.get("mode") == "turn" and self._inbox() is None:
            raise ToolRefused("no agent loop runs here to answer a turn (edgeclaw tool call); send a notice")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        target, mode = args["session"], args.get("mode", "notice")
        text = f"[message from {origin_of(ctx)}]\n{args['text']}"
        inbox = self._inbox()
        data = {"session": target, "mode": mode}
        if mode == "turn":
            assert inbox is not None
            inbox.submit(target, text, ctx)
            return ToolResult(
                f"delivered to session {target} as a turn; its answer goes to that session's channel",
                data=data,
            )
        self._sessions.append(target, channel_of(target), _user_message(text), len(text) // 4 + 4)
        try:
            where = await self._outlets.to_session(target, text)
        except DeliveryFailed as e:
            return ToolResult(
                f"filed in session {target}'s history for its next turn; not shown now: {e}",
                data={**data, "shown": False},
            )
        return ToolResult(f"filed in session {target}'s history and {where}", data={**data, "shown": True})


def _user_message(text: str) -> str:
    import json

    # The stored form of a user message (agent.messages.Message), so the target's next turn reads it.
    return json.dumps({"role": "user", "content": text}, ensure_ascii=False)
