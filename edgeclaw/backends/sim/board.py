"""The sim board's parts in one place (see docs/hardware.md), so tests and the daemon share one set.

I2C bus 1: TMP102 at 0x48, 24C32 EEPROM at 0x50 (its contents kept in the
state directory), BME280 at 0x76, BH1750 at 0x23, ADS1115 at 0x49, INA219 at
0x41, BMP280 at 0x77, SHT3x at 0x44, SHT4x at 0x45, AHT20 at 0x38, HTU21D at
0x40. SPI 0.0: an MCP3008 with a fixed voltage on each channel. 1-Wire: a
DS18B20 in a w1 sysfs tree in the state directory. GPIO (gpiozero's
MockFactory), memory (files) and the STM32 (QEMU) are built by the hub from
the same profile.
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
BH1750_ADDRESS = 0x23  # ADDR low
ADS1115_ADDRESS = 0x49  # ADDR to VDD (0x48 is the TMP102's)
ADS1115_VOLTAGES = [0.25, 1.2, 2.5, 3.3]  # AIN0..AIN3
INA219_ADDRESS = 0x41  # A0 to VS+ (0x40 is the HTU21D's)
DS18B20_ID = "28-00000a1b2c3d"
BMP280_ADDRESS = 0x77  # SDO to VDDIO (0x76 is the BME280's)
SHT3X_ADDRESS = 0x44  # ADDR low
SHT4X_ADDRESS = 0x45  # an SHT40-B (the -A answers at 0x44, taken by the SHT3x)
AHT20_ADDRESS = 0x38
HTU21D_ADDRESS = 0x40
# Who answers where on I2C bus 1: address -> the SimParts attribute holding the part. The one
# list of the sim's I2C parts (a scan of bus 1 finds exactly these).
I2C_BUS1_PARTS = {
    TMP102_ADDRESS: "tmp102",
    EEPROM_ADDRESS: "eeprom",
    BME280_ADDRESS: "bme280",
    BH1750_ADDRESS: "bh1750",
    ADS1115_ADDRESS: "ads1115",
    INA219_ADDRESS: "ina219",
    BMP280_ADDRESS: "bmp280",
    SHT3X_ADDRESS: "sht3x",
    SHT4X_ADDRESS: "sht4x",
    AHT20_ADDRESS: "aht20",
    HTU21D_ADDRESS: "htu21d",
}


class SimParts:
    def __init__(self, state_dir: Path) -> None:
        from edgeclaw.backends.sim.tmp102 import TMP102

        self.tmp102 = TMP102(21.5)
        self.bme280 = BME280(temperature_c=22.0, pressure_pa=101325.0, humidity_pct=45.0)
        self.eeprom = EEPROM24C32(state_dir / "sim" / "eeprom-24c32.bin")
        self.mcp3008 = MCP3008("SPI 0.0", vref=3.3, voltages=MCP3008_VOLTAGES)
        # The kernel's 1-Wire sysfs tree as the sim shows it (a board's is /sys/bus/w1/devices).
        self.onewire_root = state_dir / "sim" / "w1" / "devices"
        from edgeclaw.backends.sim.ads1115 import ADS1115
        from edgeclaw.backends.sim.bh1750 import BH1750
        from edgeclaw.backends.sim.ds18b20 import DS18B20
        from edgeclaw.backends.sim.ina219 import INA219
        from edgeclaw.backends.sim.onewire import SimOneWireBus

        self.bh1750 = BH1750(illuminance_lx=320.0)
        self.ads1115 = ADS1115(ADS1115_VOLTAGES)
        self.ina219 = INA219(bus_voltage_v=12.6, current_a=0.8, shunt_ohms=0.1)
        self.ds18b20 = DS18B20(DS18B20_ID, temperature_c=19.5)
        self.onewire = SimOneWireBus(self.onewire_root, [self.ds18b20])
        from edgeclaw.backends.sim.aht20 import AHT20
        from edgeclaw.backends.sim.bmp280 import BMP280
        from edgeclaw.backends.sim.htu21d import HTU21D
        from edgeclaw.backends.sim.sht import SHT3x, SHT4x

        self.bmp280 = BMP280(temperature_c=24.0, pressure_pa=100_250.0)
        self.sht3x = SHT3x(temperature_c=18.0, humidity_pct=62.0)
        self.sht4x = SHT4x(temperature_c=12.0, humidity_pct=80.0)
        self.aht20 = AHT20(temperature_c=16.0, humidity_pct=55.0)
        self.htu21d = HTU21D(temperature_c=14.0, humidity_pct=70.0)

    def i2c_devices(self, bus: int) -> dict[int, SimI2CDevice]:
        if bus != SIM_I2C_BUS:
            return {}
        return {address: getattr(self, part) for address, part in I2C_BUS1_PARTS.items()}

    def i2c_bus(self, bus: int) -> SimI2CBus:
        return SimI2CBus(bus, self.i2c_devices(bus))

    def spi_device(self, bus: int, chip_select: int) -> MCP3008 | None:
        return self.mcp3008 if (bus, chip_select) == (0, 0) else None

    def close(self) -> None:
        self.eeprom.close()
