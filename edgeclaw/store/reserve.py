"""The disk reserve: space on the state directory's file system kept for the daemon's own state.

The workspace usually lies on the same file system as the state database
(`<state dir>/workspace`), so a sandboxed command that fills the workspace
fills the disk the database writes to, and every call that records anything
(a session message, the MQTT request ledger, the outbox) would fail. The
reserve is a preallocated file in the state directory (`edgeclaw.db.reserve`,
hidden from sandboxed commands like the rest of the state directory). When a
database write meets a full disk, the database layer deletes it, logs loudly
and retries: the daemon's own writes then have its size to go on with. It is
made again once the file system has room for it twice over, so recreating it
never fills the disk itself.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("edgeclaw.store.reserve")

RESERVE_SUFFIX = ".reserve"
_ZEROS = b"\0" * (64 * 1024)


def free_bytes(path: Path) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s file system (None when unknown)."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


class DiskReserve:
    """One preallocated file of `size` bytes at `path`; size 0 = no reserve."""

    def __init__(self, path: Path, size: int) -> None:
        self.path = path
        self.size = size
        self.released_at: float | None = None  # when it was last given up for the database

    @property
    def enabled(self) -> bool:
        return self.size > 0

    @property
    def present(self) -> bool:
        try:
            return self.path.stat().st_size >= self.size
        except OSError:
            return False

    def ensure(self) -> bool:
        """Make the reserve when it is missing and the file system has room for it twice over.

        Returns whether the reserve is in place afterwards. Never raises: a
        reserve that cannot be made is a warning, not a reason to stop.
        """
        if not self.enabled:
            return False
        if self.present:
            return True
        free = free_bytes(self.path.parent)
        if free is None or free < 2 * self.size:
            return False
        tmp = self.path.with_name(f"{self.path.name}.tmp-{os.getpid()}")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
            try:
                _allocate(fd, self.size)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except OSError as e:
            with contextlib.suppress(OSError):
                tmp.unlink()
            log.warning("cannot make the %d-byte disk reserve %s: %s", self.size, self.path, e.strerror or e)
            return False
        if self.released_at is not None:
            log.warning(
                "disk space is back: the %d-byte reserve for the daemon's own state is in place again (%s)",
                self.size,
                self.path,
            )
            self.released_at = None
        return True

    def release(self) -> bool:
        """Give the reserve's space back to the file system; True when there was something to give."""
        if not self.enabled:
            return False
        try:
            size = self.path.stat().st_size
            self.path.unlink()
        except FileNotFoundError:
            return False
        except OSError as e:
            log.error("the disk is full and the reserve %s cannot be released: %s", self.path, e.strerror)
            return False
        self.released_at = time.time()
        log.error(
            "the disk is full: released the %d-byte reserve %s so the daemon's own state can still be "
            "written; free some space on %s (it is made again when there is room)",
            size,
            self.path,
            self.path.parent,
        )
        return size > 0

    def as_dict(self) -> dict[str, object]:
        return {
            "bytes": self.size,
            "present": self.present,
            "released_at": round(self.released_at, 3) if self.released_at is not None else None,
        }


def _allocate(fd: int, size: int) -> None:
    """Really take the blocks (a sparse file would reserve nothing)."""
    try:
        os.posix_fallocate(fd, 0, size)
        return
    except OSError as e:
        if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            raise
    left = size
    while left > 0:
        left -= os.write(fd, _ZEROS[: min(left, len(_ZEROS))])


def same_file_system(a: Path, b: Path) -> bool:
    """Do `a` and `b` (or their nearest existing ancestors) lie on one file system?"""

    def device(path: Path) -> int | None:
        for candidate in (path, *path.parents):
            try:
                return os.stat(candidate).st_dev
            except OSError:
                continue
        return None

    first, second = device(a), device(b)
    return first is not None and first == second
