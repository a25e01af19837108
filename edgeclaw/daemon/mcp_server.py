"""edgeclaw's tools served over MCP, built from `[mcp.server]`: on stdio (`edgeclaw mcp serve`),
as streamable HTTP in the daemon (`listen`), and over MQTT on a broker connection of its own
(`mqtt = true`, a service beside the MQTT channel's)."""

from __future__ import annotations

import logging
import ssl
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from edgeclaw import __version__
from edgeclaw.backends.mcp.protocol import MAX_MESSAGE_BYTES
from edgeclaw.channels.mcp.http import McpHttpEndpoint
from edgeclaw.channels.mcp.server import McpServer
from edgeclaw.config.listener_checks import token_problem
from edgeclaw.config.schema import McpServeConfig
from edgeclaw.daemon.runtime import Runtime
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.net.httpd import HttpServer

if TYPE_CHECKING:
    from edgeclaw.channels.mcp.mqtt_link import McpMqttLink

log = logging.getLogger("edgeclaw.mcp")


def mcp_server(runtime: Runtime, *, max_sessions: int | None = None, idle: bool = True) -> McpServer:
    """An MCP server on the runtime's registry and approvals, with `[mcp.server]`'s limits."""
    cfg = runtime.config.mcp.server
    return McpServer(
        runtime.registry,
        runtime.approvals,
        device=runtime.device_id,
        max_sessions=cfg.max_sessions if max_sessions is None else max_sessions,
        session_idle_s=cfg.session_idle_s if idle else None,
        approval_timeout_s=cfg.approval_timeout_s,
    )


def shared_mcp_server(runtime: Runtime) -> McpServer:
    """The daemon's one MCP server, shared by HTTP and MQTT (so `max_sessions` counts both);
    started on first use (on the event loop), closed with the runtime."""
    if runtime.mcp_server.built is None:
        server = runtime.mcp_server.built = mcp_server(runtime)
        server.start()
        runtime.on_close(server.aclose)
    return runtime.mcp_server.built


async def serve_stdio(runtime: Runtime, identity: str, stdin: IO[bytes], stdout: IO[bytes]) -> None:
    """One MCP client on this process's pipes, until it closes them (`edgeclaw mcp serve`)."""
    from edgeclaw.channels.mcp.stdio import open_stdio
    from edgeclaw.channels.mcp.stdio import serve_stdio as serve

    if runtime.mcp is not None:
        await runtime.mcp.start()  # the tools of [mcp.servers.*] are served too, as policy allows
    # One session, never idle-expired: the client owns this process.
    async with mcp_server(runtime, max_sessions=1, idle=False) as server:
        reader, write = await open_stdio(stdin, stdout)
        await serve(server, identity, reader, write)


def parse_listen(listen: str, source: str, key: str = "mcp.server.listen") -> tuple[str, int]:
    """ "HOST:PORT" (or "[IPv6]:PORT") → (host, port); ConfigErrors naming `key` otherwise."""
    host, sep, port_text = listen.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ConfigErrors(
            [
                ConfigError(
                    source,
                    key,
                    f'expected "HOST:PORT" (e.g. "127.0.0.1:8765"), got {listen!r}',
                )
            ]
        )
    return host, int(port_text)


def read_token(cfg: McpServeConfig, source: str) -> tuple[str, str]:
    """The bearer token (the file's content, stripped) and its name (the file's stem)."""
    key = "mcp.server.token_file"
    if not cfg.token_file:
        raise ConfigErrors(
            [ConfigError(source, key, "required with mcp.server.listen: a file holding the bearer token")]
        )
    path = Path(cfg.token_file)
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigErrors([ConfigError(source, key, f"cannot read {path}: {e}")]) from None
    if problem := token_problem(token):
        raise ConfigErrors([ConfigError(source, key, f"{path}: {problem}")])
    return token, path.stem


def tls_context(cfg: McpServeConfig, source: str) -> ssl.SSLContext | None:
    if not cfg.tls_cert_file and not cfg.tls_key_file:
        return None
    if not cfg.tls_cert_file:
        raise ConfigErrors([ConfigError(source, "mcp.server.tls_cert_file", "required with tls_key_file")])
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cfg.tls_cert_file, cfg.tls_key_file or None)
    except (OSError, ssl.SSLError) as e:
        raise ConfigErrors(
            [ConfigError(source, "mcp.server.tls_cert_file", f"cannot use the certificate: {e}")]
        ) from None
    return context


