"""The CRC-8 the humidity sensors append to each word (x^8 + x^5 + x^4 + 1, MSB first).

Sensirion (SHT3x, SHT4x) and Aosong (AHT20) start it at 0xFF, TE's HTU21D at 0x00.
The sim parts compute it here from the datasheets; the drivers check it with code of their own.
"""

from __future__ import annotations

POLYNOMIAL = 0x31


def crc8(data: bytes, init: int = 0xFF) -> int:
    crc = init
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ POLYNOMIAL) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc


def with_crc(word: int, init: int = 0xFF) -> bytes:
    """A 16-bit word MSB first, followed by its CRC."""
    pair = bytes((word >> 8 & 0xFF, word & 0xFF))
    return pair + bytes((crc8(pair, init),))
