"""The two HTTP transports: streamable HTTP (current) and HTTP+SSE (the 2024-11-05 revision).

Streamable HTTP: every message is a POST to one endpoint; the answer to a
request is either one JSON body or an event stream carrying the answer (and
progress before it); notifications are answered 202. The server's
`Mcp-Session-Id` from the handshake goes back on every later request, with
`MCP-Protocol-Version`; the session is ended with a DELETE.

Legacy SSE: a GET opens an event stream whose first `endpoint` event names
where to POST; every message from the server, answers included, arrives on
that stream. The endpoint must be on the stream's own origin: a server cannot
send our headers (credentials) somewhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from edgeclaw.backends.mcp import protocol as p
from edgeclaw.backends.mcp.sse import events
from edgeclaw.backends.mcp.transport import Deliver, Lost, Transport

log = logging.getLogger("edgeclaw.mcp")

SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
CONNECT_TIMEOUT_S = 10.0


def _client(headers: Mapping[str, str], timeout_s: float) -> httpx.AsyncClient:
    # No read timeout on the client: streams stay open while a tool runs; the session's own
    # deadline bounds every wait. Redirects are not followed (credentials stay where configured).
    return httpx.AsyncClient(
        headers=dict(headers),
        timeout=httpx.Timeout(
            connect=min(CONNECT_TIMEOUT_S, timeout_s), read=None, write=timeout_s, pool=timeout_s
        ),
        follow_redirects=False,
        trust_env=False,
    )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urlsplit(url)
    return parts.scheme, (parts.hostname or "").lower(), parts.port


async def _lines(response: httpx.Response) -> AsyncIterator[str]:
    async for line in response.aiter_lines():
        yield line


def _decode_json(data: bytes) -> list[dict[str, Any]]:
    if len(data) > p.MAX_MESSAGE_BYTES:
        raise p.McpError(f"an answer of more than {p.MAX_MESSAGE_BYTES} bytes from the server")
    return p.decode(data)


class StreamableHttpTransport(Transport):
    kind = "http"

    def __init__(self, name: str, url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self.name = name
        self.url = url
        self.headers = dict(headers)
        self.timeout_s = timeout_s
        self.session_id: str | None = None
        self.protocol_version: str | None = None
        self._client: httpx.AsyncClient | None = None
        self._deliver: Deliver | None = None
        self._lost: Lost | None = None
        self._listener: asyncio.Task[None] | None = None

    def describe(self) -> str:
        return f"http {self.url}"

    async def _listen(self) -> None:
        """The optional GET stream: what the server sends outside any request (a changed tool list).
        A server without one (405) or a stream that ends costs nothing: requests still work, and the
        health check notices a server that is gone."""
        client = self._client
        if client is None or self._deliver is None:
            return
        headers = {k: v for k, v in self._headers().items() if k != "content-type"}
        headers["accept"] = "text/event-stream"
        with contextlib.suppress(httpx.HTTPError, p.McpError):
            async with client.stream("GET", self.url, headers=headers) as r:
                if r.status_code != 200:
                    return
                async for event in events(_lines(r)):
                    if event.event == "message" and event.data.strip() and self._deliver is not None:
                        for m in p.decode(event.data):
                            self._deliver(m)

    async def open(self, deliver: Deliver, lost: Lost) -> None:
        self._deliver, self._lost = deliver, lost
        self._client = _client(self.headers, self.timeout_s)

    def negotiated(self, protocol_version: str) -> None:
        self.protocol_version = protocol_version

    def _headers(self) -> dict[str, str]:
        h = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
        if self.session_id:
            h[SESSION_HEADER] = self.session_id
        if self.protocol_version:
            h[VERSION_HEADER] = self.protocol_version
        return h

    async def send(self, message: dict[str, Any]) -> None:
        client = self._client
        if client is None or self._deliver is None:
            raise p.McpClosed("not connected")
        try:
            async with client.stream(
                "POST", self.url, content=p.encode(message), headers=self._headers()
            ) as r:
                if message.get("method") == "initialize" and r.headers.get(SESSION_HEADER):
                    self.session_id = r.headers[SESSION_HEADER]
                if r.status_code == 404 and self.session_id:
                    self._gone("the server ended the session (404)")
                    raise p.McpClosed("the server ended the session")
                if r.status_code >= 400:
                    body = (await r.aread())[:300].decode("utf-8", "replace")
                    raise p.McpError(f"HTTP {r.status_code} from {self.url}: {body.strip()}")
                kind = r.headers.get("content-type", "").split(";")[0].strip().lower()
                if message.get("method") == "notifications/initialized" and self._listener is None:
                    self._listener = asyncio.get_running_loop().create_task(
                        self._listen(), name=f"mcp {self.name} server stream"
                    )
                if r.status_code == 202 or "id" not in message or "method" not in message:
                    return  # a notification or our answer to the server: nothing comes back
                if kind == "text/event-stream":
                    async for event in events(_lines(r)):
                        if event.event == "message" and event.data.strip():
                            for m in p.decode(event.data):
                                self._deliver(m)
                elif kind == "application/json":
                    for m in _decode_json(await r.aread()):
                        self._deliver(m)
                else:
                    raise p.McpError(f"the server answered with {kind or 'no content type'}")
        except httpx.HTTPError as e:
            # The server is unreachable: the connection is as good as gone (the manager reconnects).
            self._gone(f"{type(e).__name__}: {e}")
            raise p.McpClosed(f"cannot reach {self.url}: {e}") from None

    def _gone(self, reason: str) -> None:
        lost, self._lost = self._lost, None
        if lost is not None:
            lost(reason)

    async def close(self) -> None:
        client, self._client = self._client, None
        self._lost = None
        listener, self._listener = self._listener, None
        if listener is not None:
            listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await listener
        if client is None:
            return
        if self.session_id:
            with contextlib.suppress(httpx.HTTPError):
                async with asyncio.timeout(2.0):
                    await client.delete(self.url, headers=self._headers())
        await client.aclose()


class SseTransport(Transport):
    kind = "sse"

    def __init__(self, name: str, url: str, headers: Mapping[str, str], timeout_s: float) -> None:
        self.name = name
        self.url = url
        self.headers = dict(headers)
        self.timeout_s = timeout_s
        self.endpoint: str | None = None
        self._client: httpx.AsyncClient | None = None
        self._stream: asyncio.Task[None] | None = None
        self._lost: Lost | None = None

    def describe(self) -> str:
        return f"sse {self.url}"

    async def open(self, deliver: Deliver, lost: Lost) -> None:
        self._lost = lost
        self._client = _client(self.headers, self.timeout_s)
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self._stream = asyncio.get_running_loop().create_task(
            self._listen(deliver, ready), name=f"mcp {self.name} events"
        )
        try:
            self.endpoint = await ready
        except BaseException:
            await self.close()
            raise

    async def _listen(self, deliver: Deliver, ready: asyncio.Future[str]) -> None:
        assert self._client is not None
        reason = "the server closed the event stream"
        try:
            async with self._client.stream("GET", self.url, headers={"accept": "text/event-stream"}) as r:
                if r.status_code != 200:
                    raise p.McpError(f"HTTP {r.status_code} from {self.url}")
                async for event in events(_lines(r)):
                    if event.event == "endpoint" and not ready.done():
                        endpoint = urljoin(self.url, event.data.strip())
                        if _origin(endpoint) != _origin(self.url):
                            raise p.McpError(f"the server named an endpoint on another origin: {endpoint}")
                        ready.set_result(endpoint)
                    elif event.event == "message" and event.data.strip():
                        try:
                            messages = p.decode(event.data)
                        except p.McpError as e:
                            log.warning("MCP server %s: an event that is not JSON-RPC (%s)", self.name, e)
                            continue
                        for message in messages:
                            deliver(message)
        except p.McpError as e:
            reason = str(e)
        except httpx.HTTPError as e:
            reason = f"{type(e).__name__}: {e}"
        if not ready.done():
            ready.set_exception(p.McpError(f"no endpoint from {self.url}: {reason}"))
        lost, self._lost = self._lost, None
        if lost is not None:
            lost(reason)

    async def send(self, message: dict[str, Any]) -> None:
        if self._client is None or self.endpoint is None:
            raise p.McpClosed("not connected")
        try:
            r = await self._client.post(
                self.endpoint, content=p.encode(message), headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as e:
            raise p.McpClosed(f"cannot reach {self.endpoint}: {e}") from None
        if r.status_code >= 400:
            raise p.McpError(f"HTTP {r.status_code} from the server: {r.text[:300].strip()}")

    async def close(self) -> None:
        self._lost = None
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await stream
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()
