"""A command as it came off the wire (`Incoming`) and as it is understood (`Command`).

A request is parsed once (channels.mqtt.reader) into a `Command`: what it asks, who asks, where
its answer goes. Everything the serving side needs of it — its key in the request ledger, the
name its error answers carry, whether it only reads — is read off the command, so serving it
(channels.mqtt.serving) never goes back to the wire format.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Literal

from edgeclaw.channels.mqtt.dedup import request_key
from edgeclaw.channels.mqtt.protocol import (
    AdminCall,
    AdminRequest,
    CancelRequest,
    ChatRequest,
    Route,
    ToolCallRequest,
    admin_error,
    cancel_error,
    chat_error,
    encode,
    tool_error,
)
from edgeclaw.records import dataclass

if TYPE_CHECKING:
    import aiomqtt

    from edgeclaw.agent.channel import InboundMessage

CHANNEL = "mqtt"  # the channel name requests from MQTT carry (ToolContext.channel, InboundMessage.channel)
# The commands by topic: a tool call, its cancel, a chat message, an admin request.
CommandKind = Literal["tool", "chat", "admin", "cancel"]
# Builds the error answer for one request: (code, message) -> payload.
ErrorAnswer = Callable[[str, str], bytes]


@dataclass(frozen=True, slots=True)
class Incoming:
    """A command as it came off the wire: what the inbound handlers need of the message."""

    topic: str
    payload: bytes
    retained: bool
    response_topic: str | None  # MQTT 5 only, like the two below
    correlation: bytes | None
    user_properties: list[tuple[str, str]] | None
    # The broker's DUP flag: it had sent us this very message before and got no PUBACK (we were
    # killed, or the connection dropped, before acknowledging it). A publisher's retry is not one.
    redelivered: bool = False

    @classmethod
    def of(cls, message: aiomqtt.Message) -> Incoming:
        props = message.properties  # None under MQTT 3.1.1
        payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
        return cls(
            message.topic.value,
            payload,
            message.retain,
            getattr(props, "ResponseTopic", None),
            getattr(props, "CorrelationData", None),
            getattr(props, "UserProperty", None),
            bool(getattr(message, "dup", False)),  # net.mqtt_connection.Delivery
        )


def refusal(kind: CommandKind, request_id: str | None) -> ErrorAnswer:
    """The error answers of a request refused before it was understood."""
    if kind == "tool":
        return lambda code, text: encode(tool_error(request_id, None, code, text))
    if kind == "cancel":
        return lambda code, text: encode(cancel_error(request_id, None, code, text))
    if kind == "admin":
        return lambda code, text: encode(admin_error(request_id, None, code, text))
    return lambda code, text: encode(chat_error(request_id, None, code, text))


def error_for(kind: str, request_id: str | None, label: str | None) -> ErrorAnswer:
    """The error answers of a request known only from its ledger row."""
    if kind == "tool":
        return lambda code, text: encode(tool_error(request_id, label, code, text))
    if kind == "admin":
        return lambda code, text: encode(admin_error(request_id, label, code, text))
    return lambda code, text: encode(chat_error(request_id, label, code, text))


@dataclass(slots=True)
class Cancellable:
    """A tool call admitted and not yet answered, which a `tool/cancel` from its caller may stop."""

    caller: str
    task: asyncio.Task[None] | None = None  # set once it is served (a task cancelled earlier never is)
    started: bool = False  # it holds a slot: running, not waiting
    cancelled_by: str | None = None  # the cancel request's id


Asked = ToolCallRequest | ChatRequest | CancelRequest | AdminRequest | AdminCall


def session_key(caller: str, session: str) -> str:
    """A caller's session: its identity and the name it gave ("mqtt:backend-1:s1"). Another caller
    naming the same session gets its own: sessions never cross identities."""
    return f"{caller}:{session}"


def shown_session(caller: str, key: str) -> str:
    """The session as answers name it: "mqtt:" and the name the caller gave, without its identity."""
    own = f"{caller}:"
    return "mqtt:" + key[len(own) :] if key.startswith(own) else key


@dataclass(frozen=True, slots=True)
class Command:
    """A request understood: what it asks (`asked`), who asks, and where its answer goes."""

    asked: Asked
    route: Route
    caller: str  # the proven identity (channels.mqtt.keys): "mqtt:NAME" or "mqtt:anonymous"
    # chat/in: the agent's view of it, and the signed bytes (they name a signed chat without an id).
    message: InboundMessage | None = None
    signed_body: bytes | None = None
    roles: frozenset[str] = frozenset()  # what the caller may do (docs/security.md); none = nothing
    profile: str = ""  # the tools profile the caller's calls stay within; "" = the channel's

    @property
    def kind(self) -> Literal["tool", "chat", "admin"]:
        """Its kind in the request ledger (a cancel is never recorded there)."""
        if isinstance(self.asked, ToolCallRequest):
            return "tool"
        if isinstance(self.asked, ChatRequest):
            return "chat"
        return "admin"

    @property
    def label(self) -> str | None:
        """What its answers name beside its id: the tool, the chat session, or the admin action."""
        asked = self.asked
        if isinstance(asked, ToolCallRequest):
            return asked.tool
        if isinstance(asked, ChatRequest):
            assert self.message is not None
            return shown_session(self.caller, self.message.session_key)
        if isinstance(asked, CancelRequest):
            return asked.target
        return asked.action

    def ledger_key(self) -> str | None:
        """How the request ledger recognises a repeat of it (None: nothing to recognise it by)."""
        asked = self.asked
        if isinstance(asked, ToolCallRequest):
            # The caller is part of what a request is: another caller sending the same id and
            # content is another request, never answered with the first one's stored result.
            return request_key("tool", asked.id, [asked.tool, asked.args, asked.session, self.caller])
        if isinstance(asked, AdminRequest):
            return request_key("admin", asked.id, [asked.action, asked.definition, asked.name, self.caller])
        if isinstance(asked, AdminCall):
            return request_key("admin", asked.id, [asked.tool, asked.args, self.caller])
        assert isinstance(asked, ChatRequest)
        ledger_id = asked.id
        if ledger_id is None and self.signed_body is not None:
            # A signed message must never run twice, with or without an id: its signed bytes name it.
            ledger_id = "signed:" + hashlib.sha256(self.signed_body).hexdigest()[:32]
        if ledger_id is None:
            return None
        return request_key("chat", ledger_id, [asked.text, asked.session, asked.sender, self.caller])

    def error(self, code: str, text: str) -> bytes:
        """Its error answer: past parsing the request is understood, so the answer names it fully."""
        asked = self.asked
        if isinstance(asked, ToolCallRequest):
            return encode(tool_error(asked.id, asked.tool, code, text))
        if isinstance(asked, ChatRequest):
            return encode(chat_error(asked.id, self.label, code, text))
        if isinstance(asked, CancelRequest):
            return encode(cancel_error(asked.id, asked.target, code, text))
        return encode(admin_error(asked.id, asked.action, code, text))
