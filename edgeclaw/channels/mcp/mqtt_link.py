"""MCP over MQTT on a broker connection of its own, whose Last Will clears the presence.

The transport asks each MCP server for a connection of its own: its client id is the server-id of
every `$mcp-` topic, its session ends with it (clean start, no session expiry: MCP sessions live in
the daemon, not at the broker), and its Last Will is an empty retained message on the presence
topic. So a board that dies -- a power cut, a SIGKILL, a kernel panic -- drops out of every client's
discovery as soon as the broker notices: at once when the socket closes, within one and a half
keep-alives when it just goes silent. On the daemon's own connection the presence could not be a
Will (that one is the `status` topic's).

The link reconnects like the daemon's connection (the same backoff), with the same broker address,
credentials and TLS; it costs one more TCP connection and MQTT client in the daemon.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from typing import TYPE_CHECKING

from edgeclaw.net.mqtt_connection import Connection, ConnectionSettings

if TYPE_CHECKING:
    import aiomqtt

    from edgeclaw.channels.mcp.mqtt import McpMqttTransport

log = logging.getLogger("edgeclaw.mcp.mqtt")


def link_settings(base: ConnectionSettings, transport: McpMqttTransport) -> ConnectionSettings:
    """The daemon connection's broker, credentials and TLS, as the transport's own connection."""
    return dataclasses.replace(
        base,
        client_id=transport.topics.server_id,
        protocol="5",
        subscriptions=tuple(transport.subscriptions()),
        clean_start=True,
        session_expiry_s=0,
        connect_user_properties=tuple(transport.connect_properties()),
        will_topic=transport.topics.presence,
        will_payload=lambda: b"",  # empty and retained: clears the retained presence
        will_retain=True,
    )


class McpMqttLink:
    """An async context manager: entering starts the transport on its own connection, leaving
    ends its sessions, clears the presence and disconnects."""

    def __init__(self, transport: McpMqttTransport, settings: ConnectionSettings) -> None:
        self.transport = transport
        self.connection = Connection(settings, self._on_message, on_connect=transport.on_connect)
        self._runner: asyncio.Task[None] | None = None

    def _on_message(self, message: aiomqtt.Message) -> None:
        payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
        user_properties = getattr(message.properties, "UserProperty", None)
        self.transport.on_message(message.topic.value, payload, user_properties, message.retain)

    async def __aenter__(self) -> McpMqttLink:
        self.connection.open()
        self.transport.start()
        self._runner = asyncio.get_running_loop().create_task(self.connection.run(), name="mcp-mqtt")
        return self

    async def __aexit__(self, *exc: object) -> None:
        try:
            await self.transport.before_disconnect()
        except Exception:
            log.exception("ending the MCP sessions on MQTT failed")
        if self._runner is not None:
            # A clean DISCONNECT: the broker drops the Will; the presence was cleared just above.
            await self.connection.stop(self._runner)
