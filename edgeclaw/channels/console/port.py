"""The console's serial port: opened with pyserial, read and written on the event loop, reopened when lost.

pyserial does the opening: termios set-up for baud, parity, stop bits and
flow control, raw mode, and an exclusive lock so two programs cannot fight
over one port. The reading and writing is our own, on the file descriptor
with the event loop's reader and writer callbacks, so one slow or silent
terminal never blocks the daemon.

A port that goes away (cable pulled, USB re-enumeration, the far end of a
pty closed) shows as EIO or end-of-file; `serve_port` logs it, waits with
exponential backoff and opens the path again, for as long as the daemon
runs. Opening by path each time means a udev symlink such as
/dev/serial/by-id/... follows the adapter to its new device node.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import termios
import time
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar

from edgeclaw.backends.serial import open_port
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.console")
T = TypeVar("T")


class PortError(BackendError):
    """The port could not be opened or configured."""


class PortGone(BackendError):
    """An open port stopped working: unplugged, re-enumerated, or the far end hung up."""


@dataclass(frozen=True)
class LineSettings:
    baud: int = 115200
    parity: str = "N"  # N, E, O
    stop_bits: int = 1
    flow_control: str = "none"  # none, rtscts, xonxoff

    @property
    def bits_per_char(self) -> int:
        """Bits on the wire per byte: start bit, 8 data bits, parity bit, stop bits."""
        return 1 + 8 + (0 if self.parity == "N" else 1) + self.stop_bits

    @property
    def bytes_per_s(self) -> float:
        return self.baud / self.bits_per_char

    def describe(self) -> str:
        flow = "" if self.flow_control == "none" else f", {self.flow_control}"
        return f"{self.baud} 8{self.parity}{self.stop_bits}{flow}"


class SerialPort:
    """One open port. `read` and `write` wait on the event loop, never in a thread."""

    def __init__(self, path: str, serial: Any, settings: LineSettings) -> None:
        self.path = path
        self.settings = settings
        self._serial = serial
        self.fd: int = serial.fileno()
        self._closed = False

    @classmethod
    def open(cls, path: str, settings: LineSettings) -> SerialPort:
        try:
            import serial
        except ImportError:
            raise PortError("pyserial is not installed (pip install 'edgeclaw[hw]')") from None
        parity = {"N": serial.PARITY_NONE, "E": serial.PARITY_EVEN, "O": serial.PARITY_ODD}
        options = {
            "baudrate": settings.baud,
            "bytesize": serial.EIGHTBITS,
            "parity": parity[settings.parity],
            "stopbits": {1: serial.STOPBITS_ONE, 2: serial.STOPBITS_TWO}[settings.stop_bits],
            "rtscts": settings.flow_control == "rtscts",
            "xonxoff": settings.flow_control == "xonxoff",
        }
        try:
            ser = open_port(path, options)
        except serial.SerialException as e:
            raise PortError(_describe_open_error(e)) from None
        except (OSError, ValueError) as e:
            raise PortError(str(e)) from None
        except termios.error as e:
            raise PortError(f"cannot configure {path}: {e}") from None
        return cls(path, ser, settings)

    async def _ready(self, add: Callable[..., None], remove: Callable[[int], bool]) -> None:
        fut = asyncio.get_running_loop().create_future()
        add(self.fd, lambda: fut.done() or fut.set_result(None))
        try:
            await fut
        finally:
            remove(self.fd)

    async def _io(self, op: Callable[[], T], add: Callable[..., None], remove: Callable[[int], bool]) -> T:
        """`op()` on the non-blocking descriptor, waiting on the event loop until it can proceed."""
        while True:
            if self._closed:
                raise PortGone("port closed")
            try:
                return op()
            except BlockingIOError:
                await self._ready(add, remove)
            except InterruptedError:
                continue
            except OSError as e:
                raise PortGone(e.strerror or str(e)) from None

    async def read(self, max_bytes: int = 1024) -> bytes:
        """The next bytes the terminal sent; raises PortGone when the port went away."""
        loop = asyncio.get_running_loop()
        data = await self._io(partial(os.read, self.fd, max_bytes), loop.add_reader, loop.remove_reader)
        if not data:
            raise PortGone("hung up")
        return data

    async def write(self, data: bytes) -> None:
        """Write everything, waiting (without blocking the loop) while the driver's buffer is full."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        while view:
            written = await self._io(partial(os.write, self.fd, view), loop.add_writer, loop.remove_writer)
            view = view[written:]

    def write_nowait(self, data: bytes) -> None:
        """Best effort, never waits: for a last word on shutdown."""
        with contextlib.suppress(OSError):
            os.write(self.fd, data)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        with contextlib.suppress(OSError):
            self._serial.close()


