"""TI INA219 current/power monitor with an I2C interface, after its datasheet (SBOS448).

Six 16-bit registers behind the address pointer, MSB first (section 8.6):

    00 configuration (R/W, reset 0x399F)   01 shunt voltage (R)   02 bus voltage (R)
    03 power (R)                           04 current (R)         05 calibration (R/W, 0x0000)

Configuration: RST (bit 15, self-clearing reset), BRNG (13: 0 = 16 V, 1 = 32 V
full scale), PG (12:11: shunt range ±40, ±80, ±160, ±320 mV), BADC (10:7),
SADC (6:3), MODE (2:0: 000 power down, 001-011 triggered shunt/bus/both, 100
ADC off, 101-111 continuous shunt/bus/both).

Shunt voltage: a signed count of 10 µV, saturating at the PG range (±4000 at
/1 ... ±32000 at /8). Bus voltage: a 13-bit count of 4 mV in bits 15:3, CNVR
(bit 1: a conversion finished; cleared by reading the power register or
writing the configuration) and OVF (bit 0: the current or power calculation
overflowed). The part computes, after each conversion (section 8.5):

    current = shunt * calibration / 4096        power = current * bus / 5000

so with calibration 0 (its reset value) both read 0. Bit 0 of the calibration
register is void and reads 0. The sim holds the physical bus voltage, the
current and the shunt resistor on the board; a conversion happens when a
triggered mode is written and, in continuous mode, before every read.
"""

from __future__ import annotations

from edgeclaw.backends.sim.i2c import SimI2CDevice

REG_CONFIG = 0
REG_SHUNT = 1
REG_BUS = 2
REG_POWER = 3
REG_CURRENT = 4
REG_CALIBRATION = 5
CONFIG_RESET = 0x399F

RST = 1 << 15
BRNG = 1 << 13
CNVR = 1 << 1
OVF = 1 << 0
SHUNT_LSB_V = 10e-6
BUS_LSB_V = 0.004
SHUNT_LIMIT = (4000, 8000, 16000, 32000)  # in 10 µV counts, per PG


def _s16(value: int) -> int:
    return value - 0x10000 if value & 0x8000 else value


class INA219(SimI2CDevice):
    def __init__(self, bus_voltage_v: float = 5.0, current_a: float = 0.25, shunt_ohms: float = 0.1) -> None:
        self.bus_voltage_v = bus_voltage_v
        self.current_a = current_a
        self.shunt_ohms = shunt_ohms
        self.pointer = 0
        self._reset()

    def _reset(self) -> None:
        self.config = CONFIG_RESET
        self.calibration = 0
        self.shunt = 0
        self.bus = 0  # the 13-bit count
        self.current = 0
        self.power = 0
        self.cnvr = False
        self.ovf = False

    def _convert(self) -> None:
        mode = self.config & 0b111
        if mode in (0b000, 0b100):
            return  # power down, ADC off: the registers keep their values
        if mode & 0b001:  # the shunt voltage is measured
            limit = SHUNT_LIMIT[(self.config >> 11) & 0b11]
            counts = round(self.current_a * self.shunt_ohms / SHUNT_LSB_V)
            self.shunt = max(-limit, min(limit, counts))
        if mode & 0b010:  # the bus voltage is measured
            full_scale = 32.0 if self.config & BRNG else 16.0
            volts = max(0.0, min(self.bus_voltage_v, full_scale))
            self.bus = min(0x1FFF, round(volts / BUS_LSB_V))
        product = self.shunt * self.calibration
        current = product // 4096 if product >= 0 else -(-product // 4096)  # the part truncates
        power = abs(current) * self.bus // 5000
        self.ovf = not -32768 <= current <= 32767 or power > 0xFFFF
        self.current = max(-32768, min(32767, current)) & 0xFFFF
        self.power = min(0xFFFF, power)
        self.cnvr = True

    def write(self, data: bytes) -> None:
        if not data:
            return
        self.pointer = data[0]
        if len(data) < 3:
            return  # a pointer write alone selects the register for the following reads
        value = data[1] << 8 | data[2]
        if self.pointer == REG_CONFIG:
            if value & RST:
                self._reset()  # every register to its default; RST clears itself
                return
            self.config = value & 0x3FFF
            self.cnvr = False
            if self.config & 0b111 in (0b001, 0b010, 0b011):
                self._convert()  # a triggered conversion (instant in the sim)
        elif self.pointer == REG_CALIBRATION:
            self.calibration = value & 0xFFFE
        # The other registers are read-only.

    def _register(self) -> int:
        p = self.pointer
        if p == REG_CONFIG:
            return self.config
        if p == REG_SHUNT:
            return self.shunt & 0xFFFF
        if p == REG_BUS:
            return self.bus << 3 | (CNVR if self.cnvr else 0) | (OVF if self.ovf else 0)
        if p == REG_POWER:
            return self.power
        if p == REG_CURRENT:
            return self.current
        if p == REG_CALIBRATION:
            return self.calibration
        return 0xFFFF  # no register there: the sim reads the bus's idle level

    def read(self, length: int) -> bytes:
        if self.config & 0b111 >= 0b101:
            self._convert()  # continuous: a conversion has finished just before any read
        value = self._register()
        if self.pointer == REG_POWER:
            self.cnvr = False  # reading the power register clears CNVR
        pair = bytes((value >> 8, value & 0xFF))
        return (pair * (length // 2 + 1))[:length]
