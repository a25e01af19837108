"""TI TMP102 digital temperature sensor, after its datasheet (SBOS397).

Four 16-bit registers behind a 2-bit pointer: 0x00 temperature (read-only),
0x01 configuration, 0x02 T_LOW, 0x03 T_HIGH. Every register is sent MSB first.
The temperature is a 12-bit two's-complement count of 0.0625 °C, left-justified
(bits 15..4); in extended mode (EM=1) it is 13 bits (bits 15..3) and bit 0
reads 1. The configuration powers up as 0x60A0: 12-bit resolution (R1 R0
read-only), 4 Hz conversions, comparator mode, AL = 1. The ALERT logic
(comparator and interrupt modes, fault queue, polarity) follows section 7.4.
"""

from __future__ import annotations

from edgeclaw.backends.sim.i2c import SimI2CDevice

LSB_C = 0.0625
CONFIG_POWER_UP = 0x60A0
T_LOW_POWER_UP = 0x4B00  # 75 °C
T_HIGH_POWER_UP = 0x5000  # 80 °C

# Configuration register bits.
OS = 1 << 15
R_BITS = 0b11 << 13
FAULTS = 0b11 << 11
POL = 1 << 10
TM = 1 << 9
SD = 1 << 8
CR = 0b11 << 6
AL = 1 << 5
EM = 1 << 4
WRITABLE = OS | FAULTS | POL | TM | SD | CR | EM
FAULT_COUNTS = (1, 2, 4, 6)


def encode_temperature(celsius: float, extended: bool = False) -> int:
    """Degrees Celsius → the 16-bit register value (datasheet tables 5 and 6)."""
    count = round(celsius / LSB_C)
    if extended:
        count = max(-4096, min(4095, count))
        return ((count & 0x1FFF) << 3) | 1
    count = max(-2048, min(2047, count))
    return (count & 0xFFF) << 4


def decode_temperature(register: int) -> float:
    """The 16-bit register value → degrees Celsius (either mode, told apart by bit 0)."""
    if register & 1:
        count = register >> 3
        if count & 0x1000:
            count -= 0x2000
    else:
        count = register >> 4
        if count & 0x800:
            count -= 0x1000
    return count * LSB_C


def _signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value & (1 << (bits - 1)) else value


class TMP102(SimI2CDevice):
    def __init__(self, temperature_c: float = 21.5) -> None:
        self.temperature_c = temperature_c
        self.pointer = 0
        self.config = CONFIG_POWER_UP
        self.t_low = T_LOW_POWER_UP
        self.t_high = T_HIGH_POWER_UP
        self.temp_register = 0
        self._alert = False  # ALERT active (before the polarity is applied)
        self._faults = 0
        self._armed_for_low = False  # interrupt mode: after firing on T_HIGH, the next event is < T_LOW
        self._one_shot_done = False
        self._convert()

    def _count(self, register: int) -> int:
        """A temperature-format register as a signed count of 0.0625 °C, in the current mode."""
        if self.config & EM:
            return _signed(register >> 3, 13)
        return _signed(register >> 4, 12)

    # -- the conversion and the ALERT logic ------------------------------------------------
    def _convert(self) -> None:
        self.temp_register = encode_temperature(self.temperature_c, bool(self.config & EM))
        t, high, low = self._count(self.temp_register), self._count(self.t_high), self._count(self.t_low)
        needed = FAULT_COUNTS[(self.config & FAULTS) >> 11]
        if self.config & TM:
            # Interrupt mode: an event (T >= T_HIGH, then T < T_LOW, alternately) sets ALERT;
            # any register read clears it.
            fault = t < low if self._armed_for_low else t >= high
            self._faults = self._faults + 1 if fault else 0
            if self._faults >= needed:
                self._alert, self._faults = True, 0
                self._armed_for_low = not self._armed_for_low
        elif not self._alert:
            # Comparator mode: active from T >= T_HIGH until T < T_LOW (after `needed` faults each).
            self._faults = self._faults + 1 if t >= high else 0
            if self._faults >= needed:
                self._alert, self._faults = True, 0
        else:
            self._faults = self._faults + 1 if t < low else 0
            if self._faults >= needed:
                self._alert, self._faults = False, 0

    def _config_value(self) -> int:
        # AL reads 1 while the alert is inactive when POL = 0; POL = 1 inverts it.
        al = self._alert if self.config & POL else not self._alert
        value = (self.config & ~(AL | OS)) | R_BITS | (AL if al else 0)
        if self.config & SD and self._one_shot_done:
            value |= OS  # OS reads 1 once a one-shot conversion has finished
        return value

    def _register(self, pointer: int) -> int:
        if pointer == 0:
            return self.temp_register
        if pointer == 1:
            return self._config_value()
        return self.t_low if pointer == 2 else self.t_high

    # -- I2C messages ------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        if not data:
            return
        self.pointer = data[0] & 0b11
        if len(data) < 3:
            return  # a pointer write alone selects the register for the following reads
        value = data[1] << 8 | data[2]
        limit_mask = 0xFFF8 if self.config & EM else 0xFFF0
        if self.pointer == 1:
            was_shutdown = bool(self.config & SD)
            self.config = (self.config & ~WRITABLE) | (value & WRITABLE)
            if self.config & SD and not was_shutdown and self.config & TM:
                self._alert = False  # entering shutdown clears an interrupt-mode ALERT
            self._one_shot_done = False
            if self.config & SD and value & OS:
                self._convert()  # one-shot conversion (instant in the sim)
                self._one_shot_done = True
            self.config &= ~OS
        elif self.pointer == 2:
            self.t_low = value & limit_mask
        elif self.pointer == 3:
            self.t_high = value & limit_mask

    def read(self, length: int) -> bytes:
        if not self.config & SD:
            # Continuous conversion: the part converts in the background, so whichever register is
            # read, a conversion (and its ALERT decision) has happened just before the read.
            self._convert()
        value = self._register(self.pointer)
        if self.config & TM:
            self._alert = False  # interrupt mode: any read clears ALERT, after its value is taken
        pair = bytes((value >> 8, value & 0xFF))
        return (pair * (length // 2 + 1))[:length]
