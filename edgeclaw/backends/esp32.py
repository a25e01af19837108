"""The ESP32 bridge, host side: JSON lines over a serial port, with ids, deadlines and a handshake.

The wire protocol is the reference firmware's (`edgeclaw/firmware/esp32/protocol.py`):
one JSON object per line; each request carries an integer id and its reply
the same id, so a late reply to a request that already timed out is
recognised and dropped instead of being taken for the next answer. The
first request on a fresh link is `hello`, whose protocol number must match
ours. A `boot` event means the chip reset: every request in flight fails at
once ("the ESP32 reset during the request") rather than waiting out its
deadline, and the next request shakes hands again. Lines that are not JSON
(the ROM bootloader's noise) are ignored.

The port is opened with pyserial (termios set-up, exclusive access) and read
and written through the event loop (`add_reader` / `add_writer` on its
non-blocking descriptor), so no thread is needed and a request's deadline is
an ordinary asyncio timeout. A line goes out whole, one at a time, waiting
for room while the driver's buffer is full (a chip held in reset, hardware
flow control); a line cut short by its deadline is ended before the next, so
the chip drops the fragment instead of gluing it to the next request.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
from typing import Any

from edgeclaw.backends.base import BusTimeout, DeviceReplyError, DeviceUnavailable, errno_of, missing_library
from edgeclaw.errors import BackendError

log = logging.getLogger("edgeclaw.backends.esp32")

PROTOCOL = 1
MAX_LINE = 4096  # longer unterminated input is noise; drop it


class PeerReset(BackendError):
    """The ESP32 rebooted while a request was in flight."""


class Esp32Bridge:
    def __init__(self, port: str, baud: int, *, timeout_s: float) -> None:
        self.port = port
        self.baud = baud
        self.timeout_s = timeout_s
        self.peer: dict[str, Any] = {}  # what hello said: firmware, ops
        self._serial: Any = None
        self._fd = -1
        self._buffer = b""
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._ids = itertools.count(1)
        self._handshake_done = False
        self._open_lock = asyncio.Lock()
        self._write_lock = asyncio.Lock()  # one line on the wire at a time
        self._line_cut = False  # a deadline stopped a line half written
        self.resets_seen = 0

    @property
    def is_open(self) -> bool:
        return self._serial is not None

    async def _ensure_open(self) -> None:
        if self._serial is not None:
            return
        try:
            import serial
        except ImportError:
            raise missing_library("serial (pyserial)", "hw") from None
        try:
            # timeout=0: non-blocking reads; the event loop tells us when bytes are there.
            self._serial = serial.Serial(self.port, self.baud, timeout=0, write_timeout=self.timeout_s)
        except (serial.SerialException, OSError) as e:
            raise DeviceUnavailable(
                f"cannot open the ESP32 serial port {self.port}: {e}", errno=errno_of(e)
            ) from None
        # Whatever the chip said before we listened (a boot event, ROM noise) answers nothing of ours.
        self._serial.reset_input_buffer()
        self._fd = self._serial.fileno()
        self._buffer = b""
        asyncio.get_running_loop().add_reader(self._fd, self._on_readable)

    def _on_readable(self) -> None:
        try:
            chunk = os.read(self._fd, 4096)
        except BlockingIOError:
            return
        except OSError as e:
            self._lost(f"the ESP32 serial port failed: {e.strerror}")
            return
        if not chunk:
            self._lost("the ESP32 serial port closed (unplugged?)")
            return
        self._buffer += chunk
        while b"\n" in self._buffer:
            line, self._buffer = self._buffer.split(b"\n", 1)
            self._on_line(line.strip())
        if len(self._buffer) > MAX_LINE:
            self._buffer = b""

    def _on_line(self, line: bytes) -> None:
        if not line.startswith(b"{"):
            if line:
                log.debug("esp32: ignoring non-protocol output %r", line[:80])
            return
        try:
            message = json.loads(line)
        except ValueError:
            log.debug("esp32: ignoring malformed line %r", line[:80])
            return
        if not isinstance(message, dict):
            return
        if message.get("event") == "boot":
            self.resets_seen += 1
            self._handshake_done = False
            self.peer["reset_cause"] = message.get("reset_cause")
            self._fail_all(
                PeerReset("the ESP32 reset during the request (it announced a fresh boot); try again")
            )
            return
        future = self._pending.pop(message.get("id"), None) if isinstance(message.get("id"), int) else None
        if future is None:
            log.debug("esp32: dropping a reply nobody waits for: %r", line[:80])
            return
        if not future.done():
            future.set_result(message)

    def _fail_all(self, error: BackendError) -> None:
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(error)

    def _lost(self, why: str) -> None:
        self._fail_all(DeviceUnavailable(why))
        self._close_port()

    def _close_port(self) -> None:
        if self._serial is not None:
            with contextlib.suppress(Exception):
                loop = asyncio.get_running_loop()
                loop.remove_reader(self._fd)
                loop.remove_writer(self._fd)  # a line waiting for room: it ends at its deadline
            with contextlib.suppress(Exception):
                self._serial.close()
        self._serial = None
        self._fd = -1
        self._handshake_done = False
        self._line_cut = False  # a fresh open discards nothing we half sent

    async def _write_line(self, line: bytes) -> None:
        """All of `line`, waiting (on the event loop) while the port's buffer is full."""
        loop = asyncio.get_running_loop()
        async with self._write_lock:
            if self._line_cut:
                line = b"\n" + line  # end the fragment: the chip answers it as a bad line (id null)
            view = memoryview(line)
            fd = self._fd  # this descriptor throughout, even if the port is lost and reopened meanwhile
            self._line_cut = True
            while view:
                try:
                    view = view[os.write(fd, view) :]
                except BlockingIOError:
                    room: asyncio.Future[None] = loop.create_future()
                    loop.add_writer(fd, _set_once, room)
                    try:
                        await room
                    finally:
                        loop.remove_writer(fd)
            self._line_cut = False

    async def _exchange(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        line = json.dumps({"id": request_id, "op": op, "args": args}, separators=(",", ":")).encode() + b"\n"
        try:
            async with asyncio.timeout(self.timeout_s):
                await self._write_line(line)
                reply = await future
        except TimeoutError:
            raise BusTimeout(f"the ESP32 did not answer {op!r} within {self.timeout_s:g} s") from None
        except OSError as e:
            self._lost(f"cannot write to the ESP32 serial port: {e.strerror}")
            raise DeviceUnavailable(
                f"cannot write to the ESP32 serial port {self.port}: {e.strerror}", errno=e.errno
            ) from None
        finally:
            self._pending.pop(request_id, None)
            if future.done() and not future.cancelled():
                future.exception()  # a reset or loss during our write: reported as what ended the wait
        if not reply.get("ok"):
            raise DeviceReplyError(f"the ESP32 refused {op!r}: {reply.get('error', 'no reason given')}")
        result = reply.get("result")
        return result if isinstance(result, dict) else {}

    async def _handshake(self) -> None:
        # Opening the port can reset the chip (the DevKitC wires DTR/RTS to EN and BOOT): a boot
        # event then cancels the first hello, and the chip is ready for the second.
        for attempt in range(3):
            try:
                hello = await self._exchange("hello", {"protocol": PROTOCOL})
                break
            except PeerReset:
                if attempt == 2:
                    raise
            except DeviceReplyError as e:  # it answers, but not to hello: another firmware, or an old one
                raise DeviceUnavailable(
                    f"the ESP32 does not shake hands ({e}): flash the firmware from edgeclaw/firmware/esp32"
                ) from None
        else:  # pragma: no cover - the loop either breaks or raises
            return
        if hello.get("protocol") != PROTOCOL:
            raise DeviceUnavailable(
                f"the ESP32 firmware speaks bridge protocol {hello.get('protocol')!r}, this edgeclaw speaks "
                f"{PROTOCOL}: flash the firmware from edgeclaw/firmware/esp32"
            )
        self.peer.update({"firmware": hello.get("firmware"), "ops": hello.get("ops", [])})
        self._handshake_done = True

    async def request(self, op: str, args: dict[str, Any] | None = None) -> dict[str, Any]:
        """One request/reply; opens the port and shakes hands first when needed."""
        async with self._open_lock:
            await self._ensure_open()
            if not self._handshake_done:
                await self._handshake()
        return await self._exchange(op, args or {})

    async def close(self) -> None:
        self._fail_all(DeviceUnavailable("the ESP32 bridge is shutting down"))
        self._close_port()


def _set_once(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
