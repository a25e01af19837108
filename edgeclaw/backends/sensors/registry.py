"""The parts registry: a driver for each part name, and the board's declared devices read through them.

`DRIVERS` maps each part of `edgeclaw.board.parts` to the class that reads it
(`module:Class` under this package, imported on first use, so a board with one
TMP102 loads one small module). `Sensors` is what the `sensor` tool holds: the
profile's `[[devices]]`, each device's driver built once on its first read with
the bus backend its form names, and `read_all`, which reads devices on
different buses at once and devices sharing a bus one after the other (their
bus lock would serialise them anyway; doing it here saves a task per device).

What `Sensors` needs of the board is `SensorBuses`: an I2C bus by number, an
SPI device, the 1-Wire root and the operation deadline (`hub.BoardBackends`
is one; a test may pass its own). An ADC a channel is read through is another
declared device, whose driver `Sensors` builds itself.
"""

from __future__ import annotations

import asyncio
import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from edgeclaw.backends.base import DeviceUnavailable
from edgeclaw.backends.sensors.base import (
    ADCDriver,
    OneWireBus,
    Reading,
    SensorDriver,
    SensorError,
)
from edgeclaw.board import BoardProfile, DeviceSpec
from edgeclaw.errors import BackendError

if TYPE_CHECKING:
    from edgeclaw.backends.i2c import I2CBus
    from edgeclaw.backends.spi import SPIDevice

# part name -> "module:Class" in edgeclaw.backends.sensors
DRIVERS: dict[str, str] = {
    "tmp102": "tmp102:TMP102Driver",
    "bme280": "bme280:BME280Driver",
    "bmp280": "bme280:BMP280Driver",
    "sht3x": "sht:SHT3xDriver",
    "sht4x": "sht:SHT4xDriver",
    "aht20": "aht20:AHT20Driver",
    "htu21d": "htu21d:HTU21DDriver",
    "bh1750": "bh1750:BH1750Driver",
    "ads1115": "ads1115:ADS1115Driver",
    "mcp3008": "mcp3008:MCP3008Driver",
    "ina219": "ina219:INA219Driver",
    "ds18b20": "ds18b20:DS18B20Driver",
    "analog": "analog:AnalogDriver",
}


def driver_class(part: str) -> type[SensorDriver]:
    """The driver class for `part`; DeviceUnavailable when edgeclaw has none."""
    target = DRIVERS.get(part)
    if target is None:
        raise DeviceUnavailable(f"no driver for part {part!r} (drivers: {', '.join(sorted(DRIVERS))})")
    module_name, _, class_name = target.partition(":")
    full_name = f"edgeclaw.backends.sensors.{module_name}"
    try:
        module = importlib.import_module(full_name)
    except ModuleNotFoundError as e:
        if e.name != full_name:
            raise
        raise DeviceUnavailable(f"the driver for part {part!r} is not part of this installation") from None
    cls: type[SensorDriver] | None = getattr(module, class_name, None)
    if cls is None:
        raise DeviceUnavailable(f"the driver for part {part!r} is not part of this installation")
    return cls


class SensorBuses(Protocol):
    """The buses the declared devices are read over, opened on first use and only where granted."""

    @property
    def timeout_s(self) -> float:
        """Every read's deadline."""
        ...

    def i2c(self, bus: int) -> I2CBus: ...
    def spi(self, bus: int, chip_select: int) -> SPIDevice: ...
    def onewire_root(self) -> Path: ...


class Sensors:
    """The board profile's devices and their drivers."""

    def __init__(self, profile: BoardProfile, backends: SensorBuses) -> None:
        self.profile = profile
        self.backends = backends
        self._drivers: dict[str, SensorDriver] = {}
        self._onewire: OneWireBus | None = None

    @property
    def devices(self) -> list[DeviceSpec]:
        return self.profile.devices

    def device(self, name: str) -> DeviceSpec:
        found = self.profile.device(name)
        if found is None:
            known = ", ".join(repr(d.name) for d in self.devices) or "none"
            raise DeviceUnavailable(
                f"no device named {name!r} in the {self.profile.name} profile (devices: {known})"
            )
        return found

    def driver(self, name: str) -> SensorDriver:
        found = self._drivers.get(name)
        if found is None:
            found = self._build(self.device(name))
            self._drivers[name] = found
        return found

    def onewire_bus(self) -> OneWireBus:
        if self._onewire is None:
            self._onewire = OneWireBus(self.backends.onewire_root(), timeout_s=self.backends.timeout_s)
        return self._onewire

    def _build(self, device: DeviceSpec) -> SensorDriver:
        cls = driver_class(device.part)
        form = device.form
        try:
            if form == "i2c":
                assert device.bus is not None
                return cls(device, self.backends.i2c(device.bus))  # type: ignore[call-arg]
            if form == "spi":
                assert device.bus is not None and device.chip_select is not None
                grant = self.profile.spi_device(device.bus, device.chip_select)
                spi = self.backends.spi(device.bus, device.chip_select)
                return cls(device, spi, grant)  # type: ignore[call-arg]
            if form == "onewire":
                return cls(device, self.onewire_bus())  # type: ignore[call-arg]
            try:
                adc = self.driver(device.adc)
            except SensorError as e:  # reported for this device, naming the ADC it goes through
                raise SensorError(device, e.kind, f"through {e}") from None
            if not isinstance(adc, ADCDriver):
                raise DeviceUnavailable(
                    f"device {device.adc!r} ({type(adc).__name__}) has no channels to read"
                )
            return cls(device, adc)  # type: ignore[call-arg]
        except SensorError:
            raise
        except BackendError as e:
            raise SensorError(device, "unavailable", str(e)) from None

    async def read(self, name: str) -> Reading:
        driver = self.driver(name)
        return await driver.read()

    async def read_all(self) -> list[Reading | SensorError]:
        """Every device once, in profile order; a device that fails gives its error in its place."""
        groups: dict[tuple[object, ...], list[int]] = {}
        for i, device in enumerate(self.devices):
            groups.setdefault(_bus_of(self.profile, device), []).append(i)
        results: list[Reading | SensorError | None] = [None] * len(self.devices)

        async def read_group(indices: list[int]) -> None:
            for i in indices:
                name = self.devices[i].name
                try:
                    results[i] = await self.read(name)
                except SensorError as e:
                    results[i] = e
                except BackendError as e:
                    results[i] = SensorError(self.devices[i], "unavailable", str(e))

        if len(groups) == 1:
            await read_group(next(iter(groups.values())))
        else:
            try:
                async with asyncio.TaskGroup() as tg:
                    for indices in groups.values():
                        tg.create_task(read_group(indices))
            except ExceptionGroup as group:  # a driver's bug, not a device's failure: shown as itself
                raise group.exceptions[0] from None
        return [r for r in results if r is not None]


def _bus_of(profile: BoardProfile, device: DeviceSpec) -> tuple[object, ...]:
    """Which bus a read of `device` occupies (an ADC channel: its ADC's)."""
    seen: set[str] = set()
    while device.form == "adc" and device.name not in seen:
        seen.add(device.name)
        adc = profile.device(device.adc)
        if adc is None:
            break
        device = adc
    if device.form == "i2c":
        return ("i2c", device.bus)
    if device.form == "spi":
        return ("spi", device.bus, device.chip_select)
    return (device.form,)


__all__ = ["DRIVERS", "SensorBuses", "Sensors", "driver_class"]
