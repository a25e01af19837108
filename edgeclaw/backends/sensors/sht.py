"""Sensirion SHT3x (SHT3x-DIS) and SHT4x: temperature and humidity, every word CRC-checked.

SHT3x: single shot, high repeatability, no clock stretching (command 0x2400,
datasheet table 9): the part measures for at most 15.5 ms and does not
acknowledge a read until it is done, so the driver waits that long and then
reads six bytes — temperature word, CRC, humidity word, CRC (CRC-8, polynomial
0x31, init 0xFF, 4.12). T = -45 + 175 * S_T / (2^16 - 1) °C, RH = 100 * S_RH /
(2^16 - 1) %RH (4.13). Clock stretching is avoided on purpose: not every I2C
adapter (the Raspberry Pi's among them) handles it reliably.

SHT4x: command 0xFD (measure T and RH with high precision, at most 8.3 ms), the
same six-byte answer and CRC; T = -45 + 175 * S_T / 65535 °C, RH = -6 + 125 *
S_RH / 65535 %RH, clipped to 0-100 as the datasheet says (4.6: values outside
are physically meaningless).
"""

from __future__ import annotations

from edgeclaw.backends.sensors.base import I2CSensor, Reading

SHT3X_SINGLE_SHOT_HIGH = bytes((0x24, 0x00))
SHT3X_MEASURE_S = 0.0155
SHT4X_MEASURE_HIGH = bytes((0xFD,))
SHT4X_MEASURE_S = 0.0083
FULL_SCALE = 65535


class _Sensirion(I2CSensor):
    command = b""
    measure_s = 0.0

    def words(self, raw: bytes) -> tuple[int, int]:
        """The temperature and humidity words, each checked against its CRC."""
        self.check_crc("temperature word", raw[0:2], raw[2])
        self.check_crc("humidity word", raw[3:5], raw[5])
        return raw[0] << 8 | raw[1], raw[3] << 8 | raw[4]

    async def measure(self) -> bytes:
        async with self.transaction() as t:
            await t.write(self.command)
            await t.wait(self.measure_s)
            return await t.read(6)


class SHT3xDriver(_Sensirion):
    command = SHT3X_SINGLE_SHOT_HIGH
    measure_s = SHT3X_MEASURE_S

    async def read(self) -> Reading:
        raw = await self.measure()
        s_t, s_rh = self.words(raw)
        return self.reading(
            {"temperature": -45 + 175 * s_t / FULL_SCALE, "humidity": 100 * s_rh / FULL_SCALE}, raw
        )


class SHT4xDriver(_Sensirion):
    command = SHT4X_MEASURE_HIGH
    measure_s = SHT4X_MEASURE_S

    async def read(self) -> Reading:
        raw = await self.measure()
        s_t, s_rh = self.words(raw)
        humidity = min(100.0, max(0.0, -6 + 125 * s_rh / FULL_SCALE))
        return self.reading({"temperature": -45 + 175 * s_t / FULL_SCALE, "humidity": humidity}, raw)
