"""The sim board's parts, built from a profile's `[[devices]]` (see docs/hardware.md).

Each declared device whose part the sim has a model for (`SIM_MODELS`) becomes
that model, wired where the entry says: on its I2C bus at its address, on its
SPI chip select, or in the 1-Wire tree (a DS18B20 by its id); an `analog`
entry is a channel of an ADC already built. The sim board's fixed parts
(`CONTRACT_PARTS`: a TMP102 at 0x48, a BME280 at 0x76 and a 24C32 EEPROM at
0x50 on I2C bus 1, an MCP3008 on SPI 0.0) are there whether or not the
profile declares them: where the wiring has no device at their place, the sim
adds them itself (the EEPROM always: it is no sensor part, so no entry names
it). The models read what `SIM_MODELS` gives them (the sim board's own
readings), with the device's options where the part has them (an INA219's
shunt, an MCP3008's reference voltage), so a driver configured by the same
entry reads back the sim's values.

The shipped sim profile (board_profiles/sim.toml) is the sim board's wiring:
every simulated profile runs on it (`SimDrivers`), so a device a test's own
profile declares where the sim has nothing answers as a missing part does.
GPIO (gpiozero's MockFactory), memory (files) and the STM32 (QEMU) are made by
`SimDrivers` from the grants. The profile's `[[displays]]` add an OLED controller model
(`sim.ssd1306`) where an SSD1306 or SH1106 is declared on an I2C bus.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from edgeclaw.backends.sim.i2c import SimI2CBus, SimI2CDevice
from edgeclaw.backends.sim.mcp3008 import MCP3008
from edgeclaw.board import DeviceSpec, DisplayGrant

SIM_I2C_BUS = 1
# MCP3008 inputs (volts, Vref 3.3 V): a ramp, so each channel reads differently.
MCP3008_VOLTAGES = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.3]
ADS1115_VOLTAGES = [0.25, 1.2, 2.5, 3.3]  # AIN0..AIN3
DS18B20_ID = "28-00000a1b2c3d"
EEPROM_PART = "24c32"  # not a sensor part: the sim's own name for its EEPROM

# The sim board's fixed parts and where they sit: (form, bus, address or chip select) -> part.
CONTRACT_PARTS: dict[tuple[str, int, int], str] = {
    ("i2c", SIM_I2C_BUS, 0x48): "tmp102",
    ("i2c", SIM_I2C_BUS, 0x50): EEPROM_PART,
    ("i2c", SIM_I2C_BUS, 0x76): "bme280",
    ("spi", 0, 0): "mcp3008",
}


def _option(device: DeviceSpec | None, name: str, default: float) -> float:
    """The device's setting (else its part's default) for a model that mirrors it, else the sim's."""
    return float(device.option(name)) if device is not None else default


