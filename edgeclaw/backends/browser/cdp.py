"""A small Chrome DevTools Protocol client: JSON commands and events over one websocket.

Built on wsproto (already a dependency) over asyncio streams rather than a CDP library: the protocol
needs only "send a command with an id, await the reply with that id, collect events", and wsproto is
pure Python, so it installs on arm64 and armhf without a compiler (docs/browser.md has the figures).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    Request,
    TextMessage,
)

from edgeclaw.errors import BackendError

EventHandler = Callable[[str, dict[str, Any], str | None], None]


class CDPConnection:
    """One websocket to the browser (its /devtools/browser endpoint); sessions are flattened into it."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, ws: WSConnection) -> None:
        self._reader = reader
        self._writer = writer
        self._ws = ws
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: list[EventHandler] = []
        self._text: list[str] = []
        self._task = asyncio.create_task(self._read_loop())
        self.closed = False

    @classmethod
    async def connect(cls, url: str, within: float = 10.0) -> CDPConnection:
        parts = urlsplit(url)
        host, port = parts.hostname or "127.0.0.1", parts.port or 80
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), within)
        ws = WSConnection(ConnectionType.CLIENT)
        writer.write(ws.send(Request(host=f"{host}:{port}", target=parts.path or "/")))
        await writer.drain()
        while True:
            data = await asyncio.wait_for(reader.read(65536), within)
            if not data:
                raise BackendError("browser: the DevTools endpoint closed during the handshake")
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, AcceptConnection):
                    return cls(reader, writer, ws)
                if isinstance(event, RejectConnection):
                    raise BackendError(
                        f"browser: the DevTools endpoint refused the websocket ({event.status_code})"
                    )

    def on_event(self, handler: EventHandler) -> None:
        self._handlers.append(handler)

    async def send(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        session: str | None = None,
        within: float = 30.0,
    ) -> dict[str, Any]:
        if self.closed:
            raise BackendError("browser: the DevTools connection is closed")
        ident = next(self._ids)
        message: dict[str, Any] = {"id": ident, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[ident] = future
        self._writer.write(self._ws.send(TextMessage(data=json.dumps(message))))
        await self._writer.drain()
        try:
            reply = await asyncio.wait_for(future, within)
        except TimeoutError:
            raise BackendError(f"browser: {method} got no answer within {within:g} s") from None
        finally:
            self._pending.pop(ident, None)
        if "error" in reply:
            raise BackendError(f"browser: {method}: {reply['error'].get('message', reply['error'])}")
        return reply.get("result", {})

    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(1 << 16):
                self._ws.receive_data(data)
                for event in self._ws.events():
                    if isinstance(event, TextMessage):
                        self._text.append(event.data)
                        if event.message_finished:
                            self._dispatch("".join(self._text))
                            self._text.clear()
                    elif isinstance(event, BytesMessage):
                        continue
                    elif isinstance(event, Ping):
                        self._writer.write(self._ws.send(event.response()))
                    elif isinstance(event, CloseConnection):
                        return
        except (ConnectionError, OSError):
            return
        finally:
            self.closed = True
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(BackendError("browser: the browser went away"))

    def _dispatch(self, text: str) -> None:
        message = json.loads(text)
        if "id" in message:
            future = self._pending.get(message["id"])
            if future is not None and not future.done():
                future.set_result(message)
            return
        for handler in self._handlers:
            handler(message.get("method", ""), message.get("params", {}), message.get("sessionId"))

    async def aclose(self) -> None:
        self.closed = True
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._task
        self._writer.close()
        with contextlib.suppress(Exception):
            await self._writer.wait_closed()
