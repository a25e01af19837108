"""A small Chrome DevTools Protocol client: JSON commands and events over chromium's DevTools pipe.

chromium is started with `--remote-debugging-pipe`: it reads commands from its descriptor 3 and writes
replies and events to its descriptor 4, each message a JSON text ended by a NUL byte. So no DevTools
port is opened on loopback, where any local process could have driven the browser: only the daemon,
which holds the other ends, can. The protocol needs only "send a command with an id, await the reply
with that id, collect events"; no CDP library is needed, nor a websocket.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
from collections.abc import Callable
from typing import Any

from edgeclaw.errors import BackendError

EventHandler = Callable[[str, dict[str, Any], str | None], None]
# The longest message taken from chromium (a full-page screenshot is base64 in one message).
MAX_MESSAGE_BYTES = 64 * 1024 * 1024


class CDPConnection:
    """The DevTools pipe of one browser; sessions (tabs) are flattened into it."""

    def __init__(
        self, reader: asyncio.StreamReader, read_pipe: asyncio.BaseTransport, writer: asyncio.WriteTransport
    ) -> None:
        self._reader = reader
        self._read_pipe = read_pipe
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: list[EventHandler] = []
        self._task = asyncio.create_task(self._read_loop())
        self.closed = False

    @classmethod
    async def over_pipe(cls, from_browser: int, to_browser: int) -> CDPConnection:
        """The connection over the daemon's ends of the two pipes (this takes them over)."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES, loop=loop)
        read_file = os.fdopen(from_browser, "rb", buffering=0)
        write_file = os.fdopen(to_browser, "wb", buffering=0)
        try:
            read_pipe, _ = await loop.connect_read_pipe(
                lambda: asyncio.StreamReaderProtocol(reader, loop=loop), read_file
            )
            writer, _ = await loop.connect_write_pipe(asyncio.Protocol, write_file)
        except BaseException:
            read_file.close()
            write_file.close()
            raise
        return cls(reader, read_pipe, writer)

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
        try:
            self._writer.write(json.dumps(message).encode() + b"\0")
        except (OSError, RuntimeError):
            self._pending.pop(ident, None)
            raise BackendError("browser: the browser went away") from None
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
            while True:
                try:
                    data = await self._reader.readuntil(b"\0")
                except asyncio.IncompleteReadError:
                    return  # the browser closed its end
                self._dispatch(data[:-1].decode("utf-8", "replace"))
        except (ConnectionError, OSError, asyncio.LimitOverrunError, ValueError):
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
        self._read_pipe.close()
