"""The console's line editor: raw keystroke bytes in, echo bytes and whole lines out.

The port is in raw mode (no kernel line discipline), so everything a
terminal's line discipline would do happens here: echo (off for terminals
that echo locally), backspace and DEL, Ctrl-U (kill line), Ctrl-W (kill
word), Ctrl-L (redraw), Ctrl-C (interrupt), Ctrl-D on an empty line (end of
input), and CR, LF or CRLF as the end of a line. On lines started with
`history=True`, Up and Down (ESC [ A / ESC [ B, or ESC O A / ESC O B in
application mode) step through earlier lines; with a completer, Tab completes
the line. Other cursor and function keys arrive as escape sequences and are
swallowed rather than typed into the line.

Input is decoded as UTF-8 one byte at a time; bytes that are not valid
UTF-8 (line noise, a wrong baud rate, a terminal set to Latin-1) are dropped
and counted so the session can say so. Nothing here can raise on input.

Editing is within one terminal row: erasing across a wrapped line is left
to Ctrl-L, which redraws the line on a fresh row.
"""

from __future__ import annotations

import codecs
import unicodedata
from collections.abc import Callable, Sequence
from enum import Enum

from edgeclaw.records import dataclass

CTRL_C = 0x03
CTRL_D = 0x04
BS = 0x08
TAB = 0x09
LF = 0x0A
CTRL_L = 0x0C
CR = 0x0D
CTRL_U = 0x15
CTRL_W = 0x17
ESC = 0x1B
DEL = 0x7F

BELL = b"\x07"
NEWLINE = b"\r\n"
ERASE_LINE = b"\r\x1b[K"  # back to column 0, clear to the end of the row (VT100, so every terminal)
HISTORY_MAX = 100  # lines kept for Up/Down

# Given the line typed so far, the whole lines it could become (e.g. "/call i2c ").
Completer = Callable[[str], Sequence[str]]


def char_width(ch: str) -> int:
    """Columns a character takes on a terminal: 0 for combining marks, 2 for wide East Asian forms."""
    if unicodedata.combining(ch) or unicodedata.category(ch) in ("Mn", "Me", "Cf"):
        return 0
    return 2 if unicodedata.east_asian_width(ch) in ("W", "F") else 1


def text_width(text: str) -> int:
    return sum(char_width(c) for c in text)


class EventKind(Enum):
    LINE = "line"  # Enter: `text` holds the line
    EOF = "eof"  # Ctrl-D on an empty line
    INTERRUPT = "interrupt"  # Ctrl-C


@dataclass(frozen=True)
class LineEvent:
    kind: EventKind
    text: str = ""
    invalid_bytes: int = 0  # bytes dropped from this line because they were not UTF-8


class _Escape(Enum):
    NONE = 0
    ESC = 1  # seen ESC
    CSI = 2  # seen ESC [ : parameters until a final byte 0x40-0x7e
    SS3 = 3  # seen ESC O : one more byte


