"""A pids cgroup per command: the fork-bomb limit that also holds for root.

RLIMIT_NPROC is not enforced by the kernel for root (nor for a process with
CAP_SYS_ADMIN or CAP_SYS_RESOURCE), and for other users it counts every
process of that user, the daemon's threads included. A pids cgroup caps the
command's own tree, whoever runs it. It also gives a reliable kill: every
process in the cgroup, including ones that left the process group with
setsid, can be found and killed.

Where the cgroup lives (`sandbox.pids_cgroup`):
  "auto"  cgroup v2 (`/sys/fs/cgroup/edgeclaw-sandbox`) or the v1 pids
          hierarchy (`/sys/fs/cgroup/pids/edgeclaw-sandbox`), when writable;
  ""      none;
  a path  a directory in a delegated subtree the daemon may write.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import secrets
import signal
import time
from pathlib import Path

log = logging.getLogger("edgeclaw.sandbox")

CGROUP_ROOT = Path("/sys/fs/cgroup")
PARENT_NAME = "edgeclaw-sandbox"


class PidsCgroup:
    """One command's cgroup: join it (by writing a pid to `procs_file`), kill everything in it, remove it."""

    def __init__(self, path: Path, v2: bool) -> None:
        self.path = path
        self.v2 = v2

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        try:
            return [int(x) for x in self.procs_file.read_text().split()]
        except (OSError, ValueError):
            return []

    def fork_failures(self) -> int:
        """How many forks the limit refused so far (pids.events `max`)."""
        try:
            for line in (self.path / "pids.events").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "max":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def kill(self) -> None:
        """SIGKILL every process in the cgroup; v2 does it atomically, v1 in a bounded loop."""
        if self.v2 and (self.path / "cgroup.kill").exists():
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
            return
        # v1: a process may fork between reading the list and the kill, so repeat a few times;
        # the pids limit bounds how many there can be.
        for _ in range(20):
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.01)

    def remove(self) -> None:
        """Remove the (empty) cgroup; killed processes may take a moment to leave it."""
        for _ in range(50):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError as e:
                if e.errno != errno.EBUSY:
                    log.warning("cannot remove cgroup %s: %s", self.path, e.strerror)
                    return
                self.kill()
                time.sleep(0.02)
        log.warning("cgroup %s still busy; left behind", self.path)


class PidsCgroups:
    """The parent under which each command gets its own pids cgroup."""

    def __init__(self, parent: Path, v2: bool) -> None:
        self.parent = parent
        self.v2 = v2

    @classmethod
    def find(cls, setting: str = "auto") -> PidsCgroups | None:
        """A usable parent for `setting`, or None (no cgroup file system, or not writable)."""
        if not setting:
            return None
        if setting != "auto":
            path = Path(setting)
            v2 = (path.parent / "cgroup.controllers").exists() or (path / "cgroup.controllers").exists()
            return cls._prepare(path, v2)
        controllers = CGROUP_ROOT / "cgroup.controllers"
        if controllers.exists():
            try:
                if "pids" not in controllers.read_text().split():
                    return None
            except OSError:
                return None
            return cls._prepare(CGROUP_ROOT / PARENT_NAME, True)
        if (CGROUP_ROOT / "pids" / "cgroup.procs").exists():
            return cls._prepare(CGROUP_ROOT / "pids" / PARENT_NAME, False)
        return None

    @classmethod
    def _prepare(cls, parent: Path, v2: bool) -> PidsCgroups | None:
        try:
            if v2:
                # Children of a v2 cgroup get pids.max only when the parent delegates the controller.
                with contextlib.suppress(OSError):
                    (parent.parent / "cgroup.subtree_control").write_text("+pids")
            parent.mkdir(exist_ok=True)
            if v2:
                (parent / "cgroup.subtree_control").write_text("+pids")
            probe = cls(parent, v2).create(8)
            probe.remove()
        except OSError as e:
            log.debug("no pids cgroup at %s: %s", parent, e)
            return None
        return cls(parent, v2)

    def create(self, max_pids: int) -> PidsCgroup:
        path = self.parent / f"cmd-{os.getpid()}-{secrets.token_hex(4)}"
        path.mkdir()
        try:
            (path / "pids.max").write_text(str(max_pids))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return PidsCgroup(path, self.v2)
