"""Files that must survive a power cut whole: written beside, flushed to the disk, renamed over.

A rename alone is atomic against a crash of the process, not against the power going: until the
file's blocks and the directory entry reach the disk, a file renamed a moment before the cut can
come back empty or missing (ext4 with delalloc, where no earlier file is replaced, does exactly
that). What decides which version a board runs after a cut (an update's trial marker, an applied
config) is flushed first, then renamed, then its directory flushed.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def replace_durably(path: Path, data: bytes, mode: int = 0o600) -> None:
    """`path` holds `data`, whole, on the disk: the old content until the rename, the new after.
    A file already there keeps its permissions; a new one gets `mode`."""
    tmp = path.with_name(path.name + ".new")
    with contextlib.suppress(OSError):
        mode = path.stat().st_mode & 0o777
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, mode)
    with os.fdopen(fd, "wb") as f:  # a file object writes all of `data` (os.write may stop short)
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(path: Path) -> None:
    """Flush a directory's entries (a rename, a new link) to the disk."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
