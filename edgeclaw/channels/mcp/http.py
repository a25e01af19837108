"""MCP's streamable HTTP transport in the daemon: one endpoint (`[mcp.server] listen`, `path`).

- Every request must carry `Authorization: Bearer TOKEN` (the token file's
  content, compared in constant time): 401 otherwise. A request with an
  `Origin` header (a browser) is refused with 403 unless the origin is in
  `allowed_origins`, so a web page cannot reach the board through a browser
  on its network (DNS rebinding).
- POST carries one JSON-RPC message (or a batch, for 2025-03-26 clients).
  `initialize` opens a session and answers with its `Mcp-Session-Id`; every
  later request must send it back (400 without, 404 once it has ended: idle
  for `session_idle_s`, or ended with DELETE). Notifications and responses
  are answered 202. Requests are answered as JSON, except `tools/call`, whose
  answer comes as a server-sent event stream, so that an approval question
  (`elicitation/create`) can reach the client on it before the result.
- GET opens the session's event stream for messages that belong to no
  request (`notifications/tools/list_changed`); a newer GET replaces it.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from edgeclaw.backends.mcp.protocol import INVALID_REQUEST, McpError, decode, encode, error
from edgeclaw.channels.mcp.server import McpServer, ServedSession, SessionLimit
from edgeclaw.lockout import LoginLockout
from edgeclaw.net.httpd import Exchange, Request
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.mcp.http")

SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
KEEPALIVE_S = 20.0  # a comment line on an idle event stream, so proxies and clients keep it open
MAX_QUEUED = 256  # messages waiting for a slow GET stream; beyond that they are dropped
JSON = "application/json"
EVENTS = "text/event-stream"


def sse(message: dict[str, Any]) -> bytes:
    """One server-sent event carrying one JSON-RPC message (compact JSON: no newline inside)."""
    return b"event: message\ndata: " + encode(message) + b"\n\n"


@dataclass
class _Stream:
    """A session's GET event stream: messages queued for it, ended by `close`."""

    queue: asyncio.Queue[dict[str, Any] | None] = field(default_factory=lambda: asyncio.Queue(MAX_QUEUED))

    def put(self, message: dict[str, Any] | None) -> None:
        with contextlib.suppress(asyncio.QueueFull):
            self.queue.put_nowait(message)

    def close(self) -> None:
        self.put(None)


@dataclass
class _HttpSession:
    session: ServedSession
    stream: _Stream | None = None


