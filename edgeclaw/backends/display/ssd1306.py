"""SSD1306 and SH1106 OLEDs over I2C: their init sequences and page writes, through the I2C backend.

Every message starts with a control byte: 0x00 for a stream of commands, 0x40 for a stream of
display data (SSD1306 datasheet 8.1.5.2). The SSD1306 is written in horizontal addressing mode
inside a column/page window (21h, 22h), so one frame is a window and a run of data; the SH1106
has page addressing only, so each page gets its page address (B0h+) and column (00h/10h) first.
Every write goes to an address the profile's I2C grant lets be written, checked again here.
"""

from __future__ import annotations

from typing import Any

from edgeclaw.backends.base import DeviceUnavailable
from edgeclaw.backends.display.frame import oled_pages
from edgeclaw.backends.i2c import I2CBus
from edgeclaw.board import DisplayGrant, I2CBusGrant

COMMANDS = 0x00
DATA = 0x40
DATA_CHUNK = 128  # display bytes per I2C message (one page of a 128-wide panel)


def ssd1306_init(width: int, height: int) -> bytes:
    """The power-up sequence (datasheet's application note, as Adafruit's and luma.oled's send it)."""
    return bytes(
        (
            0xAE,  # display off while configuring
            0xD5, 0x80,  # clock divide ratio / oscillator frequency: the reset default
            0xA8, height - 1,  # multiplex ratio: the panel's rows
            0xD3, 0x00,  # no display offset
            0x40,  # start line 0
            0x8D, 0x14,  # charge pump on (the modules have no external VCC)
            0x20, 0x00,  # horizontal addressing mode
            0xA1,  # segment remap: column 127 is SEG0 (the modules' usual orientation)
            0xC8,  # COM scan from COM[N-1] to COM0
            0xDA, 0x12 if height == 64 else 0x02,  # COM pins: alternative for 64 rows, sequential for 32
            0x81, 0xCF,  # contrast
            0xD9, 0xF1,  # pre-charge period, for the internal charge pump
            0xDB, 0x40,  # VCOMH deselect level
            0xA4,  # display follows RAM
            0xA6,  # normal (not inverted)
            0x2E,  # scrolling off
            0xAF,  # display on
        )
    )  # fmt: skip


def sh1106_init(width: int, height: int) -> bytes:
    """The SH1106's power-up sequence (its datasheet's commands; no addressing-mode command)."""
    return bytes(
        (
            0xAE,
            0xD5, 0x80,
            0xA8, height - 1,
            0xD3, 0x00,
            0x40,
            0xAD, 0x8B,  # DC-DC converter on
            0xA1,
            0xC8,
            0xDA, 0x12,
            0x81, 0x80,
            0xD9, 0x22,
            0xDB, 0x35,
            0xA4,
            0xA6,
            0xAF,
        )
    )  # fmt: skip


class OledDisplay:
    """An SSD1306 or SH1106 on an I2C bus: frames are mode "1" images of the panel's size."""

    mode = "1"

    def __init__(self, grant: DisplayGrant, bus: I2CBus, bus_grant: I2CBusGrant | None) -> None:
        assert grant.address is not None
        if bus_grant is None or not bus_grant.may_write(grant.address):
            raise DeviceUnavailable(
                f"display {grant.name!r}: 0x{grant.address:02x} on I2C bus {grant.bus} may not be "
                "written (the board profile's [[i2c]] write list)"
            )
        self.grant = grant
        self.bus = bus
        self.address = grant.address
        self._ready = False  # the init sequence is sent before the first frame

    async def _commands(self, commands: bytes) -> None:
        await self.bus.write_block(self.address, bytes((COMMANDS,)) + commands)

    async def present(self, image: Any) -> None:
        g = self.grant
        sh1106 = g.kind == "sh1106"
        if not self._ready:
            await self._commands((sh1106_init if sh1106 else ssd1306_init)(g.width, g.height))
            self._ready = True
        pages = oled_pages(image)
        if sh1106:
            for number, page in enumerate(pages):
                column = g.column_offset
                await self._commands(bytes((0xB0 | number, column & 0x0F, 0x10 | column >> 4)))
                await self.bus.write_block(self.address, bytes((DATA,)) + page)
            return
        first = g.column_offset
        await self._commands(bytes((0x21, first, first + g.width - 1, 0x22, 0, len(pages) - 1)))
        data = b"".join(pages)
        for start in range(0, len(data), DATA_CHUNK):
            await self.bus.write_block(self.address, bytes((DATA,)) + data[start : start + DATA_CHUNK])

    async def capture(self) -> Any:
        raise DeviceUnavailable(
            f"display {self.grant.name!r} is an {self.grant.kind}: its memory cannot be read back over I2C"
        )
