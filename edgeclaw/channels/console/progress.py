"""A tool call's progress on the console: one line, redrawn in place while the call runs.

The console's turn hands this to the agent as the message's `on_progress`, so a tool that
reports progress (flashing a firmware image, an MCP server's long call) shows a bar on the
technician's terminal. The line is drawn with VT100's erase-line (`\\r` + `ESC [ K`) and wiped
before anything else is written — the streamed answer, a notice, the reply — so text never lands
after the bar. Updates come held to a pace by the tool (at most four a second), which a 9600-baud
line carries easily.
"""

from __future__ import annotations

from collections.abc import Callable

from edgeclaw.channels.cli_progress import bar_line
from edgeclaw.channels.console.editor import ERASE_LINE

Write = Callable[[bytes], None]


class ConsoleProgress:
    """The progress sink of one console turn; `wipe()` before other output, at the end of the turn."""

    def __init__(self, write: Write, width: int) -> None:
        self._write = write
        self._width = width or 80  # 0 = no wrapping: still one row of a usual terminal
        self.drawn = False

    def __call__(self, progress: float, total: float | None, message: str) -> None:
        # bar_line lets only printable text through: a tool's message is not trusted to be.
        text = bar_line(progress, total, message, self._width)
        self._write(ERASE_LINE + text.encode("utf-8", "replace"))
        self.drawn = True

    def wipe(self) -> None:
        if self.drawn:
            self._write(ERASE_LINE)
            self.drawn = False
