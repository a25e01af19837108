"""TE HTU21D(F) (and Si7021-compatible parts): temperature and humidity, each CRC-checked.

The driver uses the "no hold master" commands (0xF3 temperature, 0xF5
humidity): the part does not acknowledge a read until the conversion is done
(at most 50 ms for 14-bit temperature, 16 ms for 12-bit humidity at the reset
resolution), so it waits that long and reads three bytes: MSB, LSB, checksum
(CRC-8, polynomial 0x31, init 0x00; the datasheet's example 0xDC -> 0x79). The
two low bits of LSB are status — bit 1 tells a humidity answer (1) from a
temperature one (0) — and are cleared before the conversion:
T = -46.85 + 175.72 * S / 2^16 °C, RH = -6 + 125 * S / 2^16 %RH (clipped to 0-100).
"""

from __future__ import annotations

from edgeclaw.backends.sensors.base import I2CPartTransaction, I2CSensor, Reading

TEMP_NO_HOLD, HUM_NO_HOLD = 0xF3, 0xF5
TEMP_S, HUM_S = 0.050, 0.016
HUMIDITY_BIT = 0b10


class HTU21DDriver(I2CSensor):
    async def _measure(self, t: I2CPartTransaction, command: int, seconds: float) -> bytes:
        await t.write(bytes((command,)))
        await t.wait(seconds)
        return await t.read(3)

    def _word(self, what: str, raw: bytes, humidity: bool) -> int:
        self.check_crc(f"{what} word", raw[:2], raw[2], init=0x00)
        if bool(raw[1] & HUMIDITY_BIT) != humidity:
            raise self.fail("bad_data", f"the {what} answer carries the other measurement's status bit")
        return (raw[0] << 8 | raw[1]) & 0xFFFC

    async def read(self) -> Reading:
        async with self.transaction() as t:
            raw_t = await self._measure(t, TEMP_NO_HOLD, TEMP_S)
            raw_h = await self._measure(t, HUM_NO_HOLD, HUM_S)
        s_t = self._word("temperature", raw_t, False)
        s_rh = self._word("humidity", raw_h, True)
        humidity = min(100.0, max(0.0, -6 + 125 * s_rh / 65536))
        return self.reading(
            {"temperature": -46.85 + 175.72 * s_t / 65536, "humidity": humidity}, raw_t + raw_h
        )
