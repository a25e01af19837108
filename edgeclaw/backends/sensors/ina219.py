"""TI INA219 current and power monitor (datasheet SBOS448).

The driver programs the part the way section 8.5.1 does: from the shunt
resistor (`shunt_ohms`) and the largest current expected (`max_current_a`)
it picks the smallest shunt range (PGA ±40/80/160/320 mV) that holds
max_current * R_shunt, the current LSB (max_current / 32767, the finest that
still reaches the maximum) and the calibration register, Cal = trunc(0.04096 /
(Current_LSB * R_shunt)) with bit 0 void; the LSB actually in effect is then
0.04096 / (Cal * R_shunt), and the power LSB 20 times that. Configuration: 32
V bus range, 12-bit conversions, shunt and bus continuous.

A reading checks the calibration register first: a part that lost power comes
back with it at 0 and its current and power registers stuck at 0, so the
driver programs it again and waits out a conversion. A shunt voltage at the
end of its range (a saturated ADC: the current is that much or more) and OVF
in the bus voltage register (the current or power computation overflowed)
are errors, not numbers.
"""

from __future__ import annotations

import math

from edgeclaw.backends.i2c import I2CBus
from edgeclaw.backends.sensors.base import I2CSensor, Reading
from edgeclaw.board import DeviceSpec
from edgeclaw.records import dataclass

REG_CONFIG = 0x00
REG_SHUNT = 0x01
REG_BUS = 0x02
REG_POWER = 0x03
REG_CURRENT = 0x04
REG_CALIBRATION = 0x05
BRNG_32V = 1 << 13
ADC_12BIT = 0b0011
MODE_CONTINUOUS = 0b111
SHUNT_RANGES_V = (0.04, 0.08, 0.16, 0.32)  # PG = 00, 01, 10, 11
CNVR = 1 << 1
OVF = 1 << 0
BUS_LSB_V = 0.004
SHUNT_LSB_V = 10e-6
CONVERSION_S = 0.00106  # shunt then bus at 12 bits: 532 µs each (table 5)
CAL_MAX = 0xFFFE


@dataclass(frozen=True)
class Programming:
    config: int
    calibration: int
    current_lsb_a: float
    power_lsb_w: float
    shunt_range_v: float


def calibration_for(current_lsb_a: float, shunt_ohms: float) -> int:
    """Cal = trunc(0.04096 / (Current_LSB * R_shunt)) (equation 1), bit 0 void."""
    cal = math.floor(0.04096 / (current_lsb_a * shunt_ohms) + 1e-9)
    return min(cal, CAL_MAX) & 0xFFFE


def programming(shunt_ohms: float, max_current_a: float) -> Programming:
    shunt_max_v = max_current_a * shunt_ohms
    pg = next((i for i, r in enumerate(SHUNT_RANGES_V) if shunt_max_v <= r + 1e-12), None)
    if pg is None:
        raise ValueError(
            f"max_current_a * shunt_ohms = {shunt_max_v:g} V is beyond the INA219's ±0.32 V shunt range"
        )
    cal = calibration_for(max_current_a / 32767, shunt_ohms)
    if cal < 2:
        raise ValueError(
            f"shunt_ohms {shunt_ohms:g} and max_current_a {max_current_a:g} give no usable calibration"
        )
    current_lsb = 0.04096 / (cal * shunt_ohms)
    config = BRNG_32V | pg << 11 | ADC_12BIT << 7 | ADC_12BIT << 3 | MODE_CONTINUOUS
    return Programming(config, cal, current_lsb, 20 * current_lsb, SHUNT_RANGES_V[pg])


def signed16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


def bus_volts(register: int) -> float:
    """Bits 15:3 of the bus voltage register, 4 mV each."""
    return (register >> 3) * BUS_LSB_V


class INA219Driver(I2CSensor):
    def __init__(self, device: DeviceSpec, bus: I2CBus) -> None:
        super().__init__(device, bus)
        try:
            self.program = programming(
                float(device.option("shunt_ohms")), float(device.option("max_current_a"))
            )
        except ValueError as e:
            raise self.fail("bad_data", str(e)) from None

    async def read(self) -> Reading:
        p = self.program
        async with self.transaction() as t:
            calibration = await t.read_register(REG_CALIBRATION, 2)
            config = await t.read_register(REG_CONFIG, 2)
            if (
                int.from_bytes(calibration, "big") != p.calibration
                or int.from_bytes(config, "big") != p.config
            ):
                # First use, or the part was reset (calibration 0, current and power stuck at 0).
                await t.write(bytes((REG_CONFIG, p.config >> 8, p.config & 0xFF)))
                await t.write(bytes((REG_CALIBRATION, p.calibration >> 8, p.calibration & 0xFF)))
                await t.wait(CONVERSION_S)
            bus = await t.read_register(REG_BUS, 2)
            shunt = await t.read_register(REG_SHUNT, 2)
            current = await t.read_register(REG_CURRENT, 2)
            power = await t.read_register(REG_POWER, 2)
        raw = bus + shunt + current + power
        bus_register = int.from_bytes(bus, "big")
        shunt_v = signed16(int.from_bytes(shunt, "big")) * SHUNT_LSB_V
        if abs(shunt_v) >= p.shunt_range_v - SHUNT_LSB_V / 2:
            # The shunt ADC saturates at its range: the current is that much or more, not that much.
            raise self.fail(
                "bad_data",
                f"the shunt voltage is at the end of its range ({shunt_v * 1000:g} mV): the current is"
                f" beyond max_current_a ({float(self.device.option('max_current_a')):g} A)",
            )
        if bus_register & OVF:
            raise self.fail(
                "bad_data",
                f"overflow: the current ({shunt_v * 1000:g} mV across the shunt) is beyond what"
                f" max_current_a allows ({p.shunt_range_v * 1000:g} mV range)",
            )
        return self.reading(
            {
                "bus_voltage": bus_volts(bus_register),
                "current": signed16(int.from_bytes(current, "big")) * p.current_lsb_a,
                "power": int.from_bytes(power, "big") * p.power_lsb_w,
            },
            raw,
        )
