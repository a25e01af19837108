"""TI ADS1115 16-bit 4-channel delta-sigma ADC, after its datasheet (SBAS444).

Four 16-bit registers behind a 2-bit address pointer (section 9.6): 00
conversion (read-only, two's complement), 01 config, 10 Lo_thresh, 11
Hi_thresh, all sent MSB first; a write message is [pointer] (select) or
[pointer, MSB, LSB]. The config register (table 8, reset 0x8583):

    15 OS         write 1: start a single conversion; read 0 while converting, 1 when idle
    14:12 MUX     000 AIN0-AIN1, 001 AIN0-AIN3, 010 AIN1-AIN3, 011 AIN2-AIN3,
                  100 AIN0-GND, 101 AIN1-GND, 110 AIN2-GND, 111 AIN3-GND
    11:9 PGA      full scale ±6.144, ±4.096, ±2.048 (reset), ±1.024, ±0.512, ±0.256 V (101-111)
    8 MODE        0 continuous, 1 single-shot / power down (reset)
    7:5 DR        8, 16, 32, 64, 128 (reset), 250, 475, 860 samples per second
    4:0 COMP_*    comparator mode, polarity, latch, queue (11 = disabled, reset)

A code is Vin / FS * 2^15, clamped to -32768..32767 (table 3). A single-shot
conversion takes one data period (1 / DR); until it ends OS reads 0 and the
conversion register keeps the previous result. In continuous mode a new
result is ready every period. The comparator and the ALERT/RDY pin are not
modelled (the sim board has no pin for it); their bits are stored as written.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from edgeclaw.backends.sim.i2c import SimI2CDevice

REG_CONVERSION = 0
REG_CONFIG = 1
REG_LO_THRESH = 2
REG_HI_THRESH = 3
CONFIG_RESET = 0x8583
LO_THRESH_RESET = 0x8000
HI_THRESH_RESET = 0x7FFF

OS = 1 << 15
MODE_SINGLE = 1 << 8
FULL_SCALE_V = (6.144, 4.096, 2.048, 1.024, 0.512, 0.256, 0.256, 0.256)
DATA_RATES = (8, 16, 32, 64, 128, 250, 475, 860)
# MUX -> (positive input, negative input); None is GND.
MUX_INPUTS: tuple[tuple[int, int | None], ...] = (
    (0, 1), (0, 3), (1, 3), (2, 3), (0, None), (1, None), (2, None), (3, None),
)  # fmt: skip


def code_for(volts: float, full_scale_v: float) -> int:
    """The conversion result for a differential input of `volts`, as a signed count."""
    return max(-32768, min(32767, round(volts / full_scale_v * 32768)))


class ADS1115(SimI2CDevice):
    def __init__(
        self, inputs: list[float] | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.inputs = list(inputs) if inputs is not None else [0.0] * 4  # volts on AIN0..AIN3
        self._clock = clock
        self.pointer = 0
        self.config = CONFIG_RESET
        self.lo_thresh = LO_THRESH_RESET
        self.hi_thresh = HI_THRESH_RESET
        self.conversion = 0
        self._ready_at: float | None = None  # a conversion under way ends then

    def sample(self, config: int) -> int:
        """The 16-bit register value a conversion with `config` gives for the held inputs."""
        plus, minus = MUX_INPUTS[(config >> 12) & 0b111]
        volts = self.inputs[plus] - (self.inputs[minus] if minus is not None else 0.0)
        return code_for(volts, FULL_SCALE_V[(config >> 9) & 0b111]) & 0xFFFF

    def _period(self) -> float:
        return 1.0 / DATA_RATES[(self.config >> 5) & 0b111]

    def _settle(self) -> None:
        now = self._clock()
        if self._ready_at is None or now < self._ready_at:
            return
        self.conversion = self.sample(self.config)
        if self.config & MODE_SINGLE:
            self._ready_at = None  # single-shot: back to power down
        else:
            self._ready_at = now + self._period()

    def write(self, data: bytes) -> None:
        if not data:
            return
        self._settle()
        self.pointer = data[0] & 0b11
        if len(data) < 3:
            return  # a pointer write alone selects the register the next read returns
        value = data[1] << 8 | data[2]
        if self.pointer == REG_CONFIG:
            converting = self._ready_at is not None
            self.config = value & ~OS
            if not value & MODE_SINGLE:
                self._ready_at = self._clock() + self._period()  # continuous conversions start
            elif value & OS and not converting:
                self._ready_at = self._clock() + self._period()  # one single-shot conversion
            elif not converting:
                self._ready_at = None
        elif self.pointer == REG_LO_THRESH:
            self.lo_thresh = value
        elif self.pointer == REG_HI_THRESH:
            self.hi_thresh = value
        # The conversion register is read-only.

    def _register(self) -> int:
        if self.pointer == REG_CONVERSION:
            return self.conversion
        if self.pointer == REG_CONFIG:
            # In continuous mode the part is always converting, so OS reads 0.
            return self.config | (OS if self._ready_at is None else 0)
        return self.lo_thresh if self.pointer == REG_LO_THRESH else self.hi_thresh

    def read(self, length: int) -> bytes:
        self._settle()
        value = self._register()
        pair = bytes((value >> 8, value & 0xFF))
        return (pair * (length // 2 + 1))[:length]
