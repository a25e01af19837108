"""The sim board's I2C bus: device models behind the same driver protocol as smbus2.

Devices are modelled at the level of I2C messages: a write message (the
bytes after the address byte, possibly none) and a read message (so many
bytes clocked out). Every SMBus transaction is composed from those exactly
as it appears on the wire, so a device model only has to follow its
datasheet. An address nobody answers, or a device that does not acknowledge
(an EEPROM busy with its write cycle), raises EREMOTEIO like i2c-dev does.

Faults a real bus has can be injected per address (`SimI2CBus.inject`), so a
driver's handling of them is tested on the same path as its readings: "nack"
(the device stops acknowledging), "timeout" (the adapter gives up: ETIMEDOUT,
SCL held low), "hang" (the transfer never returns until `release()`d — the
deadline's case; only meaningful on a threaded bus) and "corrupt" (every read
comes back with one bit flipped, which a CRC must catch).
"""

from __future__ import annotations

import errno
import os
import threading
from abc import ABC, abstractmethod
from typing import Literal

Fault = Literal["nack", "timeout", "hang", "corrupt"]


class SimI2CDevice(ABC):
    """One simulated I2C target."""

    def acks(self) -> bool:
        """Whether the device acknowledges its address right now."""
        return True

    @abstractmethod
    def write(self, data: bytes) -> None:
        """One write message (empty for a quick write)."""

    @abstractmethod
    def read(self, length: int) -> bytes:
        """One read message of `length` bytes."""


def _nack(address: int) -> OSError:
    return OSError(errno.EREMOTEIO, os.strerror(errno.EREMOTEIO), f"0x{address:02x}")


class SimI2CBus:
    """Implements `backends.i2c.I2CDriver` over a dictionary of device models."""

    def __init__(self, number: int, devices: dict[int, SimI2CDevice]) -> None:
        self.number = number
        self.devices = devices
        self.faults: dict[int, Fault] = {}
        self._released = threading.Event()

    def inject(self, address: int, fault: Fault | None) -> None:
        """Make transfers to `address` fail as `fault` does from now on (None: heal it)."""
        if fault is None:
            self.faults.pop(address, None)
        else:
            self.faults[address] = fault
            self._released.clear()

    def release(self) -> None:
        """Let hung transfers return (as a NACK, as a bus recovered by the adapter would)."""
        self._released.set()

    def _target(self, address: int) -> SimI2CDevice:
        fault = self.faults.get(address)
        if fault == "hang":
            self._released.wait()
            raise _nack(address)
        if fault == "timeout":
            raise OSError(errno.ETIMEDOUT, os.strerror(errno.ETIMEDOUT), f"0x{address:02x}")
        device = self.devices.get(address)
        if device is None or not device.acks() or fault == "nack":
            raise _nack(address)
        return device

    def _received(self, address: int, data: bytes) -> bytes:
        if self.faults.get(address) == "corrupt" and data:
            return bytes((data[0] ^ 0x01, *data[1:]))  # the lowest bit of the first byte
        return data

    def supports_quick(self) -> bool:
        return True

    def quick_write(self, address: int) -> None:
        self._target(address).write(b"")

    def read_byte(self, address: int) -> int:
        return self._received(address, self._target(address).read(1))[0]

    def read_byte_data(self, address: int, register: int) -> int:
        device = self._target(address)
        device.write(bytes((register,)))
        # repeated start: the address is sent again
        return self._received(address, self._target(address).read(1))[0]

    def read_word_data(self, address: int, register: int) -> int:
        device = self._target(address)
        device.write(bytes((register,)))
        low, high = self._received(address, self._target(address).read(2))
        return low | high << 8  # SMBus words are sent low byte first

    def read_block(self, address: int, register: bytes, length: int) -> bytes:
        device = self._target(address)
        device.write(register)
        return self._received(address, self._target(address).read(length))

    def read_bytes(self, address: int, length: int) -> bytes:
        return self._received(address, self._target(address).read(length))

    def write_byte_data(self, address: int, register: int, value: int) -> None:
        self._target(address).write(bytes((register, value)))

    def write_word_data(self, address: int, register: int, value: int) -> None:
        self._target(address).write(bytes((register, value & 0xFF, value >> 8)))

    def write_block(self, address: int, data: bytes) -> None:
        self._target(address).write(data)

    # -- raw messages, for drivers that speak I2C_RDWR to the sim -----------------------------
    def write_message(self, address: int, data: bytes) -> None:
        self._target(address).write(data)

    def read_message(self, address: int, length: int) -> bytes:
        return self._received(address, self._target(address).read(length))

    def close(self) -> None:
        for device in self.devices.values():
            close = getattr(device, "close", None)
            if close is not None:
                close()
