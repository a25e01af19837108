"""A tool call's progress for `edgeclaw tool call`: a bar on a terminal, plain lines otherwise.

It is the call's `ToolContext.progress` sink and writes to stderr, so stdout holds only the
answer (and `--json` stays one JSON object a script can parse). On a terminal the bar is redrawn
in place on one line and wiped when the call ends, before the answer is printed; elsewhere (a
pipe, a log, CI) each whole percent — or, without a total, each new message — is one line, as
`progress 42%: flashing app.hex: write 42% (...)`.
"""

from __future__ import annotations

import shutil
import sys
from typing import TextIO

BAR_WIDTH = 24


def bar_line(progress: float, total: float | None, message: str, width: int) -> str:
    """One frame of the bar, cut to the terminal's `width`. Only printable text reaches the
    terminal: a tool's message (an MCP server's, say) is not trusted to hold no escape sequences."""
    message = "".join(ch if ch.isprintable() else "?" for ch in " ".join(message.split()))
    if total:
        fraction = min(max(progress / total, 0.0), 1.0)
        filled = int(fraction * BAR_WIDTH)
        head = f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {int(fraction * 100):3d}%"
    else:
        head = f"[{'?' * BAR_WIDTH}] {progress:g}"
    return f"{head}  {message}"[: max(width - 1, 10)]


class TerminalProgress:
    """The `ProgressSink` of one CLI call; `close()` before printing the answer."""

    def __init__(self, out: TextIO | None = None, *, tty: bool | None = None, quiet: bool = False) -> None:
        self.out = out if out is not None else sys.stderr
        self.tty = self.out.isatty() if tty is None else tty
        self.quiet = quiet  # plain lines off (--json to a pipe); the bar on a terminal stays
        self._drawn = False
        self._last: int | str | None = None

    def __call__(self, progress: float, total: float | None, message: str) -> None:
        message = "".join(ch if ch.isprintable() else "?" for ch in " ".join(message.split()))
        if self.tty:
            width = shutil.get_terminal_size((80, 24)).columns
            self.out.write("\r\x1b[K" + bar_line(progress, total, message, width))
            self.out.flush()
            self._drawn = True
            return
        if self.quiet:
            return
        step: int | str = int(100 * progress / total) if total else message
        if step == self._last:
            return
        self._last = step
        figure = f"{step}%" if total else f"{progress:g}"
        self.out.write(f"progress {figure}: {message}\n")
        self.out.flush()

    def close(self) -> None:
        if self._drawn:
            self.out.write("\r\x1b[K")  # the answer starts on a clean line
            self.out.flush()
            self._drawn = False
