"""A small HTTP/1.1 server on asyncio streams, for the one MCP endpoint the daemon serves.

Why our own: httpx (a dependency already) is a client only, and aiohttp or an
ASGI stack (uvicorn, starlette) would add several megabytes and a second of
import to a board for a single endpoint. This serves exactly what streamable
HTTP needs and bounds everything a client controls:

- the request line and headers: at most `MAX_HEAD_BYTES`, `MAX_HEADERS` lines,
  read within `HEAD_TIMEOUT_S`;
- the body: a `Content-Length` of at most `max_body` (413 otherwise), read
  within `BODY_TIMEOUT_S`; a chunked request body is refused (411), which no
  MCP client sends;
- connections: at most `max_connections` at once (503 beyond), each kept
  alive between requests for `IDLE_TIMEOUT_S`;
- responses: a whole body with its length, or a stream in chunked transfer
  encoding (server-sent events), on which the connection stays usable.

TLS comes from the `ssl.SSLContext` given to `HttpServer`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from urllib.parse import urlsplit

log = logging.getLogger("edgeclaw.mcp.http")

MAX_HEAD_BYTES = 16 * 1024
MAX_HEADERS = 64
HEAD_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
IDLE_TIMEOUT_S = 75.0
WRITE_TIMEOUT_S = 30.0


@dataclass
class Request:
    method: str
    target: str  # as sent: path and query
    version: str  # "HTTP/1.1" or "HTTP/1.0"
    headers: dict[str, str]  # names in lower case; repeated headers joined with ", "
    body: bytes = b""
    peer: str = ""

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
    ) -> None:
        self.handler = handler
        self.host = host
        self.port = port
        self.tls = tls
        self.max_body = max_body
        self.max_connections = max_connections
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task[None]] = set()

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
        try:
            if len(self._connections) >= self.max_connections:
                await Exchange(writer, keep_alive=False).respond(
                    503, b"too many connections\n", content_type="text/plain"
                )
                return
            self._connections.add(task)
            await self._serve(reader, writer, peer_text)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # the client went away, stalled or spoke no TLS: nothing to answer
        except Exception:
            log.exception("HTTP connection from %s failed", peer_text)
        finally:
            self._connections.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(writer.wait_closed(), 2.0)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, peer: str) -> None:
        first = True
        while True:
            try:
                async with asyncio.timeout(HEAD_TIMEOUT_S if first else IDLE_TIMEOUT_S):
                    head = await _read_head(reader)
                if head is None:
                    return  # closed between requests
                request = _parse_head(head, peer)
                async with asyncio.timeout(BODY_TIMEOUT_S):
                    request.body = await self._read_body(reader, request)
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


def _keeps_alive(request: Request) -> bool:
    tokens = {t.strip().lower() for t in request.header("connection").split(",")}
    if request.version == "HTTP/1.0":
        return "keep-alive" in tokens
    return "close" not in tokens
