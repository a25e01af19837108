"""What a sandbox backend is: something that wraps a command line so it runs confined.

A backend only builds an argument vector (`wrap`); starting, watching and
killing the process is `edgeclaw.sandbox.process`, and choosing a backend is
`edgeclaw.sandbox.manager`. The `SandboxSpec` says what one command may see
and do, independent of the backend that enforces it.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import field
from pathlib import Path
from typing import ClassVar

from edgeclaw.records import dataclass

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

# /etc entries a shell command usually needs; everything else in /etc (shadow,
# ssh host keys, Wi-Fi passwords, /etc/edgeclaw) stays out of sight.
DEFAULT_ETC_ALLOW: tuple[str, ...] = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "group",
    "host.conf",
    "hostname",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
)


# The top-level directories a command sees as on the host, read-only: the programs and their
# libraries. Besides them only /etc (reduced to `etc_allow`), a private /dev, /proc and /tmp, and
# the workspace and `visible` paths exist; /var, /home, /root, /srv, /opt, /mnt, /media, /boot,
# /sys and whatever else lies in / are out of sight. An allowlist: a directory that appears in /
# later, or that this list does not know, is hidden, not shown.
SYSTEM_DIRS: tuple[str, ...] = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")


@dataclass(frozen=True, slots=True)
class Limits:
    """Resource limits for one sandboxed command (and everything it starts)."""

    max_processes: int = 64
    # Address space per process (RLIMIT_AS); 0 = none, for a command whose memory its cgroup bounds
    # (Node and the JVM reserve far more address space than they use, and die at start under it).
    max_memory_bytes: int = 512 * 1024 * 1024
    max_file_bytes: int = 64 * 1024 * 1024  # largest file it may write
    max_open_files: int = 256


@dataclass(frozen=True, slots=True)
class SandboxSpec:
    """What one command may see and do.

    `workspace` is the only writable tree. Every path in `hidden` is made
    invisible (directories become empty, files become empty and unreadable
    where the backend can manage it). `etc_allow` names the /etc entries that
    stay visible; the rest of /etc is replaced. `visible` are paths the command
    must be able to read (read-only) outside the system directories
    (`SYSTEM_DIRS`): a program's own installation, say a virtualenv under /tmp
    or an interpreter under the daemon user's home. `unix_sockets`: the command may make unix-domain
    sockets (a multi-process program's own IPC, such as chromium's); off for shell commands, for which
    a socket in /run would be a way out. `keep_fds`: descriptors the command inherits through the
    sandbox (a pipe the daemon talks to it over).
    """

    workspace: Path
    cwd: Path
    hidden: tuple[Path, ...] = ()
    network: bool = False
    limits: Limits = field(default_factory=Limits)
    etc_allow: tuple[str, ...] = DEFAULT_ETC_ALLOW
    timeout_s: float = 300.0
    visible: tuple[Path, ...] = ()
    unix_sockets: bool = False
    keep_fds: tuple[int, ...] = ()


class SandboxBackend(ABC):
    """One way of confining a command: firejail, bubblewrap, or none."""

    name: ClassVar[str]
    # False only for the host backend: callers pick the host timeout and say so.
    confines: ClassVar[bool] = True
    # Lines the backend itself prints on the command's stderr that mean nothing to the caller.
    noise_lines: ClassVar[frozenset[str]] = frozenset()

    def __init__(self, binary: str = "") -> None:
        self.binary = binary

    def locate(self) -> str | None:
        """The backend's executable, or None when it is not installed."""
        if not self.binary:
            return ""
        return shutil.which(self.binary)

    @abstractmethod
    def wrap(self, argv: Sequence[str], spec: SandboxSpec) -> list[str]:
        """The argument vector that runs `argv` confined by `spec`."""

    def wrap_with_fds(self, argv: Sequence[str], spec: SandboxSpec) -> tuple[list[str], tuple[int, ...]]:
        """`wrap`, plus the descriptors the wrapped command must inherit (the caller closes them
        once it has started the command). For a backend that binds what it opened itself."""
        return self.wrap(argv, spec), ()


def unfollowed(path: Path) -> bool:
    """Whether `path` names what it is without a symlink anywhere on the way (it is its real path).

    A visible path must be: one that is, or passes, a symlink shows whatever the link points at
    when the sandbox is made, which whoever can change the link chooses.
    """
    return os.path.isabs(path) and os.path.realpath(path) == os.path.normpath(path)


def only_trusted_can_swap(path: Path) -> bool:
    """Whether only root or this process's user could replace `path` (or a directory on the way)
    with a symlink: every directory from / down to its parent is owned by one of them and writable
    by no one else, save a sticky one (such as /tmp) whose entry on the way is theirs.

    A symlink on the way counts as its directory (only whoever may write there may change it) and
    its target is checked the same way. For a path looked up by name after the check (firejail),
    or reached through a symlink: a swap by someone else would show what they chose.
    """
    return _swappable_only_by_trusted(path) and _swappable_only_by_trusted(Path(os.path.realpath(path)))


