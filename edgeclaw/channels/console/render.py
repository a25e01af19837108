"""Replies as terminal rows: control characters made harmless, long lines wrapped, output bounded.

Tool output can hold anything a file or a device held, including escape
sequences that would retitle, recolour or reprogram the technician's
terminal; every control character except newline and tab is shown in caret
form (ESC as `^[`) instead of being sent. Tabs become spaces to the next
multiple of 8 so wrapping can count columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import field

from edgeclaw.channels.console.editor import char_width
from edgeclaw.records import dataclass


def sanitize(text: str) -> str:
    """Control characters other than newline and tab in caret form; C1 controls as '?'."""
    out: list[str] = []
    for ch in text.replace("\r\n", "\n"):
        code = ord(ch)
        if ch in "\n\t":
            out.append(ch)
        elif code < 0x20:
            out.append("^" + chr(code + 0x40))
        elif code == 0x7F:
            out.append("^?")
        elif 0x80 <= code < 0xA0:
            out.append("?")
        else:
            out.append(ch)
    return "".join(out)


def _expand_tabs(line: str) -> str:
    if "\t" not in line:
        return line
    out: list[str] = []
    col = 0
    for ch in line:
        if ch == "\t":
            pad = 8 - col % 8
            out.append(" " * pad)
            col += pad
        else:
            out.append(ch)
            col += char_width(ch)
    return "".join(out)


def wrap_line(line: str, width: int, hang: int = 2) -> list[str]:
    """Split one line into rows of at most `width` columns, at a space when one is near the end.

    Continuation rows are indented `hang` columns past the line's own indent
    (at most a quarter of the width), so a wrapped row reads as a continuation.
    """
    if width <= 0 or sum(char_width(c) for c in line) <= width:
        return [line]
    lead = len(line) - len(line.lstrip(" "))
    indent = [" "] * min(lead + hang, width // 4)
    rows: list[str] = []
    row: list[str] = []
    cols = 0
    for ch in line:
        w = char_width(ch)
        base = len(indent) if rows else 0  # the indent this row started with
        if cols + w > width and len(row) > base:
            # Break at the last space in the second half of the row, so words stay whole.
            half = base + (len(row) - base) // 2
            cut = next((i for i in range(len(row) - 1, half - 1, -1) if row[i] == " "), -1)
            if cut > base:
                rows.append("".join(row[:cut]).rstrip())
                row = indent + row[cut + 1 :]
            else:
                rows.append("".join(row))
                row = list(indent)
            cols = sum(char_width(c) for c in row)
        row.append(ch)
        cols += w
    rows.append("".join(row))
    return rows


def to_rows(text: str, width: int) -> list[str]:
    """Text → sanitized, tab-expanded, wrapped rows (no line endings)."""
    rows: list[str] = []
    for line in sanitize(text).split("\n"):
        rows += wrap_line(_expand_tabs(line), width)
    return rows


@dataclass(frozen=True)
class Bounded:
    rows: list[str]
    cut: int  # rows left out at the end
    tail: list[str] = field(default_factory=list)  # rows shown after the cut, whatever was cut


def bound(rows: list[str], max_rows: int) -> Bounded:
    """Keep the first `max_rows` rows; the caller adds a note saying how many were left out."""
    if len(rows) <= max_rows:
        return Bounded(rows, 0)
    return Bounded(rows[:max_rows], len(rows) - max_rows)


def layout(
    text: str, width: int, max_rows: int, *, keep_last: Callable[[str], object] | None = None
) -> Bounded:
    """A reply as bounded rows. A last line that `keep_last` accepts (the registry's own
    "[output truncated …]" note) is set aside as the tail, so cutting the rows for the console
    cannot cut away the news that the text was already cut. Trailing newlines make no rows."""
    text = text.rstrip("\n")
    tail: list[str] = []
    if keep_last is not None:
        head, newline, last = text.rpartition("\n")
        if newline and keep_last(last):
            text, tail = head, to_rows(last, width)
    b = bound(to_rows(text, width), max_rows)
    return Bounded(b.rows, b.cut, tail)


def encode_rows(rows: list[str]) -> bytes:
    """Rows as bytes for a raw-mode port: CRLF after each, since nothing translates LF for us."""
    return "".join(row + "\r\n" for row in rows).encode("utf-8", "replace")


class RowStream:
    """Text that arrives piece by piece (a streamed answer) as bytes for the port, made safe and
    wrapped like `to_rows` does it, at most `max_rows` rows.

    A word is written once it is complete (a space or a line end follows), so it can move to the next
    row whole, and the spaces before it only when it stays on the row; `finish` writes what is left.
    Rows past `max_rows` are counted (`cut`), not written.
    """

    HANG = 2  # continuation rows' indent, as wrap_line's

    def __init__(self, width: int, max_rows: int) -> None:
        self.width = width
        self.max_rows = max_rows
        self.row = 0  # the row being written, from 0
        self.cut = 0  # rows not written: over max_rows
        self._col = 0
        self._spaces = 0  # spaces after the last word written, written with the next word
        self._word = ""

    def feed(self, text: str) -> bytes:
        out: list[str] = []
        for ch in sanitize(text.replace("\r", "")):
            if ch == "\n":
                self._put_word(out)
                self._newline(out)
            elif ch in " \t":
                self._put_word(out)
                col = self._col + self._spaces
                self._spaces += 8 - col % 8 if ch == "\t" else 1
            else:
                self._word += ch
                # A word longer than a row is broken where the row ends.
                if self.width and char_width_of(self._word) >= self.width - self.HANG:
                    self._put_word(out)
        return "".join(out).encode("utf-8", "replace")

    def finish(self) -> bytes:
        """The rest, and the end of the row being written (so what follows starts on its own row)."""
        out: list[str] = []
        self._put_word(out)
        if self._col:
            self._newline(out)
        return "".join(out).encode("utf-8", "replace")

    def _put_word(self, out: list[str]) -> None:
        word, self._word = self._word, ""
        if not word:
            return
        cols = char_width_of(word)
        if self.width and self._col + self._spaces + cols > self.width and self._col > self.HANG:
            self._newline(out)
            self._write(out, " " * self.HANG + word, self.HANG + cols)
        else:
            self._write(out, " " * self._spaces + word, self._spaces + cols)

    def _newline(self, out: list[str]) -> None:
        if self.row < self.max_rows:
            out.append("\r\n")
        self.row += 1
        self._col = self._spaces = 0

    def _write(self, out: list[str], text: str, cols: int) -> None:
        self._spaces = 0
        if self.row >= self.max_rows:
            if self._col == 0:
                self.cut += 1
        else:
            out.append(text)
        self._col += cols


def char_width_of(text: str) -> int:
    return sum(char_width(c) for c in text)
