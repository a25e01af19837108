"""Markdown split into search chunks: at headings first, then paragraphs, a few hundred tokens each.

A chunk keeps the path of headings above it ("Greenhouse > Fans"), because a
paragraph such as "It is on GPIO 22" means nothing without its heading. Code
fences are kept whole where they fit, and a `#` inside one is not a heading.

Consecutive chunks of one section overlap: the next chunk starts with the
last paragraph (or the last `overlap_tokens` of it) of the one before, so a
fact that straddles the cut is found from either side. Sizes are estimated at
four characters a token, as everywhere else in edgeclaw.

Only ATX headings (`#`, `##`, ...) count; setext underlines are read as text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator

from edgeclaw.records import dataclass

CHARS_PER_TOKEN = 4

_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)[ \t#]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


@dataclass(frozen=True, slots=True)
class Chunk:
    seq: int  # position in the document, from 0
    heading: str  # the headings above it, outermost first, joined with " > "
    text: str
    start_line: int  # 1-based, inclusive
    end_line: int

    @property
    def embed_text(self) -> str:
        """What is embedded and hashed: the heading path gives the paragraph its meaning."""
        return f"{self.heading}\n{self.text}" if self.heading else self.text

    @property
    def text_hash(self) -> str:
        return text_hash(self.embed_text)


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass(frozen=True, slots=True)
class _Block:
    """A paragraph (or a whole code fence) with its line span."""

    text: str
    start: int
    end: int

    @property
    def tokens(self) -> int:
        return estimate_tokens(self.text)


def estimate_tokens(text: str) -> int:
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def _sections(lines: list[str]) -> Iterator[tuple[str, list[_Block]]]:
    """(heading path, paragraphs) per section, in document order."""
    path: list[tuple[int, str]] = []  # (level, title) of the headings in force
    blocks: list[_Block] = []
    current: list[str] = []
    start = 0
    fence: str | None = None

    def close(end: int) -> None:
        nonlocal current
        text = "\n".join(current).strip("\n")
        if text.strip():
            blocks.append(_Block(text, start, end))
        current = []

    for number, line in enumerate(lines, 1):
        fence_match = _FENCE.match(line)
        if fence is not None:
            current.append(line)
            if (
                fence_match
                and fence_match.group(1)[0] == fence[0]
                and len(fence_match.group(1)) >= len(fence)
            ):
                fence = None
            continue
        if fence_match:
            if not current:
                start = number
            fence = fence_match.group(1)
            current.append(line)
            continue
        heading = _HEADING.match(line)
        if heading:
            close(number - 1)
            yield " > ".join(t for _, t in path), blocks
            blocks = []
            level = len(heading.group(1))
            path = [(lv, t) for lv, t in path if lv < level]
            path.append((level, heading.group(2).strip()))
            continue
        if not line.strip():
            close(number - 1)
            continue
        if not current:
            start = number
        current.append(line)
    close(len(lines))
    yield " > ".join(t for _, t in path), blocks


def _split_long(block: _Block, max_chars: int) -> list[_Block]:
    """A paragraph bigger than a chunk: by lines, and a line still too long at spaces (or hard)."""
    pieces: list[_Block] = []
    buf: list[str] = []
    buf_start = block.start
    size = 0
    for offset, line in enumerate(block.text.split("\n")):
        number = block.start + offset
        while len(line) > max_chars:
            if buf:
                pieces.append(_Block("\n".join(buf), buf_start, number - 1 if number > buf_start else number))
                buf, size = [], 0
            cut = line.rfind(" ", 0, max_chars)
            cut = cut if cut > max_chars // 2 else max_chars
            pieces.append(_Block(line[:cut], number, number))
            line = line[cut:].lstrip(" ")
        if size + len(line) + 1 > max_chars and buf:
            pieces.append(_Block("\n".join(buf), buf_start, number - 1))
            buf, size = [], 0
        if not buf:
            buf_start = number
        buf.append(line)
        size += len(line) + 1
    if buf:
        pieces.append(_Block("\n".join(buf), buf_start, block.end))
    return [p for p in pieces if p.text.strip()]


def _tail(block: _Block, max_chars: int) -> _Block:
    """The end of `block`, at most `max_chars`, starting at a word."""
    if len(block.text) <= max_chars:
        return block
    text = block.text[-max_chars:]
    space = text.find(" ")
    if 0 <= space < len(text) // 2:
        text = text[space + 1 :]
    return _Block(text, block.end - text.count("\n"), block.end)


def chunk_markdown(text: str, *, max_tokens: int = 256, overlap_tokens: int = 32) -> list[Chunk]:
    """The chunks of a markdown text (an empty or blank text has none)."""
    if max_tokens < 16:
        raise ValueError(f"max_tokens must be at least 16, got {max_tokens}")
    if not 0 <= overlap_tokens < max_tokens // 2:
        raise ValueError(f"overlap_tokens must be between 0 and half of max_tokens, got {overlap_tokens}")
    max_chars = max_tokens * CHARS_PER_TOKEN
    overlap_chars = overlap_tokens * CHARS_PER_TOKEN
    chunks: list[Chunk] = []
    for heading, blocks in _sections(text.replace("\r\n", "\n").split("\n")):
        pieces = [p for b in blocks for p in (_split_long(b, max_chars) if len(b.text) > max_chars else [b])]
        current: list[_Block] = []
        size = 0
        fresh = False  # the current chunk holds more than the overlap carried from the last one

        for piece in pieces:
            if current and size + len(piece.text) + 2 > max_chars:
                chunks.append(_chunk(len(chunks), heading, current))
                carried = _tail(current[-1], overlap_chars) if overlap_chars else None
                current = [carried] if carried is not None and carried.text.strip() else []
                size = sum(len(b.text) + 2 for b in current)
                if current and size + len(piece.text) + 2 > max_chars:
                    current, size = [], 0  # no room for the overlap beside this piece
                fresh = False
            current.append(piece)
            size += len(piece.text) + 2
            fresh = True
        if current and fresh:
            chunks.append(_chunk(len(chunks), heading, current))
    return chunks


def _chunk(seq: int, heading: str, blocks: list[_Block]) -> Chunk:
    body = "\n\n".join(b.text for b in blocks)
    return Chunk(seq, heading, body, blocks[0].start, blocks[-1].end)
