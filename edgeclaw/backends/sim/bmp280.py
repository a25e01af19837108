"""Bosch BMP280 pressure and temperature sensor (BST-BMP280-DS001): the BME280 without humidity.

The register map is the BME280's for temperature and pressure (calibration
0x88-0x9F, ctrl_meas 0xF4, config 0xF5, data 0xF7-0xFC) with chip id 0x58 at
0xD0; there is no ctrl_hum, no humidity calibration and no humidity data (the
registers read 0).
"""

from __future__ import annotations

from edgeclaw.backends.sim.bme280 import BME280, REG_CALIB_B, REG_CHIP_ID, REG_CTRL_HUM, REG_HUM

CHIP_ID = 0x58


class BMP280(BME280):
    def __init__(self, temperature_c: float = 24.0, pressure_pa: float = 100_250.0) -> None:
        super().__init__(temperature_c=temperature_c, pressure_pa=pressure_pa, humidity_pct=0.0)

    def _reset(self) -> None:
        super()._reset()
        self.regs[REG_CALIB_B : REG_CALIB_B + 7] = bytes(7)
        self.regs[REG_CHIP_ID] = CHIP_ID

    def _store(self, adc_p: int, adc_t: int, adc_h: int) -> None:
        super()._store(adc_p, adc_t, adc_h)
        self.regs[REG_HUM : REG_HUM + 2] = bytes(2)

    def _write_register(self, register: int, value: int) -> None:
        if register != REG_CTRL_HUM:
            super()._write_register(register, value)