class McpHttpService:
    """`[mcp.server] listen`: the streamable HTTP endpoint as a daemon service."""

    name = "mcp-http"

    def __init__(self, runtime: Runtime) -> None:
        cfg = runtime.config.mcp.server
        source = runtime.config._source
        host, port = parse_listen(cfg.listen, source)
        token, token_name = read_token(cfg, source)
        runtime.registry.scrubber.add_secret(token)  # never in a tool's output or a log line
        self.runtime = runtime
        self.scheme = "https" if cfg.tls_cert_file else "http"
        self._tls = tls_context(cfg, source)
        self._cfg = cfg
        self._host, self._port = host, port
        self._token, self._token_name = token, token_name
        self.endpoint: McpHttpEndpoint | None = None
        self.http: HttpServer | None = None

    async def __aenter__(self) -> McpHttpService:
        server = shared_mcp_server(self.runtime)
        self.endpoint = McpHttpEndpoint(
            server,
            path=self._cfg.path,
            token=self._token,
            token_name=self._token_name,
            allowed_origins=self._cfg.allowed_origins,
        )
        self.http = HttpServer(
            self.endpoint.handle,
            self._host,
            self._port,
            tls=self._tls,
            max_body=MAX_MESSAGE_BYTES,
            allowed_hosts=self._cfg.allowed_hosts,
        )
        await self.http.__aenter__()
        log.info("MCP over streamable HTTP at %s", self.url)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.endpoint is not None:
            self.endpoint.close()
        if self.http is not None:
            await self.http.__aexit__(*exc)

    @property
    def url(self) -> str:
        host = f"[{self._host}]" if ":" in self._host else self._host
        port = self.http.bound_port if self.http is not None else self._port
        return f"{self.scheme}://{host}:{port}{self._cfg.path}"

    def status_snapshot(self) -> dict[str, Any]:
        sessions = len(self.endpoint.sessions) if self.endpoint is not None else 0
        return {"url": self.url, "sessions": sessions}


def mcp_http_service(runtime: Runtime) -> McpHttpService:
    """The daemon service for `[mcp.server] listen` (an async context manager)."""
    return McpHttpService(runtime)


def mcp_over_mqtt(runtime: Runtime) -> McpMqttLink:
    """`[mcp.server] mqtt = true`: MCP sessions over MQTT (5 only), on a connection of their own beside
    the MQTT channel's (a daemon service, entered after it)."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from edgeclaw.channels.mcp.mqtt import McpMqttTransport, McpTopics, server_name_problem
    from edgeclaw.channels.mcp.mqtt_link import McpMqttLink, link_settings
    from edgeclaw.channels.mqtt.channel import connection_settings

    cfg = runtime.config.mcp.server
    source = runtime.config._source
    if runtime.config.mqtt.protocol != "5":
        raise ConfigErrors(
            [ConfigError(source, "mcp.server.mqtt", 'MCP over MQTT needs MQTT 5 (mqtt.protocol = "5")')]
        )
    name = cfg.mqtt_server_name or f"edgeclaw/{runtime.device_id}"
    problem = server_name_problem(name)
    if problem is not None:
        key = "mcp.server.mqtt_server_name" if cfg.mqtt_server_name else "device_id"
        raise ConfigErrors([ConfigError(source, key, f"MCP server name {name!r}: {problem}")])
    mqtt = runtime.config.mqtt
    # The daemon's connection, as the MCP link's: its client id is the server-id of every topic.
    password = runtime.secrets.get("mqtt", "")
    base = connection_settings(mqtt, runtime.device_id, password, (), ("", lambda: b""))
    server_id = f"{base.client_id}-mcp"
    link: McpMqttLink | None = None

    async def publish(
        topic: str, payload: bytes, retain: bool, user_properties: list[tuple[str, str]], expiry: int | None
    ) -> None:
        properties = Properties(PacketTypes.PUBLISH)
        properties.UserProperty = user_properties
        if expiry is not None:
            properties.MessageExpiryInterval = expiry
        assert link is not None
        await link.connection.publish(topic, payload, qos=1, retain=retain, properties=properties)

    board = runtime.board
    transport = McpMqttTransport(
        shared_mcp_server(runtime),
        McpTopics(server_id, name),
        publish,
        description=(
            f"edgeclaw on {runtime.device_id} ({board.name}): the board's tools (hardware, files) "
            "as its policy allows"
        ),
        meta={"device": runtime.device_id, "board": board.name, "version": __version__},
        presence_expiry_s=cfg.mqtt_presence_expiry_s,
        connected=lambda: link is not None and link.connection.connected,
    )
    link = McpMqttLink(transport, link_settings(base, transport))
    return link
