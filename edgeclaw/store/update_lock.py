"""STATE/update.lock: work that an update must not cut short holds it; an update waits for it.

The daemon holds the lock SHARED (flock(2), LOCK_SH) while a scheduled job runs and while a call
to a tool named in `gateway.defer_updates_during` runs; any other process may hold it too, shared
or exclusive (`flock STATE/update.lock long-job.sh` takes it exclusive). An update takes it
EXCLUSIVE without waiting (LOCK_EX | LOCK_NB): while anyone holds it the update is deferred
(edgeclaw.admin.update_defer), and applied once it can take it.

A hold never waits either: when an outside process holds the lock exclusive, the daemon's own work
still runs (updates are kept out by that process already), and is counted here, so an update waits
for it as well. Who holds the lock is told from what the daemon knows of its own holds and, for
other processes, from /proc/locks (their pid and command line).
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
from collections.abc import Callable, Iterator
from pathlib import Path

LOCK_FILE = "update.lock"


class UpdateLock:
    """The daemon's side of STATE/update.lock: its own shared holds, and the update's exclusive try."""

    def __init__(self, state_dir: Path) -> None:
        self.path = state_dir / LOCK_FILE
        self._holds: dict[int, str] = {}  # hold number -> what holds it, e.g. "job nightly-flash"
        self._numbers = itertools.count()

    def _open(self) -> int:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)

    @contextlib.contextmanager
    def hold(self, what: str) -> Iterator[None]:
        """Hold the lock shared while the block runs; `what` is named to an update deferred by it."""
        number = next(self._numbers)
        self._holds[number] = what
        fd: int | None = None
        try:
            fd = self._open()
            with contextlib.suppress(BlockingIOError):  # held exclusive outside: counted in _holds
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            pass  # a state directory that cannot hold the file: _holds still defers updates
        try:
            yield
        finally:
            del self._holds[number]
            if fd is not None:
                os.close(fd)

    def guard_for(self, tools: list[str]) -> Callable[[str, str], contextlib.AbstractContextManager[None]]:
        """For the registry: (tool name, group) -> the lock held while a call to one of `tools`
        (names, `group:NAME`, `*`) runs, nothing held for the others."""
        names = set(tools)

        def guard(name: str, group: str) -> contextlib.AbstractContextManager[None]:
            if "*" in names or name in names or f"group:{group}" in names:
                return self.hold(f"tool call {name}")
            return contextlib.nullcontext()

        return guard

    def try_exclusive(self) -> int | None:
        """The lock taken exclusive (its descriptor: closing it releases the lock), or None while
        anyone holds it, the daemon's own work included."""
        if self._holds:
            return None
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    def holders(self) -> list[str]:
        """What holds the lock, as far as it can be told: the daemon's own holds, then other
        processes (by pid and command line) found in /proc/locks."""
        return [*self._holds.values(), *outside_holders(self.path)]


def outside_holders(path: Path) -> list[str]:
    """Processes other than this one holding a lock on `path`, from /proc/locks (Linux)."""
    try:
        st = path.stat()
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; a waiter's line has "->" after the number.
    wanted = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    found: list[str] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] == "->" or fields[5] != wanted:
            continue
        pid = fields[4]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        mode = "exclusive" if fields[3] == "WRITE" else "shared"
        try:
            raw = Path(f"/proc/{pid}/cmdline").read_bytes()
            command = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()[:200]
        except OSError:
            command = ""
        holder = f"pid {pid} ({command}, {mode})" if command else f"pid {pid} ({mode})"
        if holder not in found:
            found.append(holder)
    return found
