"""A simulated SSD1306 (or SH1106) OLED controller on I2C, keeping its display RAM as the chip does.

Every I2C write starts with a control byte (datasheet 8.1.5.2): Co (bit 7) and D/C# (bit 6). With
D/C# = 0 the bytes that follow are commands, with D/C# = 1 they are display data written to the
GDDRAM at the current page and column; with Co = 1 only the next byte is, and another control byte
follows it. The RAM is `pages` pages of `columns` bytes; each byte is a column of 8 pixels, bit 0
the top row of its page (datasheet figure 10-2).

Implemented commands (datasheet table 9-1): display on/off (AE/AF), contrast (81), entire display
on (A4/A5), inverse (A6/A7), memory addressing mode (20: horizontal, vertical, page), column and page
address windows (21, 22), page start for page addressing (B0-B7) and the column nibbles (00-0F,
10-1F), plus the set-up commands an init sequence sends, whose arguments are kept but do not change
the RAM (multiplex ratio, offset, start line, remaps, clock, pre-charge, COM pins, VCOMH, charge
pump, scrolling off, NOP). An SH1106 has page addressing only (no 20/21/22) and 132 columns.

Over I2C the RAM cannot be read (the chip answers a read with its status byte only: bit 6 set while
the display is off), so the sim's `pixel()` is how tests look at what the screen shows.
"""

from __future__ import annotations

from edgeclaw.backends.sim.i2c import SimI2CDevice

# Commands that take arguments, and how many (SSD1306 datasheet table 9-1, fundamental to charge pump).
_ARGUMENTS = {
    0x81: 1,  # contrast
    0x20: 1,  # memory addressing mode
    0x21: 2,  # column address: start, end
    0x22: 2,  # page address: start, end
    0xA8: 1,  # multiplex ratio
    0xD3: 1,  # display offset
    0xD5: 1,  # clock divide / oscillator
    0xD9: 1,  # pre-charge period
    0xDA: 1,  # COM pins configuration
    0xDB: 1,  # VCOMH deselect level
    0x8D: 1,  # charge pump
    0xAD: 1,  # SH1106: DC-DC control
}
HORIZONTAL, VERTICAL, PAGE = 0, 1, 2


class SSD1306(SimI2CDevice):
    """The controller's state: display RAM, addressing pointers and the settings a host sends."""

    def __init__(self, *, columns: int = 128, pages: int = 8, sh1106: bool = False) -> None:
        self.columns = columns
        self.pages = pages
        self.sh1106 = sh1106
        self.ram = [bytearray(columns) for _ in range(pages)]
        self.display_on = False  # after reset, the panel is off (AE)
        self.contrast = 0x7F
        self.inverted = False
        self.entire_on = False
        self.charge_pump = False
        self.mode = PAGE  # the reset default
        self.column = self.page = 0
        self.column_window = (0, columns - 1)
        self.page_window = (0, pages - 1)
        self.settings: dict[int, tuple[int, ...]] = {}  # the other commands' last arguments
        self.commands: list[int] = []  # every command byte received, in order (for tests)
        self._pending: list[int] = []  # a command waiting for its arguments

    # -- I2C ----------------------------------------------------------------------------------
    def write(self, data: bytes) -> None:
        i = 0
        while i < len(data):
            control = data[i]
            i += 1
            single = bool(control & 0x80)  # Co: one byte, then another control byte
            is_data = bool(control & 0x40)
            chunk = data[i : i + 1] if single else data[i:]
            i += len(chunk)
            for byte in chunk:
                if is_data:
                    self._data(byte)
                else:
                    self._command(byte)

    def read(self, length: int) -> bytes:
        status = 0x00 if self.display_on else 0x40
        return bytes([status] * length)

    # -- what the screen shows ----------------------------------------------------------------
    def pixel(self, x: int, y: int) -> bool:
        """Whether the pixel at column x, row y of the RAM is lit (before inversion)."""
        return bool(self.ram[y // 8][x] >> (y % 8) & 1)

    def lit(self, x: int, y: int) -> bool:
        """What a person sees there: off while the display is off, inverted by A7, all on by A5."""
        if not self.display_on:
            return False
        if self.entire_on:
            return True
        return self.pixel(x, y) != self.inverted

    # -- the command decoder ------------------------------------------------------------------
    def _command(self, byte: int) -> None:
        self.commands.append(byte)
        if self._pending:
            self._pending.append(byte)
            if len(self._pending) == _ARGUMENTS[self._pending[0]] + 1:
                command, *args = self._pending
                self._pending = []
                self._apply(command, tuple(args))
            return
        if byte in _ARGUMENTS and not (self.sh1106 and byte in (0x20, 0x21, 0x22)):
            self._pending = [byte]
        else:
            self._apply(byte, ())

    def _apply(self, command: int, args: tuple[int, ...]) -> None:
        if command in (0xAE, 0xAF):
            self.display_on = command == 0xAF
        elif command == 0x81:
            self.contrast = args[0]
        elif command in (0xA4, 0xA5):
            self.entire_on = command == 0xA5
        elif command in (0xA6, 0xA7):
            self.inverted = command == 0xA7
        elif command == 0x8D:
            self.charge_pump = bool(args[0] & 0x04)
        elif command == 0x20:
            self.mode = args[0] & 0x03 if args[0] & 0x03 != 3 else self.mode  # 3 is invalid: ignored
        elif command == 0x21:
            self.column_window = (args[0] % self.columns, args[1] % self.columns)
            self.column = self.column_window[0]
        elif command == 0x22:
            self.page_window = (args[0] % self.pages, args[1] % self.pages)
            self.page = self.page_window[0]
        elif 0xB0 <= command <= 0xB7:
            self.page = (command & 0x07) % self.pages
        elif command <= 0x0F:
            self.column = (self.column & 0xF0 | command) % self.columns
        elif command <= 0x1F:
            self.column = ((command & 0x0F) << 4 | self.column & 0x0F) % self.columns
        else:
            self.settings[command] = args  # start line, remaps, scan direction, timing: no RAM effect

    def _data(self, byte: int) -> None:
        self.ram[self.page][self.column] = byte
        first_col, last_col = self.column_window
        first_page, last_page = self.page_window
        if self.mode == PAGE:
            # Page addressing: the column pointer advances and wraps within the page (8.7.1).
            self.column = (self.column + 1) % self.columns
        elif self.mode == HORIZONTAL:
            if self.column >= last_col:
                self.column = first_col
                self.page = first_page if self.page >= last_page else self.page + 1
            else:
                self.column += 1
        else:  # vertical
            if self.page >= last_page:
                self.page = first_page
                self.column = first_col if self.column >= last_col else self.column + 1
            else:
                self.page += 1
