"""A client for the GDB Remote Serial Protocol: the vendor-neutral way into a debug target.

OpenOCD, pyocd's gdbserver, probe-rs, J-Link's GDB server, Black Magic Probe
and QEMU's `-gdb` all speak it, so one small client reaches any of them. What
is implemented (see "Remote Protocol" in the GDB manual):

* framing `$payload#checksum`, acknowledgements (`+`/`-`, resend on `-`),
  `QStartNoAckMode` when the stub offers it, escapes (`}`) and run-length
  encoding (`*`) in replies, `%` notifications ignored;
* `qSupported` (PacketSize, qXfer features), `?` (halt reason);
* memory: `m` / `M`, split by the stub's packet size; `Exx` replies become
  `DeviceReplyError`s naming the address;
* registers: `qXfer:features:read` target description (following
  `xi:include`s) for names and numbers, then `p`; `g` when `p` is missing;
* run control: `c` (resume, no reply until the target stops), `\\x03`
  (interrupt → stop reply), `qRcmd` (monitor commands);
* flash: `vFlashErase` / `vFlashWrite` / `vFlashDone` against the stub's
  `qXfer:memory-map` when it has one; otherwise plain memory writes, which is
  how QEMU's (debug-writable) flash is loaded.

Every exchange runs under a lock, so one connection serves concurrent calls
one at a time; the caller bounds each with a deadline.
"""

from __future__ import annotations

import asyncio
import binascii
import contextlib
import logging
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable

from edgeclaw.backends.base import DeviceReplyError, DeviceUnavailable
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.backends.gdb")

Progress = Callable[[str, int, int], None]  # (phase, done, total)

# Stubs disagree on the base of "Exx": the manual says hex, QEMU writes errno in decimal (E14 = EFAULT).
_ERRNO_WORDS = {
    "01": "operation not permitted",
    "05": "input/output error",
    "0e": "bad address: nothing is mapped there",
    "14": "bad address: nothing is mapped there",
    "16": "invalid argument",
    "22": "invalid argument",
}


@dataclass(frozen=True)
class RegisterInfo:
    name: str
    regnum: int
    bitsize: int


@dataclass(frozen=True)
class FlashRegion:
    start: int
    length: int
    blocksize: int


def checksum(payload: bytes) -> bytes:
    return b"%02x" % (sum(payload) & 0xFF)


def escape_binary(data: bytes) -> bytes:
    """Binary data in a packet: '#', '$', '}' and '*' are sent as '}' followed by the byte ^ 0x20."""
    out = bytearray()
    for b in data:
        if b in b"#$}*":
            out += bytes((0x7D, b ^ 0x20))
        else:
            out.append(b)
    return bytes(out)


def decode_payload(raw: bytes) -> bytes:
    """Undo escapes and run-length encoding ('X*N' repeats X N-29 more times)."""
    out = bytearray()
    i, n = 0, len(raw)
    while i < n:
        b = raw[i]
        if b == 0x7D and i + 1 < n:
            out.append(raw[i + 1] ^ 0x20)
            i += 2
        elif b == 0x2A and out and i + 1 < n:
            out += bytes((out[-1],)) * (raw[i + 1] - 29)
            i += 2
        else:
            out.append(b)
            i += 1
    return bytes(out)


def _is_error(reply: bytes) -> bool:
    """An error reply: `Exx` (two hex digits) or `E.text` (stubs that send a message)."""
    return reply[:1] == b"E" and ((len(reply) == 3 and _is_hex(reply[1:])) or reply[1:2] == b".")


def _error_words(reply: bytes) -> str:
    if reply[1:2] == b".":
        return "error: " + reply[2:82].decode("utf-8", "replace")
    code = reply[1:3].decode("ascii", "replace")
    words = _ERRNO_WORDS.get(code.lower())
    return f"error {code}" + (f" ({words})" if words else "")


def _register_value(hex_text: bytes, name: str) -> int | None:
    """A register's value from its target-order (little-endian) hex; None when the stub sends
    'x' digits, the protocol's "this register is unavailable"."""
    if b"x" in hex_text.lower():
        return None
    try:
        return int.from_bytes(binascii.unhexlify(hex_text), "little")
    except binascii.Error:
        raise DeviceReplyError(
            f"malformed value for register {name} from the GDB server: {hex_text[:20]!r}"
        ) from None


