"""TE Connectivity HTU21D(F) humidity and temperature sensor, after its datasheet (HPC199_6).

Commands are single bytes: 0xE3 / 0xE5 measure temperature / humidity holding
the master (SCL stretched until done: ready when the read begins), 0xF3 / 0xF5
the same without holding (the part does not acknowledge a read header until
the measurement is done: 50 ms for 14-bit temperature, 16 ms for 12-bit
humidity at most), 0xE7 / 0xE6 read / write the user register (resolution,
heater; reset value 0x02), 0xFE soft reset (15 ms).

A measurement reads as MSB, LSB, checksum: the two low bits of LSB are status
(bit 1: 0 = temperature, 1 = humidity) and are zero in the value; the checksum
is CRC-8 with polynomial 0x31 and init 0x00. T = -46.85 + 175.72 * S / 2^16 °C,
RH = -6 + 125 * S / 2^16 %RH. Time comes from an injectable clock.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

from edgeclaw.backends.sim.crc import with_crc
from edgeclaw.backends.sim.i2c import SimI2CDevice

TEMP_HOLD, HUM_HOLD, TEMP_NO_HOLD, HUM_NO_HOLD = 0xE3, 0xE5, 0xF3, 0xF5
READ_USER, WRITE_USER, SOFT_RESET = 0xE7, 0xE6, 0xFE
USER_RESET_VALUE = 0x02
TEMP_TIME_S, HUM_TIME_S = 0.050, 0.016


class HTU21D(SimI2CDevice):
    def __init__(
        self,
        temperature_c: float = 14.0,
        humidity_pct: float = 70.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.temperature_c = temperature_c
        self.humidity_pct = humidity_pct
        self._clock = clock
        self.user = USER_RESET_VALUE
        self._ready_at = 0.0
        self._out = b""

    def _measure(self, humidity: bool, duration_s: float) -> None:
        if humidity:
            count = round((self.humidity_pct + 6) / 125 * 65536)
        else:
            count = round((self.temperature_c + 46.85) / 175.72 * 65536)
        word = (max(0, min(0xFFFF, count)) & 0xFFFC) | (0b10 if humidity else 0b00)
        self._out = with_crc(word, init=0x00)
        self._ready_at = self._clock() + duration_s

    def write(self, data: bytes) -> None:
        if not data:
            return
        command = data[0]
        if command in (TEMP_HOLD, TEMP_NO_HOLD):
            self._measure(False, 0.0 if command == TEMP_HOLD else TEMP_TIME_S)
        elif command in (HUM_HOLD, HUM_NO_HOLD):
            self._measure(True, 0.0 if command == HUM_HOLD else HUM_TIME_S)
        elif command == READ_USER:
            self._out = bytes((self.user,))
        elif command == WRITE_USER and len(data) > 1:
            self.user = (data[1] & 0b1100_0111) | (self.user & 0b0011_1000)  # bits 3-5 are reserved
        elif command == SOFT_RESET:
            self.user = USER_RESET_VALUE
            self._ready_at = self._clock() + 0.015

    def read(self, length: int) -> bytes:
        if self._clock() < self._ready_at:
            raise OSError(errno.EREMOTEIO, os.strerror(errno.EREMOTEIO))
        out, self._out = self._out, b""
        return (out + b"\x00" * length)[:length]
