"""`message`: send text to a channel target or a notification service, through the registered outlets.

Channels and targets:

| channel    | target                              | where it goes                                     |
|------------|-------------------------------------|---------------------------------------------------|
| `console`  | a console port (`/dev/ttyGS0`)      | shown on that port, when someone is logged in     |
| `mqtt`     | a topic below `message/` ("alerts") | `{prefix}/{dev}/message/{target}`, store-and-forward |
| `session`  | a session key (`mqtt:ops`)          | shown in that conversation's channel              |
| `pushover` | empty, or a configured device       | a push notification                               |
| `ntfy`     | empty (the first topic), or a topic | a notification on the ntfy server                 |

The text is scrubbed on the way out (`Outlets`); a message into a session is
held to `[tools.sessions] send_scope` like `sessions_send`.
"""

from __future__ import annotations

from typing import Any

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.outlets import DeliveryFailed, Outgoing, Outlets, channel_of

SESSION_CHANNEL = "session"


def origin_of(ctx: ToolContext) -> str:
    """Who a message is from, as its receiver reads it."""
    sub = f", subagent of {ctx.parent_session}" if ctx.parent_session else ""
    return f"agent {ctx.agent_id}, session {ctx.session_key}{sub}"


def check_session_scope(target: str, ctx: ToolContext, scope: str) -> None:
    """Refuse a session outside what `[tools.sessions] send_scope` lets the caller reach."""
    if scope != "all" and channel_of(target) != ctx.channel:
        raise ToolRefused(
            f"session {target!r} is not on this channel ({ctx.channel}); only sessions of the caller's own "
            'channel may be sent to ([tools.sessions] send_scope = "all" widens it)'
        )


class MessageTool(Tool):
    name = "message"
    group = "messaging"
    description = (
        "Send a message: to a console port, to an MQTT topic under this device's message/ topic, into a "
        "chat session, or as a push notification (pushover, ntfy, when configured). For notices to "
        "people, not for answering the current conversation."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "channel": {
                "type": "string",
                "maxLength": 32,
                "description": "console, mqtt, session, pushover or ntfy",
            },
            "target": {
                "type": "string",
                "maxLength": 256,
                "description": "console: a port; mqtt: a topic under message/; session: a session key; "
                "pushover: a device (optional); ntfy: a topic (optional)",
            },
            "text": {"type": "string", "minLength": 1, "maxLength": 4000},
            "title": {"type": "string", "maxLength": 120},
            "priority": {
                "type": "integer",
                "minimum": -2,
                "maximum": 2,
                "description": "-2 quiet .. 2 urgent",
            },
        },
        "required": ["channel", "text"],
        "additionalProperties": False,
    }

    def __init__(self, outlets: Outlets, *, send_scope: str = "channel") -> None:
        self._outlets = outlets
        self._scope = send_scope

    async def check(self, args: Args, ctx: ToolContext) -> None:
        channel = args["channel"]
        if channel == SESSION_CHANNEL:
            target = args.get("target", "")
            if not target:
                raise ToolRefused("message to a session: give its key as target (sessions_list shows them)")
            check_session_scope(target, ctx, self._scope)
            return
        if self._outlets.get(channel) is None:
            known = ", ".join([*self._outlets.names(), SESSION_CHANNEL])
            raise ToolRefused(
                f"no channel or notification service {channel!r} is running here (running: {known})"
            )
        if channel in ("console", "mqtt") and not args.get("target"):
            raise ToolRefused(
                f"message on {channel}: give a target ({'a port' if channel == 'console' else 'a topic'})"
            )

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        channel, target, text = args["channel"], args.get("target", ""), args["text"]
        try:
            if channel == SESSION_CHANNEL:
                where = await self._outlets.to_session(target, f"[message from {origin_of(ctx)}]\n{text}")
            else:
                message = Outgoing(text, origin_of(ctx), args.get("title", ""), args.get("priority", 0))
                where = await self._outlets.to_target(channel, target, message)
        except DeliveryFailed as e:
            raise ToolError(f"message not sent: {e}") from None
        return ToolResult(
            f"sent: {where}", data={"channel": channel, "target": target or None, "delivered": where}
        )
