"""`spi`: one full-duplex transfer on a granted SPI device; returns the bytes clocked in.

The profile caps the clock, lists the allowed modes and word sizes, and
decides what may be sent: on an `ro` device only transfers that start with
one of its `read_commands` (an ADC conversion request, a flash READ), on an
`rw` device anything.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.board import SPIDeviceGrant
from edgeclaw.errors import ToolRefused
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import HardwareTool, bytes_schema, data_bytes, hexbytes, result


class SPITool(HardwareTool):
    name = "spi"
    description = (
        "Full-duplex SPI transfer on a device the board profile grants: sends `data` and returns as many "
        "bytes read back. Optional mode (0-3), speed_hz (capped by the profile) and bits_per_word. "
        "Example, MCP3008 channel 0: data [1, 128, 0]."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "bus": {"type": "integer", "minimum": 0, "maximum": 255},
            "chip_select": {"type": "integer", "minimum": 0, "maximum": 255},
            "data": bytes_schema("bytes to send", 4096),
            "mode": {"type": "integer", "minimum": 0, "maximum": 3},
            "speed_hz": {"type": "integer", "minimum": 1000, "maximum": 100_000_000},
            "bits_per_word": {"type": "integer", "minimum": 1, "maximum": 32},
        },
        "required": ["bus", "chip_select", "data"],
        "additionalProperties": False,
    }

    def _checked(self, args: Args) -> tuple[SPIDeviceGrant, bytes, int, int, int]:
        bus, cs = args["bus"], args["chip_select"]
        grant = self.profile.spi_device(bus, cs)
        if grant is None:
            granted = ", ".join(f"{g.bus}.{g.chip_select}" for g in self.profile._spec.spi) or "none"
            raise ToolRefused(
                f"SPI {bus}.{cs} is not granted by the {self.profile.name} profile (granted: {granted})"
            )
        data = data_bytes(args, "data", max_len=self.config.max_read_bytes)
        speed = args.get("speed_hz", grant.max_speed_hz)
        if speed > grant.max_speed_hz:
            raise ToolRefused(f"speed_hz {speed} is over SPI {bus}.{cs}'s cap of {grant.max_speed_hz} Hz")
        mode = args.get("mode", grant.modes[0])
        if mode not in grant.modes:
            raise ToolRefused(f"SPI mode {mode} is not allowed on {bus}.{cs} (allowed: {grant.modes})")
        bits = args.get("bits_per_word", 8)
        if bits not in grant.bits_per_word:
            raise ToolRefused(
                f"bits_per_word {bits} is not allowed on {bus}.{cs} (allowed: {grant.bits_per_word})"
            )
        if grant.access == "ro" and data[0] not in grant.read_commands:
            allowed = ", ".join(f"0x{c:02x}" for c in grant.read_commands) or "none"
            raise ToolRefused(
                f"SPI {bus}.{cs} is read-only in the {self.profile.name} profile: a transfer must start with "
                f"one of its read commands ({allowed}), not 0x{data[0]:02x}"
            )
        return grant, data, speed, mode, bits

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self._checked(args)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        grant, data, speed, mode, bits = self._checked(args)
        device = self.backends.spi(grant.bus, grant.chip_select)
        received = await device.transfer(data, speed, mode, bits)
        payload = {
            "bus": grant.bus,
            "chip_select": grant.chip_select,
            "sent": data.hex(" "),
            "received": received.hex(" "),
            "mode": mode,
            "speed_hz": speed,
        }
        return result(
            payload,
            f"SPI {grant.bus}.{grant.chip_select} (mode {mode}, {speed} Hz): sent {hexbytes(data)}; "
            f"received {hexbytes(received)}",
        )
