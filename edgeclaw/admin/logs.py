"""The daemon's recent log lines for the gateway tool's `logs`: the journal under systemd, else
the file stderr goes to, else a ring of the last lines kept in this process.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import re
import shutil
from pathlib import Path

from edgeclaw.admin.restart import under_systemd

log = logging.getLogger("edgeclaw.gateway")

LOG_RING_LINES = 2000


class LogRing(logging.Handler):
    """The daemon's last lines, for `gateway logs` when neither a journal nor a log file has them."""

    def __init__(self, size: int = LOG_RING_LINES) -> None:
        super().__init__()
        self.lines: collections.deque[str] = collections.deque(maxlen=size)
        self.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        with contextlib.suppress(Exception):
            self.lines.append(self.format(record))


_RING: LogRing | None = None


def install_log_ring() -> LogRing:
    global _RING
    if _RING is None:
        _RING = LogRing()
        logging.getLogger().addHandler(_RING)
    return _RING


def _systemd_unit() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            for part in reversed(line.split("/")):
                if part.endswith(".service"):
                    return part
    return None


LEVELS = ("debug", "info", "warning", "error", "critical")
_LEVEL_WORD = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")
# With a level filter, this many lines are read back to find `n` that pass it.
LOG_SCAN_LINES = 20000


def at_level(lines: list[str], level: str) -> list[str]:
    """The lines of records at `level` or above. A line without a level word (a traceback's, a
    message's second line) belongs to the record above it."""
    floor = LEVELS.index(level)
    kept: list[str] = []
    keep = False
    for line in lines:
        word = _LEVEL_WORD.search(line)
        if word is not None:
            keep = LEVELS.index(word.group(1).lower()) >= floor
        if keep:
            kept.append(line)
    return kept


async def read_logs(n: int, level: str | None = None) -> tuple[str, list[str]]:
    """The last `n` lines (of records at `level` or above): the journal under systemd, else stderr's
    file, else the in-process buffer."""
    if level is not None and level not in LEVELS:
        from edgeclaw.errors import ToolError

        raise ToolError(f"logs: unknown level {level!r} (expected one of: {', '.join(LEVELS)})")
    source, lines = await _read_lines(LOG_SCAN_LINES if level else n)
    if level is not None:
        lines = at_level(lines, level)
    return source, lines[-n:]


async def _read_lines(n: int) -> tuple[str, list[str]]:
    journalctl = shutil.which("journalctl")
    if under_systemd() and journalctl:
        unit = _systemd_unit()
        match = f"_SYSTEMD_UNIT={unit}" if unit else f"_SYSTEMD_INVOCATION_ID={os.environ['INVOCATION_ID']}"
        proc = await asyncio.create_subprocess_exec(
            journalctl, "-q", "--no-pager", "-o", "short-iso", "-n", str(n), match,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, err = await proc.communicate()
        if proc.returncode == 0 and out.strip():
            return "journal", out.decode(errors="replace").splitlines()[-n:]
        log.info(
            "journalctl gave nothing (%s); using the other log sources", err.decode(errors="replace").strip()
        )
    with contextlib.suppress(OSError):
        target = Path(os.readlink("/proc/self/fd/2"))
        if target.is_absolute() and _is_file(target):
            return f"file {target}", _tail(target, n)
    if _RING is not None:
        return "memory", list(_RING.lines)[-n:]
    return "none", []


def _is_file(path: Path) -> bool:
    return path.is_file()


def _tail(path: Path, n: int, block: int = 65536) -> list[str]:
    with path.open("rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        data = b""
        while size > 0 and data.count(b"\n") <= n:
            step = min(block, size)
            size -= step
            f.seek(size)
            data = f.read(step) + data
    return data.decode(errors="replace").splitlines()[-n:]
