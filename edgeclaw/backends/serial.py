"""Serial ports the board profile grants: opened with pyserial, read and written on the event loop.

pyserial opens and configures the port (termios: baud, character size,
parity, stop bits, flow control, raw mode) and takes an exclusive lock on it,
so another program holding it open is refused instead of sharing the wires.
The reading and writing is our own, on the non-blocking descriptor through
the event loop's reader and writer callbacks: a silent peer costs no thread,
and every wait is an ordinary asyncio deadline.

One `SerialLink` per port, kept open between calls (bytes a peer sends
between two calls wait in the kernel's buffer) and closed at shutdown. Its
`lock` is held by the tool for a whole exchange (write, then read the
answer), so two sessions never interleave their bytes on one port. A port
that goes away (a USB adapter pulled, the far end of a pty closed) fails the
call in words and is opened again by the next one.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import termios
import time
from typing import Any, Literal

from edgeclaw.backends.base import BusTimeout, DeviceUnavailable, errno_of, missing_library
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

Parity = Literal["N", "E", "O", "M", "S"]
FlowControl = Literal["none", "rtscts", "xonxoff"]
Stopped = Literal["delimiter", "count", "timeout", "idle"]

PARITIES = ("N", "E", "O", "M", "S")
STOP_BITS = (1, 1.5, 2)
BYTE_SIZES = (5, 6, 7, 8)
FLOW_CONTROLS = ("none", "rtscts", "xonxoff")
CHUNK = 4096


class PortLost(BackendError):
    """An open port stopped working: unplugged, re-enumerated, or the far end hung up."""


@dataclass(frozen=True)
class LineSettings:
    baud: int = 115200
    bytesize: int = 8
    parity: Parity = "N"
    stop_bits: float = 1
    flow_control: FlowControl = "none"

    def describe(self) -> str:
        """`115200 8N1`, as a terminal program writes it."""
        stop = f"{self.stop_bits:g}"
        flow = "" if self.flow_control == "none" else f" {self.flow_control}"
        return f"{self.baud} {self.bytesize}{self.parity}{stop}{flow}"


@dataclass(frozen=True)
class Received:
    data: bytes
    stopped: Stopped  # what ended the read
    elapsed_s: float


def open_port(path: str, options: dict[str, Any]) -> Any:
    """A pyserial port at `path` with `options`, opened exclusively and read without blocking.

    pyserial leaves VMIN at 0, where an empty read means "no data" and "hung up" alike. With VMIN=1
    on the non-blocking descriptor, no data is EAGAIN and an empty read is always a hang-up. Raises
    what pyserial (SerialException, OSError, ValueError) and termios (termios.error) raise.
    """
    import serial

    ser = serial.Serial(port=path, timeout=0, exclusive=True, **options)
    try:
        attrs = termios.tcgetattr(ser.fileno())
        attrs[6][termios.VMIN] = 1
        attrs[6][termios.VTIME] = 0
        termios.tcsetattr(ser.fileno(), termios.TCSANOW, attrs)
    except termios.error:
        ser.close()
        raise
    return ser


class SerialLink:
    """One port: opened on first use, reconfigured when asked for other settings, one lock."""

    def __init__(self, path: str, label: str) -> None:
        self.path = path
        self.label = label  # "serial port /dev/ttyUSB1 (GPS)", for messages
        self.lock = asyncio.Lock()
        self.settings: LineSettings | None = None
        self._serial: Any = None
        self._fd = -1
        self._pending = b""  # bytes read past a delimiter or a count, handed to the next read first

    @property
    def is_open(self) -> bool:
        return self._serial is not None

    def configure(self, settings: LineSettings) -> None:
        """Open the port with `settings`, or apply them to the open port when they differ."""
        try:
            import serial
        except ImportError:
            raise missing_library("serial (pyserial)", "hw") from None
        options = {
            "baudrate": settings.baud,
            "bytesize": settings.bytesize,
            "parity": settings.parity,
            "stopbits": settings.stop_bits,
            "rtscts": settings.flow_control == "rtscts",
            "xonxoff": settings.flow_control == "xonxoff",
        }
        if self._serial is not None:
            if settings == self.settings:
                return
            try:
                self._serial.apply_settings(options)
            except (serial.SerialException, OSError, ValueError) as e:
                raise BackendError(
                    f"{self.label}: cannot apply {settings.describe()}: {e}", errno=errno_of(e)
                ) from None
            self.settings = settings
            return
        try:
            ser = open_port(self.path, options)
        except serial.SerialException as e:
            raise DeviceUnavailable(
                f"cannot open {self.label}: {_open_problem(e)}", errno=errno_of(e)
            ) from None
        except (OSError, ValueError) as e:
            raise DeviceUnavailable(f"cannot open {self.label}: {e}", errno=errno_of(e)) from None
        except termios.error as e:
            code = e.args[0] if e.args and isinstance(e.args[0], int) else None
            raise DeviceUnavailable(f"cannot configure {self.label}: {e}", errno=code) from None
        self._serial, self._fd, self.settings = ser, ser.fileno(), settings

    def discard_input(self) -> int:
        """Drop what the peer sent before now (stale output); returns how many bytes were dropped."""
        dropped = 0
        while True:
            try:
                chunk = os.read(self._fd, CHUNK)
            except (BlockingIOError, InterruptedError):
                return dropped
            except OSError as e:
                raise self._lost(e.strerror or str(e)) from None
            if not chunk:
                raise self._lost("hung up")
            dropped += len(chunk)

    async def write(self, data: bytes, timeout_s: float) -> None:
        """Everything out, waiting (on the event loop) while the driver's buffer is full."""
        loop = asyncio.get_running_loop()
        view = memoryview(data)
        try:
            async with asyncio.timeout(timeout_s):
                while view:
                    try:
                        written = os.write(self._fd, view)
                    except (BlockingIOError, InterruptedError):
                        await _ready(self._fd, loop.add_writer, loop.remove_writer)
                        continue
                    except OSError as e:
                        raise self._lost(e.strerror or str(e)) from None
                    view = view[written:]
        except TimeoutError:
            sent = len(data) - len(view)
            raise BusTimeout(
                f"{self.label}: only {sent} of {len(data)} bytes written within {timeout_s:g} s "
                "(flow control holding the line?)"
            ) from None

    async def read(
        self, *, until: bytes, count: int, timeout_s: float, idle_s: float | None = None
    ) -> Received:
        """Bytes until `until` (when not empty) is seen, `count` bytes are in, `timeout_s` has passed
        since the start, or (with `idle_s`) the line has been quiet that long after the first byte.

        Running out of time is not an error: what came is returned with `stopped` saying why.
        Bytes past the delimiter or the count stay for the next read.
        """
        loop = asyncio.get_running_loop()
        start = time.monotonic()
        got = bytearray()
        stopped: Stopped = "timeout"
        deadline = start + timeout_s
        while True:
            if until:
                at = got.find(until)
                if at >= 0:
                    self._unread(bytes(got[at + len(until) :]))
                    del got[at + len(until) :]
                    stopped = "delimiter"
                    break
            if len(got) >= count:
                self._unread(bytes(got[count:]))
                del got[count:]
                stopped = "count"
                break
            now = time.monotonic()
            wait = deadline - now
            quiet: Stopped = "timeout"
            if idle_s is not None and got and idle_s < wait:
                wait, quiet = idle_s, "idle"
            if wait <= 0:
                break
            chunk = self._take_unread() or self._read_now()
            if chunk is None:
                try:
                    async with asyncio.timeout(wait):
                        await _ready(self._fd, loop.add_reader, loop.remove_reader)
                except TimeoutError:
                    stopped = quiet
                    break
                continue
            got += chunk
        return Received(bytes(got), stopped, time.monotonic() - start)

    def _unread(self, rest: bytes) -> None:
        self._pending = rest + self._pending

    def _take_unread(self) -> bytes | None:
        rest, self._pending = self._pending, b""
        return rest or None

    def _read_now(self) -> bytes | None:
        try:
            chunk = os.read(self._fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError as e:
            raise self._lost(e.strerror or str(e)) from None
        if not chunk:
            raise self._lost("hung up")
        return chunk

    def _lost(self, why: str) -> PortLost:
        self.close()
        return PortLost(f"{self.label} went away ({why}); the next call opens it again")

    def close(self) -> None:
        if self._serial is None:
            return
        loop = _running_loop()
        if loop is not None:
            loop.remove_reader(self._fd)
            loop.remove_writer(self._fd)
        with contextlib.suppress(OSError):
            self._serial.close()
        self._serial, self._fd, self.settings, self._pending = None, -1, None, b""


async def _ready(fd: int, add: Any, remove: Any) -> None:
    fut = asyncio.get_running_loop().create_future()
    add(fd, lambda: fut.done() or fut.set_result(None))
    try:
        await fut
    finally:
        remove(fd)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _open_problem(e: Exception) -> str:
    if "exclusively lock" in str(e):
        return "another program holds it open"
    code = getattr(e, "errno", None)
    return os.strerror(code) if isinstance(code, int) else str(e)


class SerialPorts:
    """The board's open serial links, by path; every one closed at shutdown."""

    def __init__(self) -> None:
        self._links: dict[str, SerialLink] = {}

    def link(self, path: str, label: str) -> SerialLink:
        found = self._links.get(path)
        if found is None:
            found = self._links[path] = SerialLink(path, label)
        return found

    def open_paths(self) -> list[str]:
        return sorted(p for p, link in self._links.items() if link.is_open)

    def close(self) -> None:
        for link in self._links.values():
            link.close()
        self._links.clear()