def _swappable_only_by_trusted(path: Path) -> bool:
    trusted = {0, os.geteuid()}
    parts = Path(os.path.normpath(path)).parts
    for depth in range(1, len(parts)):
        directory = Path(*parts[:depth])
        try:
            info = os.stat(directory)  # the directory a lookup goes through, a symlink followed
            entry = os.lstat(directory / parts[depth])
        except OSError:
            return False
        if info.st_uid not in trusted:
            return False
        shared = info.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if shared and (not info.st_mode & stat.S_ISVTX or entry.st_uid not in trusted):
            return False
    return True


def open_unfollowed(path: Path) -> int | None:
    """An O_PATH descriptor for `path`, or None when reaching it meant following a symlink.

    What is opened is checked after opening (/proc/self/fd names what the descriptor holds), so
    a symlink swapped in before or after the check cannot change what a bind of the descriptor
    shows. The descriptor is placed at 64 or above, clear of the low numbers shells use.
    """
    try:
        fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if os.readlink(f"/proc/self/fd/{fd}") != os.path.normpath(path):
            return None
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 64)
    except OSError:
        return None
    finally:
        os.close(fd)


def prlimit_prefix(limits: Limits, *, nproc: bool = True) -> list[str]:
    """`prlimit` (util-linux) sets the limits and execs the command: no Python runs in the child."""
    prefix = [shutil.which("prlimit") or "/usr/bin/prlimit"]
    if limits.max_memory_bytes > 0:
        prefix.append(f"--as={limits.max_memory_bytes}")
    prefix += [f"--fsize={limits.max_file_bytes}", f"--nofile={limits.max_open_files}"]
    if nproc:
        prefix.append(f"--nproc={limits.max_processes}")
    # prlimit does not take `--` before the command on every util-linux version; the
    # command here is always an absolute path, so it cannot be mistaken for an option.
    return prefix


def hidden_entries(state_dir: Path, workspace: Path) -> list[Path]:
    """What of the state directory to hide: all of it, even when the workspace lies inside.

    Backends cover a hidden directory *and* keep a workspace inside it visible
    (`split_hidden`), so a database, WAL file or key created while a command
    runs is covered too. Only when the workspace is the state directory itself
    (an odd layout) are edgeclaw's own files in it listed instead.
    """
    state = Path(os.path.realpath(state_dir))
    ws = Path(os.path.realpath(workspace))
    if not state.exists():
        return []
    if ws == state:
        return [p for p in state.iterdir() if p.name.startswith("edgeclaw.db") or p.suffix == ".key"]
    return [state]


def split_hidden(hidden: Sequence[Path], workspace: Path) -> tuple[list[Path], list[Path]]:
    """Hidden paths as (directories holding the workspace, shallowest first; everything else).

    The workspace itself is never hidden. A path inside a hidden ancestor is
    dropped (the ancestor covers it) unless it is inside the workspace, where
    the backend must cover it after making the workspace visible.
    """
    ancestors = sorted(
        {p for p in hidden if p != workspace and workspace.is_relative_to(p)}, key=lambda p: len(p.parts)
    )
    others = [
        p
        for p in dict.fromkeys(hidden)
        if p not in ancestors
        and p != workspace
        and (p.is_relative_to(workspace) or not any(p.is_relative_to(a) for a in ancestors))
    ]
    return ancestors, others


def entries_beside(ancestor: Path, workspace: Path) -> list[Path]:
    """Every entry under `ancestor` that is not on the way down to `workspace`.

    For a backend that cannot cover a directory and uncover a path inside it.
    A snapshot: an entry created after the command starts is not in it.
    """
    out: list[Path] = []
    level = ancestor
    for part in workspace.relative_to(ancestor).parts:
        nxt = level / part
        with contextlib.suppress(OSError):
            out.extend(p for p in level.iterdir() if p != nxt)
        level = nxt
    return out


def hidden_around(hidden: Sequence[Path], keep: Sequence[Path]) -> list[Path]:
    """`hidden` with every path in `keep` left visible: a hidden directory holding a kept path is
    replaced by the entries beside the way down to it (like `entries_beside`, for several paths).

    For programs whose own files lie in a hidden tree (an interpreter installed under the daemon
    user's home). A snapshot, as `entries_beside` is; a hidden path inside a kept one stays hidden.
    """
    keep = [Path(p) for p in keep]
    out: list[Path] = []

    def walk(level: Path, inside: list[Path]) -> None:
        names = {k.relative_to(level).parts[0] for k in inside}
        with contextlib.suppress(OSError):
            out.extend(p for p in level.iterdir() if p.name not in names)
        for name in names:
            step = level / name
            if step in inside:
                continue  # kept whole
            walk(step, [k for k in inside if k.is_relative_to(step)])

    for path in hidden:
        inside = [k for k in keep if k != path and k.is_relative_to(path)]
        if any(path == k for k in keep) and not inside:
            continue  # asked to be kept itself
        if inside:
            walk(path, inside)
        else:
            out.append(path)
    return list(dict.fromkeys(out))