def _describe_open_error(e: Exception) -> str:
    if "exclusively lock" in str(e):
        return "another program (a getty?) holds it open"
    code = getattr(e, "errno", None)
    # pyserial's messages repeat the path and the errno; the strerror alone reads better in a log line.
    return os.strerror(code) if isinstance(code, int) else str(e)


class PacedWriter:
    """All output of one session, in order, no faster than the line can carry it.

    Pacing keeps what is queued in the kernel small: at 115200 baud a 64 KiB
    reply would otherwise sit in driver buffers for seconds, beyond the reach
    of Ctrl-C, and a receiver without flow control can be overrun. Writes are
    queued without waiting (keystroke echo comes from a callback); `drain`
    waits until everything queued has been handed to the port.
    """

    CHUNK = 64

    def __init__(self, port: SerialPort, *, pace: bool = True, burst_s: float = 0.02) -> None:
        self.port = port
        self.rate = port.settings.bytes_per_s if pace else 0.0
        self.burst_s = burst_s
        self._buf = bytearray()
        self._wake = asyncio.Event()
        self._idle = asyncio.Event()
        self._idle.set()
        self._line_free_at = 0.0  # monotonic time at which the line will have sent everything so far
        self._ended = False

    def write(self, data: bytes) -> None:
        if data and not self._ended:  # after the writer ended (port gone) nothing will be sent
            self._buf += data
            self._idle.clear()
            self._wake.set()

    def discard(self) -> None:
        """Drop what is still queued (Ctrl-C during long output)."""
        self._buf.clear()

    async def drain(self) -> None:
        await self._idle.wait()

    async def run(self) -> None:
        """The writer task; raises PortGone when the port fails."""
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._buf:
                    chunk = bytes(self._buf[: self.CHUNK])
                    del self._buf[: self.CHUNK]
                    await self._pace(len(chunk))
                    await self.port.write(chunk)
                self._idle.set()
        finally:
            # Failed or cancelled: whoever waits in `drain` (a delivered message, the end of a
            # reply) must not wait for ever on a writer that is gone.
            self._ended = True
            self._buf.clear()
            self._idle.set()

    async def _pace(self, size: int) -> None:
        if not self.rate:
            return
        now = time.monotonic()
        ahead = self._line_free_at - now
        if ahead > self.burst_s:
            await asyncio.sleep(ahead - self.burst_s)
            now = time.monotonic()
        self._line_free_at = max(now, self._line_free_at) + size / self.rate


SessionRunner = Callable[[SerialPort], Awaitable[None]]


async def serve_port(
    path: str,
    settings: LineSettings,
    run_session: SessionRunner,
    *,
    min_backoff_s: float = 1.0,
    max_backoff_s: float = 30.0,
    stable_after_s: float = 10.0,
) -> None:
    """Open `path` and run sessions on it for ever, reopening with backoff whenever it fails.

    Only cancellation ends this. A failure is logged as a warning when it
    changes (so a port that is simply absent does not fill the journal every
    30 s), and at debug level while it repeats.
    """
    backoff = min_backoff_s
    last_problem = ""
    while True:
        try:
            port = SerialPort.open(path, settings)
        except PortError as e:
            problem = str(e)
            level = logging.WARNING if problem != last_problem else logging.DEBUG
            log.log(level, "console %s: cannot open: %s; retrying in %.3g s", path, problem, backoff)
            last_problem = problem
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, max_backoff_s)
            continue
        log.info("console %s: open at %s", path, settings.describe())
        last_problem = ""
        started = time.monotonic()
        try:
            await run_session(port)
            problem = "session ended"
        except PortGone as e:
            problem = f"port lost ({e})"
        except Exception:
            log.exception("console %s: session failed", path)
            problem = "session failed"
        finally:
            port.close()
        if time.monotonic() - started >= stable_after_s:
            backoff = min_backoff_s  # it worked for a while: this is a fresh failure, start over
        log.warning("console %s: %s; reopening in %.3g s", path, problem, backoff)
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, max_backoff_s)
