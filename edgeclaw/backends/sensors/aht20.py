"""Aosong AHT20: temperature and humidity, after its datasheet (AHT20 v1.1, 5.3-5.5).

A read: the status byte first; if CAL enable (bit 3) is clear, the part is
initialised (0xBE 0x08 0x00, then 10 ms). Then a measurement is triggered (0xAC
0x33 0x00), and after 80 ms seven bytes are read: status, humidity (20 bits),
temperature (20 bits), CRC-8 (polynomial 0x31, init 0xFF) of the first six. If
the status still says busy (bit 7), the driver waits and reads again a few
times before giving up. RH = S_RH / 2^20 * 100 %RH, T = S_T / 2^20 * 200 - 50 °C.
"""

from __future__ import annotations

from edgeclaw.backends.sensors.base import I2CSensor, Reading

INIT = bytes((0xBE, 0x08, 0x00))
TRIGGER = bytes((0xAC, 0x33, 0x00))
BUSY, CALIBRATED = 0x80, 0x08
INIT_S, MEASURE_S, RETRY_S, RETRIES = 0.010, 0.080, 0.010, 5
FULL_SCALE = 1 << 20


class AHT20Driver(I2CSensor):
    async def read(self) -> Reading:
        async with self.transaction() as t:
            if not (await t.read(1))[0] & CALIBRATED:
                await t.write(INIT)
                await t.wait(INIT_S)
            await t.write(TRIGGER)
            await t.wait(MEASURE_S)
            for _ in range(RETRIES):
                raw = await t.read(7)
                if not raw[0] & BUSY:
                    break
                await t.wait(RETRY_S)
            else:
                raise self.fail("timeout", "the part stayed busy (status bit 7) after its measurement time")
        self.check_crc("measurement", raw[:6], raw[6])
        if not raw[0] & CALIBRATED:
            raise self.fail("bad_data", "the part is not calibrated (status bit 3 clear after initialising)")
        s_rh = raw[1] << 12 | raw[2] << 4 | raw[3] >> 4
        s_t = (raw[3] & 0x0F) << 16 | raw[4] << 8 | raw[5]
        return self.reading(
            {"temperature": s_t / FULL_SCALE * 200 - 50, "humidity": s_rh / FULL_SCALE * 100}, raw
        )
