"""How a channel plugs into the agent: inbound messages, outbound replies, and asking a person.

A channel (MQTT, the serial console, the local terminal) turns its wire into
`InboundMessage`s, hands each to `AgentLoop.handle`, and delivers the `Reply`.
To put a question to the person on the other end (tool approvals), it
implements `ask_approval` and registers itself with the approval broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any, Protocol

from edgeclaw.records import dataclass
from edgeclaw.tools.approval import ApprovalRequest, Decision


@dataclass(frozen=True)
class InboundMessage:
    channel: str  # "cli", "mqtt", "console", ...
    text: str
    chat_id: str = ""  # the conversation on that channel: a port, a topic, a terminal
    sender: str = ""
    session: str = ""  # an explicit session key; empty = derived from channel and chat id
    peer_kind: str = "direct"
    caller: str = ""  # the sender's identity as the channel knows it (see ToolContext.caller)
    request_id: str = ""  # the channel's id of this message (MQTT "id"), carried into its tool calls
    meta: Mapping[str, Any] = field(default_factory=dict)  # wire details the channel needs to answer
    agent: str = ""  # the agent to answer it; empty = the configured routes decide ("main" by default)
    # Who put it into the session when no person typed it: "subagents" (their results), "session
    # mqtt:ops" (sessions_send), a scheduled job. Such a message is text, never a slash command.
    origin: str = ""
    # The tools its turn may never go beyond (a message another session sent: the sender's tools).
    tool_ceiling: frozenset[str] | None = None
    # Where the model's answer goes while it is written (agent.streaming), for a channel that shows
    # text as it arrives; the reply still comes whole at the end. None = no streaming.
    on_text: Callable[[str], None] | None = field(default=None, compare=False, repr=False)
    # Where the progress of its turn's tool calls goes (ToolContext.progress: done, total, message),
    # for a channel that can show it while the call runs. None = nobody shows it.
    on_progress: Callable[[float, float | None, str], None] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def session_key(self) -> str:
        if self.session:
            return self.session
        return f"{self.channel}:{self.chat_id or self.sender or 'default'}"


@dataclass(frozen=True)
class Reply:
    text: str
    session: str
    ok: bool = True  # False when the turn failed (no model reachable, stopped, iteration limit)
    in_reply_to: InboundMessage | None = None


class Channel(Protocol):
    name: str

    async def send(self, reply: Reply) -> None:
        """Deliver a reply to the person or machine that sent the message."""
        ...

    async def ask_approval(self, request: ApprovalRequest) -> Decision | None:
        """Ask the person on this channel; None when nobody can be asked."""
        ...
