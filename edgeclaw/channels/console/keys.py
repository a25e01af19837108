"""What the keys typed on a console port are for: a line being edited, one key asked for, or type-ahead.

The session's reader hands every chunk from the port to `KeyInput.feed` at
once, whatever the session is doing. What a keystroke means depends on what
the session waits for:

- a line (the PIN, the prompt, a typed approval answer): the line editor gets it;
- one key (the `-- more --` prompt, an approval question): the next chunk
  answers it when it is one of the keys asked for; anything else is typing
  (a paste at `-- more --` ends the paging and becomes the next line; at an
  approval question it starts a typed answer);
- nothing (a turn is running, output is being written): Ctrl-C stops the turn
  or the output, anything else is kept as type-ahead for the next prompt
  (except before an approval question, where type-ahead is thrown away so a
  stray key can never answer it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from enum import Enum

from edgeclaw.channels.console.editor import CTRL_C, LineEditor, LineEvent
from edgeclaw.channels.console.port import PacedWriter

TYPEAHEAD_MAX = 1024
ENTER = (b"\r", b"\n", b"\r\n")


class Mode(Enum):
    BUSY = "busy"  # nobody reads: Ctrl-C interrupts, the rest is type-ahead
    LINE = "line"
    KEY = "key"


class KeyInput:
    """The keys of one port: read as lines (through the editor), as single keys, or kept as type-ahead."""

    def __init__(self, out: PacedWriter, editor: LineEditor, on_interrupt: Callable[[], None]) -> None:
        self.out = out
        self.editor = editor
        self.mode = Mode.BUSY
        self._on_interrupt = on_interrupt  # Ctrl-C while nobody reads a line or a key
        self._line_future: asyncio.Future[LineEvent] | None = None
        self._key_future: asyncio.Future[bytes] | None = None
        self._typeahead = bytearray()
        self.last_activity = time.monotonic()
        # After a key that answered a question, the Enter a habit adds is not the next line:
        # "any" swallows a leading CR, LF or CRLF of the next input, "lf" only an LF (CR came already).
        self.swallow_enter = ""
        self.key_prompt = ""  # the one-key question on screen, redrawn under a delivered message

    def feed(self, data: bytes) -> None:
        """A chunk from the port: to the line or key being read, else type-ahead (Ctrl-C interrupts)."""
        self.last_activity = time.monotonic()
        swallow, self.swallow_enter = self.swallow_enter, ""
        if swallow:
            data = _drop_enter(data, lf_only=swallow == "lf")
            if not data:
                return
        if self.mode is Mode.LINE:
            self._feed_line(data)
            return
        if self.mode is Mode.KEY:
            if self._key_future is not None and not self._key_future.done():
                self._key_future.set_result(data)
            return
        if CTRL_C in data:
            self._on_interrupt()
            data = data[data.rindex(CTRL_C) + 1 :]  # what was typed before Ctrl-C is abandoned too
            self._typeahead.clear()
        room = TYPEAHEAD_MAX - len(self._typeahead)
        self._typeahead += data[: max(room, 0)]

    def _feed_line(self, data: bytes) -> None:
        echo, event, rest = self.editor.feed(data)
        self.out.write(echo)
        if event is None:
            return
        self.mode = Mode.BUSY
        self._typeahead[:0] = rest
        if self._line_future is not None and not self._line_future.done():
            self._line_future.set_result(event)

    def keep(self, keys: bytes) -> None:
        """Keys that were not an answer: the start of the next line read."""
        self._typeahead[:0] = keys[:TYPEAHEAD_MAX]

    def drop_typeahead(self) -> None:
        self._typeahead.clear()

    async def read_line(
        self,
        prompt: str,
        *,
        mask: str | None = None,
        idle_s: float = 0,
        complete: Callable[[str], list[str]] | None = None,
    ) -> LineEvent | None:
        """The next line from the editor; None when `idle_s` pass with no keystroke.

        `complete` (Tab completion) is given for the prompt's own lines, which also have Up/Down
        history (not a PIN or an answer).
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[LineEvent] = loop.create_future()
        self._line_future = fut
        history = complete is not None
        self.out.write(self.editor.start(prompt, mask=mask, history=history, complete=complete))
        self.mode = Mode.LINE
        if self._typeahead:
            data = bytes(self._typeahead)
            self._typeahead.clear()
            self._feed_line(data)
        try:
            while True:
                if not idle_s:
                    return await fut
                left = self.last_activity + idle_s - time.monotonic()
                if left <= 0:
                    return None
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(fut), left)
        finally:
            self.mode = Mode.BUSY
            self._line_future = None

    async def read_key(self, idle_s: float = 0) -> bytes | None:
        """The next chunk of keys; None after `idle_s` without one."""
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self._key_future = fut
        self.mode = Mode.KEY
        try:
            if not idle_s:
                return await fut
            try:
                return await asyncio.wait_for(fut, idle_s)
            except TimeoutError:
                return None
        finally:
            self.mode = Mode.BUSY
            self._key_future = None


def lone_key(keys: bytes) -> bytes | None:
    """The one key this input is, Enter (CR, LF or CRLF) as b"\\r", or None when it is more than one key
    (typing, a paste, an escape sequence)."""
    if keys in ENTER:
        return b"\r"
    for enter in (b"\r\n", b"\r", b"\n"):
        if keys.endswith(enter):
            keys = keys[: -len(enter)]
            break
    return keys if len(keys) == 1 else None


def enter_after(keys: bytes) -> str:
    """Which Enter may still follow a key that answered: any, only the LF of a CRLF, or none."""
    if keys.endswith((b"\n",)):
        return ""
    return "lf" if keys.endswith(b"\r") else "any"


def _drop_enter(data: bytes, *, lf_only: bool) -> bytes:
    if data.startswith(b"\n"):
        return data[1:]
    if not lf_only and data.startswith(b"\r"):
        return data[2:] if data.startswith(b"\r\n") else data[1:]
    return data
