"""A simulated ST7789 (or ST7735) TFT controller on SPI, keeping its frame memory as the chip does.

The controller reads the D/C line with every byte (datasheet 8.4: low = command, high = parameter or
pixel data), so the model is given a way to read that line (`dc`, the level of the GPIO pin wired to
it). Implemented (datasheet 9.1): software reset (01h), sleep in/out (10h/11h), display off/on
(28h/29h), inversion off/on (20h/21h), normal mode (13h), MADCTL (36h: kept), COLMOD (3Ah: only 16
bits a pixel, 55h or 05h, fills the RAM), CASET/RASET (2Ah/2Bh: 16-bit big-endian start and end)
and RAMWR (2Ch: RGB565 pixels, high byte first, written left to right, top to bottom inside the
window, wrapping to its start). Reads return zeros (MISO is not wired on these modules).

It implements the SPI driver protocol (`backends.spi.SPIDriver`), so the real `SPIDevice` drives it;
the sim board wires none (its SPI 0.0 is the MCP3008): tests build one beside a mock D/C pin.
"""

from __future__ import annotations

from collections.abc import Callable

_PARAMETERS = {0x2A: 4, 0x2B: 4, 0x36: 1, 0x3A: 1}  # commands taking a fixed number of parameter bytes


class ST7789:
    """Frame memory `columns` x `rows` of RGB565 words, and the pointers RAMWR advances."""

    def __init__(
        self, dc: Callable[[], bool], *, columns: int = 240, rows: int = 320, label: str = "SPI 0.1"
    ) -> None:
        self.label = label
        self.dc = dc
        self.columns, self.rows = columns, rows
        self.ram = [0] * (columns * rows)
        self.commands: list[int] = []
        self.reset()

    def reset(self) -> None:
        self.sleeping = True
        self.display_on = False
        self.inverted = False
        self.madctl = 0
        self.colmod = 0x66  # 18 bits a pixel after reset: the host must choose 16
        self.window = (0, self.columns - 1, 0, self.rows - 1)
        self._command: int | None = None
        self._parameters = bytearray()
        self._x = self._y = 0
        self._high: int | None = None  # the first byte of a pixel, waiting for its second

    def pixel(self, x: int, y: int) -> tuple[int, int, int]:
        """The RGB a pixel of the frame memory holds, each channel expanded back to 8 bits."""
        word = self.ram[y * self.columns + x]
        r, g, b = word >> 11, word >> 5 & 0x3F, word & 0x1F
        return (r << 3 | r >> 2, g << 2 | g >> 4, b << 3 | b >> 2)

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        for byte in data:
            if self.dc():
                self._data(byte)
            else:
                self._start(byte)
        return bytes(len(data))

    def close(self) -> None:
        pass

    def _start(self, command: int) -> None:
        self.commands.append(command)
        self._command, self._parameters, self._high = command, bytearray(), None
        if command == 0x01:
            self.reset()
        elif command in (0x10, 0x11):
            self.sleeping = command == 0x10
        elif command in (0x28, 0x29):
            self.display_on = command == 0x29
        elif command in (0x20, 0x21):
            self.inverted = command == 0x21
        elif command == 0x2C:
            self._x, self._y = self.window[0], self.window[2]

    def _data(self, byte: int) -> None:
        command = self._command
        if command == 0x2C:
            self._pixel_byte(byte)
            return
        if command not in _PARAMETERS or len(self._parameters) >= _PARAMETERS[command]:
            return  # parameters of a command the model ignores, or too many: the chip ignores them too
        self._parameters.append(byte)
        if len(self._parameters) < _PARAMETERS[command]:
            return
        p = self._parameters
        if command == 0x2A:
            self.window = (p[0] << 8 | p[1], p[2] << 8 | p[3], *self.window[2:])
        elif command == 0x2B:
            self.window = (*self.window[:2], p[0] << 8 | p[1], p[2] << 8 | p[3])
        elif command == 0x36:
            self.madctl = p[0]
        else:
            self.colmod = p[0]

    def _pixel_byte(self, byte: int) -> None:
        if self.colmod & 0x07 != 0x05:  # only 16 bits a pixel is modelled
            return
        if self._high is None:
            self._high = byte
            return
        x0, x1, y0, y1 = self.window
        if self._x < self.columns and self._y < self.rows:
            self.ram[self._y * self.columns + self._x] = self._high << 8 | byte
        self._high = None
        if self._x >= x1:
            self._x = x0
            self._y = y0 if self._y >= y1 else self._y + 1
        else:
            self._x += 1
