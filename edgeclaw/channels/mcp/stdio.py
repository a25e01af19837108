"""MCP over stdio (`edgeclaw mcp serve`): one JSON-RPC message per line on a pair of pipes.

One session for the life of the process, ended when the client closes our
stdin. Each request runs in a task of its own, so the answer to an approval
question (a response on stdin) gets through while the call that asked waits
for it. Lines are bounded (`MAX_MESSAGE_BYTES`): a longer one is dropped up to
its newline and answered with a parse error, never buffered whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Awaitable, Callable
from typing import IO, Any

from edgeclaw.backends.mcp.protocol import (
    MAX_MESSAGE_BYTES,
    PARSE_ERROR,
    McpError,
    decode,
    encode,
    error,
)
from edgeclaw.channels.mcp.server import McpServer
from edgeclaw.tasks import TaskSet

log = logging.getLogger("edgeclaw.mcp.stdio")

Write = Callable[[bytes], Awaitable[None]]


class LineTooLong(Exception):
    """A line over MAX_MESSAGE_BYTES (it was read to its end and dropped)."""


async def read_line(reader: asyncio.StreamReader) -> bytes | None:
    """The next line without its newline; None at the end of the stream; LineTooLong for a line
    over the reader's limit (consumed and dropped)."""
    try:
        return (await reader.readuntil(b"\n")).rstrip(b"\r\n")
    except asyncio.IncompleteReadError as e:
        return e.partial.rstrip(b"\r") or None  # the last line may lack its newline
    except asyncio.LimitOverrunError as e:
        consumed = e.consumed
    while True:  # drop the rest of the long line, a limit's worth at a time
        await reader.readexactly(consumed)
        try:
            await reader.readuntil(b"\n")
            break
        except asyncio.LimitOverrunError as e:
            consumed = e.consumed
        except asyncio.IncompleteReadError:
            break
    raise LineTooLong


async def serve_stdio(server: McpServer, identity: str, reader: asyncio.StreamReader, write: Write) -> None:
    """Serve one MCP client on `reader` / `write` until the reader ends."""
    lock = asyncio.Lock()

    async def send(message: dict[str, Any]) -> None:
        async with lock:  # one message, one whole line
            await write(encode(message) + b"\n")

    session = server.open("stdio", identity, send)
    requests = TaskSet()

    async def answer(message: dict[str, Any]) -> None:
        response = await session.receive(message)
        if response is not None:
            await send(response)

    log.info("serving MCP on stdio as %s", identity)
    try:
        while True:
            try:
                line = await read_line(reader)
            except LineTooLong:
                await send(error(None, PARSE_ERROR, f"message over {MAX_MESSAGE_BYTES} bytes dropped"))
                continue
            if line is None:
                break
            if not line.strip():
                continue
            try:
                messages = decode(line)
            except McpError as e:
                await send(error(None, e.code or PARSE_ERROR, str(e)))
                continue
            for message in messages:
                if "method" in message and "id" in message:
                    requests.spawn(answer(message))
                else:  # notifications and responses at once, in their order
                    refusal = await session.receive(message)  # an error for what is neither
                    if refusal is not None:
                        await send(refusal)
    finally:
        session.close("the client closed stdin")
        await requests.close()


async def open_stdio(stdin: IO[bytes], stdout: IO[bytes]) -> tuple[asyncio.StreamReader, Write]:
    """A bounded line reader on `stdin` and a writer on `stdout`, on the event loop when they are
    pipes, sockets or terminals (the usual case: an MCP client started us), else in a thread."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=MAX_MESSAGE_BYTES + 1)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), stdin)
    except (ValueError, OSError):  # a regular file: read it in a thread
        fd = stdin.fileno()

        def pump() -> None:
            while chunk := os.read(fd, 65536):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
            loop.call_soon_threadsafe(reader.feed_eof)

        loop.run_in_executor(None, pump)
    try:
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, stdout)
    except (ValueError, OSError):
        out = stdout.fileno()

        async def write_blocking(data: bytes) -> None:
            await loop.run_in_executor(None, _write_all, out, data)

        return reader, write_blocking
    writer = asyncio.StreamWriter(transport, protocol, None, loop)

    async def write(data: bytes) -> None:
        writer.write(data)
        with contextlib.suppress(ConnectionResetError, BrokenPipeError):
            await writer.drain()

    return reader, write


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
