"""`hardware_memory`: 8/16/32-bit values and byte blocks inside a memory region the profile grants.

The whole access [address, address + size) must lie inside one region, with
no wrap-around; values must be aligned to their width (an unaligned register
access faults on the bus or tears); writes only to `rw` regions; blocks are
bounded by `hardware.max_read_bytes`.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.board import MemoryRegionGrant
from edgeclaw.errors import ToolRefused
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import (
    HardwareTool,
    bytes_schema,
    data_bytes,
    hex_dump,
    int_or_hex,
    number,
    result,
)
from edgeclaw.wording import plural

ADDRESS_LIMIT = 1 << 64
WIDTHS = {8: 1, 16: 2, 32: 4}


class HardwareMemoryTool(HardwareTool):
    name = "hardware_memory"
    observing_actions = frozenset({"regions", "read", "read_block"})
    description = (
        "Read or write memory-mapped registers inside a region the board profile grants. Actions: regions "
        "(list them), read (width 8/16/32, count values), write (one value), read_block (length bytes), "
        "write_block (data). Writes only to read-write regions; addresses must be aligned to the width."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["regions", "read", "write", "read_block", "write_block"]},
            "address": int_or_hex('physical address, e.g. "0x3F200034"', 0, ADDRESS_LIMIT - 1),
            "width": {"type": "integer", "enum": [8, 16, 32], "description": "bits per value (default 32)"},
            "count": {"type": "integer", "minimum": 1, "maximum": 1024, "description": "values to read"},
            "value": int_or_hex("value to write", 0, 0xFFFF_FFFF),
            "length": {"type": "integer", "minimum": 1, "maximum": 1 << 20},
            "data": bytes_schema("bytes for write_block", 1 << 16),
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def _plan(self, args: Args) -> tuple[MemoryRegionGrant, int, int]:
        """(region, address, size in bytes) of the access, or a refusal saying what is wrong."""
        action = args["action"]
        address = number(args, "address", lo=0, hi=ADDRESS_LIMIT - 1)
        width = WIDTHS[args.get("width", 32)]
        if action == "read":
            size = width * args.get("count", 1)
        elif action == "write":
            size = width
            number(args, "value", lo=0, hi=(1 << (8 * width)) - 1)
        elif action == "read_block":
            size = number(args, "length", lo=1)
        else:
            size = len(data_bytes(args, "data", max_len=self.config.max_read_bytes))
        if size > self.config.max_read_bytes:
            raise ToolRefused(f"{size} bytes is over the {self.config.max_read_bytes}-byte limit per call")
        if address + size > ADDRESS_LIMIT:
            raise ToolRefused(f"0x{address:x} + {size} bytes overflows the 64-bit address space")
        if action in ("read", "write") and address % width:
            raise ToolRefused(f"address 0x{address:x} is not aligned to {width * 8}-bit access")
        region = self.profile.memory_region_at(address, size)
        if region is None:
            granted = (
                ", ".join(f"{r.name} 0x{r.base:x}-0x{r.end - 1:x}" for r in self.profile._spec.memory)
                or "none"
            )
            raise ToolRefused(
                f"0x{address:x}..0x{address + size - 1:x} is not inside a memory region of the "
                f"{self.profile.name} profile (granted: {granted})"
            )
        if action in ("write", "write_block") and region.access != "rw":
            raise ToolRefused(
                f"memory region {region.name!r} is read-only in the {self.profile.name} profile"
            )
        return region, address, size

    async def check(self, args: Args, ctx: ToolContext) -> None:
        if args["action"] != "regions":
            self._plan(args)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        if action == "regions":
            regions = [
                {"name": r.name, "base": f"0x{r.base:x}", "size": r.size, "access": r.access}
                for r in self.profile._spec.memory
            ]
            text = "\n".join(f"{r['name']}: {r['base']} +{r['size']} {r['access']}" for r in regions)
            return result({"regions": regions}, text or "no memory regions granted")
        region, address, size = self._plan(args)
        memory = self.backends.memory(region)
        offset = address - region.base
        width_bits = args.get("width", 32)
        width = WIDTHS[width_bits]
        payload: dict[str, Any] = {"region": region.name, "address": f"0x{address:x}"}
        if action == "read":
            values = await memory.read_values(offset, width, size // width)
            payload.update(width=width_bits, values=values)
            shown = " ".join(f"0x{v:0{width * 2}x}" for v in values)
            return result(payload, f"{region.name} @ 0x{address:x} ({width_bits}-bit): {shown}")
        if action == "write":
            value = number(args, "value", lo=0, hi=(1 << (8 * width)) - 1)
            await memory.write_value(offset, width, value)
            payload.update(width=width_bits, written=value)
            return result(payload, f"{region.name} @ 0x{address:x}: wrote 0x{value:0{width * 2}x}")
        if action == "read_block":
            data = await memory.read_bytes(offset, size)
            payload.update(length=len(data), data=data.hex(" "))
            return result(payload, hex_dump(address, data))
        data = data_bytes(args, "data", max_len=self.config.max_read_bytes)
        await memory.write_bytes(offset, data)
        payload["written"] = len(data)
        return result(payload, f"{region.name} @ 0x{address:x}: wrote {plural(len(data), 'byte')}")
