"""A small HTTP/1.1 server on asyncio streams, for the one MCP endpoint the daemon serves.

Why our own: httpx (a dependency already) is a client only, and aiohttp or an
ASGI stack (uvicorn, starlette) would add several megabytes and a second of
import to a board for a single endpoint. This serves exactly what streamable
HTTP needs and bounds everything a client controls:

- the request line and headers: at most `MAX_HEAD_BYTES`, `MAX_HEADERS` lines,
  read within `head_timeout_s` (a few seconds: a client that trickles its
  headers holds a slot no longer than that);
- the body: a `Content-Length` of at most `max_body` (413 otherwise), read
  within `BODY_TIMEOUT_S`; a chunked request body is refused (411), which no
  MCP client sends;
- connections: at most `max_connections` at once and `max_per_source` from
  one source address (503 beyond), each kept alive between requests for
  `IDLE_TIMEOUT_S`; when every slot is taken, a newcomer first closes the
  connections idling between requests, so idle keep-alives cannot starve
  a client that has something to ask;
- the `Host` header: when `allowed_hosts` is given (even empty), only those names, the
  address the client connected to and the localhost names are served (421
  otherwise), so a DNS-rebound name in a browser cannot reach the endpoint;
- responses: a whole body with its length, or a stream in chunked transfer
  encoding (server-sent events), on which the connection stays usable.

TLS comes from the `ssl.SSLContext` given to `HttpServer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import field
from http import HTTPStatus
from urllib.parse import urlsplit

from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.mcp.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 64
HEAD_TIMEOUT_S = 5.0
BODY_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 75.0
WRITE_TIMEOUT_S = 30.0
MAX_PER_SOURCE = 16
LOCAL_HOSTS = frozenset({"localhost", "127.0.0.1", "::1", "localhost.localdomain"})


@dataclass
class Request:
    method: str
    target: str  # as sent: path and query
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: dict[str, str]  # names in lower case; repeated headers joined with ", "
    body: bytes = b""
    peer: str = ""

    @property
    def source(self) -> str:
        """The client's address without its port: what per-source limits and lock-outs count by."""
        return self.peer.rpartition(":")[0] or self.peer

    @property
    def path(self) -> str:
        return urlsplit(self.target).path

    def header(self, name: str, default: str = "") -> str:
        return self.headers.get(name.lower(), default)


