"""`serial`: the serial ports the board profile grants — list, open, write, read, exchange, close.

A port is named by its path or by the name the profile gives it. The ports
the daemon itself talks over are never offered, even when the profile grants
them: the console's (`console.ports`) and the ESP32 bridge's. They are
compared by the device they resolve to, so `/dev/serial0` is refused when
the console runs on `/dev/ttyAMA0` it points at.

Every exchange holds the port's lock from the first byte written to the last
byte read, so two sessions never interleave on the wires. Reads stop at a
delimiter, a byte count or a deadline; a peer that never answers is not an
error but a result saying nothing came within the time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
from collections.abc import Sequence
from typing import Any, ClassVar

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile, SerialPortGrant
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.errors import ToolRefused
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import HardwareTool, bytes_schema, data_bytes, hexbytes, result

ACTIONS = ("list", "open", "write", "read", "exchange", "close")
READS = ("read", "exchange")
WRITES = ("write", "exchange")
MAX_TIMEOUT_MS = 30_000
DEFAULT_TIMEOUT_MS = 1000
MAX_DELIMITER = 16
STOPPED_WORDS = {
    "delimiter": "at the delimiter",
    "count": "at the byte count",
    "timeout": "at the deadline",
    "idle": "when the line went quiet",
}


class SerialTool(HardwareTool):
    name = "serial"
    observing_actions = frozenset({"list"})
    description = (
        "Serial ports (UARTs) the board profile grants, by path or name. Actions: list; open (baud, "
        "bytesize, parity N/E/O/M/S, stop_bits 1/1.5/2, flow_control; a port opens with 115200 8N1 on "
        "first use otherwise); write (text in `data`, or bytes in `hex`); read (until the `until` "
        "delimiter, `count` bytes or `timeout_ms`, optional `idle_ms` silence); exchange (write, then "
        "read the answer, in one go: nobody else's bytes in between); close. `flush: true` drops what "
        "the peer sent before the write."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "port": {"type": "string", "minLength": 1, "maxLength": 256, "description": "path or name"},
            "baud": {"type": "integer", "minimum": 50, "maximum": 4_000_000},
            "bytesize": {"type": "integer", "enum": [5, 6, 7, 8]},
            "parity": {"type": "string", "enum": ["N", "E", "O", "M", "S"]},
            "stop_bits": {"type": "number", "enum": [1, 1.5, 2]},
            "flow_control": {"type": "string", "enum": ["none", "rtscts", "xonxoff"]},
            "data": {"type": "string", "maxLength": 4096, "description": "text to send, as UTF-8"},
            "hex": bytes_schema("bytes to send instead of text", 4096),
            "until": {"type": "string", "minLength": 1, "maxLength": MAX_DELIMITER},
            "until_hex": bytes_schema("a delimiter given as bytes", MAX_DELIMITER),
            "count": {"type": "integer", "minimum": 1, "maximum": 65536},
            "timeout_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS},
            "idle_ms": {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_MS},
            "flush": {"type": "boolean"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        profile: BoardProfile,
        config: HardwareConfig,
        backends: BoardBackends,
        console_ports: Sequence[str] = (),
    ) -> None:
        super().__init__(profile, config, backends)
        self.console_ports = tuple(console_ports)

    # -- which ports ----------------------------------------------------------------------------
    def _reserved(self) -> dict[str, str]:
        """The devices the daemon itself uses, by the path they resolve to (at this moment: udev
        may move a symlink), each with the reason it is not offered."""
        out = {os.path.realpath(p): "the console's port" for p in self.console_ports}
        bridge = self.backends.bridge_port()
        if bridge is not None:
            out[os.path.realpath(bridge)] = "the ESP32 bridge's port"
        return out

    def _grants(self) -> list[SerialPortGrant]:
        return list(self.profile._spec.serial)

    def _port(self, args: Args) -> SerialPortGrant:
        wanted = args.get("port")
        if not wanted:
            raise ToolRefused("argument 'port' is required for this action")
        grants = self._grants()
        grant = next((g for g in grants if g.path == wanted), None) or next(
            (g for g in grants if g.name and g.name == wanted), None
        )
        if grant is None:
            offered = ", ".join(g.path + (f" ({g.name})" if g.name else "") for g in grants) or "none"
            raise ToolRefused(
                f"serial port {wanted!r} is not granted by the {self.profile.name} profile "
                f"(granted: {offered})"
            )
        why = self._reserved().get(os.path.realpath(grant.path))
        if why is not None:
            raise ToolRefused(f"serial port {grant.path} is {why}; the serial tool never opens it")
        return grant

    @staticmethod
    def _label(grant: SerialPortGrant) -> str:
        return f"serial port {grant.path}" + (f" ({grant.name})" if grant.name else "")

    # -- arguments ------------------------------------------------------------------------------
    @staticmethod
    def _outgoing(args: Args) -> bytes:
        if ("data" in args) == ("hex" in args):
            raise ToolRefused("give exactly one of 'data' (text) or 'hex' (bytes) to write")
        if "data" in args:
            data = str(args["data"]).encode("utf-8")
            if not data:
                raise ToolRefused("argument 'data' must hold at least one character")
            return data
        return data_bytes(args, "hex", max_len=4096)

    @staticmethod
    def _delimiter(args: Args) -> bytes:
        if "until" in args and "until_hex" in args:
            raise ToolRefused("give at most one of 'until' (text) or 'until_hex' (bytes)")
        if "until" in args:
            return str(args["until"]).encode("utf-8")
        return data_bytes(args, "until_hex", max_len=MAX_DELIMITER, required=False)

    def _settings(self, args: Args, current: Any) -> Any:
        """The line settings asked for: the given keys over the port's current (else the defaults)."""
        from edgeclaw.backends.serial import LineSettings

        base = current if current is not None else LineSettings()
        keys = {"baud": "baud", "bytesize": "bytesize", "parity": "parity", "stop_bits": "stop_bits"}
        changes = {field: args[arg] for arg, field in keys.items() if arg in args}
        if "flow_control" in args:
            changes["flow_control"] = args["flow_control"]
        return dataclasses.replace(base, **changes) if changes else base

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action = args["action"]
        if action == "list":
            return
        self._port(args)
        if action in WRITES:
            self._outgoing(args)
        elif "data" in args or "hex" in args:
            raise ToolRefused(f"'{action}' sends nothing: use write or exchange to send 'data' or 'hex'")
        if action in READS:
            self._delimiter(args)
            count = args.get("count", self.config.max_read_bytes)
            if count > self.config.max_read_bytes:
                raise ToolRefused(
                    f"count {count} is over the {self.config.max_read_bytes}-byte limit per call "
                    "(hardware.max_read_bytes)"
                )
        elif any(k in args for k in ("until", "until_hex", "count", "idle_ms")):
            raise ToolRefused(f"'{action}' reads nothing: until, count and idle_ms are for read and exchange")

    # -- running --------------------------------------------------------------------------------
    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        if action == "list":
            return self._list()
        grant = self._port(args)
        ports = self.backends.serial()
        link = ports.link(self.backends.serial_device(grant.path), self._label(grant))
        timeout_s = args.get("timeout_ms", DEFAULT_TIMEOUT_MS) / 1000
        # Waiting for another session's exchange on this port is bounded too.
        lock_wait_s = timeout_s + self.config.op_timeout_s
        try:
            async with asyncio.timeout(lock_wait_s):
                await link.lock.acquire()
        except TimeoutError:
            from edgeclaw.backends.base import BusTimeout

            raise BusTimeout(f"{link.label}: busy with another exchange for over {lock_wait_s:g} s") from None
        try:
            return await self._run(action, args, grant, link, timeout_s)
        finally:
            link.lock.release()

    async def _run(
        self, action: str, args: Args, grant: SerialPortGrant, link: Any, timeout_s: float
    ) -> ToolResult:
        payload: dict[str, Any] = {"port": grant.path, "name": grant.name}
        if action == "close":
            was_open = link.is_open
            link.close()
            payload["closed"] = was_open
            return result(payload, f"{link.label} " + ("closed" if was_open else "was not open"))
        link.configure(self._settings(args, link.settings))
        payload["settings"] = link.settings.describe()
        lines = []
        if action == "open":
            return result(payload, f"{link.label} open at {link.settings.describe()}")
        if args.get("flush"):
            payload["discarded"] = link.discard_input()
            if payload["discarded"]:
                lines.append(f"dropped {payload['discarded']} stale bytes")
        if action in WRITES:
            data = self._outgoing(args)
            # A write's own deadline: `timeout_ms` for a write alone; in an exchange it is the read's.
            given = action == "write" and "timeout_ms" in args
            await link.write(data, timeout_s if given else self.config.op_timeout_s)
            payload["written"] = len(data)
            lines.append(f"wrote {len(data)} bytes to {link.label} at {link.settings.describe()}")
        if action in READS:
            idle = args.get("idle_ms")
            got = await link.read(
                until=self._delimiter(args),
                count=args.get("count", self.config.max_read_bytes),
                timeout_s=timeout_s,
                idle_s=idle / 1000 if idle else None,
            )
            payload.update(
                received_hex=hexbytes(got.data),
                received_text=got.data.decode("utf-8", errors="replace"),
                received=len(got.data),
                stopped=got.stopped,
                elapsed_ms=round(got.elapsed_s * 1000, 1),
            )
            if not got.data:
                lines.append(f"no answer from {link.label} within {timeout_s:g} s")
            else:
                stopped = STOPPED_WORDS[got.stopped]
                lines.append(
                    f"read {len(got.data)} bytes, stopped {stopped}: {shown_text(got.data)}"
                    + (f"\nhex: {hexbytes(got.data)}" if not _printable(got.data) else "")
                )
        return result(payload, "\n".join(lines))

    def _list(self) -> ToolResult:
        reserved = self._reserved()
        ports, withheld = [], []
        for g in self._grants():
            why = reserved.get(os.path.realpath(g.path))
            entry = {"port": g.path, "name": g.name}
            if why is None:
                ports.append(entry)
            else:
                withheld.append({**entry, "reason": why})
        lines = [f"{p['port']}" + (f" ({p['name']})" if p["name"] else "") for p in ports]
        lines += [f"not offered: {w['port']} ({w['reason']})" for w in withheld]
        text = "\n".join(lines) if lines else f"the {self.profile.name} profile grants no serial ports"
        return result({"ports": ports, "withheld": withheld}, text)


def _printable(data: bytes) -> bool:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return all(c.isprintable() or c in "\r\n\t" for c in text)


def shown_text(data: bytes) -> str:
    """Received bytes as one readable line: line ends and other control bytes spelled out."""
    text = data.decode("utf-8", errors="replace")
    out = []
    for c in text:
        if c == "\r":
            out.append("\\r")
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif not c.isprintable():
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'
