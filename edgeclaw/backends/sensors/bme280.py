"""Bosch BME280 (BST-BME280-DS002) and BMP280 (BST-BMP280-DS001): compensated T, p and RH.

A read is one forced-mode measurement at 1x oversampling (datasheet 3.5.1,
"weather monitoring"): ctrl_hum (0xF2) = 0x01 — it takes effect with the next
ctrl_meas write, so it is written first — then ctrl_meas (0xF4) = 0x25 (osrs_t
1x, osrs_p 1x, forced mode). The measurement takes at most 1.25 + 2.3 * 3 +
0.575 * 2 = 9.3 ms (9.1, t_measure,max); the driver waits that long, then polls
status (0xF3) bit 3 "measuring" until it clears, then reads the data registers
in one burst (4.1: so they come from one measurement): 0xF7-0xFE on a BME280
(pressure and temperature 20 bits as msb/lsb/xlsb[7:4], humidity 16 bits),
0xF7-0xFC on a BMP280.

The trimming parameters (0x88-0xA1, and the BME280's 0xE1-0xE7, laid out as in
table 16 / 17) are read once, after the chip id (0xD0: 0x60 for the BME280,
0x58 for the BMP280) confirms which part answers. The compensation is the
datasheet's integer code (4.2.3 / 3.11.3): temperature in 0.01 °C and
t_fine, pressure with 64-bit intermediates as Q24.8 Pa, humidity as Q22.10
%RH, ported as written (C's shifts are arithmetic, its divisions truncate).
"""

from __future__ import annotations

import struct

from edgeclaw.backends.sensors.base import I2CPartTransaction, I2CSensor, Reading
from edgeclaw.records import dataclass

REG_CALIB_A, CALIB_A_LEN = 0x88, 26
REG_CALIB_B, CALIB_B_LEN = 0xE1, 7
REG_CHIP_ID = 0xD0
REG_CTRL_HUM, REG_STATUS, REG_CTRL_MEAS = 0xF2, 0xF3, 0xF4
REG_DATA = 0xF7
STATUS_MEASURING = 0x08
CTRL_HUM_X1 = 0x01
CTRL_MEAS_FORCED_X1 = 0b001_001_01  # osrs_t x1, osrs_p x1, forced mode
MEASURE_MAX_S = 0.0093
POLL_S, POLL_LIMIT = 0.002, 20
SKIPPED_20 = 0x80000  # a measurement that was skipped (datasheet 5.4.7): no data


@dataclass(frozen=True)
class Trimming:
    T1: int
    T2: int
    T3: int
    P1: int
    P2: int
    P3: int
    P4: int
    P5: int
    P6: int
    P7: int
    P8: int
    P9: int
    H1: int = 0
    H2: int = 0
    H3: int = 0
    H4: int = 0
    H5: int = 0
    H6: int = 0


def parse_trimming(block_a: bytes, block_b: bytes = b"") -> Trimming:
    """Datasheet table 16: 0x88-0x9F as T1 (u16), T2, T3, P1 (u16), P2-P9 (s16), little-endian;
    0xA1 H1 (u8); 0xE1 H2 (s16), 0xE3 H3 (u8), 0xE4-0xE6 H4 and H5 (s12, sharing 0xE5), 0xE7 H6 (s8)."""
    t1, t2, t3, p1, p2, p3, p4, p5, p6, p7, p8, p9 = struct.unpack_from("<HhhHhhhhhhhh", block_a)
    if not block_b:
        return Trimming(t1, t2, t3, p1, p2, p3, p4, p5, p6, p7, p8, p9)
    h1 = block_a[25]
    h2, h3 = struct.unpack_from("<hB", block_b)
    e4, e5, e6 = block_b[3], block_b[4], block_b[5]
    h4 = (struct.unpack("b", bytes((e4,)))[0] << 4) | (e5 & 0x0F)
    h5 = (struct.unpack("b", bytes((e6,)))[0] << 4) | (e5 >> 4)
    h6 = struct.unpack("b", bytes((block_b[6],)))[0]
    return Trimming(t1, t2, t3, p1, p2, p3, p4, p5, p6, p7, p8, p9, h1, h2, h3, h4, h5, h6)


