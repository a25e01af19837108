"""Aosong AHT20 humidity and temperature sensor, after its datasheet (AHT20 v1.1, sections 5.3-5.5).

No registers: commands are write messages, and a read message clocks out the
status byte and, after a measurement, the data. Commands: 0xBE 0x08 0x00
(initialise: loads the calibration, sets CAL enable, status bit 3), 0xAC 0x33
0x00 (trigger a measurement: the part is busy, status bit 7, for up to 80 ms),
0xBA (soft reset, 20 ms), 0x71 (get status: the next read starts with it).

A read clocks out the status byte, then humidity (20 bits), temperature (20
bits) packed into five bytes, then a CRC-8 (polynomial 0x31, init 0xFF) of the
six bytes before it: RH = S_RH / 2^20 * 100 %RH, T = S_T / 2^20 * 200 - 50 °C.
While busy the part answers with its status (bit 7 set) and the previous data.
Time comes from an injectable clock, so tests can step it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edgeclaw.backends.sim.crc import crc8
from edgeclaw.backends.sim.i2c import SimI2CDevice

INIT = bytes((0xBE, 0x08, 0x00))
TRIGGER = bytes((0xAC, 0x33, 0x00))
SOFT_RESET = 0xBA
GET_STATUS = 0x71
BUSY = 0x80
CALIBRATED = 0x08
POWER_UP_STATUS = 0x18  # CAL enable (bit 3) and bit 4, as read from a fresh part
MEASUREMENT_S = 0.080


class AHT20(SimI2CDevice):
    def __init__(
        self,
        temperature_c: float = 16.0,
        humidity_pct: float = 55.0,
        calibrated: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.temperature_c = temperature_c
        self.humidity_pct = humidity_pct
        self._clock = clock
        self.status = POWER_UP_STATUS if calibrated else POWER_UP_STATUS & ~CALIBRATED
        self._ready_at = 0.0
        self._data = bytes(5)
        self._pending: bytes | None = None  # the measurement under way, shown once it is done
        self.triggers = 0

    def _busy(self) -> bool:
        return self._clock() < self._ready_at

    def write(self, data: bytes) -> None:
        if data[:3] == INIT:
            self.status |= CALIBRATED
        elif data[:3] == TRIGGER:
            self.triggers += 1
            self._ready_at = self._clock() + MEASUREMENT_S
            rh = max(0, min(0xFFFFF, round(self.humidity_pct / 100 * (1 << 20))))
            t = max(0, min(0xFFFFF, round((self.temperature_c + 50) / 200 * (1 << 20))))
            self._pending = bytes(
                (rh >> 12, rh >> 4 & 0xFF, (rh & 0xF) << 4 | t >> 16, t >> 8 & 0xFF, t & 0xFF)
            )
        elif data[:1] == bytes((SOFT_RESET,)):
            self.status = POWER_UP_STATUS
            self._ready_at = self._clock() + 0.020

    def read(self, length: int) -> bytes:
        if self._busy():
            status = self.status | BUSY
        else:
            status = self.status & ~BUSY
            if self._pending is not None:
                self._data, self._pending = self._pending, None
        frame = bytes((status,)) + self._data
        frame += bytes((crc8(frame),))
        return (frame + b"\xff" * length)[:length]
