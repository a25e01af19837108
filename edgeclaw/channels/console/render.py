"""Replies as terminal rows: control characters made harmless, long lines wrapped, output bounded.

Tool output can hold anything a file or a device held, including escape
sequences that would retitle, recolour or reprogram the technician's
terminal; every control character except newline and tab is shown in caret
form (ESC as `^[`) instead of being sent. Tabs become spaces to the next
multiple of 8 so wrapping can count columns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from edgeclaw.channels.console.editor import char_width


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
