"""Bosch BME280 humidity, pressure and temperature sensor, after its datasheet (BST-BME280-DS002).

The register map of section 5.3: chip id 0xD0 = 0x60, soft reset 0xE0
(write 0xB6), calibration 0x88-0xA1 and 0xE1-0xE7, ctrl_hum 0xF2, status
0xF3, ctrl_meas 0xF4, config 0xF5, and the raw ADC values 0xF7-0xFE
(pressure and temperature 20 bits as msb/lsb/xlsb[7:4], humidity 16 bits).
Reads auto-increment the register address; writes are (register, value)
pairs. ctrl_hum only takes effect with the next ctrl_meas write; forced mode
measures once and returns to sleep; a skipped measurement (oversampling 0)
reads 0x80000 / 0x8000.

The sim holds physical values (°C, Pa, %RH). A measurement finds the raw ADC
words that the datasheet's integer compensation formulas (section 4.2.3, the
code every driver ports) turn back into those values, by bisection — the
formulas are monotonic in each ADC value — so any correct driver reads what
the sim holds.
"""

from __future__ import annotations

import struct

from edgeclaw.backends.sim.i2c import SimI2CDevice

CHIP_ID = 0x60
RESET_WORD = 0xB6
REG_CALIB_A = 0x88
REG_CHIP_ID = 0xD0
REG_RESET = 0xE0
REG_CALIB_B = 0xE1
REG_CTRL_HUM = 0xF2
REG_STATUS = 0xF3
REG_CTRL_MEAS = 0xF4
REG_CONFIG = 0xF5
REG_PRESS = 0xF7
REG_TEMP = 0xFA
REG_HUM = 0xFD

SKIPPED_20 = 0x80000
SKIPPED_16 = 0x8000

# Trimming values of a typical part (temperature and pressure: the datasheet's worked example).
CALIBRATION = {
    "T1": 27504, "T2": 26435, "T3": -1000,
    "P1": 36477, "P2": -10685, "P3": 3024, "P4": 2855, "P5": 140,
    "P6": -7, "P7": 15500, "P8": -14600, "P9": 6000,
    "H1": 75, "H2": 362, "H3": 0, "H4": 313, "H5": 50, "H6": 30,
}  # fmt: skip


