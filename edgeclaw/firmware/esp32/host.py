"""Serving the bridge protocol from CPython: the peer the tests and the sim board talk to.

`HostHal` is an in-memory ESP32 (pins, ADC readings, I2C buses lent by the
caller); `serve()` answers request lines on a file descriptor (the master
side of a pty), exactly like main.py does on the chip's UART. `reset()`
writes what a real ESP32 prints when it reboots — ROM boot noise, then the
firmware's boot event — which is how the host learns a request was lost.
"""

from __future__ import annotations

import os
import select
import threading
import time
from collections.abc import Callable
from typing import Protocol

from edgeclaw.firmware.esp32.protocol import BridgeHandler, boot_event

# What the ESP32's ROM bootloader prints at 115200 baud on reset (abridged): never valid JSON.
ROM_BOOT_NOISE = (
    b"\x00\xff ets Jun  8 2016 00:22:57\r\n\r\nrst:0x1 (POWERON_RESET),boot:0x13 (SPI_FAST_FLASH_BOOT)\r\n"
    b"configsip: 0, SPIWP:0xee\r\nload:0x3fff0030,len:4540\r\nentry 0x40080698\r\n"
)


class HostI2CBus(Protocol):
    def scan(self) -> list[int]: ...
    def read(self, address: int, register: int, length: int) -> bytes: ...
    def write(self, address: int, register: int, data: bytes) -> None: ...


class HostHal:
    """A simulated ESP32 for `BridgeHandler`."""

    def __init__(self, i2c: dict[int, HostI2CBus] | None = None) -> None:
        self.levels: dict[int, int] = {}
        self.adc_millivolts: dict[int, int] = {}
        self.i2c = i2c or {}
        self.cause = "power-on"
        self._started = time.monotonic()

    def chip(self) -> str:
        return "ESP32 (simulated)"

    def cpu_mhz(self) -> int:
        return 240

    def free_memory(self) -> int:
        return 110_000

    def uptime_ms(self) -> int:
        return int((time.monotonic() - self._started) * 1000)

    def reset_cause(self) -> str:
        return self.cause

    def gpio_read(self, pin: int) -> int:
        return self.levels.get(pin, 0)

    def gpio_write(self, pin: int, value: int) -> None:
        self.levels[pin] = value

    def adc_read(self, pin: int) -> tuple[int, int]:
        mv = max(0, min(3300, self.adc_millivolts.get(pin, 0)))
        return mv * 4095 // 3300, mv  # 12-bit reading with 11 dB attenuation, taken as linear

    def _bus(self, bus: int) -> HostI2CBus:
        found = self.i2c.get(bus)
        if found is None:
            raise OSError(19, "no I2C bus " + str(bus))
        return found

    def i2c_scan(self, bus: int) -> list[int]:
        return self._bus(bus).scan()

    def i2c_read(self, bus: int, address: int, register: int, length: int) -> bytes:
        return self._bus(bus).read(address, register, length)

    def i2c_write(self, bus: int, address: int, register: int, data: bytes) -> None:
        self._bus(bus).write(address, register, data)


class BridgePeer:
    """The device side on one fd, served by a thread until `stop()`.

    `handle` defaults to the reference handler; tests pass a wrapper to make a
    peer that stays silent (timeouts) or reboots mid-request.
    """

    def __init__(self, fd: int, hal: HostHal, handle: Callable[[bytes], bytes | None] | None = None) -> None:
        self.fd = fd
        self.hal = hal
        self.handler = BridgeHandler(hal)
        self.handle = handle or self.handler.handle_line
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="esp32-peer", daemon=True)

    def start(self, announce: bool = True) -> BridgePeer:
        if announce:
            self._write(boot_event(self.hal))
        self._thread.start()
        return self

    def reset(self) -> None:
        """What a reboot looks like on the wire."""
        self.hal.cause = "hard reset"
        self._write(ROM_BOOT_NOISE + boot_event(self.hal))

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view) :]

    def _serve(self) -> None:
        buffer = b""
        while not self._stop.is_set():
            ready, _, _ = select.select([self.fd], [], [], 0.05)
            if not ready:
                continue
            try:
                chunk = os.read(self.fd, 4096)
            except OSError:
                return  # the other side closed
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                reply = self.handle(line)
                if reply is not None:
                    self._write(reply)

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=2)
