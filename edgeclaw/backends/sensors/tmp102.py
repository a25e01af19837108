"""TI TMP102 (datasheet SBOS397): the temperature register in degrees Celsius.

Register 0x00 holds the last conversion, MSB first: a 12-bit two's-complement
count of 0.0625 °C in bits 15..4 (bit 0 = 0), or in extended mode (EM = 1) a
13-bit count in bits 15..3 with bit 0 = 1 (datasheet 7.5.1, tables 5-8). The part
converts continuously at power-up (4 Hz), so a read needs no command: the pointer
write and the two-byte read of one combined transfer.
"""

from __future__ import annotations

from edgeclaw.backends.sensors.base import I2CSensor, Reading

REG_TEMPERATURE = 0x00
LSB_C = 0.0625


def temperature_c(msb: int, lsb: int) -> float:
    """The temperature register's two bytes -> °C, in either mode (told apart by bit 0)."""
    register = msb << 8 | lsb
    if register & 1:  # extended mode: 13 bits
        count = register >> 3
        if count & 0x1000:
            count -= 0x2000
    else:
        count = register >> 4
        if count & 0x800:
            count -= 0x1000
    return count * LSB_C


class TMP102Driver(I2CSensor):
    async def read(self) -> Reading:
        async with self.transaction() as t:
            raw = await t.read_register(REG_TEMPERATURE, 2)
        return self.reading({"temperature": temperature_c(raw[0], raw[1])}, raw)
