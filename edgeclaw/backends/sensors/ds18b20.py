"""Maxim DS18B20 1-Wire thermometer, read through the kernel's w1_therm driver.

The kernel does the 1-Wire protocol (reset, ROM match, Convert T, Read
Scratchpad) when `<root>/<id>/w1_slave` is read, and prints the nine
scratchpad bytes, its CRC verdict and a temperature. We do not take its word:
the CRC (Dallas/Maxim CRC-8, x^8 + x^5 + x^4 + 1, reflected, application note
27) is checked again over the bytes, and the temperature is worked out from
the scratchpad at the resolution its configuration byte states (datasheet
figure 7, table 1), with the kernel's `t=` as a cross-check. A scratchpad of
all zeros passes the CRC but is a bus with nobody answering; +85 °C with the
power-on reserved byte is a conversion that never ran (a weak pull-up or
parasite power), and both are reported, not returned as temperatures.
"""

from __future__ import annotations

import re

from edgeclaw.backends.sensors.base import ErrorKind, OneWireSensor, Reading
from edgeclaw.records import dataclass

POWER_ON_COUNT = 0x0550  # +85 °C, the temperature register before the first conversion
POWER_ON_RESERVED = 0x0C
_LINE1 = re.compile(r"^((?:[0-9a-f]{2} ){9}): crc=([0-9a-f]{2}) (YES|NO)$")
_LINE2 = re.compile(r"^((?:[0-9a-f]{2} ){9})t=(-?\d+)$")


def maxim_crc8(data: bytes) -> int:
    """The Dallas/Maxim 1-Wire CRC-8 (polynomial 0x31 reflected = 0x8C, initial value 0)."""
    crc = 0
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x8C if crc & 1 else crc >> 1
    return crc


class W1SlaveError(ValueError):
    """The `w1_slave` text is not a good reading; the message says what is wrong with it."""

    def __init__(self, message: str, *, kind: str, raw: bytes = b"") -> None:
        super().__init__(message)
        self.kind = kind  # "crc", "no_answer", "format", "not_converted"
        self.raw = raw


@dataclass(frozen=True)
class ScratchpadReading:
    temperature_c: float
    resolution_bits: int
    scratchpad: bytes  # the nine bytes, for the audit trail


def resolution_bits(config: int) -> int:
    """The configuration register's R1 R0 (bits 6:5): 9 to 12 bits."""
    return 9 + ((config >> 5) & 0b11)


def scratchpad_temperature(scratchpad: bytes) -> float:
    """°C from the temperature register, ignoring the bits the configured resolution leaves undefined."""
    bits = resolution_bits(scratchpad[4])
    count = int.from_bytes(scratchpad[0:2], "little", signed=True)
    count &= ~((1 << (12 - bits)) - 1)
    return count / 16


def parse_w1_slave(text: str) -> ScratchpadReading:
    """A `w1_slave` file's text → the reading, or `W1SlaveError` saying why it is not one."""
    lines = text.strip().splitlines()
    if not lines:
        raise W1SlaveError("the sensor did not answer (the kernel read nothing)", kind="no_answer")
    match1 = _LINE1.match(lines[0].strip())
    match2 = _LINE2.match(lines[1].strip()) if len(lines) > 1 else None
    if match1 is None or match2 is None:
        raise W1SlaveError(f"unexpected w1_slave text: {text[:120]!r}", kind="format")
    raw = bytes.fromhex(match1.group(1))
    if raw == bytes(9):
        raise W1SlaveError(
            "the sensor did not answer (the scratchpad reads all zeros)", kind="no_answer", raw=raw
        )
    crc = maxim_crc8(raw[:8])
    if crc != raw[8] or match1.group(3) != "YES":
        raise W1SlaveError(
            f"CRC mismatch: the scratchpad's CRC byte is 0x{raw[8]:02x}, its bytes give 0x{crc:02x}"
            " (noise on the 1-Wire line, or a missing pull-up)",
            kind="crc",
            raw=raw,
        )
    if int.from_bytes(raw[0:2], "little") == POWER_ON_COUNT and raw[6] == POWER_ON_RESERVED:
        raise W1SlaveError(
            "the scratchpad still holds its power-on value (85 °C): the conversion did not run"
            " (a weak pull-up, or parasite power without a strong pull-up)",
            kind="not_converted",
            raw=raw,
        )
    temperature = scratchpad_temperature(raw)
    kernel_mc = int(match2.group(2))
    # The kernel's t= is the full 16-bit count in millidegrees; it agrees with ours within the
    # undefined low bits of a coarser resolution (< 1/2 °C), and anything further off is not a
    # reading of these bytes.
    if abs(kernel_mc / 1000 - temperature) > 0.5:
        raise W1SlaveError(
            f"the kernel's t={kernel_mc} does not match the scratchpad ({temperature:g} °C)",
            kind="format",
            raw=raw,
        )
    return ScratchpadReading(temperature, resolution_bits(raw[4]), raw)


class DS18B20Driver(OneWireSensor):
    async def read(self) -> Reading:
        text = (await self.read_file("w1_slave")).decode("ascii", "replace")
        try:
            found = parse_w1_slave(text)
        except W1SlaveError as e:
            kind: ErrorKind = {"crc": "crc", "no_answer": "nack"}.get(e.kind, "bad_data")  # type: ignore[assignment]
            raise self.fail(kind, str(e)) from None
        return self.reading({"temperature": found.temperature_c}, found.scratchpad)
