"""`sensor`: the board profile's declared devices, read in engineering units.

`list` names each `[[devices]]` entry, its part, where it is wired and what it
measures; `read` reads one device by name, or every device when none is named.
Each reading carries its values with units, the time the part answered and the
raw bytes it sent (for audit). Reads go through the parts' drivers over the
board's bus backends (their locks and deadlines). In a read of every device, a
device that fails is reported in its place — naming the part, the bus and the
cause — and the others are still read.
"""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.board import DEVICE_NAME_MAX, DeviceSpec, describe_device
from edgeclaw.errors import BackendError, ToolRefused
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import HardwareTool, result
from edgeclaw.wording import plural


def _measures(device: DeviceSpec) -> list[dict[str, str]]:
    if device.part == "analog":
        return [{"quantity": str(device.option("quantity")), "unit": str(device.option("unit"))}]
    return [{"quantity": m.quantity, "unit": m.unit} for m in device.info.measures]


class SensorTool(HardwareTool):
    name = "sensor"
    observing_actions = frozenset({"list", "read"})
    description = (
        "Readings from the sensors the board profile declares, in engineering units (°C, hPa, %RH, lx, V, "
        "A, W), with the time and the raw bytes. Actions: list (the devices, their parts and what each "
        "measures), read (one device by its name, or every device when no device is given). Use this, "
        "not raw i2c/spi reads, for temperature, pressure, humidity, light, voltage or current."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "read"]},
            "device": {
                "type": "string",
                "minLength": 1,
                "maxLength": DEVICE_NAME_MAX,
                "description": "a device name from list; omit to read every device",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def _known(self) -> str:
        return ", ".join(repr(d.name) for d in self.profile.devices) or "none"

    async def check(self, args: Args, ctx: ToolContext) -> None:
        if not self.profile.devices:
            raise ToolRefused(
                f"the {self.profile.name} profile declares no devices (add [[devices]] entries to the board "
                "profile: see docs/hardware.md)"
            )
        name = args.get("device")
        if name is None:
            return
        if args["action"] == "list":
            raise ToolRefused("list takes no device (it lists them all)")
        if self.profile.device(name) is None:
            raise ToolRefused(
                f"no device named {name!r} in the {self.profile.name} profile (devices: {self._known()})"
            )

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if args["action"] == "list":
            return self._list()
        # The drivers and their interface load on the first read, not when the daemon starts.
        from edgeclaw.backends.sensors.base import SensorError

        sensors = self.backends.sensors()
        name = args.get("device")
        if name is not None:
            reading = await sensors.read(name)
            return result(reading.as_dict(), reading.text())
        outcomes = await sensors.read_all()
        readings = [r.as_dict() for r in outcomes if not isinstance(r, SensorError)]
        errors = [
            {"device": e.device, "part": e.part, "location": e.location, "kind": e.kind, "error": str(e)}
            for e in outcomes
            if isinstance(e, SensorError)
        ]
        lines = [f"{o.device}: FAILED: {o}" if isinstance(o, SensorError) else o.text() for o in outcomes]
        if not readings:
            raise BackendError("no device could be read:\n" + "\n".join(lines))
        head = f"{plural(len(readings), 'device')} read" + (f", {len(errors)} failed" if errors else "")
        return result({"readings": readings, "errors": errors}, f"{head}:\n" + "\n".join(lines))

    def _list(self) -> ToolResult:
        devices = [
            {
                "name": d.name,
                "part": d.part,
                "interface": d.form,
                "location": d.location,
                "measures": _measures(d),
                "description": d.info.description,
            }
            for d in self.profile.devices
        ]
        lines = [f"{d.name}: {describe_device(d)}" for d in self.profile.devices]
        return result({"devices": devices}, f"{plural(len(devices), 'device')}:\n" + "\n".join(lines))