class GdbRemoteClient:
    """One connection to a GDB server. Use `connect()`, then the operations; `close()` at the end."""

    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._ack = True
        self.packet_size = 400  # until qSupported says otherwise
        self.features: dict[str, str | bool] = {}
        self.running = False
        self.halt_reason = b""
        self._registers: list[RegisterInfo] | None = None
        self.lock = asyncio.Lock()

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        try:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        except OSError as e:
            raise DeviceUnavailable(
                f"cannot reach the GDB server at {self.host}:{self.port}: {e.strerror or e}", errno=e.errno
            ) from None
        reply = await self.request(b"qSupported:multiprocess-;swbreak+;hwbreak+;xmlRegisters=arm")
        for item in reply.decode("ascii", "replace").split(";"):
            if "=" in item:
                key, value = item.split("=", 1)
                self.features[key] = value
            elif item.endswith(("+", "-")):
                self.features[item[:-1]] = item.endswith("+")
        if "PacketSize" in self.features:
            self.packet_size = max(64, int(str(self.features["PacketSize"]), 16))
        if self.features.get("QStartNoAckMode") is True and await self.request(b"QStartNoAckMode") == b"OK":
            self._ack = False
        self.halt_reason = await self.request(b"?")
        self.running = False

    async def close(self) -> None:
        writer, self._writer, self._reader = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    # -- framing ----------------------------------------------------------------------------
    async def _send(self, payload: bytes) -> None:
        if self._writer is None:
            raise DeviceUnavailable("not connected to the GDB server")
        packet = b"$" + payload + b"#" + checksum(payload)
        for _ in range(3):
            self._writer.write(packet)
            await self._writer.drain()
            if not self._ack:
                return
            ack = await self._read_byte()
            while ack not in b"+-":
                ack = await self._read_byte()  # stray bytes before the ack
            if ack == b"+":
                return
        raise BackendError("the GDB server kept rejecting our packets (bad checksums on the link?)")

    async def _read_byte(self) -> bytes:
        assert self._reader is not None
        b = await self._reader.read(1)
        if not b:
            await self.close()
            raise DeviceUnavailable(f"the GDB server at {self.host}:{self.port} closed the connection")
        return b

    async def read_packet(self) -> bytes:
        """The next packet's payload, skipping acks and notifications, acknowledging when required."""
        assert self._reader is not None
        while True:
            b = await self._read_byte()
            if b not in b"$%":
                continue  # '+', '-' and noise between packets
            try:
                body = await self._reader.readuntil(b"#")
                sum_hex = await self._reader.readexactly(2)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                await self.close()
                raise DeviceUnavailable("the GDB server closed the connection mid-packet") from None
            raw = body[:-1]
            if b == b"%":
                continue  # asynchronous notification (non-stop mode): not used
            if self._ack:
                ok = sum_hex.lower() == checksum(raw)
                assert self._writer is not None
                self._writer.write(b"+" if ok else b"-")
                if not ok:
                    continue
            return decode_payload(raw)

    async def request(self, payload: bytes) -> bytes:
        if self.running and payload not in (b"?",):
            raise BackendError("the target is running; halt it first")
        await self._send(payload)
        while True:
            reply = await self.read_packet()
            if reply.startswith(b"O") and reply != b"OK" and _is_hex(reply[1:]):
                continue  # console output from the target
            return reply

    # -- memory ------------------------------------------------------------------------------
    async def read_memory(self, address: int, length: int) -> bytes:
        out = bytearray()
        chunk = max(16, (self.packet_size - 8) // 2)
        while len(out) < length:
            n = min(chunk, length - len(out))
            at = address + len(out)
            reply = await self.request(b"m%x,%x" % (at, n))
            if _is_error(reply) or not reply:
                why = _error_words(reply) if reply else "not supported"
                raise DeviceReplyError(f"cannot read {n} bytes at 0x{at:08x}: the target reported {why}")
            try:
                data = binascii.unhexlify(reply)
            except binascii.Error:
                raise DeviceReplyError(
                    f"malformed memory reply from the GDB server: {reply[:40]!r}"
                ) from None
            if not data:
                raise DeviceReplyError(f"cannot read at 0x{at:08x}: the target returned no data")
            out += data
        return bytes(out)

    async def write_memory(self, address: int, data: bytes) -> None:
        chunk = max(16, (self.packet_size - 32) // 2)
        for i in range(0, len(data), chunk):
            part = data[i : i + chunk]
            at = address + i
            reply = await self.request(b"M%x,%x:" % (at, len(part)) + binascii.hexlify(part))
            if reply != b"OK":
                why = _error_words(reply) if _is_error(reply) else f"reply {reply[:20]!r}"
                raise DeviceReplyError(
                    f"cannot write {len(part)} bytes at 0x{at:08x}: the target reported {why}"
                )

    # -- registers ---------------------------------------------------------------------------
    async def _xfer(self, obj: bytes, annex: bytes) -> bytes:
        out = bytearray()
        while True:
            reply = await self.request(
                b"qXfer:%s:read:%s:%x,%x" % (obj, annex, len(out), self.packet_size - 8)
            )
            if reply[:1] not in (b"m", b"l") or (reply == b"m"):
                # An error, no support, or an 'm' with no data (which would ask for the same again).
                raise DeviceReplyError(f"the GDB server could not send {obj.decode()} {annex.decode()!r}")
            out += reply[1:]
            if reply[:1] == b"l":
                return bytes(out)

    async def register_layout(self) -> list[RegisterInfo]:
        if self._registers is not None:
            return self._registers
        regs: list[RegisterInfo] = []
        if self.features.get("qXfer:features:read") is True:
            regs = await self._described_registers()
        if not regs:
            # No target description: the classic ARM numbering (r0-r12, sp, lr, pc; cpsr is 25).
            names = [f"r{i}" for i in range(13)] + ["sp", "lr", "pc"]
            regs = [RegisterInfo(n, i, 32) for i, n in enumerate(names)] + [RegisterInfo("xpsr", 25, 32)]
        self._registers = regs
        return regs

    async def _described_registers(self) -> list[RegisterInfo]:
        pending, seen = [b"target.xml"], set()
        features: list[tuple[str, list[RegisterInfo]]] = []
        regnum = 0
        while pending:
            annex = pending.pop(0)
            if annex in seen:
                continue
            seen.add(annex)
            text = await self._xfer(b"features", annex)
            root = _parse_xml(text)
            for element in root.iter():
                tag = element.tag.rsplit("}", 1)[-1]
                if tag == "include" and element.get("href"):
                    pending.append(element.get("href", "").encode())
                elif tag == "feature":
                    regs = []
                    for reg in element.iter():
                        if reg.tag.rsplit("}", 1)[-1] != "reg":
                            continue
                        regnum = int(reg.get("regnum", regnum))
                        regs.append(
                            RegisterInfo(reg.get("name", f"r{regnum}"), regnum, int(reg.get("bitsize", 32)))
                        )
                        regnum += 1
                    features.append((element.get("name", ""), regs))
        core = [r for name, regs in features if name.endswith((".core", ".m-profile")) for r in regs]
        return core or (features[0][1] if features else [])

    async def read_registers(self) -> dict[str, int]:
        """The core registers by name; registers the stub says are unavailable are left out."""
        layout = await self.register_layout()
        values: dict[str, int] = {}
        for reg in layout:
            reply = await self.request(b"p%x" % reg.regnum)
            if not reply:
                return await self._registers_from_g(layout)
            if _is_error(reply):
                raise DeviceReplyError(
                    f"cannot read register {reg.name}: the target reported {_error_words(reply)}"
                )
            value = _register_value(reply, reg.name)
            if value is not None:
                values[reg.name] = value
        return values

    async def _registers_from_g(self, layout: list[RegisterInfo]) -> dict[str, int]:
        # `g` holds the registers in number order; only r0-pc are contiguous at the start whatever
        # the target, so those are read from it (never zeros made up for a short reply).
        reply = await self.request(b"g")
        if not reply or _is_error(reply):
            why = _error_words(reply) if reply else "it supports neither 'p' nor 'g'"
            raise DeviceReplyError(f"the GDB server did not send the registers: {why}")
        values: dict[str, int] = {}
        offset = 0
        for reg in sorted(layout, key=lambda r: r.regnum)[:16]:
            width = reg.bitsize // 4  # hex digits
            if offset + width > len(reply):
                raise DeviceReplyError(f"the GDB server's register reply is short ({len(reply) // 2} bytes)")
            value = _register_value(reply[offset : offset + width], reg.name)
            if value is not None:
                values[reg.name] = value
            offset += width
        return values

    # -- run control ------------------------------------------------------------------------
    async def halt(self) -> bytes:
        if not self.running:
            return self.halt_reason
        assert self._writer is not None
        self._writer.write(b"\x03")
        await self._writer.drain()
        while True:
            reply = await self.read_packet()
            if reply[:1] in (b"T", b"S", b"W", b"X"):
                break
        self.running = False
        self.halt_reason = reply
        return reply

    async def resume(self) -> None:
        if self.running:
            return
        await self._send(b"c")  # the reply (a stop packet) only comes when the target stops
        self.running = True

    async def monitor(self, command: str) -> str:
        await self._send(b"qRcmd," + binascii.hexlify(command.encode()))
        output = bytearray()
        while True:
            reply = await self.read_packet()
            if reply.startswith(b"O") and reply != b"OK" and _is_hex(reply[1:]):
                output += binascii.unhexlify(reply[1:])
                continue
            if _is_error(reply) or not reply:
                raise DeviceReplyError(f"the GDB server refused monitor command {command!r}")
            if reply != b"OK" and _is_hex(reply):
                output += binascii.unhexlify(reply)
            return output.decode("utf-8", "replace")

    # -- flash ------------------------------------------------------------------------------
    async def flash_regions(self) -> list[FlashRegion]:
        if self.features.get("qXfer:memory-map:read") is not True:
            return []
        text = await self._xfer(b"memory-map", b"")
        root = _parse_xml(text)
        regions = []
        for mem in root.iter("memory"):
            if mem.get("type") == "flash":
                block = next((p.text for p in mem.iter("property") if p.get("name") == "blocksize"), "0x400")
                start, length = int(mem.get("start", "0"), 0), int(mem.get("length", "0"), 0)
                # A blocksize of 0 (or none) would divide by zero when aligning the erase: 1 = no rounding.
                regions.append(FlashRegion(start, length, max(1, int(block or "0", 0))))
        return regions

    async def flash(self, base: int, image: bytes, progress: Progress | None = None) -> str:
        """Program `image` at `base`; returns how ("vFlash" or "memory writes, verified")."""
        report = progress or (lambda phase, done, total: None)
        regions = await self.flash_regions()
        region = next((r for r in regions if r.start <= base < r.start + r.length), None)
        if region is not None and base + len(image) > region.start + region.length:
            # Plain memory writes past a flash region's end would land in whatever follows it.
            raise DeviceReplyError(
                f"a {len(image)}-byte image at 0x{base:08x} runs past the end of the target's flash "
                f"region 0x{region.start:08x}-0x{region.start + region.length - 1:08x}"
            )
        if region is not None:
            start = base - (base - region.start) % region.blocksize
            end = base + len(image)
            end += -(end - region.start) % region.blocksize
            report("erase", 0, end - start)
            reply = await self.request(b"vFlashErase:%x,%x" % (start, end - start))
            if reply != b"OK":
                raise DeviceReplyError(f"flash erase failed: {_error_words(reply)}")
            report("erase", end - start, end - start)
            chunk = max(64, self.packet_size // 2 - 32)
            for i in range(0, len(image), chunk):
                part = image[i : i + chunk]
                reply = await self.request(b"vFlashWrite:%x:" % (base + i) + escape_binary(part))
                if reply != b"OK":
                    raise DeviceReplyError(f"flash write at 0x{base + i:08x} failed: {_error_words(reply)}")
                report("write", i + len(part), len(image))
            reply = await self.request(b"vFlashDone")
            if reply != b"OK":
                raise DeviceReplyError(f"flash programming failed to complete: {_error_words(reply)}")
            method = "vFlash"
        else:
            step = 4096
            for i in range(0, len(image), step):
                await self.write_memory(base + i, image[i : i + step])
                report("write", min(i + step, len(image)), len(image))
            method = "memory writes"
        # Read back and compare: the only proof that the image landed.
        step = 4096
        for i in range(0, len(image), step):
            expected = image[i : i + step]
            actual = await self.read_memory(base + i, len(expected))
            if actual != expected:
                bad = next(j for j in range(len(expected)) if actual[j] != expected[j])
                raise DeviceReplyError(f"flash verify failed at 0x{base + i + bad:08x}")
            report("verify", min(i + step, len(image)), len(image))
        return f"{method}, verified"


def _parse_xml(text: bytes) -> ET.Element:
    """Parse a target description or memory map. Stubs write `xi:include` without declaring the
    namespace (QEMU does), and a DOCTYPE would make the parser look for a DTD: drop both."""
    text = re.sub(rb"<!DOCTYPE[^>]*>", b"", text)
    text = re.sub(rb"<(/?)[A-Za-z_][\w.-]*:", rb"<\1", text)
    try:
        return ET.fromstring(text)
    except ET.ParseError as e:
        raise DeviceReplyError(f"the GDB server sent malformed XML: {e}") from None


def _is_hex(data: bytes) -> bool:
    try:
        binascii.unhexlify(data)
    except binascii.Error:
        return False
    return bool(data)
