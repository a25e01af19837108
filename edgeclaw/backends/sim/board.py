"""The sim board's parts in one place (see docs/hardware.md), so tests and the daemon share one set.

I2C bus 1: TMP102 at 0x48, 24C32 EEPROM at 0x50 (its contents kept in the
state directory), BME280 at 0x76. SPI 0.0: an MCP3008 with a fixed voltage
on each channel. GPIO (gpiozero's MockFactory), memory (files) and the
STM32 (QEMU) are built by the hub from the same profile.
"""

from __future__ import annotations

from pathlib import Path

from edgeclaw.backends.sim.bme280 import BME280
from edgeclaw.backends.sim.eeprom import EEPROM24C32
from edgeclaw.backends.sim.i2c import SimI2CBus, SimI2CDevice
from edgeclaw.backends.sim.mcp3008 import MCP3008

TMP102_ADDRESS = 0x48
EEPROM_ADDRESS = 0x50
BME280_ADDRESS = 0x76
SIM_I2C_BUS = 1
# MCP3008 inputs (volts, Vref 3.3 V): a ramp, so each channel reads differently.
MCP3008_VOLTAGES = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.3]


class SimParts:
    def __init__(self, state_dir: Path) -> None:
        from edgeclaw.backends.sim.tmp102 import TMP102

        self.tmp102 = TMP102(21.5)
        self.bme280 = BME280(temperature_c=22.0, pressure_pa=101325.0, humidity_pct=45.0)
        self.eeprom = EEPROM24C32(state_dir / "sim" / "eeprom-24c32.bin")
        self.mcp3008 = MCP3008("SPI 0.0", vref=3.3, voltages=MCP3008_VOLTAGES)

    def i2c_devices(self, bus: int) -> dict[int, SimI2CDevice]:
        if bus != SIM_I2C_BUS:
            return {}
        return {TMP102_ADDRESS: self.tmp102, EEPROM_ADDRESS: self.eeprom, BME280_ADDRESS: self.bme280}

    def i2c_bus(self, bus: int) -> SimI2CBus:
        return SimI2CBus(bus, self.i2c_devices(bus))

    def spi_device(self, bus: int, chip_select: int) -> MCP3008 | None:
        return self.mcp3008 if (bus, chip_select) == (0, 0) else None

    def close(self) -> None:
        self.eeprom.close()
