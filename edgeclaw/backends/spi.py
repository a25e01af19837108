"""SPI: the driver protocol, the spidev driver for /dev/spidevB.C, and the async device the tools use.

A transfer is full duplex: as many bytes come back as go out. spidev is an
optional extra (it ships no wheels; on a Pi, Debian's python3-spidev), so it
is imported only when a real SPI device is first opened.
"""

from __future__ import annotations

import errno
from typing import Protocol

from edgeclaw.backends.base import BusGate, missing_library, open_error, os_error_words
from edgeclaw.errors import BackendError


class SPIDriver(Protocol):
    """One SPI device (bus + chip select). `transfer` returns exactly len(data) bytes."""

    label: str

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes: ...
    def close(self) -> None: ...


class SpidevDriver:
    """/dev/spidevBUS.CS through the spidev module."""

    def __init__(self, bus: int, chip_select: int) -> None:
        try:
            import spidev  # type: ignore[import-not-found]
        except ImportError:
            raise missing_library("spidev", "hw", "apt install python3-spidev") from None
        self.label = f"SPI {bus}.{chip_select}"
        self._dev = spidev.SpiDev()
        try:
            self._dev.open(bus, chip_select)
        except OSError as e:
            raise open_error(
                self.label,
                f"/dev/spidev{bus}.{chip_select}",
                e,
                missing="is the SPI interface enabled?",
                denied="add the daemon's user to the spi group",
            ) from None

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        dev = self._dev
        if dev.mode != mode:
            dev.mode = mode
        if dev.bits_per_word != bits_per_word:
            dev.bits_per_word = bits_per_word
        # xfer2 keeps chip select asserted for the whole buffer, which multi-byte commands need.
        # It returns the received bytes; their count equals what was sent (nothing to "check").
        received = dev.xfer2(list(data), speed_hz)
        if len(received) != len(data):
            raise OSError(errno.EIO, f"short transfer: {len(received)} of {len(data)} bytes")
        return bytes(received)

    def close(self) -> None:
        self._dev.close()


class SPIDevice:
    """One SPI device as the tools see it: async, locked, bounded."""

    def __init__(self, driver: SPIDriver, *, timeout_s: float, threaded: bool) -> None:
        self.label = driver.label
        self._gate: BusGate[SPIDriver] = BusGate(
            driver,
            label=driver.label,
            timeout_s=timeout_s,
            threaded=threaded,
            describe_error=lambda e, _args: BackendError(
                f"{driver.label}: {os_error_words(e)}", errno=e.errno
            ),
        )

    async def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        return await self._gate.run(_transfer, data, speed_hz, mode, bits_per_word)

    def close(self) -> None:
        self._gate.close()


def _transfer(d: SPIDriver, data: bytes, speed_hz: int, mode: int, bits: int) -> bytes:
    return d.transfer(data, speed_hz, mode, bits)
