"""ROHM BH1750FVI ambient light sensor, after its datasheet (BH1750FVI rev. D).

The part has no registers: a write message is one instruction byte, a read
message clocks out the last measurement result, high byte first. The
instructions (datasheet "Instruction Set Architecture"):

    0000_0000 power down          0000_0001 power on          0000_0111 reset (data := 0; power on only)
    0001_0000 continuous H-res    0001_0001 continuous H-res2  0001_0011 continuous L-res
    0010_0000 one time H-res      0010_0001 one time H-res2    0010_0011 one time L-res
    01000_MT[7:5] measurement time, high bits      011_MT[4:0] measurement time, low bits

The count is lx * 1.2 * (MTreg / 69) in H-resolution mode (1 lx steps at the
default MTreg of 69), twice that in H-resolution mode 2 (0.5 lx steps), and
in L-resolution mode a 4 lx step (the count's low two bits read 0). A
measurement takes 120 ms typical, 180 ms at most in the H modes and 16 / 24 ms
in L mode, scaled by MTreg / 69; until it finishes a read returns the
previous result (0 after power on or reset). A one-time measurement drops the
part back to power down when it is done. Time comes from an injectable clock,
so tests can step it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edgeclaw.backends.sim.i2c import SimI2CDevice

POWER_DOWN = 0x00
POWER_ON = 0x01
RESET = 0x07
CONTINUOUS_H = 0x10
CONTINUOUS_H2 = 0x11
CONTINUOUS_L = 0x13
ONE_TIME_H = 0x20
ONE_TIME_H2 = 0x21
ONE_TIME_L = 0x23
MODES = (CONTINUOUS_H, CONTINUOUS_H2, CONTINUOUS_L, ONE_TIME_H, ONE_TIME_H2, ONE_TIME_L)
MT_DEFAULT = 69
MT_MIN, MT_MAX = 31, 254
# The measurement time used by the sim: the datasheet's typical figure (the drivers wait for the maximum).
TYPICAL_TIME_S = {"H": 0.120, "L": 0.016}


def resolution(mode: int) -> str:
    return "L" if mode & 0x0F == 0x03 else "H"


class BH1750(SimI2CDevice):
    def __init__(self, illuminance_lx: float = 320.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.illuminance_lx = illuminance_lx
        self._clock = clock
        self.powered = False  # the part powers up in power-down mode
        self.mode: int | None = None  # the measurement instruction being carried out
        self.mtreg = MT_DEFAULT
        self.data = 0
        self._ready_at = 0.0  # when the measurement under way finishes

    def count(self, mode: int) -> int:
        """The 16-bit result a measurement in `mode` gives for the held illuminance."""
        counts = self.illuminance_lx * 1.2 * self.mtreg / MT_DEFAULT
        if mode & 0x0F == 0x01:
            counts *= 2  # H-resolution mode 2: 0.5 lx per count
        value = max(0, min(0xFFFF, int(counts)))
        if resolution(mode) == "L":
            value &= ~0b11  # 4 lx steps
        return value

    def _measurement_time(self, mode: int) -> float:
        return TYPICAL_TIME_S[resolution(mode)] * self.mtreg / MT_DEFAULT

    def _settle(self) -> None:
        """Finish the measurement under way if its time has come."""
        if self.mode is None or self._clock() < self._ready_at:
            return
        self.data = self.count(self.mode)
        if self.mode in (ONE_TIME_H, ONE_TIME_H2, ONE_TIME_L):
            self.mode = None
            self.powered = False  # "it automatically sets to Power Down mode after measurement"
        else:
            self._ready_at = self._clock() + self._measurement_time(self.mode)

    def write(self, data: bytes) -> None:
        self._settle()
        for op in data:  # each byte is one instruction
            self._instruction(op)

    def _instruction(self, op: int) -> None:
        if op == POWER_DOWN:
            self.powered, self.mode = False, None
        elif op == POWER_ON:
            self.powered = True
        elif op == RESET:
            if self.powered:  # "Reset command is not acceptable in Power Down mode"
                self.data = 0
        elif op in MODES:
            self.powered, self.mode = True, op
            self._ready_at = self._clock() + self._measurement_time(op)
        elif op >> 3 == 0b01000:
            self.mtreg = (self.mtreg & 0x1F) | (op & 0b111) << 5
        elif op >> 5 == 0b011:
            self.mtreg = (self.mtreg & 0xE0) | (op & 0x1F)
        # Any other byte is not an instruction: ignored. MTreg is kept as written, as the part
        # does (the datasheet specifies 31..254; drivers stay inside it).

    def read(self, length: int) -> bytes:
        self._settle()
        pair = bytes((self.data >> 8, self.data & 0xFF))
        return (pair * (length // 2 + 1))[:length]