class HttpError(Exception):
    """A request we answer with `status` and close: malformed, too large, too slow."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Exchange:
    """The response side of one request: one `respond`, or `stream` then `send`s and `end`."""

    writer: asyncio.StreamWriter
    keep_alive: bool
    started: bool = False
    finished: bool = False
    _chunked: bool = field(default=False, repr=False)

    async def respond(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None, *, content_type: str = ""
    ) -> None:
        head = dict(headers or {})
        if content_type:
            head["Content-Type"] = content_type
        head["Content-Length"] = str(len(body))
        self._head(status, head)
        self.writer.write(body)
        self.finished = True
        await self._drain()

    async def stream(self, status: int, headers: dict[str, str] | None = None, *, content_type: str) -> None:
        """Start a streamed response (chunked): `send` pieces, then `end`."""
        head = dict(headers or {})
        head["Content-Type"] = content_type
        head["Transfer-Encoding"] = "chunked"
        self._head(status, head)
        self._chunked = True
        await self._drain()

    async def send(self, data: bytes) -> None:
        """One piece of a streamed response; ConnectionError when the client has gone."""
        if not data:
            return
        self.writer.write(b"%x\r\n%s\r\n" % (len(data), data))
        await self._drain()

    async def end(self) -> None:
        if self._chunked and not self.finished:
            self.finished = True
            self.writer.write(b"0\r\n\r\n")
            await self._drain()

    @property
    def closing(self) -> bool:
        return self.writer.is_closing()

    def _head(self, status: int, headers: dict[str, str]) -> None:
        if self.started:
            raise RuntimeError("the response has already started")
        self.started = True
        reason = HTTPStatus(status).phrase if status in HTTPStatus._value2member_map_ else ""
        lines = [f"HTTP/1.1 {status} {reason}"]
        headers.setdefault("Connection", "keep-alive" if self.keep_alive else "close")
        headers.setdefault("Cache-Control", "no-store")
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))

    async def _drain(self) -> None:
        async with asyncio.timeout(WRITE_TIMEOUT_S):  # a client that stops reading is let go
            await self.writer.drain()


Handler = Callable[[Request, Exchange], Awaitable[None]]


class HttpServer:
    """An async context manager serving `handler` on (host, port), with TLS when `tls` is given."""

    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        *,
        tls: ssl.SSLContext | None = None,
        max_body: int = 4 * 1024 * 1024,
        max_connections: int = 64,
        max_per_source: int = MAX_PER_SOURCE,
        head_timeout_s: float = HEAD_TIMEOUT_S,
        allowed_hosts: Iterable[str] | None = None,
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.tls = tls
        self.max_body = max_body
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self.max_per_source = max_per_source
        self.head_timeout_s = head_timeout_s
        # The names served besides the local ones and the address connected to; None: no Host check.
        self.allowed_hosts = None if allowed_hosts is None else frozenset(h.lower() for h in allowed_hosts)
        self._connections: set[asyncio.Task[None]] = set()
        self._per_source: dict[str, int] = {}
        self._idle: set[asyncio.Task[None]] = set()  # waiting for a next request on a kept-alive connection
        self._evicted: set[asyncio.Task[None]] = set()  # idle ones cancelled to make room

    @property
    def bound_port(self) -> int:
        assert self._server is not None
        return int(self._server.sockets[0].getsockname()[1])

    async def __aenter__(self) -> HttpServer:
        self._server = await asyncio.start_server(
            self._connection, self.host, self.port, ssl=self.tls, limit=MAX_HEAD_BYTES + 1
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        if self._connections:
            await asyncio.wait(self._connections, timeout=5.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 5.0)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        peer = writer.get_extra_info("peername")
        peer_text = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer or "")
        source = str(peer[0]) if isinstance(peer, tuple) else peer_text
        counted = False
        try:
            if self._per_source.get(source, 0) >= self.max_per_source:
                log.warning("HTTP: %s already holds %d connections; refused", source, self.max_per_source)
                await Exchange(writer, keep_alive=False).respond(
                    503, b"too many connections from your address\n", content_type="text/plain"
                )
                return
            if len(self._connections) >= self.max_connections:
                self._close_idle()
            if len(self._connections) >= self.max_connections:
                await Exchange(writer, keep_alive=False).respond(
                    503, b"too many connections\n", content_type="text/plain"
                )
                return
            self._connections.add(task)
            self._per_source[source] = self._per_source.get(source, 0) + 1
            counted = True
            await self._serve(reader, writer, peer_text)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away, stalled or spoke no TLS: nothing to answer
        except asyncio.CancelledError:
            if task not in self._evicted:
                raise
        except Exception:
            log.exception("HTTP connection from %s failed", peer_text)
        finally:
            self._connections.discard(task)
            self._idle.discard(task)
            self._evicted.discard(task)
            if counted:
                left = self._per_source[source] - 1
                if left:
                    self._per_source[source] = left
                else:
                    del self._per_source[source]
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2.0)

    def _close_idle(self) -> None:
        """Every slot is taken: end the connections idling between requests, to make room."""
        for task in list(self._idle):
            self._idle.discard(task)
            self._connections.discard(task)  # the slot is free now, whenever the task gets to end
            self._evicted.add(task)
            task.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        task = asyncio.current_task()
        assert task is not None
        first = True
        while True:
            try:
                head = await self._next_head(reader, task, first=first)
                if head is None:
                    return  # closed between requests
                request = _parse_head(head, peer)
                async with asyncio.timeout(BODY_TIMEOUT_S):
                    request.body = await self._read_body(reader, request)
                self._check_host(request, writer)
            except HttpError as e:
                exchange = Exchange(writer, keep_alive=False)
                await exchange.respond(e.status, f"{e}\n".encode(), content_type="text/plain")
                return
            first = False
            keep_alive = _keeps_alive(request)
            exchange = Exchange(writer, keep_alive=keep_alive)
            await self.handler(request, exchange)
            if not exchange.started:
                await exchange.respond(500, b"no response\n", content_type="text/plain")
            elif not exchange.finished:
                await exchange.end()
            if not keep_alive or writer.is_closing():
                return

    async def _next_head(
        self, reader: asyncio.StreamReader, task: asyncio.Task[None], *, first: bool
    ) -> bytes | None:
        """The next request's head: idle (evictable) until its first byte, then within the head timeout."""
        start = b""
        if not first:
            self._idle.add(task)
            try:
                async with asyncio.timeout(IDLE_TIMEOUT_S):
                    start = await reader.read(1)
            finally:
                self._idle.discard(task)
            if not start:
                return None
        async with asyncio.timeout(self.head_timeout_s):
            head = await _read_head(reader)
        if head is None:
            if start:
                raise HttpError(400, "the request ended inside its headers")
            return None
        return start + head

    def _check_host(self, request: Request, writer: asyncio.StreamWriter) -> None:
        if self.allowed_hosts is None:
            return
        host = host_name(request.header("host"))
        local = writer.get_extra_info("sockname")
        own = str(local[0]).lower() if isinstance(local, tuple) else ""
        if host in LOCAL_HOSTS or host in self.allowed_hosts or (own and host == own):
            return
        raise HttpError(
            421,
            f"this server does not answer for Host {request.header('host')[:100]!r} "
            "(add the name to the endpoint's allowed_hosts)",
        )

    async def _read_body(self, reader: asyncio.StreamReader, request: Request) -> bytes:
        if "transfer-encoding" in request.headers:
            raise HttpError(411, "a request body must come with Content-Length (chunked is not accepted)")
        length_text = request.headers.get("content-length", "")
        if not length_text:
            return b""
        if not length_text.isdigit():
            raise HttpError(400, f"bad Content-Length {length_text[:32]!r}")
        length = int(length_text)
        if length > self.max_body:
            raise HttpError(413, f"the body is {length} bytes; the limit is {self.max_body}")
        return await reader.readexactly(length)


