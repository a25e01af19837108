"""Sensirion SHT3x (SHT30/31/35) and SHT4x (SHT40/41/45) humidity and temperature sensors.

After their datasheets (SHT3x-DIS v7, SHT4x v6.6). Both take 16-bit (SHT3x) or
8-bit (SHT4x) commands and answer a measurement with six bytes: the temperature
word, its CRC, the humidity word, its CRC (CRC-8, polynomial 0x31, init 0xFF).

SHT3x single shot (datasheet 4.3, table 9): 0x2400 / 0x240B / 0x2416 (high,
medium, low repeatability, no clock stretching; 15.5 / 6.5 / 4.5 ms at most)
and 0x2C06 / 0x2C0D / 0x2C10 (clock stretching: the part holds SCL until done,
which the sim answers at once). Until a no-stretching measurement is done the
part does not acknowledge a read header (4.3). T = -45 + 175 * S_T / 65535 °C,
RH = 100 * S_RH / 65535 %RH (4.13). Also the status register (0xF32D: its word
and CRC), clear status (0x3041), soft reset (0x30A2) and the heater (on 0x306D,
off 0x3066; status bit 13).

SHT4x (datasheet 4.5, table 7): 0xFD / 0xF6 / 0xE0 measure at high / medium /
low repeatability (8.3 / 4.5 / 1.7 ms at most), 0x89 the serial number (two
words), 0x94 soft reset; a read before the measurement is done is not
acknowledged. T = -45 + 175 * S_T / 65535 °C, RH = -6 + 125 * S_RH / 65535
%RH, which the driver clips to 0-100 (4.6).

Time comes from an injectable clock, so tests can step it.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Callable

from edgeclaw.backends.sim.crc import with_crc
from edgeclaw.backends.sim.i2c import SimI2CDevice

SHT3X_SINGLE_SHOT = {0x2400: 0.0155, 0x240B: 0.0065, 0x2416: 0.0045}  # no clock stretching
SHT3X_STRETCHED = (0x2C06, 0x2C0D, 0x2C10)
SHT3X_STATUS, SHT3X_CLEAR_STATUS, SHT3X_RESET = 0xF32D, 0x3041, 0x30A2
SHT3X_HEATER_ON, SHT3X_HEATER_OFF = 0x306D, 0x3066
HEATER_BIT = 1 << 13
RESET_BIT = 1 << 4  # "system reset detected", set after power-up and every reset

SHT4X_MEASURE = {0xFD: 0.0083, 0xF6: 0.0045, 0xE0: 0.0017}
SHT4X_SERIAL, SHT4X_RESET = 0x89, 0x94


def _count(value: float, low: float, span: float) -> int:
    return max(0, min(0xFFFF, round((value - low) * 65535 / span)))


class _NotReady(OSError):
    def __init__(self) -> None:
        super().__init__(errno.EREMOTEIO, os.strerror(errno.EREMOTEIO))


class _Sensirion(SimI2CDevice):
    def __init__(
        self, temperature_c: float, humidity_pct: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.temperature_c = temperature_c
        self.humidity_pct = humidity_pct
        self._clock = clock
        self._ready_at = 0.0
        self._out = b""  # what the next read message clocks out

    def _measurement(self) -> bytes:
        raise NotImplementedError

    def _start(self, duration_s: float) -> None:
        self._ready_at = self._clock() + duration_s
        self._out = self._measurement()

    def read(self, length: int) -> bytes:
        if self._clock() < self._ready_at:
            raise _NotReady()  # the read header is not acknowledged while the part measures
        out, self._out = self._out, b""
        return (out + b"\xff" * length)[:length]


class SHT3x(_Sensirion):
    def __init__(
        self,
        temperature_c: float = 18.0,
        humidity_pct: float = 62.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(temperature_c, humidity_pct, clock)
        self.status = RESET_BIT

    def _measurement(self) -> bytes:
        t = _count(self.temperature_c, -45.0, 175.0)
        rh = _count(self.humidity_pct, 0.0, 100.0)
        return with_crc(t) + with_crc(rh)

    def write(self, data: bytes) -> None:
        if len(data) < 2:
            return  # a quick write: the address alone
        command = data[0] << 8 | data[1]
        if command in SHT3X_SINGLE_SHOT:
            self._start(SHT3X_SINGLE_SHOT[command])
        elif command in SHT3X_STRETCHED:
            self._start(0.0)  # SCL is held until the result is there: ready when the read begins
        elif command == SHT3X_STATUS:
            self._out = with_crc(self.status)
        elif command == SHT3X_CLEAR_STATUS:
            self.status &= ~RESET_BIT
        elif command == SHT3X_RESET:
            self.status = RESET_BIT
            self._out = b""
        elif command == SHT3X_HEATER_ON:
            self.status |= HEATER_BIT
        elif command == SHT3X_HEATER_OFF:
            self.status &= ~HEATER_BIT


class SHT4x(_Sensirion):
    def __init__(
        self,
        temperature_c: float = 12.0,
        humidity_pct: float = 80.0,
        serial: int = 0x1234_5678,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(temperature_c, humidity_pct, clock)
        self.serial = serial

    def _measurement(self) -> bytes:
        t = _count(self.temperature_c, -45.0, 175.0)
        rh = _count(self.humidity_pct, -6.0, 125.0)
        return with_crc(t) + with_crc(rh)

    def write(self, data: bytes) -> None:
        if not data:
            return
        command = data[0]
        if command in SHT4X_MEASURE:
            self._start(SHT4X_MEASURE[command])
        elif command == SHT4X_SERIAL:
            self._ready_at = self._clock() + 0.001
            self._out = with_crc(self.serial >> 16) + with_crc(self.serial & 0xFFFF)
        elif command == SHT4X_RESET:
            self._out = b""
