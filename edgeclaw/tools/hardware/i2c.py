"""`i2c`: scan a bus, read and write device registers — only where the board profile allows.

Scanning follows i2cdetect (quick write, or receive byte at 0x30-0x37 and
0x50-0x5f; the reserved addresses 0x00-0x07 and 0x78-0x7f skipped), so only
devices that acknowledge are listed, each with the device the profile declares
there, or else the parts that can answer at that address; a declared device
that did not answer is named too. Reads need the address in the bus's `read` grant, writes in its
`write` grant. `register_width = 2` sends a 16-bit register address (EEPROMs
such as the 24C32), and `settle_ms` waits after a write (an EEPROM's write
cycle) before the bus is handed to the next call.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.backends.i2c import ADDRESS_FIRST, ADDRESS_LAST
from edgeclaw.board import I2CBusGrant
from edgeclaw.board.parts import likely_parts
from edgeclaw.errors import ToolRefused
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import (
    HardwareTool,
    bytes_schema,
    data_bytes,
    hexbytes,
    int_or_hex,
    number,
    result,
)
from edgeclaw.wording import plural

READS = ("read_byte", "read_word", "read_block")
WRITES = ("write_byte", "write_word", "write_block")


class I2CTool(HardwareTool):
    name = "i2c"
    observing_actions = frozenset({"scan", *READS})
    description = (
        "I2C bus access bounded by the board profile. Actions: scan (list devices that acknowledge), "
        "read_byte / read_word / read_block from a register, write_byte / write_word / write_block to a "
        "register. Words are SMBus order (low byte first); blocks are returned as bytes. Use "
        "register_width 2 for 16-bit register addresses (EEPROMs) and settle_ms after EEPROM writes."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["scan", *READS, *WRITES]},
            "bus": {"type": "integer", "minimum": 0, "maximum": 255, "description": "bus number, e.g. 1"},
            "address": int_or_hex('7-bit device address, e.g. 72 or "0x48"', 0, 0x7F),
            "register": int_or_hex("register (or memory) address", 0, 0xFFFF),
            "register_width": {"type": "integer", "enum": [1, 2], "description": "register address bytes"},
            "length": {
                "type": "integer",
                "minimum": 1,
                "maximum": 4096,
                "description": "bytes for read_block",
            },
            "value": int_or_hex("byte (0-255) or word (0-65535) to write", 0, 0xFFFF),
            "data": bytes_schema("bytes for write_block", 4096),
            "settle_ms": {
                "type": "integer",
                "minimum": 0,
                "maximum": 100,
                "description": "wait after a write",
            },
        },
        "required": ["action", "bus"],
        "additionalProperties": False,
    }

    def _grant(self, bus: int) -> I2CBusGrant:
        grant = self.profile.i2c_bus(bus)
        if grant is None:
            granted = ", ".join(str(g.bus) for g in self.profile._spec.i2c) or "none"
            raise ToolRefused(
                f"I2C bus {bus} is not granted by the {self.profile.name} profile (granted: {granted})"
            )
        return grant

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action, bus = args["action"], args["bus"]
        grant = self._grant(bus)
        if action == "scan":
            if not grant.scan:
                raise ToolRefused(f"scanning I2C bus {bus} is not granted by the {self.profile.name} profile")
            return
        address = number(args, "address", lo=ADDRESS_FIRST, hi=ADDRESS_LAST)
        width = args.get("register_width", 1)
        number(args, "register", lo=0, hi=0xFF if width == 1 else 0xFFFF)
        if action in WRITES:
            if not grant.may_write(address):
                raise ToolRefused(
                    f"writing to 0x{address:02x} on I2C bus {bus} is not granted by the "
                    f"{self.profile.name} profile"
                )
            if action == "write_byte":
                number(args, "value", lo=0, hi=0xFF)
            elif action == "write_word":
                number(args, "value", lo=0, hi=0xFFFF)
            else:
                data_bytes(args, "data", max_len=self.config.max_read_bytes)
        elif not grant.may_read(address):
            raise ToolRefused(
                f"reading 0x{address:02x} on I2C bus {bus} is not granted by the {self.profile.name} profile"
            )
        elif action == "read_block":
            number(args, "length", lo=1, hi=self.config.max_read_bytes)
        if width == 2 and action not in ("read_block", "write_block"):
            raise ToolRefused("register_width 2 works with read_block and write_block only")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action, bus_number = args["action"], args["bus"]
        grant = self._grant(bus_number)
        bus = self.backends.i2c(bus_number)
        if action == "scan":
            return await self._scan(bus_number, grant)
        address = number(args, "address", lo=ADDRESS_FIRST, hi=ADDRESS_LAST)
        width = args.get("register_width", 1)
        register = number(args, "register", lo=0, hi=0xFF if width == 1 else 0xFFFF)
        at = f"0x{address:02x} register 0x{register:0{2 * width}x} on bus {bus_number}"
        payload: dict[str, Any] = {"bus": bus_number, "address": f"0x{address:02x}", "register": register}
        if action == "read_byte":
            value = await bus.read_byte_data(address, register)
            payload["value"] = value
            return result(payload, f"{at}: 0x{value:02x} ({value})")
        if action == "read_word":
            value = await bus.read_word_data(address, register)
            payload.update(value=value, bytes=hexbytes(value.to_bytes(2, "little")))
            return result(payload, f"{at}: 0x{value:04x} ({value}; bytes on the wire {payload['bytes']})")
        if action == "read_block":
            length = number(args, "length", lo=1, hi=self.config.max_read_bytes)
            data = await bus.read_block(address, register.to_bytes(width, "big"), length)
            payload.update(length=len(data), data=data.hex(" "))
            return result(payload, f"{at}, {len(data)} bytes: {hexbytes(data)}")
        settle_s = args.get("settle_ms", 0) / 1000  # waited with the bus held: see I2CBus
        if action == "write_byte":
            value = number(args, "value", lo=0, hi=0xFF)
            await bus.write_byte_data(address, register, value, settle_s=settle_s)
            payload["written"] = 1
        elif action == "write_word":
            value = number(args, "value", lo=0, hi=0xFFFF)
            await bus.write_word_data(address, register, value, settle_s=settle_s)
            payload["written"] = 2
        else:
            data = data_bytes(args, "data", max_len=self.config.max_read_bytes)
            await bus.write_block(address, register.to_bytes(width, "big") + data, settle_s=settle_s)
            payload["written"] = len(data)
        return result(payload, f"{at}: wrote {plural(payload['written'], 'byte')}")

    async def _scan(self, bus_number: int, grant: I2CBusGrant) -> ToolResult:
        candidates = [a for a in range(ADDRESS_FIRST, ADDRESS_LAST + 1) if grant.may_read(a)]
        found = await self.backends.i2c(bus_number).scan(candidates)
        labels = {d.address: d.name for d in grant.devices}
        parts = {a: self._who(bus_number, a) for a in found.found}
        payload = {
            "bus": bus_number,
            "addresses": [f"0x{a:02x}" for a in found.found],
            "in_use_by_kernel": [f"0x{a:02x}" for a in found.busy],
            "probed": len(candidates),
            "parts": {f"0x{a:02x}": who for a, who in parts.items() if who},
        }
        lines = [
            f"I2C bus {bus_number}: {plural(len(found.found), 'device')} acknowledged "
            f"({len(candidates)} addresses probed)"
        ]
        for a in found.found:
            words = [labels[a]] if a in labels else []
            declared, likely = parts[a].get("devices"), parts[a].get("likely")
            if declared:
                words += [f"device {d['name']!r} ({d['part']})" for d in declared]
            elif likely:
                words.append(f"not declared; likely {' or '.join(likely)}")
            lines.append(f"  0x{a:02x}" + (f"  {'; '.join(words)}" if words else ""))
        for a in found.busy:
            lines.append(f"  0x{a:02x}  in use by a kernel driver (UU)")
        probed = set(candidates)
        for d in self.profile.devices:
            if d.form == "i2c" and d.bus == bus_number and d.address in probed and d.address not in parts:
                where = f"0x{d.address:02x}"
                lines.append(f"  device {d.name!r} ({d.part}, declared at {where}) did not acknowledge")
        return result(payload, "\n".join(lines))

    def _who(self, bus: int, address: int) -> dict[str, Any]:
        """The profile's devices declared at `address`, else the parts that can answer there."""
        declared = self.profile.i2c_devices_at(bus, address)
        if declared:
            return {"devices": [{"name": d.name, "part": d.part} for d in declared]}
        likely = [p.name for p in likely_parts(address)]
        return {"likely": likely} if likely else {}