def _tdiv(a: int, b: int) -> int:
    """C integer division (truncates toward zero), as the datasheet's code does."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def compensate_temperature(adc_t: int, c: dict[str, int]) -> tuple[int, int]:
    """Datasheet 4.2.3: returns (temperature in 0.01 °C, t_fine)."""
    var1 = (((adc_t >> 3) - (c["T1"] << 1)) * c["T2"]) >> 11
    var2 = (((((adc_t >> 4) - c["T1"]) * ((adc_t >> 4) - c["T1"])) >> 12) * c["T3"]) >> 14
    t_fine = var1 + var2
    return (t_fine * 5 + 128) >> 8, t_fine


def compensate_pressure(adc_p: int, t_fine: int, c: dict[str, int]) -> int:
    """Datasheet 4.2.3 (64-bit version): pressure in Pa as Q24.8 (value / 256 = Pa)."""
    var1 = t_fine - 128000
    var2 = var1 * var1 * c["P6"]
    var2 = var2 + ((var1 * c["P5"]) << 17)
    var2 = var2 + (c["P4"] << 35)
    var1 = ((var1 * var1 * c["P3"]) >> 8) + ((var1 * c["P2"]) << 12)
    var1 = (((1 << 47) + var1) * c["P1"]) >> 33
    if var1 == 0:
        return 0  # avoid a division by zero
    p = 1048576 - adc_p
    p = _tdiv(((p << 31) - var2) * 3125, var1)
    var1 = (c["P9"] * (p >> 13) * (p >> 13)) >> 25
    var2 = (c["P8"] * p) >> 19
    return ((p + var1 + var2) >> 8) + (c["P7"] << 4)


def compensate_humidity(adc_h: int, t_fine: int, c: dict[str, int]) -> int:
    """Datasheet 4.2.3: relative humidity as Q22.10 (value / 1024 = %RH)."""
    v = t_fine - 76800
    v = (((adc_h << 14) - (c["H4"] << 20) - (c["H5"] * v)) + 16384) >> 15
    v = v * (
        (
            (
                (
                    ((((t_fine - 76800) * c["H6"]) >> 10) * ((((t_fine - 76800) * c["H3"]) >> 11) + 32768))
                    >> 10
                )
                + 2097152
            )
            * c["H2"]
            + 8192
        )
        >> 14
    )
    v = v - (((((v >> 15) * (v >> 15)) >> 7) * c["H1"]) >> 4)
    v = max(0, min(v, 419430400))
    return v >> 12


def _bisect(fn, target: float, lo: int, hi: int, increasing: bool) -> int:  # type: ignore[no-untyped-def]
    """The integer in [lo, hi] whose fn value is closest to target, for a monotonic fn."""
    a, b = lo, hi
    while b - a > 1:
        mid = (a + b) // 2
        if (fn(mid) < target) == increasing:
            a = mid
        else:
            b = mid
    return min((a, b), key=lambda x: abs(fn(x) - target))


def calibration_bytes(c: dict[str, int]) -> tuple[bytes, bytes]:
    """The calibration registers as laid out in datasheet table 16: (0x88-0xA1, 0xE1-0xE7)."""
    block_a = struct.pack(
        "<HhhHhhhhhhhhxB",
        c["T1"], c["T2"], c["T3"], c["P1"], c["P2"], c["P3"], c["P4"],
        c["P5"], c["P6"], c["P7"], c["P8"], c["P9"], c["H1"],
    )  # fmt: skip
    h4, h5 = c["H4"] & 0xFFF, c["H5"] & 0xFFF
    block_b = struct.pack("<hB", c["H2"], c["H3"]) + bytes(
        (h4 >> 4, (h4 & 0xF) | (h5 & 0xF) << 4, h5 >> 4, c["H6"] & 0xFF)
    )
    return block_a, block_b


class BME280(SimI2CDevice):
    def __init__(
        self,
        temperature_c: float = 22.0,
        pressure_pa: float = 101325.0,
        humidity_pct: float = 45.0,
        calibration: dict[str, int] | None = None,
    ) -> None:
        self.temperature_c = temperature_c
        self.pressure_pa = pressure_pa
        self.humidity_pct = humidity_pct
        self.calibration = dict(calibration or CALIBRATION)
        self.regs = bytearray(256)
        self.pointer = 0
        self._reset()

    def _reset(self) -> None:
        regs = self.regs
        regs[:] = bytes(256)
        block_a, block_b = calibration_bytes(self.calibration)
        regs[REG_CALIB_A : REG_CALIB_A + len(block_a)] = block_a
        regs[REG_CALIB_B : REG_CALIB_B + len(block_b)] = block_b
        regs[REG_CHIP_ID] = CHIP_ID
        self._ctrl_hum_pending = 0
        self._store(SKIPPED_20, SKIPPED_20, SKIPPED_16)

    def _store(self, adc_p: int, adc_t: int, adc_h: int) -> None:
        r = self.regs
        r[REG_PRESS : REG_PRESS + 3] = bytes((adc_p >> 12, (adc_p >> 4) & 0xFF, (adc_p & 0xF) << 4))
        r[REG_TEMP : REG_TEMP + 3] = bytes((adc_t >> 12, (adc_t >> 4) & 0xFF, (adc_t & 0xF) << 4))
        r[REG_HUM : REG_HUM + 2] = bytes((adc_h >> 8, adc_h & 0xFF))

    def raw_values(self) -> tuple[int, int, int]:
        """(adc_P, adc_T, adc_H) that compensate to the held values."""
        c = self.calibration
        adc_t = _bisect(lambda a: compensate_temperature(a, c)[0], self.temperature_c * 100, 0, 0xFFFFF, True)
        t_fine = compensate_temperature(adc_t, c)[1]
        adc_p = _bisect(
            lambda a: compensate_pressure(a, t_fine, c), self.pressure_pa * 256, 0, 0xFFFFF, False
        )
        adc_h = _bisect(
            lambda a: compensate_humidity(a, t_fine, c), self.humidity_pct * 1024, 0, 0xFFFF, True
        )
        return adc_p, adc_t, adc_h

    def _measure(self) -> None:
        ctrl = self.regs[REG_CTRL_MEAS]
        osrs_t, osrs_p = ctrl >> 5, (ctrl >> 2) & 0b111
        osrs_h = self.regs[REG_CTRL_HUM] & 0b111
        filtered = (self.regs[REG_CONFIG] >> 2) & 0b111
        adc_p, adc_t, adc_h = self.raw_values()

        def resolution(adc: int, osrs: int) -> int:
            # Datasheet 3.4.2/3.4.3: 16 bits at x1 up to 20 bits at x16, always 20 with the IIR filter.
            bits = 20 if filtered else min(20, 15 + osrs)
            step = 1 << (20 - bits)
            return min(0xFFFFF, (adc + step // 2)) & ~(step - 1)  # the nearest value at that resolution

        self._store(
            resolution(adc_p, osrs_p) if osrs_p else SKIPPED_20,
            resolution(adc_t, osrs_t) if osrs_t else SKIPPED_20,
            adc_h if osrs_h else SKIPPED_16,
        )

    # -- I2C messages ------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not data:
            return
        self.pointer = data[0]
        # Datasheet 6.2.1: a write is (register, value) pairs; no auto-increment.
        for i in range(0, len(data) - 1, 2):
            self._write_register(data[i], data[i + 1])

    def _write_register(self, register: int, value: int) -> None:
        if register == REG_RESET:
            if value == RESET_WORD:
                self._reset()
        elif register == REG_CTRL_HUM:
            self._ctrl_hum_pending = value & 0b111  # takes effect with the next ctrl_meas write
        elif register == REG_CTRL_MEAS:
            self.regs[REG_CTRL_HUM] = self._ctrl_hum_pending
            self.regs[REG_CTRL_MEAS] = value
            if value & 0b11 in (0b01, 0b10):
                self._measure()  # forced mode: one measurement, then back to sleep
                self.regs[REG_CTRL_MEAS] = value & ~0b11
        elif register == REG_CONFIG:
            self.regs[REG_CONFIG] = value & 0b11111101  # bit 1 is reserved
        # Every other register is read-only.

    def read(self, length: int) -> bytes:
        if self.regs[REG_CTRL_MEAS] & 0b11 == 0b11 and REG_PRESS <= self.pointer <= REG_HUM + 1:
            self._measure()  # normal mode: the data registers always hold a recent measurement
        out = bytearray()
        for _ in range(length):
            out.append(self.regs[self.pointer])
            self.pointer = (self.pointer + 1) & 0xFF
        return bytes(out)