class McpHttpEndpoint:
    """The request handler for `HttpServer`: authentication, origins, sessions, the MCP messages."""

    def __init__(
        self,
        server: McpServer,
        *,
        path: str,
        token: str,
        token_name: str,
        allowed_origins: Sequence[str] = (),
        lockout: LoginLockout | None = None,
    ) -> None:
        if not token:
            raise ValueError("the MCP endpoint needs a bearer token")
        self.server = server
        self.path = path
        self._token = token.encode("utf-8")
        self.identity = f"mcp:http:{token_name}"
        self.allowed_origins = frozenset(o.rstrip("/") for o in allowed_origins)
        self.sessions: dict[str, _HttpSession] = {}
        # Wrong tokens counted per source address: a guesser is locked out alone, and slowed.
        self.lockout = lockout or LoginLockout()

    async def handle(self, request: Request, exchange: Exchange) -> None:
        if request.path != self.path:
            await _plain(exchange, 404, f"no MCP endpoint at {request.path} (it is at {self.path})")
            return
        origin = request.header("origin")
        if origin and origin.rstrip("/") not in self.allowed_origins:
            await _plain(
                exchange, 403, f"origin {origin[:100]!r} is not allowed (mcp.server.allowed_origins)"
            )
            return
        lockout, source = self.lockout, request.source
        async with lockout.checking_for(source):
            left = lockout.locked_for(source)
            if left > 0:
                log.warning("MCP HTTP: %s is locked out after wrong tokens", source)
                await _plain(exchange, 429, f"too many wrong tokens: try again in {max(1, round(left))} s")
                return
            if not self._authorized(request):
                if request.header("authorization"):  # a guess; a client's first, token-less try is not
                    lockout.failed(source)
                    log.warning("MCP HTTP: wrong bearer token from %s", source)
                    await lockout.slow_down()
                await exchange.respond(
                    401,
                    b"a bearer token is required (Authorization: Bearer TOKEN)\n",
                    {"WWW-Authenticate": 'Bearer realm="edgeclaw"'},
                    content_type="text/plain",
                )
                return
            lockout.succeeded(source)
        if request.method == "POST":
            await self._post(request, exchange)
        elif request.method == "GET":
            await self._get(request, exchange)
        elif request.method == "DELETE":
            await self._delete(request, exchange)
        else:
            await exchange.respond(405, b"", {"Allow": "GET, POST, DELETE"})

    def _authorized(self, request: Request) -> bool:
        scheme, _, value = request.header("authorization").partition(" ")
        # compare_digest takes as long whatever the mismatch, so the token cannot be guessed by timing.
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode("utf-8"), self._token)

    # -- POST: messages from the client ------------------------------------------------------
    async def _post(self, request: Request, exchange: Exchange) -> None:
        if request.header("content-type").split(";")[0].strip().lower() != JSON:
            await _plain(exchange, 415, "the body must be application/json")
            return
        try:
            messages = decode(request.body)
        except McpError as e:
            await _json(exchange, 400, error(None, e.code or INVALID_REQUEST, str(e)))
            return
        if any(m.get("method") == "initialize" for m in messages):
            await self._initialize(request, exchange, messages)
            return
        entry = await self._session(request, exchange)
        if entry is None:
            return
        session = entry.session
        requests = [m for m in messages if "method" in m and "id" in m]
        refusals = []
        for message in messages:
            if not ("method" in message and "id" in message):  # notifications, responses
                refusal = await session.receive(message)  # an error for what is neither
                if refusal is not None:
                    refusals.append(refusal)
        if not requests:
            if refusals:
                await _json(exchange, 400, refusals[0] if len(refusals) == 1 else refusals)
            else:
                await exchange.respond(202)
            return
        accept = request.header("accept")
        takes_events = EVENTS in accept or "*/*" in accept
        # An event stream only where something may come before the answer (an approval question)
        # and the client takes one; else plain JSON.
        if not takes_events or all(m.get("method") != "tools/call" for m in requests):
            answers = [a for a in await asyncio.gather(*(session.receive(m) for m in requests)) if a]
            await _json(exchange, 200, answers[0] if len(messages) == 1 and answers else answers)
            return
        await self._stream_answers(exchange, session, requests)

    async def _initialize(self, request: Request, exchange: Exchange, messages: list[dict[str, Any]]) -> None:
        if len(messages) != 1:
            await _json(exchange, 400, error(None, INVALID_REQUEST, "initialize must be sent alone"))
            return
        if request.header("mcp-session-id"):
            msg = "initialize opens a new session: send it without Mcp-Session-Id"
            await _json(exchange, 400, error(messages[0].get("id"), INVALID_REQUEST, msg))
            return
        sid = secrets.token_urlsafe(24)
        entry: _HttpSession | None = None

        async def send(message: dict[str, Any]) -> None:
            if entry is not None and entry.stream is not None:
                entry.stream.put(message)

        try:
            session = self.server.open("http", self.identity, send)
        except SessionLimit as e:
            await _json(exchange, 503, error(messages[0].get("id"), INVALID_REQUEST, str(e)))
            return
        entry = _HttpSession(session)
        answer = await session.receive(messages[0])
        if answer is None or "error" in answer:
            session.close("initialize failed")
            await _json(exchange, 200, answer or error(None, INVALID_REQUEST, "initialize failed"))
            return
        self.sessions[sid] = entry
        session.on_close(lambda _s: self._ended(sid))
        await _json(exchange, 200, answer, {SESSION_HEADER: sid})

    def _ended(self, sid: str) -> None:
        entry = self.sessions.pop(sid, None)
        if entry is not None and entry.stream is not None:
            entry.stream.close()

    async def _session(self, request: Request, exchange: Exchange) -> _HttpSession | None:
        """The request's session, or None after answering why not (400, 404)."""
        sid = request.header("mcp-session-id")
        if not sid:
            msg = f"the {SESSION_HEADER} header is required (initialize first)"
            await _json(exchange, 400, error(None, INVALID_REQUEST, msg))
            return None
        entry = self.sessions.get(sid)
        if entry is None:
            msg = "unknown or ended session: initialize again"
            await _json(exchange, 404, error(None, INVALID_REQUEST, msg))
            return None
        version = request.header("mcp-protocol-version")
        if version and version != entry.session.protocol_version:
            msg = (
                f"{VERSION_HEADER} {version[:32]!r} is not this session's ({entry.session.protocol_version})"
            )
            await _json(exchange, 400, error(None, INVALID_REQUEST, msg))
            return None
        entry.session.touch()
        return entry

    async def _stream_answers(
        self, exchange: Exchange, session: ServedSession, requests: list[dict[str, Any]]
    ) -> None:
        """Answer on an event stream: what the calls ask of the client first, then their results."""
        await exchange.stream(200, content_type=EVENTS)
        lock = asyncio.Lock()
        gone = False

        async def send(message: dict[str, Any]) -> None:
            nonlocal gone
            if gone:
                raise ConnectionError("the client closed the event stream")
            async with lock:
                try:
                    await exchange.send(sse(message))
                except (ConnectionError, TimeoutError):
                    # A dropped stream is not a cancellation: the call goes on, its answer is lost.
                    gone = True
                    raise ConnectionError("the client closed the event stream") from None

        async def answer(message: dict[str, Any]) -> None:
            response = await session.receive(message, send)
            if response is not None:
                with contextlib.suppress(ConnectionError):
                    await send(response)

        await asyncio.gather(*(answer(m) for m in requests))
        if not gone:
            with contextlib.suppress(ConnectionError, TimeoutError):
                await exchange.end()

    # -- GET: the session's own event stream ----------------------------------------------------
    async def _get(self, request: Request, exchange: Exchange) -> None:
        if EVENTS not in request.header("accept") and "*/*" not in request.header("accept"):
            await _plain(exchange, 406, f"the event stream needs Accept: {EVENTS}")
            return
        entry = await self._session(request, exchange)
        if entry is None:
            return
        if entry.stream is not None:
            entry.stream.close()  # one stream per session: the newer one wins
        stream = entry.stream = _Stream()
        try:
            await exchange.stream(200, content_type=EVENTS)
            while True:
                try:
                    message = await asyncio.wait_for(stream.queue.get(), KEEPALIVE_S)
                except TimeoutError:
                    await exchange.send(b": keep-alive\n\n")
                    continue
                if message is None:
                    break
                await exchange.send(sse(message))
            await exchange.end()
        except (ConnectionError, TimeoutError):
            pass
        finally:
            if entry.stream is stream:
                entry.stream = None

    async def _delete(self, request: Request, exchange: Exchange) -> None:
        entry = await self._session(request, exchange)
        if entry is None:
            return
        entry.session.close("the client ended it")
        await exchange.respond(200)

    def close(self) -> None:
        for entry in list(self.sessions.values()):
            entry.session.close("the daemon is stopping")


async def _json(
    exchange: Exchange, status: int, body: dict[str, Any] | list[Any], headers: dict[str, str] | None = None
) -> None:
    await exchange.respond(status, encode(body) if isinstance(body, dict) else _encode_list(body), headers,
                           content_type=JSON)  # fmt: skip


def _encode_list(items: list[Any]) -> bytes:
    return b"[" + b",".join(encode(i) for i in items) + b"]"


async def _plain(exchange: Exchange, status: int, text: str) -> None:
    await exchange.respond(status, text.encode("utf-8") + b"\n", content_type="text/plain; charset=utf-8")
