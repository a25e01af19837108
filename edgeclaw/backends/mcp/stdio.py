"""The stdio transport: a program we start, one JSON-RPC message per line on its stdin/stdout.

The program is started by a `spawn` callable (the sandbox's launch, or a plain
one on the host), so this module knows nothing about confinement. Its stderr
is its log: each line goes to ours (bounded), and the last few are kept to
say why it exited. A line longer than `MAX_MESSAGE_BYTES` ends the connection:
that is a runaway, not a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw.backends.mcp import protocol as p
from edgeclaw.backends.mcp.transport import Deliver, Lost, Transport
from edgeclaw.sandbox.process import ChildProcess

log = logging.getLogger("edgeclaw.mcp")

Spawn = Callable[[], Awaitable[ChildProcess]]
# The program's stderr: lines kept to explain an exit, and the longest line logged.
STDERR_TAIL_LINES = 5
STDERR_LINE_CHARS = 300
CLOSE_GRACE_S = 2.0


class StdioTransport(Transport):
    kind = "stdio"

    def __init__(self, name: str, spawn: Spawn, command: str) -> None:
        self.name = name
        self.spawn = spawn
        self.command = command
        self.child: ChildProcess | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._stderr_tail: deque[str] = deque(maxlen=STDERR_TAIL_LINES)
        self._lost: Lost | None = None
        self._closing = False

    def describe(self) -> str:
        backend = self.child.launch.backend if self.child is not None else "?"
        return f"stdio {self.command} ({backend})"

    async def open(self, deliver: Deliver, lost: Lost) -> None:
        self._lost = lost
        try:
            self.child = await self.spawn()
        except OSError as e:
            raise p.McpError(f"cannot start {self.command}: {e.strerror or e}") from None
        except p.McpError:
            raise
        except Exception as e:  # BackendError (sandbox unavailable, no cgroup): say it plainly
            raise p.McpError(f"cannot start {self.command}: {e}") from None
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._read(deliver), name=f"mcp {self.name} stdout"),
            loop.create_task(self._read_stderr(), name=f"mcp {self.name} stderr"),
        ]

    async def _read(self, deliver: Deliver) -> None:
        assert self.child is not None and self.child.proc.stdout is not None
        stdout = self.child.proc.stdout
        reason = "the program closed its output"
        try:
            while True:
                try:
                    line = await stdout.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    reason = f"a line of more than {p.MAX_MESSAGE_BYTES} bytes"
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                try:
                    messages = p.decode(line)
                except p.McpError as e:
                    # Servers that print banners on stdout exist; a bad line is logged, not fatal.
                    log.warning("MCP server %s: a line that is not JSON-RPC (%s)", self.name, e)
                    continue
                for message in messages:
                    deliver(message)
        except OSError as e:
            reason = f"reading its output failed: {e.strerror or e}"
        await self._ended(reason)

    async def _read_stderr(self) -> None:
        assert self.child is not None and self.child.proc.stderr is not None
        stderr = self.child.proc.stderr
        with contextlib.suppress(OSError):
            while True:
                try:
                    line = await stderr.readline()
                except (ValueError, asyncio.LimitOverrunError):
                    continue  # a long line: its rest is read as the next line
                if not line:
                    return
                text = line.decode("utf-8", "replace").rstrip()[:STDERR_LINE_CHARS]
                if text:
                    self._stderr_tail.append(text)
                    log.debug("MCP server %s: %s", self.name, text)

    async def _ended(self, reason: str) -> None:
        if self._closing or self._lost is None:
            return
        child = self.child
        if child is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(0.5):  # its exit status, when it is on the way out
                    await child.proc.wait()
            code = child.proc.returncode
            if code is not None:
                reason = (
                    f"the program exited with status {code}" if code >= 0 else f"killed by signal {-code}"
                )
            child.note_limits()
            if child.limit_hit is not None:  # the sandbox's bound did it: say which
                reason += f" ({child.limit_hit})"
        if self._stderr_tail:
            reason += "; its last words: " + " | ".join(self._stderr_tail)
        lost, self._lost = self._lost, None
        lost(reason)

    async def send(self, message: dict[str, Any]) -> None:
        child = self.child
        if child is None or child.proc.stdin is None or child.proc.stdin.is_closing():
            raise p.McpClosed("the program is not running")
        try:
            child.proc.stdin.write(p.encode(message) + b"\n")
            await child.proc.stdin.drain()
        except (BrokenPipeError, ConnectionResetError) as e:
            raise p.McpClosed(f"the program's input is closed ({e.strerror or e})") from None

    async def close(self) -> None:
        self._closing = True
        child, self.child = self.child, None
        if child is not None:
            # Closing stdin is the spec's way to ask a stdio server to stop; then SIGTERM, SIGKILL.
            if child.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    child.proc.stdin.close()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(CLOSE_GRACE_S / 2):
                    await child.proc.wait()
            await child.terminate(CLOSE_GRACE_S / 2)
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []
