"""The sensor parts edgeclaw has drivers for: what each is, how it is wired, what it measures.

This is vocabulary, below every layer: the board profile checks a `[[devices]]`
entry against it when the profile is loaded (is the part known, is the address
one the part can be strapped to, are its options the part's own), the `sensor`
tool lists what each device measures from it, and the I2C scan names the parts
that may sit at an address nobody declared. The drivers themselves live in
`edgeclaw.backends.sensors`, one module per part, looked up by the same names.

An entry's `interface` is how the part is reached, which decides the keys a
device declaration needs:

- `i2c`: `bus` and `address` (one of the part's `addresses`);
- `spi`: `bus` and `chip_select`;
- `onewire`: `w1_id`, the kernel's 1-Wire device id (`28-00000a1b2c3d`), whose family code
  (the first byte) must be the part's `onewire_family`;
- `adc`: `adc` (the name of a declared ADC device) and `channel` (below that ADC's `channels`).
"""

from __future__ import annotations

from typing import Literal

from edgeclaw.records import dataclass

Interface = Literal["i2c", "spi", "onewire", "adc"]
OptionValue = int | float | str | bool
TEXT_OPTION_MAX = 32  # a quantity or unit name, shown in every reading


@dataclass(frozen=True)
class Measure:
    """One quantity a part reports, in the unit its readings carry."""

    quantity: str  # "temperature", "pressure", "humidity", "illuminance", "voltage", ...
    unit: str  # "°C", "hPa", "%RH", "lx", "V", "A", "W"


@dataclass(frozen=True)
class PartOption:
    """A setting a device declaration may give in its `options` table; the default's type is its type."""

    name: str
    default: OptionValue
    description: str
    choices: tuple[OptionValue, ...] = ()
    minimum: float | None = None
    maximum: float | None = None

    def problem(self, value: OptionValue) -> str | None:
        """Why `value` is not acceptable for this option, or None."""
        kind = type(self.default)
        if kind is float:
            ok_type = isinstance(value, int | float) and not isinstance(value, bool)
        elif kind is int:
            ok_type = isinstance(value, int) and not isinstance(value, bool)
        else:
            ok_type = isinstance(value, kind)
        if not ok_type:
            words = {float: "a number", int: "an integer", str: "a string", bool: "true or false"}[kind]
            return f"expected {words}, got {value!r}"
        if isinstance(value, str) and not (0 < len(value) <= TEXT_OPTION_MAX and value.isprintable()):
            return f"expected 1-{TEXT_OPTION_MAX} printable characters, got {value!r}"
        if self.choices and value not in self.choices:
            return f"expected one of {', '.join(repr(c) for c in self.choices)}, got {value!r}"
        if isinstance(value, int | float) and not isinstance(value, bool):
            if self.minimum is not None and value < self.minimum:
                return f"expected at least {self.minimum:g}, got {value!r}"
            if self.maximum is not None and value > self.maximum:
                return f"expected at most {self.maximum:g}, got {value!r}"
        return None


@dataclass(frozen=True)
class PartInfo:
    """A part of the catalogue: how it is attached, what it measures, where it can sit."""

    name: str
    interface: Interface
    description: str
    measures: tuple[Measure, ...]
    addresses: tuple[int, ...] = ()  # i2c: the addresses the part can be strapped to
    channels: int = 0  # an ADC: its input channels (0 = not an ADC)
    onewire_family: int | None = None  # onewire: the family code of its device ids
    options: tuple[PartOption, ...] = ()

    def option(self, name: str) -> PartOption | None:
        return next((o for o in self.options if o.name == name), None)

    @property
    def measures_text(self) -> str:
        """`temperature (°C), pressure (hPa)`."""
        return ", ".join(f"{m.quantity} ({m.unit})" for m in self.measures)


TEMPERATURE = Measure("temperature", "°C")
PRESSURE = Measure("pressure", "hPa")
HUMIDITY = Measure("humidity", "%RH")