# part -> the sim model, given its `[[devices]]` entry (None for a fixed part no entry declares)
# and the state directory. Imported on first use, like the drivers.
def _tmp102(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.tmp102 import TMP102

    return TMP102(21.5)


def _bme280(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.bme280 import BME280

    return BME280(temperature_c=22.0, pressure_pa=101325.0, humidity_pct=45.0)


def _bmp280(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.bmp280 import BMP280

    return BMP280(temperature_c=24.0, pressure_pa=100_250.0)


def _sht3x(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.sht import SHT3x

    return SHT3x(temperature_c=18.0, humidity_pct=62.0)


def _sht4x(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.sht import SHT4x

    return SHT4x(temperature_c=12.0, humidity_pct=80.0)


def _aht20(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.aht20 import AHT20

    return AHT20(temperature_c=16.0, humidity_pct=55.0)


def _htu21d(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.htu21d import HTU21D

    return HTU21D(temperature_c=14.0, humidity_pct=70.0)


def _bh1750(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.bh1750 import BH1750

    return BH1750(illuminance_lx=320.0)


def _ads1115(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.ads1115 import ADS1115

    return ADS1115(ADS1115_VOLTAGES)


def _ina219(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.ina219 import INA219

    return INA219(bus_voltage_v=12.6, current_a=0.8, shunt_ohms=_option(device, "shunt_ohms", 0.1))


def _mcp3008(device: DeviceSpec | None, state_dir: Path) -> Any:
    bus, cs = (device.bus, device.chip_select) if device is not None else (0, 0)
    return MCP3008(f"SPI {bus}.{cs}", vref=_option(device, "vref", 3.3), voltages=MCP3008_VOLTAGES)


def _ds18b20(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.ds18b20 import DS18B20

    return DS18B20(device.w1_id if device is not None else DS18B20_ID, temperature_c=19.5)


def _eeprom(device: DeviceSpec | None, state_dir: Path) -> Any:
    from edgeclaw.backends.sim.eeprom import EEPROM24C32

    return EEPROM24C32(state_dir / "sim" / "eeprom-24c32.bin")  # its contents kept across restarts


SIM_MODELS: dict[str, Callable[[DeviceSpec | None, Path], Any]] = {
    "tmp102": _tmp102,
    "bme280": _bme280,
    "bmp280": _bmp280,
    "sht3x": _sht3x,
    "sht4x": _sht4x,
    "aht20": _aht20,
    "htu21d": _htu21d,
    "bh1750": _bh1750,
    "ads1115": _ads1115,
    "ina219": _ina219,
    "mcp3008": _mcp3008,
    "ds18b20": _ds18b20,
    EEPROM_PART: _eeprom,
}


def _place(device: DeviceSpec) -> tuple[str, int, int] | None:
    """Where a device entry puts its part on the sim's buses (None: 1-Wire, or an ADC channel)."""
    if device.form == "i2c" and device.bus is not None and device.address is not None:
        return ("i2c", device.bus, device.address)
    if device.form == "spi" and device.bus is not None and device.chip_select is not None:
        return ("spi", device.bus, device.chip_select)
    return None


def sim_layout(devices: Iterable[DeviceSpec]) -> dict[tuple[str, int, int], str]:
    """What the sim wires where, for these `[[devices]]`: (form, bus, address or chip select) -> part,
    the fixed parts included, in the order they are built."""
    layout: dict[tuple[str, int, int], str] = {}
    for device in devices:
        place = _place(device)
        if place is not None and device.part in SIM_MODELS:
            layout.setdefault(place, device.part)
    for place, part in CONTRACT_PARTS.items():
        layout.setdefault(place, part)
    return layout


def _display_model(display: DisplayGrant) -> SimI2CDevice:
    from edgeclaw.backends.sim.ssd1306 import SSD1306

    sh1106 = display.kind == "sh1106"
    return SSD1306(columns=132 if sh1106 else 128, pages=8, sh1106=sh1106)


def oled_places(displays: Iterable[DisplayGrant]) -> dict[tuple[int, int], DisplayGrant]:
    """(bus, address) -> the OLED declared there, for the displays the sim has a model of."""
    return {
        (d.bus, d.address): d
        for d in displays
        if d.kind in ("ssd1306", "sh1106") and d.bus is not None and d.address is not None
    }


class SimParts:
    """The sim board's device models for one wiring (a profile's `[[devices]]` and `[[displays]]`)."""

    def __init__(
        self, state_dir: Path, devices: Iterable[DeviceSpec], displays: Iterable[DisplayGrant] = ()
    ) -> None:
        devices = list(devices)
        self.i2c: dict[int, dict[int, SimI2CDevice]] = {}
        self.spi: dict[tuple[int, int], MCP3008] = {}
        self.by_device: dict[str, Any] = {}  # the `[[devices]]` entry's name -> its model
        self.by_part: dict[str, Any] = {}  # part -> the first model of it
        self.models: list[Any] = []  # every model, in the order built
        onewire: list[Any] = []
        declared = {_place(d): d for d in reversed(devices) if _place(d) is not None}  # first wins
        for place, part in sim_layout(devices).items():
            device = declared.get(place)
            model = self._add(part, device, state_dir)
            form, bus, where = place
            if form == "i2c":
                self.i2c.setdefault(bus, {})[where] = model
            else:
                self.spi[(bus, where)] = model
        self.displays: dict[str, Any] = {}  # a `[[displays]]` entry's name -> its controller model
        for (bus, address), display in oled_places(displays).items():
            model = self.displays[display.name] = _display_model(display)
            self.models.append(model)
            self.i2c.setdefault(bus, {}).setdefault(address, model)
        for device in devices:
            if device.form == "onewire" and device.part in SIM_MODELS:
                onewire.append(self._add(device.part, device, state_dir))
        # The kernel's 1-Wire sysfs tree as the sim shows it (a board's is /sys/bus/w1/devices).
        self.onewire_root = state_dir / "sim" / "w1" / "devices"
        from edgeclaw.backends.sim.onewire import SimOneWireBus

        self.onewire = SimOneWireBus(self.onewire_root, onewire)

    def _add(self, part: str, device: DeviceSpec | None, state_dir: Path) -> Any:
        model = SIM_MODELS[part](device, state_dir)
        self.models.append(model)
        if device is not None:
            self.by_device[device.name] = model
        self.by_part.setdefault(part, model)
        return model

    def __getattr__(self, name: str) -> Any:
        """`parts.tmp102`: the (first) model of a part, as tests reach for it; `eeprom` for the 24C32."""
        if name.startswith("_"):
            raise AttributeError(name)
        found = self.__dict__.get("by_part", {}).get(EEPROM_PART if name == "eeprom" else name)
        if found is None:
            raise AttributeError(f"the sim board has no {name!r} part")
        return found

    def device(self, name: str) -> Any:
        """The model behind the `[[devices]]` entry called `name` (KeyError when the sim built none)."""
        return self.by_device[name]

    def i2c_devices(self, bus: int) -> dict[int, SimI2CDevice]:
        return dict(self.i2c.get(bus, {}))

    def i2c_bus(self, bus: int) -> SimI2CBus:
        return SimI2CBus(bus, self.i2c_devices(bus))

    def spi_device(self, bus: int, chip_select: int) -> MCP3008 | None:
        return self.spi.get((bus, chip_select))

    def close(self) -> None:
        for devices in self.i2c.values():
            for model in devices.values():
                close = getattr(model, "close", None)
                if close is not None:
                    close()


def sim_wiring() -> list[DeviceSpec]:
    """The sim board's own wiring: the shipped sim profile's `[[devices]]`."""
    from edgeclaw.board import load_profile

    return load_profile("sim").devices


def sim_displays() -> list[DisplayGrant]:
    """The sim board's own screens: the shipped sim profile's `[[displays]]`."""
    from edgeclaw.board import load_profile

    return load_profile("sim").displays


def __getattr__(name: str) -> Any:
    # I2C_BUS1_PARTS (address -> part on bus 1, as the sim board is wired) is worked out from the sim
    # profile when first asked for, so importing this module reads no file.
    if name == "I2C_BUS1_PARTS":
        layout = sim_layout(sim_wiring())
        parts = {where: part for (form, bus, where), part in layout.items() if (form, bus) == ("i2c", 1)}
        for (bus, address), display in oled_places(sim_displays()).items():
            if bus == 1:
                parts.setdefault(address, display.kind)
        return parts
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
