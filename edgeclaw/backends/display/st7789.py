"""ST7735 and ST7789 TFTs over SPI: commands with D/C low, parameters and pixels with D/C high.

The controllers take a window (CASET 2Ah, RASET 2Bh: first and last column and row, 16 bits each,
big-endian), then RAMWR (2Ch) and the window's pixels as RGB565, high byte first, in 16-bit colour
mode (COLMOD 3Ah = 55h on the ST7789, 05h on the ST7735). The D/C line is a GPIO output pin the
profile grants (`dc_pin`); the SPI device must be granted `access = "rw"`. Pixels go in chunks of
at most 4096 bytes, spidev's default buffer.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.display.frame import rgb565
from edgeclaw.backends.spi import SPIDevice
from edgeclaw.board import DisplayGrant, SPIDeviceGrant

if TYPE_CHECKING:
    from edgeclaw.backends.gpio import GPIOController

SPI_CHUNK = 4096
SWRESET, SLPOUT, NORON, INVON, DISPON = 0x01, 0x11, 0x13, 0x21, 0x29
CASET, RASET, RAMWR, MADCTL, COLMOD = 0x2A, 0x2B, 0x2C, 0x36, 0x3A


def tft_init(kind: str) -> list[tuple[int, bytes, float]]:
    """(command, parameters, seconds to wait after it): the power-up sequence of each controller."""
    steps = [(SWRESET, b"", 0.15), (SLPOUT, b"", 0.12)]
    if kind == "st7789":
        # 65K colours, 16 bits a pixel; the IPS panels these modules carry need inversion on.
        steps += [(COLMOD, b"\x55", 0.01), (MADCTL, b"\x00", 0), (INVON, b"", 0)]
    else:
        steps += [(COLMOD, b"\x05", 0.01), (MADCTL, b"\x00", 0)]
    return [*steps, (NORON, b"", 0.01), (DISPON, b"", 0.1)]


def window(first_column: int, first_row: int, width: int, height: int) -> list[tuple[int, bytes]]:
    """CASET and RASET for a window, then RAMWR."""
    last_column, last_row = first_column + width - 1, first_row + height - 1
    return [
        (CASET, first_column.to_bytes(2, "big") + last_column.to_bytes(2, "big")),
        (RASET, first_row.to_bytes(2, "big") + last_row.to_bytes(2, "big")),
        (RAMWR, b""),
    ]


class TftDisplay:
    """An ST7735 or ST7789 on an SPI device with its D/C pin: frames are RGB images."""

    mode = "RGB"

    def __init__(
        self, grant: DisplayGrant, spi: SPIDevice, spi_grant: SPIDeviceGrant, gpio: GPIOController, dc: int
    ) -> None:
        self.grant = grant
        self.spi = spi
        self.speed_hz = spi_grant.max_speed_hz
        self.spi_mode = 0 if 0 in spi_grant.modes else spi_grant.modes[0]
        self.gpio = gpio
        self.dc = dc
        self._ready = False

    async def _send(self, data: bytes, *, is_data: bool) -> None:
        await self.gpio.write(self.dc, is_data)
        for start in range(0, len(data), SPI_CHUNK):
            await self.spi.transfer(data[start : start + SPI_CHUNK], self.speed_hz, self.spi_mode, 8)

    async def _command(self, command: int, parameters: bytes = b"") -> None:
        await self._send(bytes((command,)), is_data=False)
        if parameters:
            await self._send(parameters, is_data=True)

    async def present(self, image: Any) -> None:
        g = self.grant
        if not self._ready:
            for command, parameters, wait_s in tft_init(g.kind):
                await self._command(command, parameters)
                if wait_s:
                    await asyncio.sleep(wait_s)
            self._ready = True
        for command, parameters in window(g.column_offset, g.row_offset, g.width, g.height):
            await self._command(command, parameters)
        await self._send(rgb565(image, big_endian=True), is_data=True)

    async def capture(self) -> Any:
        from edgeclaw.backends.base import DeviceUnavailable

        raise DeviceUnavailable(
            f"display {self.grant.name!r} is an {self.grant.kind}: its memory is not read back over SPI"
        )