_PARTS = (
    PartInfo(
        "tmp102",
        "i2c",
        "TI TMP102 temperature sensor (±0.5 °C, 0.0625 °C steps)",
        (TEMPERATURE,),
        addresses=(0x48, 0x49, 0x4A, 0x4B),
    ),
    PartInfo(
        "bme280",
        "i2c",
        "Bosch BME280 temperature, pressure and humidity sensor",
        (TEMPERATURE, PRESSURE, HUMIDITY),
        addresses=(0x76, 0x77),
    ),
    PartInfo(
        "bmp280",
        "i2c",
        "Bosch BMP280 temperature and pressure sensor",
        (TEMPERATURE, PRESSURE),
        addresses=(0x76, 0x77),
    ),
    PartInfo(
        "sht3x",
        "i2c",
        "Sensirion SHT30/SHT31/SHT35 temperature and humidity sensor (CRC-checked)",
        (TEMPERATURE, HUMIDITY),
        addresses=(0x44, 0x45),
    ),
    PartInfo(
        "sht4x",
        "i2c",
        "Sensirion SHT40/SHT41/SHT45 temperature and humidity sensor (CRC-checked)",
        (TEMPERATURE, HUMIDITY),
        addresses=(0x44, 0x45, 0x46),
    ),
    PartInfo(
        "aht20",
        "i2c",
        "Aosong AHT20 temperature and humidity sensor (CRC-checked)",
        (TEMPERATURE, HUMIDITY),
        addresses=(0x38,),
    ),
    PartInfo(
        "htu21d",
        "i2c",
        "TE HTU21D / Si7021-compatible temperature and humidity sensor (CRC-checked)",
        (TEMPERATURE, HUMIDITY),
        addresses=(0x40,),
    ),
    PartInfo(
        "bh1750",
        "i2c",
        "ROHM BH1750 ambient light sensor",
        (Measure("illuminance", "lx"),),
        addresses=(0x23, 0x5C),
    ),
    PartInfo(
        "ads1115",
        "i2c",
        "TI ADS1115 4-channel 16-bit ADC",
        (Measure("voltage", "V"),),
        addresses=(0x48, 0x49, 0x4A, 0x4B),
        channels=4,
        options=(
            PartOption(
                "gain",
                2.048,
                "full-scale range in volts (the PGA setting)",
                choices=(6.144, 4.096, 2.048, 1.024, 0.512, 0.256),
            ),
        ),
    ),
    PartInfo(
        "mcp3008",
        "spi",
        "Microchip MCP3008 8-channel 10-bit ADC",
        (Measure("voltage", "V"),),
        channels=8,
        options=(
            PartOption("vref", 3.3, "the reference voltage on VREF, in volts", minimum=0.25, maximum=5.5),
        ),
    ),
    PartInfo(
        "ina219",
        "i2c",
        "TI INA219 current and power monitor",
        (Measure("bus_voltage", "V"), Measure("current", "A"), Measure("power", "W")),
        addresses=tuple(range(0x40, 0x50)),
        options=(
            PartOption("shunt_ohms", 0.1, "the shunt resistor, in ohms", minimum=0.0001, maximum=100.0),
            PartOption("max_current_a", 3.2, "the largest current expected, in amperes", minimum=0.001),
        ),
    ),
    PartInfo(
        "ds18b20",
        "onewire",
        "Maxim DS18B20 1-Wire temperature sensor (through the kernel's w1 driver)",
        (TEMPERATURE,),
        onewire_family=0x28,
    ),
    PartInfo(
        "analog",
        "adc",
        "A voltage on an ADC channel, optionally scaled: value = volts * scale + offset",
        (Measure("voltage", "V"),),
        options=(
            PartOption("scale", 1.0, "multiplies the volts"),
            PartOption("offset", 0.0, "added after scaling"),
            PartOption("quantity", "voltage", "what the scaled value is (e.g. 'temperature')"),
            PartOption("unit", "V", "the scaled value's unit (e.g. '°C')"),
        ),
    ),
)

PARTS: dict[str, PartInfo] = {p.name: p for p in _PARTS}


def part_info(name: str) -> PartInfo | None:
    return PARTS.get(name)


def likely_parts(address: int) -> list[PartInfo]:
    """The I2C parts that can answer at `address` (for naming what a scan finds)."""
    return [p for p in _PARTS if p.interface == "i2c" and address in p.addresses]


__all__ = [
    "PARTS",
    "Interface",
    "Measure",
    "OptionValue",
    "PartInfo",
    "PartOption",
    "likely_parts",
    "part_info",
]
