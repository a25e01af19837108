"""Maxim DS18B20 programmable-resolution 1-Wire digital thermometer, after its datasheet (19-7487).

The part's 9-byte scratchpad (figure 7): temperature LSB and MSB (a signed
count of 1/16 °C; at 9-, 10- and 11-bit resolution bits 2:0, 1:0 and 0 are
undefined — the sim leaves them 0), the alarm thresholds TH and TL (EEPROM
copies, power-up 0x4B = 75 °C and 0x46 = 70 °C as shipped), the configuration
register (bits 6:5 R1 R0: 0x1F, 0x3F, 0x5F, 0x7F for 9 to 12 bits; 12 bits
as shipped), 0xFF, a reserved byte (0x0C at power-up; genuine parts then
give 0x10 minus the count's low four bits, like the DS18S20's COUNT_REMAIN),
0x10, and the CRC of the first eight bytes (the Dallas/Maxim CRC-8,
x^8 + x^5 + x^4 + 1, application note 27). Until a conversion has run the
temperature register holds its power-on value, +85 °C (0x0550).
"""

from __future__ import annotations

from collections.abc import Callable

from edgeclaw.backends.sensors.ds18b20 import maxim_crc8

FAMILY = 0x28
POWER_ON_COUNT = 0x0550  # +85 °C
CONFIG_FOR_BITS = {9: 0x1F, 10: 0x3F, 11: 0x5F, 12: 0x7F}


class DS18B20:
    def __init__(
        self,
        w1_id: str = "28-00000a1b2c3d",
        temperature_c: float = 19.5,
        resolution_bits: int = 12,
        th: int = 0x4B,
        tl: int = 0x46,
    ) -> None:
        if not w1_id.startswith(f"{FAMILY:02x}-"):
            raise ValueError(f"a DS18B20's 1-Wire id starts with {FAMILY:02x}-, got {w1_id!r}")
        self.w1_id = w1_id
        self._temperature_c = temperature_c
        self.resolution_bits = resolution_bits
        self.th, self.tl = th, tl
        self.converted = True  # False: the scratchpad still holds the power-on +85 °C
        self.on_change: Callable[[], None] | None = None

    @property
    def temperature_c(self) -> float:
        return self._temperature_c

    @temperature_c.setter
    def temperature_c(self, value: float) -> None:
        self._temperature_c = value
        if self.on_change is not None:
            self.on_change()

    def count(self) -> int:
        """The temperature register: 1/16 °C steps, the undefined low bits of coarser resolutions 0."""
        if not self.converted:
            return POWER_ON_COUNT
        count = max(-55 * 16, min(125 * 16, round(self._temperature_c * 16)))
        return count & ~((1 << (12 - self.resolution_bits)) - 1)

    def scratchpad(self) -> bytes:
        count = self.count() & 0xFFFF
        lsb, msb = count & 0xFF, count >> 8
        reserved = 0x0C if not self.converted else (0x10 - (lsb & 0x0F)) & 0xFF
        body = bytes(
            (lsb, msb, self.th, self.tl, CONFIG_FOR_BITS[self.resolution_bits], 0xFF, reserved, 0x10)
        )
        return body + bytes((maxim_crc8(body),))

    @staticmethod
    def crc_of(data: bytes) -> int:
        return maxim_crc8(data)
