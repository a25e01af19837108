"""The guarded proxy chromium is started behind: every request a page makes is vetted first.

chromium runs with `--proxy-server` pointing here and `--proxy-bypass-list=<-loopback>`, so every
navigation, redirect, sub-resource, fetch() and websocket of every page arrives at this loopback
listener as a CONNECT (https, wss) or an absolute-form request (http, ws). Each target is resolved and
checked with the same guard as web_fetch (`backends.web.guard.vet`), and the connection goes to the
address that was checked, so a name that resolves differently a second time gains nothing. A refused
target gets a 403 naming the rule; nothing is sent towards it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlsplit

from edgeclaw.backends.web.guard import NetworkPolicy, WebError, vet

log = logging.getLogger("edgeclaw.browser")

_HEAD_LIMIT = 64 * 1024
_HOP_HEADERS = {b"proxy-connection", b"connection", b"keep-alive", b"proxy-authorization"}


class GuardedProxy:
    """An HTTP/CONNECT proxy on 127.0.0.1 (a random port) that only reaches what `policy` allows."""

    def __init__(self, policy: NetworkPolicy, connect_timeout: float = 10.0) -> None:
        self.policy = policy
        self.connect_timeout = connect_timeout
        self.refused: list[str] = []  # what was refused, newest last (a page's errors name it)
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def aclose(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        try:
            await self._serve(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            if task is not None:
                self._tasks.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        if len(head) > _HEAD_LIMIT:
            return await _answer(writer, 431, "request head too large")
        request_line, _, rest = head.partition(b"\r\n")
        try:
            method, target, version = request_line.decode("latin-1").split(" ", 2)
        except ValueError:
            return await _answer(writer, 400, "malformed request line")
        if method == "CONNECT":
            host, _, port_text = target.rpartition(":")
            scheme, port = "https", _port(port_text)
            first = b""
        else:
            parts = urlsplit(target)
            if parts.scheme not in ("http", "ws") or not parts.hostname:
                return await _answer(writer, 400, "only absolute http URLs and CONNECT are proxied")
            scheme, host, port = "http", parts.hostname, parts.port or 80
            path = parts.path or "/"
            if parts.query:
                path += "?" + parts.query
            first = _origin_request(method, path, version, rest)
        if port is None:
            return await _answer(writer, 400, "bad port")
        try:
            vetted = await vet(scheme, host, port, self.policy)
        except WebError as e:
            self.refused.append(f"{host}:{port}: {e}")
            log.info("browser proxy refused %s:%s: %s", host, port, e)
            return await _answer(writer, 403, str(e))
        try:
            up_reader, up_writer = await asyncio.wait_for(
                asyncio.open_connection(vetted.address, vetted.port), self.connect_timeout
            )
        except (OSError, TimeoutError) as e:
            return await _answer(writer, 502, f"cannot connect to {host}:{port}: {e}")
        if method == "CONNECT":
            writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            await writer.drain()
        else:
            up_writer.write(first)
        await _pipe_both(reader, writer, up_reader, up_writer)


def _port(text: str) -> int | None:
    return int(text) if text.isdigit() and 0 < int(text) < 65536 else None


def _origin_request(method: str, path: str, version: str, rest: bytes) -> bytes:
    """The request as the server expects it: origin-form, one request per connection (so a kept-alive
    proxy connection cannot carry a second request to another host past the check)."""
    lines = [f"{method} {path} {version}".encode("latin-1")]
    for line in rest.split(b"\r\n"):
        if not line:
            continue
        name = line.split(b":", 1)[0].strip().lower()
        if name not in _HOP_HEADERS:
            lines.append(line)
    lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n"


async def _answer(writer: asyncio.StreamWriter, status: int, reason: str) -> None:
    body = f"edgeclaw browser proxy: {reason}\n".encode()
    writer.write(
        f"HTTP/1.1 {status} Refused\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
        f"Connection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(1 << 16):
            dst.write(data)
            await dst.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            dst.close()


async def _pipe_both(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    up_reader: asyncio.StreamReader,
    up_writer: asyncio.StreamWriter,
) -> None:
    await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))
