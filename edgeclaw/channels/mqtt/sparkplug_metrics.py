"""The metrics of a Sparkplug edge node and of the devices behind it, from the board profile: what each
is called, its datatype and unit, how it is read and, for writable ones, written (sparkplug.py sends
them).

The node's: each GPIO pin (`GPIO/{name}`, Boolean; output pins writable), each value of each
`[[devices]]` entry (`Sensors/{device}/{Quantity}`, Double, with its unit), a TMP102 labelled on I2C
and not declared, the tool statistics (`Tools/*`) and health figures from the telemetry (`Health/*`).
The devices': the ESP32 bridge's pins and ADC inputs and its firmware, the probe's target.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw.channels.mqtt.homeassistant import RecentReadings, tmp102_celsius
from edgeclaw.records import dataclass

# Telemetry figures sent as Health/* (Double): they change all the time, so on the interval only.
HEALTH_KEYS = ("uptime_s", "cpu_temp_c", "load_1m", "mem_used_pct", "disk_used_pct", "outbox_depth")
TOOL_KEYS = (
    ("Tools/calls", "tool_calls"),
    ("Tools/errors", "tool_errors"),
    ("Tools/refused", "tool_refused"),
)


@dataclass(frozen=True)
class Metric:
    """One metric of the node. `read` gives its value; `write` (writable metrics) takes a new one."""

    name: str
    datatype: int
    read: Callable[[], Awaitable[Any]]
    write: Callable[[Any], Awaitable[None]] | None = None
    on_change: bool = True  # sent in an NDATA as soon as it changes, not just on the interval
    unit: str = ""  # its engineering unit (the `engUnit` property of its birth), if it has one


class MetricCatalogue:
    """The metrics, built once from the profile; writes go through `call` (the node's policy check)."""

    def __init__(
        self,
        pb: Any,
        profile: Any,  # edgeclaw.board.BoardProfile
        hardware: Any,  # edgeclaw.backends.hub.BoardBackends, or None
        telemetry: Callable[[], dict[str, Any]],
        call: Callable[[str, dict[str, Any]], Awaitable[Any]],
        poll_s: float,
    ) -> None:
        self.pb = pb
        self.profile = profile
        self.hardware = hardware
        self.telemetry = telemetry
        self._call = call
        self._readings = RecentReadings(hardware, max_age_s=min(1.0, poll_s / 2))
        self._snapshot: dict[str, Any] = {}
        self.node: dict[str, Metric] = {}
        # The devices behind the node: device id -> its metrics (none for a board without them).
        self.devices: dict[str, dict[str, Metric]] = {}
        self._build()
        self._build_devices()

    def take_telemetry(self) -> None:
        """The telemetry figures the next reads give (one snapshot per message)."""
        self._snapshot = self.telemetry()

    # -- the metrics from the profile ---------------------------------------------
    def _build(self) -> None:
        pb = self.pb
        spec = self.profile._spec if self.profile is not None else None
        if spec is not None and self.hardware is not None:
            for grant in spec.gpio:
                writer = self._gpio_writer(grant.pin) if grant.direction == "out" else None
                self._add(Metric(f"GPIO/{grant.name}", pb.BOOLEAN, self._gpio_reader(grant.pin), writer))
            declared = {(d.bus, d.address) for d in self.profile.devices if d.form == "i2c"}
            for device in self.profile.devices:
                for value in device.values:
                    words = value.quantity.replace("_", " ").title() + (
                        f" {value.label}" if value.label else ""
                    )
                    reader = self._declared_reader(device.name, value.quantity, value.label)
                    self._add(Metric(f"Sensors/{device.name}/{words}", pb.DOUBLE, reader, unit=value.unit))
            for bus in spec.i2c:
                for label in bus.devices:
                    if (bus.bus, label.address) in declared:
                        continue  # read as a [[devices]] entry above, with every quantity it has
                    if label.name.upper().startswith("TMP102"):
                        name = f"Sensors/TMP102 (I2C {bus.bus} 0x{label.address:02x})/Temperature"
                        reader = self._tmp102_reader(bus.bus, label.address)
                        self._add(Metric(name, pb.FLOAT, reader, unit="°C"))
        for name, key in TOOL_KEYS:
            self._add(Metric(name, pb.UINT64, self._telemetry_reader(key)))
        for key in HEALTH_KEYS:
            self._add(Metric(f"Health/{key}", pb.DOUBLE, self._telemetry_reader(key), on_change=False))

    def _add(self, metric: Metric) -> None:
        self.node[metric.name] = metric

    def _build_devices(self) -> None:
        pb = self.pb
        spec = self.profile._spec if self.profile is not None else None
        if spec is None or self.hardware is None:
            return
        if spec.esp32 is not None:
            esp: dict[str, Metric] = {}
            grant = spec.esp32

            async def port() -> Any:
                return grant.port

            async def firmware() -> Any:
                bridge = self.hardware.esp32()
                return bridge.peer.get("firmware")

            esp["Properties/Port"] = Metric("Properties/Port", pb.STRING, port)
            for pin in grant.gpio:
                writer = self._esp32_writer(pin.name) if pin.direction == "out" else None
                name = f"GPIO/{pin.name}"
                esp[name] = Metric(
                    name, pb.BOOLEAN, self._esp32_reader("gpio.read", pin.pin, "value"), writer
                )
            for adc in grant.adc:
                name = f"ADC/{adc.name}/Millivolts"
                esp[name] = Metric(name, pb.INT32, self._esp32_reader("adc.read", adc.pin, "millivolts"))
            # After the reads: the first of them shakes hands, which is what names the firmware.
            esp["Properties/Firmware"] = Metric("Properties/Firmware", pb.STRING, firmware)
            self.devices["esp32"] = esp
        if spec.probe is not None:
            probe = spec.probe

            def fixed(value: str) -> Callable[[], Awaitable[Any]]:
                async def read() -> Any:
                    return value

                return read

            self.devices["probe"] = {
                "Properties/Target": Metric("Properties/Target", pb.STRING, fixed(probe.target)),
                "Properties/Transport": Metric("Properties/Transport", pb.STRING, fixed(probe.transport)),
            }

    def _esp32_reader(self, op: str, pin: int, field: str) -> Callable[[], Awaitable[Any]]:
        async def read() -> Any:
            reply = await self.hardware.esp32().request(op, {"pin": pin})
            value = reply.get(field)
            return bool(value) if op == "gpio.read" else value

        return read

    def _esp32_writer(self, name: str) -> Callable[[Any], Awaitable[None]]:
        async def write(value: Any) -> None:
            await self._call("esp32", {"action": "gpio_write", "pin": name, "value": bool(value)})

        return write

    def _gpio_reader(self, pin: int) -> Callable[[], Awaitable[Any]]:
        async def read() -> Any:
            return bool((await self.hardware.gpio().read(pin)).active)

        return read

    def _tmp102_reader(self, bus: int, address: int) -> Callable[[], Awaitable[Any]]:
        async def read() -> Any:
            return tmp102_celsius(await self.hardware.i2c(bus).read_word_data(address, 0x00))

        return read

    def _declared_reader(self, device: str, quantity: str, label: str) -> Callable[[], Awaitable[Any]]:
        async def read() -> Any:
            found = (await self._readings.get(device)).value(quantity, label)
            return None if found is None else found.value

        return read

    def _telemetry_reader(self, key: str) -> Callable[[], Awaitable[Any]]:
        async def read() -> Any:
            return self._snapshot.get(key)

        return read

    def _gpio_writer(self, pin: int) -> Callable[[Any], Awaitable[None]]:
        async def write(value: Any) -> None:
            await self._call("gpio", {"action": "write", "pin": pin, "value": bool(value)})

        return write