def _div(a: int, b: int) -> int:
    """C's integer division: truncates toward zero."""
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def temperature(adc_t: int, c: Trimming) -> tuple[int, int]:
    """(temperature in 0.01 °C, t_fine), datasheet BME280_compensate_T_int32."""
    var1 = (((adc_t >> 3) - (c.T1 << 1)) * c.T2) >> 11
    var2 = (((((adc_t >> 4) - c.T1) * ((adc_t >> 4) - c.T1)) >> 12) * c.T3) >> 14
    t_fine = var1 + var2
    return (t_fine * 5 + 128) >> 8, t_fine


def pressure_q24_8(adc_p: int, t_fine: int, c: Trimming) -> int:
    """Pressure in Pa as Q24.8 (value / 256 = Pa), datasheet BME280_compensate_P_int64; 0 = undefined."""
    var1 = t_fine - 128000
    var2 = var1 * var1 * c.P6
    var2 += (var1 * c.P5) << 17
    var2 += c.P4 << 35
    var1 = ((var1 * var1 * c.P3) >> 8) + ((var1 * c.P2) << 12)
    var1 = (((1 << 47) + var1) * c.P1) >> 33
    if var1 == 0:
        return 0
    p = 1048576 - adc_p
    p = _div(((p << 31) - var2) * 3125, var1)
    var1 = (c.P9 * (p >> 13) * (p >> 13)) >> 25
    var2 = (c.P8 * p) >> 19
    return ((p + var1 + var2) >> 8) + (c.P7 << 4)


def humidity_q22_10(adc_h: int, t_fine: int, c: Trimming) -> int:
    """Relative humidity as Q22.10 (value / 1024 = %RH), datasheet bme280_compensate_H_int32."""
    v = t_fine - 76800
    v = ((((adc_h << 14) - (c.H4 << 20) - (c.H5 * v)) + 16384) >> 15) * (
        ((((((v * c.H6) >> 10) * (((v * c.H3) >> 11) + 32768)) >> 10) + 2097152) * c.H2 + 8192) >> 14
    )
    v -= ((((v >> 15) * (v >> 15)) >> 7) * c.H1) >> 4
    v = min(max(v, 0), 419430400)
    return v >> 12


class BME280Driver(I2CSensor):
    chip_id = 0x60
    humidity = True
    trimming: Trimming | None = None  # read on the first measurement; fixed in the part's NVM

    async def _trimming(self, t: I2CPartTransaction) -> Trimming:
        if self.trimming is None:
            chip = (await t.read_register(REG_CHIP_ID, 1))[0]
            if chip != self.chip_id:
                raise self.fail(
                    "bad_data",
                    f"chip id 0x{chip:02x} is not a {self.device.part}'s (0x{self.chip_id:02x}); "
                    "is another part at this address?",
                )
            block_a = await t.read_register(REG_CALIB_A, CALIB_A_LEN)
            block_b = await t.read_register(REG_CALIB_B, CALIB_B_LEN) if self.humidity else b""
            self.trimming = parse_trimming(block_a, block_b)
        return self.trimming

    async def read(self) -> Reading:
        async with self.transaction() as t:
            trimming = await self._trimming(t)
            if self.humidity:
                await t.write(bytes((REG_CTRL_HUM, CTRL_HUM_X1)))
            await t.write(bytes((REG_CTRL_MEAS, CTRL_MEAS_FORCED_X1)))
            await t.wait(MEASURE_MAX_S)
            for _ in range(POLL_LIMIT):
                if not (await t.read_register(REG_STATUS, 1))[0] & STATUS_MEASURING:
                    break
                await t.wait(POLL_S)
            else:
                raise self.fail("timeout", "the measurement did not finish (status bit 3 stayed set)")
            raw = await t.read_register(REG_DATA, 8 if self.humidity else 6)
        adc_p = raw[0] << 12 | raw[1] << 4 | raw[2] >> 4
        adc_t = raw[3] << 12 | raw[4] << 4 | raw[5] >> 4
        if adc_t == SKIPPED_20 or adc_p == SKIPPED_20:
            raise self.fail(
                "bad_data", "the part reports no measurement (data registers at their reset value)"
            )
        centi_c, t_fine = temperature(adc_t, trimming)
        pressure = pressure_q24_8(adc_p, t_fine, trimming)
        if pressure == 0:
            raise self.fail("bad_data", "the pressure compensation is undefined (the trimming reads as zero)")
        values = {"temperature": centi_c / 100, "pressure": pressure / 256 / 100}
        if self.humidity:
            values["humidity"] = humidity_q22_10(raw[6] << 8 | raw[7], t_fine, trimming) / 1024
        return self.reading(values, raw)


class BMP280Driver(BME280Driver):
    chip_id = 0x58
    humidity = False
