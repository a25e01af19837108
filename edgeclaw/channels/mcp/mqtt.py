"""MCP over MQTT, after the published MQTT transport for MCP (mqtt.ai / EMQX, "MCP over MQTT"), so a
fleet backend finds every board's tools through the broker. It runs on a connection of its own
(`mqtt_link`), whose Last Will clears the presence when the board dies.

Topics (`server-id` is that connection's MQTT client id, `{mqtt client id}-mcp`; `server-name` is
`mcp.server.mqtt_server_name`, by default `edgeclaw/{device id}`):

- `$mcp-server/presence/{server-id}/{server-name}`: our presence, retained: a
  `notifications/server/online` with the name, a description and metadata;
  emptied (the retained message cleared) at a clean stop, and by the connection's Will otherwise;
- `$mcp-server/{server-id}/{server-name}`: the control topic, where a client
  sends `initialize`, naming itself in the user property `MCP-MQTT-CLIENT-ID`
  (or `MQTT-CLIENT-ID`, as earlier drafts spelled it);
- `$mcp-rpc/{mcp-client-id}/{server-id}/{server-name}`: everything after that,
  both ways (we subscribe to `$mcp-rpc/+/{server-id}/{server-name}`);
- `$mcp-server/capability/{server-id}/{server-name}`: `notifications/tools/list_changed`;
- `$mcp-client/presence/{mcp-client-id}`: a client's `notifications/disconnected`
  (its Last Will) ends its session.

Every message we publish carries the user properties `MCP-COMPONENT-TYPE:
mcp-server` and `MCP-MQTT-CLIENT-ID: {server-id}`; the connection says
`MCP-COMPONENT-TYPE` and `MCP-META` in its CONNECT.

The presence also carries a Message Expiry Interval (`mqtt_presence_expiry_s`) and is
refreshed at half that: should a broker ever lose the Will, a dead board still drops out of
discovery within that time. A broker's suggested server name (CONNACK `MCP-SERVER-NAME`) is
not read: set the name in the config.

Identity: `mcp:mqtt:{mcp-client-id}` is what the client says it is, not a
proof (MCP over MQTT has no signatures): who may publish on these topics is
the broker's ACL's to decide, and the channel's policy bounds what they get.
A session is bound to the `{mcp-client-id}` level of its RPC topic (an ACL
that lets each client write only its own makes that level a proof): a message
there, or on a client's presence topic, whose `MCP-MQTT-CLIENT-ID` names
another client is refused. Retained messages are never handled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw.backends.mcp.protocol import (
    INVALID_REQUEST,
    MAX_MESSAGE_BYTES,
    McpError,
    decode,
    encode,
    error,
    notification,
)
from edgeclaw.channels.mcp.server import McpServer, ServedSession, SessionLimit
from edgeclaw.records import dataclass
from edgeclaw.tasks import TaskSet

log = logging.getLogger("edgeclaw.mcp.mqtt")

COMPONENT_TYPE = "MCP-COMPONENT-TYPE"
CLIENT_ID_PROPERTY = "MCP-MQTT-CLIENT-ID"
# The same property as earlier drafts of the transport spelled it (and clients written then send it).
CLIENT_ID_SPELLINGS = ("mcp-mqtt-client-id", "mqtt-client-id", "mcp-client-id")
META_PROPERTY = "MCP-META"
# A client id goes into topic levels: no wildcards, no separators, nothing unprintable.
CLIENT_ID = re.compile(r"[^/+#\x00-\x1f\x7f]{1,128}")

UserProperties = list[tuple[str, str]]
# (topic, payload, retain, user properties, message expiry in seconds or None)
Publish = Callable[[str, bytes, bool, UserProperties, int | None], Awaitable[None]]


def server_name_problem(name: str) -> str | None:
    """Why `name` cannot be a server-name (topic levels), or None."""
    if not name or any(c in name for c in "+#") or any(not level for level in name.split("/")):
        return "expected topic levels separated by '/', none empty, without '+' or '#' (e.g. edgeclaw/pi-07)"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in name):
        return "control characters are not allowed"
    return None


def claimed_client(properties: dict[str, str]) -> str | None:
    """The MQTT client id a message says it is from (user property names lower-cased), in any of the
    spellings the transport has had; None when it says none."""
    for key in CLIENT_ID_SPELLINGS:
        if key in properties:
            return properties[key]
    return None


@dataclass(frozen=True)
class McpTopics:
    server_id: str
    server_name: str

    @property
    def control(self) -> str:
        return f"$mcp-server/{self.server_id}/{self.server_name}"

    @property
    def capability(self) -> str:
        return f"$mcp-server/capability/{self.server_id}/{self.server_name}"

    @property
    def presence(self) -> str:
        return f"$mcp-server/presence/{self.server_id}/{self.server_name}"

    def rpc(self, client_id: str) -> str:
        return f"$mcp-rpc/{client_id}/{self.server_id}/{self.server_name}"

    @property
    def rpc_filter(self) -> str:
        return f"$mcp-rpc/+/{self.server_id}/{self.server_name}"

    def subscriptions(self) -> list[str]:
        return [self.control, self.rpc_filter, "$mcp-client/presence/+", "$mcp-client/capability/+"]

    def rpc_client(self, topic: str) -> str | None:
        """The client id of one of our RPC topics, or None when `topic` is not one."""
        head, tail = "$mcp-rpc/", f"/{self.server_id}/{self.server_name}"
        if not (topic.startswith(head) and topic.endswith(tail)):
            return None
        client = topic[len(head) : len(topic) - len(tail)]
        return client if CLIENT_ID.fullmatch(client) else None


class McpMqttTransport:
    """MCP sessions over the daemon's MQTT connection: the MQTT channel hands it every message on
    a `$mcp-` topic (`on_message`) and tells it when it connects and before it disconnects."""

    def __init__(
        self,
        server: McpServer,
        topics: McpTopics,
        publish: Publish,
        *,
        description: str,
        meta: dict[str, Any],
        presence_expiry_s: int = 600,
        connected: Callable[[], bool] = lambda: True,
    ) -> None:
        self.server = server
        self.topics = topics
        self._publish = publish
        self.description = description
        self.meta = meta
        self.presence_expiry_s = presence_expiry_s
        self.sessions: dict[str, ServedSession] = {}  # by MCP client id
        self._tasks = TaskSet()
        self._refresher: asyncio.Task[None] | None = None
        self._connected = connected
        self._list_changed_pending = False
        self._stopping = False
        self._departed: set[str] = set()  # labels of sessions their client ended

    @property
    def user_properties(self) -> UserProperties:
        return [(COMPONENT_TYPE, "mcp-server"), (CLIENT_ID_PROPERTY, self.topics.server_id)]

    def connect_properties(self) -> UserProperties:
        """For the connection's CONNECT packet."""
        meta = encode({"name": self.topics.server_name, **self.meta}).decode()
        return [(COMPONENT_TYPE, "mcp-server"), (META_PROPERTY, meta)]

    # -- the MQTT channel's side -------------------------------------------------------------
    def subscriptions(self) -> list[str]:
        return self.topics.subscriptions()

    def handles(self, topic: str) -> bool:
        return topic.startswith(("$mcp-server/", "$mcp-rpc/", "$mcp-client/"))

    def start(self) -> None:
        if self.presence_expiry_s > 0 and self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh(), name="mcp-presence")

    def on_connect(self) -> None:
        self._spawn(self._announce())

    async def before_disconnect(self) -> None:
        """A clean stop: every session told it has ended, the presence cleared."""
        self._stopping = True
        if self._refresher is not None:
            self._refresher.cancel()
        for session in list(self.sessions.values()):
            session.close("the daemon is stopping")
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._send(self.topics.presence, b"", retain=True), 5.0)
        await self._tasks.wait(5.0)

    def on_message(
        self, topic: str, payload: bytes, user_properties: UserProperties | None, retained: bool
    ) -> None:
        """One message on a `$mcp-` topic; never blocks (the work goes to tasks)."""
        if self._stopping:
            return
        if retained:  # a retained request would run again at every connect
            log.debug("MCP message on %s was retained at the broker: ignored", topic)
            return
        properties = dict((k.lower(), v) for k, v in user_properties or [])
        if topic == self.topics.control:
            self._spawn(self._initialize(payload, properties))
            return
        client = self.topics.rpc_client(topic)
        if client is not None:
            claimed = claimed_client(properties)
            if claimed is not None and claimed != client:
                self._refuse_foreign(topic, claimed, payload)
                return
            self._rpc(client, payload)
            return
        if topic.startswith("$mcp-client/presence/"):
            client = topic.removeprefix("$mcp-client/presence/")
            claimed = claimed_client(properties)
            if claimed is not None and claimed != client:  # only a client itself may end its session
                log.warning("MCP presence on %s from %r: ignored", topic, claimed[:64])
                return
            self._client_presence(client, payload)
            return
        log.debug("MCP message on %s ignored", topic)

    # -- sessions ------------------------------------------------------------------------------
    async def _initialize(self, payload: bytes, properties: dict[str, str]) -> None:
        client = claimed_client(properties)
        if client is None or not CLIENT_ID.fullmatch(client):
            log.warning("MCP initialize without a usable %s user property: dropped", CLIENT_ID_PROPERTY)
            return
        reply_to = self.topics.rpc(client)
        try:
            messages = _decode(payload)
        except McpError as e:
            await self._send_message(reply_to, error(None, e.code or INVALID_REQUEST, str(e)))
            return
        if len(messages) != 1 or messages[0].get("method") != "initialize" or "id" not in messages[0]:
            msg = "the control topic takes one initialize request"
            await self._send_message(reply_to, error(messages[0].get("id"), INVALID_REQUEST, msg))
            return
        old = self.sessions.pop(client, None)
        if old is not None:  # a client id is used for one initialize; a second one starts afresh
            old.close("initialized again")

        async def send(message: dict[str, Any]) -> None:
            await self._send_message(reply_to, message)

        try:
            session = self.server.open("mqtt", f"mcp:mqtt:{client}", send, on_list_changed=self._list_changed)
        except SessionLimit as e:
            await self._send_message(reply_to, error(messages[0].get("id"), INVALID_REQUEST, str(e)))
            return
        self.sessions[client] = session
        session.on_close(lambda s: self._ended(client, s))
        answer = await session.receive(messages[0])
        if answer is not None:
            await self._send_message(reply_to, answer)
        if answer is None or "error" in answer:
            session.close("initialize failed")

    def _ended(self, client: str, session: ServedSession) -> None:
        if self.sessions.get(client) is session:
            del self.sessions[client]
        if session.label in self._departed:
            self._departed.discard(session.label)
        else:  # we end it (idle, stopping): the client is told on its RPC topic
            goodbye = notification("notifications/disconnected")
            self._spawn(self._send_message(self.topics.rpc(client), goodbye))

    def _depart(self, session: ServedSession, why: str) -> None:
        """The client ended it (its goodbye or its Last Will): nobody to tell."""
        self._departed.add(session.label)
        session.close(why)

    def _rpc(self, client: str, payload: bytes) -> None:
        session = self.sessions.get(client)
        try:
            messages = _decode(payload)
        except McpError as e:
            self._spawn(
                self._send_message(self.topics.rpc(client), error(None, e.code or INVALID_REQUEST, str(e)))
            )
            return
        for message in messages:
            if session is None:
                if "method" in message and "id" in message:
                    msg = "no MCP session for this client: send initialize on the control topic first"
                    reply = error(message.get("id"), INVALID_REQUEST, msg)
                    self._spawn(self._send_message(self.topics.rpc(client), reply))
                continue
            if message.get("method") == "notifications/disconnected":
                self._depart(session, "the client disconnected")
                continue
            self._spawn(self._answer(session, client, message))

    def _refuse_foreign(self, topic: str, claimed: str, payload: bytes) -> None:
        """A message on one client's RPC topic from another: never handled, its requests answered
        with an error on the sender's own RPC topic (the session's owner is not disturbed)."""
        log.warning("MCP message on %s claims to be from %r: refused", topic, claimed[:64])
        if not CLIENT_ID.fullmatch(claimed):
            return
        with contextlib.suppress(McpError):
            for message in _decode(payload):
                if "method" in message and "id" in message:
                    msg = "this RPC topic belongs to another client's session"
                    reply = error(message.get("id"), INVALID_REQUEST, msg)
                    self._spawn(self._send_message(self.topics.rpc(claimed), reply))

    async def _answer(self, session: ServedSession, client: str, message: dict[str, Any]) -> None:
        response = await session.receive(message)
        if response is not None:
            await self._send_message(self.topics.rpc(client), response)

    def _client_presence(self, client: str, payload: bytes) -> None:
        session = self.sessions.get(client)
        if session is None:
            return
        # Its Last Will or its goodbye: a disconnected notification (an empty payload says the same).
        self._depart(session, "the client went offline")

    async def _list_changed(self) -> None:
        """One notification on the capability topic for every MQTT session whose view changed."""
        if self._list_changed_pending:
            return
        self._list_changed_pending = True
        await asyncio.sleep(0)  # the other sessions' checks of the same change come first
        self._list_changed_pending = False
        await self._send_message(self.topics.capability, notification("notifications/tools/list_changed"))

    # -- presence ------------------------------------------------------------------------------
    def presence_payload(self) -> bytes:
        params = {"server_name": self.topics.server_name, "description": self.description, "meta": self.meta}
        return encode(notification("notifications/server/online", params))

    async def _announce(self) -> None:
        expiry = self.presence_expiry_s if self.presence_expiry_s > 0 else None
        await self._send(self.topics.presence, self.presence_payload(), retain=True, expiry=expiry)

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(max(1.0, self.presence_expiry_s / 2))
            if self._connected():
                await self._announce()

    # -- publishing ----------------------------------------------------------------------------
    async def _send_message(self, topic: str, message: dict[str, Any]) -> None:
        await self._send(topic, encode(message))

    async def _send(
        self, topic: str, payload: bytes, *, retain: bool = False, expiry: int | None = None
    ) -> None:
        try:
            await self._publish(topic, payload, retain, self.user_properties, expiry)
        except Exception as e:  # not connected, dropped before the PUBACK: the client times out
            log.warning("MCP over MQTT: could not publish on %s: %s", topic, e)

    def _spawn(self, work: Awaitable[Any]) -> None:
        self._tasks.spawn(work)


def _decode(payload: bytes) -> list[dict[str, Any]]:
    if len(payload) > MAX_MESSAGE_BYTES:
        raise McpError(f"message over {MAX_MESSAGE_BYTES} bytes", INVALID_REQUEST)
    return decode(payload)
