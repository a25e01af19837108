"""The sim board's ESP32: the reference firmware's handler served behind a pty pair.

The host side opens the pty's slave like any serial port (pyserial, the same
`Esp32Bridge` a real board uses); the firmware's `BridgePeer` answers on the
master side from a thread. The simulated ESP32 has an LED on GPIO 2, the
boot button on GPIO 0, a reading on ADC pin 34 and its own TMP102 on I2C
bus 0 at 0x48.
"""

from __future__ import annotations

import contextlib
import os
import tty

from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.tmp102 import TMP102
from edgeclaw.firmware.esp32.host import BridgePeer, HostHal


class SimI2CForBridge:
    """A `SimI2CBus` in the shape the firmware's host HAL wants (MicroPython's I2C methods)."""

    def __init__(self, bus: SimI2CBus) -> None:
        self.bus = bus

    def scan(self) -> list[int]:
        found = []
        for address in range(0x08, 0x78):  # MicroPython's I2C.scan() range
            try:
                self.bus.quick_write(address)
            except OSError:
                continue
            found.append(address)
        return found

    def read(self, address: int, register: int, length: int) -> bytes:
        return self.bus.read_block(address, bytes((register,)), length)

    def write(self, address: int, register: int, data: bytes) -> None:
        self.bus.write_block(address, bytes((register,)) + data)


class SimEsp32:
    """A pty pair with the reference firmware on its master side; `port` is the slave's path."""

    def __init__(self) -> None:
        self.master, self.slave = os.openpty()
        tty.setraw(self.slave)
        self.port = os.ttyname(self.slave)
        self.sensor = TMP102(24.0)
        self.hal = HostHal({0: SimI2CForBridge(SimI2CBus(0, {0x48: self.sensor}))})
        self.hal.levels[0] = 1  # the boot button has a pull-up: released reads 1
        self.hal.adc_millivolts[34] = 1650
        self.peer = BridgePeer(self.master, self.hal).start()

    def close(self) -> None:
        self.peer.stop()
        for fd in (self.master, self.slave):
            with contextlib.suppress(OSError):
                os.close(fd)
