"""`esp32`: the ESP32 bridge's commands — info/version, GPIO, ADC and its own I2C bus.

Bounded by the profile's `[esp32]` table: GPIO pins by number or name (only
`out` pins may be written), ADC pins, and the bridge's I2C buses with their
read/write address grants.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.backends.i2c import ADDRESS_FIRST, ADDRESS_LAST
from edgeclaw.board import ESP32Grant, ESP32PinGrant, I2CBusGrant
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

ACTIONS = ("info", "version", "gpio_read", "gpio_write", "adc_read", "i2c_scan", "i2c_read", "i2c_write")
BRIDGE_MAX_BYTES = 64  # the firmware's per-request I2C limit


class ESP32Tool(HardwareTool):
    name = "esp32"
    observing_actions = frozenset({"info", "version", "gpio_read", "adc_read", "i2c_scan", "i2c_read"})
    description = (
        "The ESP32 attached over serial (edgeclaw bridge firmware). Actions: info, version, gpio_read / "
        "gpio_write (pin number or name, value 0/1), adc_read (pin), i2c_scan (bus), i2c_read (bus, address, "
        "register, length), i2c_write (bus, address, register, data). Only what the board profile grants."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "pin": {
                "anyOf": [
                    {"type": "integer", "minimum": 0, "maximum": 39},
                    {"type": "string", "minLength": 1},
                ]
            },
            "value": {"anyOf": [{"type": "boolean"}, {"type": "integer", "enum": [0, 1]}]},
            "bus": {"type": "integer", "minimum": 0, "maximum": 1},
            "address": int_or_hex("7-bit I2C address", 0, 0x7F),
            "register": int_or_hex("register", 0, 0xFF),
            "length": {"type": "integer", "minimum": 1, "maximum": BRIDGE_MAX_BYTES},
            "data": bytes_schema("bytes for i2c_write", BRIDGE_MAX_BYTES),
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def _grant(self) -> ESP32Grant:
        grant = self.profile._spec.esp32
        if grant is None:
            raise ToolRefused(f"the {self.profile.name} profile names no ESP32 bridge")
        return grant

    def _gpio(self, grant: ESP32Grant, args: Args) -> ESP32PinGrant:
        pin = args.get("pin")
        if pin is None:
            raise ToolRefused("argument 'pin' is required for this action")
        found = next((g for g in grant.gpio if pin in (g.pin, g.name) or str(g.pin) == pin), None)
        if found is None:
            names = ", ".join(f"{g.pin} ({g.name})" for g in grant.gpio) or "none"
            raise ToolRefused(
                f"ESP32 GPIO {pin!r} is not granted by the {self.profile.name} profile (granted: {names})"
            )
        return found

    def _adc_pin(self, grant: ESP32Grant, args: Args) -> int:
        pin = args.get("pin")
        found = next((a for a in grant.adc if pin in (a.pin, a.name) or str(a.pin) == pin), None)
        if found is None:
            names = ", ".join(f"{a.pin} ({a.name})" for a in grant.adc) or "none"
            raise ToolRefused(
                f"ESP32 ADC pin {pin!r} is not granted by the {self.profile.name} profile (granted: {names})"
            )
        return found.pin

    def _i2c(self, grant: ESP32Grant, args: Args, write: bool) -> tuple[I2CBusGrant, int]:
        bus = args.get("bus", 0)
        bus_grant = next((g for g in grant.i2c if g.bus == bus), None)
        if bus_grant is None:
            raise ToolRefused(f"the ESP32's I2C bus {bus} is not granted by the {self.profile.name} profile")
        if args["action"] == "i2c_scan":
            return bus_grant, 0
        address = number(args, "address", lo=ADDRESS_FIRST, hi=ADDRESS_LAST)
        allowed = bus_grant.may_write(address) if write else bus_grant.may_read(address)
        if not allowed:
            verb = "writing to" if write else "reading"
            raise ToolRefused(
                f"{verb} 0x{address:02x} on the ESP32's I2C bus {bus} is not granted by the "
                f"{self.profile.name} profile"
            )
        number(args, "register", lo=0, hi=0xFF)
        if write:
            data_bytes(args, "data", max_len=BRIDGE_MAX_BYTES)
        return bus_grant, address

    async def check(self, args: Args, ctx: ToolContext) -> None:
        grant = self._grant()
        action = args["action"]
        if action in ("gpio_read", "gpio_write"):
            pin = self._gpio(grant, args)
            if action == "gpio_write":
                if pin.direction != "out":
                    raise ToolRefused(
                        f"ESP32 GPIO {pin.pin} ({pin.name}) is an input in the {self.profile.name} profile"
                    )
                if "value" not in args:
                    raise ToolRefused("argument 'value' is required for gpio_write")
        elif action == "adc_read":
            self._adc_pin(grant, args)
        elif action.startswith("i2c_"):
            self._i2c(grant, args, write=action == "i2c_write")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        grant = self._grant()
        action = args["action"]
        bridge = self.backends.esp32()
        if action in ("info", "version"):
            info = await bridge.request("info")
            if action == "version":
                payload = {"firmware": info.get("firmware"), "protocol": info.get("protocol")}
                return result(payload, f"{payload['firmware']} (bridge protocol {payload['protocol']})")
            text = ", ".join(f"{k} {v}" for k, v in info.items())
            return result(info, f"ESP32 on {grant.port}: {text}")
        if action == "gpio_read":
            pin = self._gpio(grant, args)
            reply = await bridge.request("gpio.read", {"pin": pin.pin})
            return result(
                {"pin": pin.pin, "name": pin.name, "value": reply.get("value")},
                f"ESP32 GPIO {pin.pin} ({pin.name}) reads {reply.get('value')}",
            )
        if action == "gpio_write":
            pin = self._gpio(grant, args)
            value = int(bool(args["value"]))
            await bridge.request("gpio.write", {"pin": pin.pin, "value": value})
            return result(
                {"pin": pin.pin, "name": pin.name, "value": value},
                f"ESP32 GPIO {pin.pin} ({pin.name}) set to {value}",
            )
        if action == "adc_read":
            pin_number = self._adc_pin(grant, args)
            reply = await bridge.request("adc.read", {"pin": pin_number})
            return result(
                reply, f"ESP32 ADC pin {pin_number}: raw {reply.get('raw')} ({reply.get('millivolts')} mV)"
            )
        bus_grant, address = self._i2c(grant, args, write=action == "i2c_write")
        if action == "i2c_scan":
            reply = await bridge.request("i2c.scan", {"bus": bus_grant.bus})
            found = [a for a in reply.get("addresses", []) if isinstance(a, int) and bus_grant.may_read(a)]
            shown = ", ".join(f"0x{a:02x}" for a in found) or "none"
            return result(
                {"bus": bus_grant.bus, "addresses": [f"0x{a:02x}" for a in found]},
                f"ESP32 I2C bus {bus_grant.bus}: {shown}",
            )
        register = number(args, "register", lo=0, hi=0xFF)
        if action == "i2c_read":
            length = args.get("length", 1)
            reply = await bridge.request(
                "i2c.read", {"bus": bus_grant.bus, "address": address, "register": register, "length": length}
            )
            data = bytes.fromhex(str(reply.get("data", "")))
            return result(
                {
                    "bus": bus_grant.bus,
                    "address": f"0x{address:02x}",
                    "register": register,
                    "data": data.hex(" "),
                },
                f"ESP32 I2C 0x{address:02x} register 0x{register:02x}: {hexbytes(data)}",
            )
        data = data_bytes(args, "data", max_len=BRIDGE_MAX_BYTES)
        await bridge.request(
            "i2c.write", {"bus": bus_grant.bus, "address": address, "register": register, "data": data.hex()}
        )
        return result(
            {"bus": bus_grant.bus, "address": f"0x{address:02x}", "register": register, "written": len(data)},
            f"ESP32 I2C 0x{address:02x} register 0x{register:02x}: wrote {plural(len(data), 'byte')}",
        )
