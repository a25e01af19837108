"""Where the media tools put what they make: a workspace path, written atomically."""

from __future__ import annotations

import time
from pathlib import Path

from edgeclaw.tools.fs.file_io import write_atomically
from edgeclaw.tools.fs.workspace import Workspace

MEDIA_DIR = "media"


def output_path(ws: Workspace, asked: str | None, stem: str, suffix: str) -> tuple[Path, str]:
    """The resolved path to write (the caller's, else `media/{stem}-{time}.{suffix}`) and how it is
    shown. The caller's path is checked like every workspace path; its suffix must match."""
    if asked:
        if not asked.lower().endswith("." + suffix):
            from edgeclaw.errors import ToolRefused

            raise ToolRefused(f"refused path {asked!r}: a {suffix} file must end in .{suffix}")
        user = asked
    else:
        user = (
            f"{MEDIA_DIR}/{stem}-{time.strftime('%Y%m%d-%H%M%S')}-{time.monotonic_ns() % 1000:03d}.{suffix}"
        )
    path = ws.resolve(user, for_write=True)
    return path, ws.display(path)


def save(ws: Workspace, path: Path, data: bytes, shown: str) -> None:
    write_atomically(ws, path, data, shown)


def size_text(n: int) -> str:
    if n < 1024:
        return f"{n} B"
    return f"{n / 1024:.1f} KiB" if n < 1024 * 1024 else f"{n / (1024 * 1024):.1f} MiB"