class LineEditor:
    def __init__(self, *, echo: bool = True, max_chars: int = 2048) -> None:
        self.echo = echo
        self.max_chars = max_chars
        self.prompt = ""
        self.mask: str | None = None
        self.chars: list[str] = []
        self.invalid = 0
        self.history: list[str] = []
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._escape = _Escape.NONE
        self._csi_params = bytearray()
        # Survives start(): a CRLF terminal's LF may arrive after the CR has ended the line.
        self._after_cr = False
        self._use_history = False
        self._complete: Completer | None = None
        self._recalled: int | None = None  # index into history while stepping through it
        self._draft: list[str] = []  # the line being typed before Up was pressed

    @property
    def text(self) -> str:
        return "".join(self.chars)

    def start(
        self,
        prompt: str,
        *,
        mask: str | None = None,
        history: bool = False,
        complete: Completer | None = None,
    ) -> bytes:
        """Begin a new line; returns the bytes that draw the prompt.

        `history`: Up/Down recall earlier lines (never for a masked line); `complete`: what Tab offers.
        """
        self.prompt = prompt
        self.mask = mask
        self.chars = []
        self.invalid = 0
        self._decoder.reset()
        self._escape = _Escape.NONE
        self._use_history = history and mask is None
        self._complete = complete if mask is None else None
        self._recalled = None
        self._draft = []
        return prompt.encode("utf-8")

    def remember(self, line: str) -> None:
        """Keep a line for Up/Down (blank lines and repeats of the last one are not kept)."""
        if line.strip() and (not self.history or self.history[-1] != line):
            self.history.append(line)
            del self.history[:-HISTORY_MAX]

    def forget(self) -> None:
        """Drop the history: the next person on this port must not page through this one's lines."""
        self.history.clear()

    def redraw(self, prompt: str | None = None) -> bytes:
        """Rewrite the current row: prompt and what has been typed so far (e.g. a countdown changed)."""
        if prompt is not None:
            self.prompt = prompt
        return ERASE_LINE + self.prompt.encode("utf-8") + self._visible(self.chars)

    def _visible(self, chars: list[str]) -> bytes:
        if not self.echo:
            return b""
        if self.mask is not None:
            return (self.mask * len(chars)).encode("utf-8")
        return "".join(chars).encode("utf-8")

    def _erase(self, chars: list[str]) -> bytes:
        if not self.echo or not chars:
            return b""
        cols = len(chars) if self.mask is not None else sum(char_width(c) for c in chars)
        return b"\b \b" * cols

    def feed(self, data: bytes) -> tuple[bytes, LineEvent | None, bytes]:
        """Process keystrokes until one ends the line.

        Returns the bytes to echo, the event (None when the line goes on), and
        the bytes after the event, which belong to whatever reads next.
        """
        out = bytearray()
        for i, byte in enumerate(data):
            event = self._byte(byte, out)
            if event is not None:
                return bytes(out), event, data[i + 1 :]
        return bytes(out), None, b""

    def _finish(self, kind: EventKind, out: bytearray) -> LineEvent:
        self._flush_partial()
        event = LineEvent(kind, self.text if kind is EventKind.LINE else "", self.invalid)
        self.chars = []
        self.invalid = 0
        return event

    def _flush_partial(self) -> None:
        # A multi-byte character cut short by a control byte can never complete: it was noise.
        if self._decoder.decode(b"", final=True):
            self.invalid += 1
        self._decoder.reset()

    def _byte(self, byte: int, out: bytearray) -> LineEvent | None:
        after_cr, self._after_cr = self._after_cr, False
        if self._escape is not _Escape.NONE and byte >= 0x20:
            self._escape_byte(byte, out)
            return None
        if byte < 0x20 or byte == DEL:
            self._escape = _Escape.NONE
            self._flush_partial()
            return self._control(byte, out, after_cr)
        for ch in self._decoder.decode(bytes([byte])):
            self._insert(ch, out)
        return None

    def _escape_byte(self, byte: int, out: bytearray) -> None:
        """One byte of an escape sequence: Up and Down act, every other sequence is swallowed."""
        if self._escape is _Escape.ESC:
            self._escape = {0x5B: _Escape.CSI, 0x4F: _Escape.SS3}.get(byte, _Escape.NONE)
            self._csi_params.clear()
        elif self._escape is _Escape.CSI:
            if 0x40 <= byte <= 0x7E:
                self._escape = _Escape.NONE
                if not self._csi_params:  # plain ESC [ A, not ESC [ 1 ; 5 A (Ctrl-Up)
                    self._arrow(byte, out)
            elif len(self._csi_params) < 16:
                self._csi_params.append(byte)
        else:  # SS3: exactly one more byte
            self._escape = _Escape.NONE
            self._arrow(byte, out)

    def _arrow(self, final: int, out: bytearray) -> None:
        if final == 0x41:  # A: up, to older lines
            self._recall(-1, out)
        elif final == 0x42:  # B: down, to newer lines and back to the draft
            self._recall(+1, out)

    def _recall(self, step: int, out: bytearray) -> None:
        if not self._use_history:
            return
        if self._recalled is None:
            if step > 0 or not self.history:
                out += BELL
                return
            self._draft = list(self.chars)
            index = len(self.history) - 1
        else:
            index = self._recalled + step
            if index < 0:
                out += BELL
                return
        if index >= len(self.history):
            self._recalled, chars = None, self._draft
        else:
            self._recalled, chars = index, list(self.history[index])
        self._replace(chars, out)

    def _replace(self, chars: list[str], out: bytearray) -> None:
        """The whole line becomes `chars`: redrawn on its row (editing stays within one row)."""
        self.chars = chars[: self.max_chars]
        out += ERASE_LINE + self.prompt.encode("utf-8") + "".join(self.chars).encode("utf-8")

    def _tab(self, out: bytearray) -> None:
        if self._complete is None:
            self._insert(" ", out)
            return
        typed = self.text
        options = [o for o in self._complete(typed) if o.startswith(typed)]
        if not options:
            out += BELL
            return
        common = _common_prefix(options)
        if len(common) > len(typed):
            self._replace(list(common), out)
            return
        if len(options) == 1:
            out += BELL  # complete already
            return
        # Several ways to go on: list them (by their last word) under the line, then the line again.
        words = sorted({o.rstrip().rsplit(" ", 1)[-1] for o in options})
        out += NEWLINE + "  ".join(words).encode("utf-8") + NEWLINE
        out += self.prompt.encode("utf-8") + typed.encode("utf-8")

    def _control(self, byte: int, out: bytearray, after_cr: bool) -> LineEvent | None:
        if byte == CR:
            self._after_cr = True
            out += NEWLINE
            return self._finish(EventKind.LINE, out)
        if byte == LF:
            if after_cr:
                return None  # the second half of CRLF
            out += NEWLINE
            return self._finish(EventKind.LINE, out)
        if byte in (BS, DEL):
            if self.chars:
                out += self._erase([self.chars.pop()])
            return None
        if byte == CTRL_U:
            out += self._erase(self.chars)
            self.chars = []
            return None
        if byte == CTRL_W:
            end = len(self.chars)
            while end and self.chars[end - 1].isspace():
                end -= 1
            while end and not self.chars[end - 1].isspace():
                end -= 1
            out += self._erase(self.chars[end:])
            del self.chars[end:]
            return None
        if byte == CTRL_C:
            out += b"^C" + NEWLINE
            return self._finish(EventKind.INTERRUPT, out)
        if byte == CTRL_D:
            if self.chars:
                return None  # like a shell: Ctrl-D only ends an empty line
            out += NEWLINE
            return self._finish(EventKind.EOF, out)
        if byte == CTRL_L:
            out += NEWLINE + self.prompt.encode("utf-8") + self._visible(self.chars)
            return None
        if byte == TAB:
            self._tab(out)
            return None
        if byte == ESC:
            self._escape = _Escape.ESC
        return None  # other control characters mean nothing here

    def _insert(self, ch: str, out: bytearray) -> None:
        if ch == "\ufffd":
            self.invalid += 1
            return
        if len(self.chars) >= self.max_chars:
            out += BELL
            return
        self.chars.append(ch)
        out += self._visible([ch])


def _common_prefix(texts: Sequence[str]) -> str:
    """The longest start every text shares, character by character."""
    first, last = min(texts), max(texts)
    n = 0
    while n < len(first) and first[n] == last[n]:
        n += 1
    return first[:n]