async def _read_head(reader: asyncio.StreamReader) -> bytes | None:
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as e:
        if not e.partial.strip():
            return None
        raise HttpError(400, "the request ended inside its headers") from None
    except asyncio.LimitOverrunError:
        raise HttpError(431, f"the request line and headers are over {MAX_HEAD_BYTES} bytes") from None


def _parse_head(head: bytes, peer: str) -> Request:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # latin-1 decodes every byte; kept for clarity
        raise HttpError(400, "undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.1", "HTTP/1.0") or not parts[1].startswith("/"):
        raise HttpError(400, "bad request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    fields = [line for line in lines[1:] if line]
    if len(fields) > MAX_HEADERS:
        raise HttpError(431, f"more than {MAX_HEADERS} header lines")
    for line in fields:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip() or any(c in name for c in " \t"):
            raise HttpError(400, "bad header line")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if "content-length" in headers and "," in headers["content-length"]:
        raise HttpError(400, "more than one Content-Length")
    return Request(method, target, version, headers, peer=peer)


def host_name(host: str) -> str:
    """The name in a `Host` header, without its port or an IPv6 address's brackets, in lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1 : host.find("]")] if "]" in host else host
    name, _, port = host.rpartition(":")
    return name if name and port.isdigit() else host


def _keeps_alive(request: Request) -> bool:
    tokens = {t.strip().lower() for t in request.header("connection").split(",")}
    if request.version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens
