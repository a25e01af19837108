"""Microchip 24C32 (24AA32A / 24LC32A) 32-kbit serial EEPROM, after its datasheet.

4096 bytes behind a 12-bit address sent as two bytes (the top four bits are
don't-care). A write message is [address high, address low, data...]: the
data goes into a 32-byte page buffer, the address counter's low five bits
wrapping inside the page (so a write past the page end wraps to its start),
and is committed at STOP, after which the part runs its write cycle (t_WR,
5 ms) and does not acknowledge its address (acknowledge polling). An address
with no data only sets the counter (the first half of a random read). Reads
are sequential from the counter, incrementing across the whole array and
rolling over from 0xFFF to 0x000. The contents persist in a file, as a
non-volatile memory should.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from edgeclaw.backends.sim.i2c import SimI2CDevice

SIZE = 4096
PAGE = 32
WRITE_CYCLE_S = 0.005


class EEPROM24C32(SimI2CDevice):
    def __init__(self, path: Path | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._busy_until = 0.0
        self.pointer = 0
        self._fd: int | None = None
        if path is None:
            self.memory = bytearray(b"\xff" * SIZE)  # erased cells read 0xFF
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            data = os.pread(self._fd, SIZE, 0)
            if len(data) < SIZE:
                data += b"\xff" * (SIZE - len(data))
                os.pwrite(self._fd, data, 0)
            self.memory = bytearray(data)

    def acks(self) -> bool:
        return self._clock() >= self._busy_until

    def write(self, data: bytes) -> None:
        if len(data) < 2:
            return  # a quick write, or a lone high address byte: nothing is latched
        self.pointer = ((data[0] << 8) | data[1]) % SIZE
        payload = data[2:]
        if not payload:
            return
        page = self.pointer - self.pointer % PAGE
        offset = self.pointer % PAGE
        for byte in payload:
            self.memory[page + offset] = byte
            offset = (offset + 1) % PAGE
        self.pointer = page + offset
        if self._fd is not None:
            os.pwrite(self._fd, bytes(self.memory[page : page + PAGE]), page)
        self._busy_until = self._clock() + WRITE_CYCLE_S

    def read(self, length: int) -> bytes:
        out = bytearray()
        for _ in range(length):
            out.append(self.memory[self.pointer])
            self.pointer = (self.pointer + 1) % SIZE
        return bytes(out)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
