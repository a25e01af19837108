"""A reply on the console: wrapped, cut at `max_output_lines`, paged every `page_lines` rows.

Rows go out a few at a time, so Ctrl-C (`stop`) takes effect within a row or
two. At `-- more --` Space or Enter shows the next page, `a` all of it, `q`
(or Ctrl-C, Ctrl-D, going idle) ends it; keys that are not paging keys (a
paste, a command typed ahead) end the paging too and are kept, to become the
next line at the prompt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from edgeclaw.channels.console.editor import CTRL_C, CTRL_D, ERASE_LINE
from edgeclaw.channels.console.keys import KeyInput, lone_key
from edgeclaw.channels.console.port import PacedWriter
from edgeclaw.channels.console.render import Bounded, encode_rows, layout
from edgeclaw.tools.outcome import TRUNCATION_NOTE
from edgeclaw.wording import plural

if TYPE_CHECKING:
    from edgeclaw.channels.console.session import SessionOptions


class Pager:
    """Shows replies on one port, a page at a time; `stop` ends the one being shown."""

    def __init__(
        self,
        out: PacedWriter,
        keys: KeyInput,
        options: SessionOptions,
        say: Callable[[str], None],
        idle_s: Callable[[], float],
    ) -> None:
        self.out = out
        self.keys = keys
        self.options = options
        self._say = say
        self._idle_s = idle_s  # how long `-- more --` waits for a key (0 = for ever)
        self.active = False
        self._stopped = False

    def stop(self) -> bool:
        """Ctrl-C: the output being written stops here; False when none is."""
        if not self.active:
            return False
        self.out.discard()
        self._stopped = True
        return True

    async def show(self, text: str) -> None:
        """A reply: wrapped, cut at max_output_lines, paged every page_lines rows; Ctrl-C stops it.

        The registry's own "[output truncated …]" note is kept out of the console's cut: it is
        shown at the end whatever the console cut or the technician skipped.
        """
        self.active, self._stopped = True, False
        opts = self.options
        try:
            await self._page(
                layout(text, opts.width, opts.max_output_lines, keep_last=TRUNCATION_NOTE.fullmatch)
            )
        finally:
            self.active = False
        # Not in the `finally`: when the session is being torn down (port lost, daemon stopping)
        # the writer task is cancelled with this one, and waiting for it would never end.
        await self.out.drain()

    async def _page(self, bounded: Bounded) -> None:
        opts = self.options
        rows = bounded.rows
        total = len(rows)
        page = opts.page_lines or total
        shown = 0
        while shown < total:
            end = min(shown + page, total)
            # A few rows at a time, so Ctrl-C takes effect within a row or two.
            for i in range(shown, end, 4):
                if self._stopped:
                    break
                self.out.write(encode_rows(rows[i : min(i + 4, end)]))
                await self.out.drain()
            if self._stopped:
                self._say("[output stopped]")
                self.out.write(encode_rows(bounded.tail))
                return
            shown = end
            if shown < total and opts.page_lines:
                choice = await self._more(shown, total + bounded.cut)
                if choice in ("quit", "typing"):
                    self._say(f"[{plural(total - shown + bounded.cut, 'more row')} not shown]")
                    self.out.write(encode_rows(bounded.tail))
                    return
                if choice == "all":
                    page = total
        if bounded.cut:
            self._say(
                f"[{plural(bounded.cut, 'more row')} cut: the console shows at most "
                f"{opts.max_output_lines}; ask for less, or read it in parts]"
            )
        self.out.write(encode_rows(bounded.tail))

    async def _more(self, shown: int, total: int) -> str:
        """ "next", "all", "quit", or "typing": keys that are not paging keys (a paste, a command typed
        ahead) end the paging and are kept, to become the next line at the prompt."""
        keys = self.keys
        keys.key_prompt = f"-- more: {shown} of {total} rows; Space/Enter next page, a all, q quit --"
        self.out.write(keys.key_prompt.encode())
        try:
            typed = await keys.read_key(self._idle_s())
            while typed is not None and typed[:1] == b"\x1b":
                typed = await keys.read_key(self._idle_s())  # a cursor key: not typing, not an answer
            if typed is None:
                return "quit"
            if bytes([CTRL_C]) in typed or typed[:1] == bytes([CTRL_D]):
                return "quit"
            key = lone_key(typed)
            if key in (b" ", b"\r"):
                keys.swallow_enter = "lf" if typed.endswith(b"\r") else ""  # a CRLF terminal's LF
                return "next"
            if key in (b"a", b"A"):
                return "all"
            if key in (b"q", b"Q"):
                return "quit"
            keys.keep(typed)
            return "typing"
        finally:
            self.out.write(ERASE_LINE)
