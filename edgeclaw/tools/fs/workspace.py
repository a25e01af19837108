"""The workspace: the directory tree (plus a few extra prefixes) that the fs tools may touch.

Every path a model hands to a tool goes through `Workspace.resolve`, which
returns a real absolute path or raises `ToolRefused`. The rules fail closed:
a path that merely *looks* like a traversal attempt is refused even when it
would end up inside, because a refusal that is easy to explain beats a clever
normalisation that is easy to get wrong.

Rules, in the order they are checked (`check_syntax`, then `resolve`):

* the path must be a non-empty, non-blank string of at most 4096 characters;
* no NUL byte and no other ASCII control character (a newline in a file name
  would also corrupt `file:line: text` outputs);
* no leading `~`: home-directory expansion is *not* performed, and creating a
  literal `~` directory would surprise everyone, so such paths are refused;
* no percent-encoded `.`, `/`, `\\` or NUL (`%2e`, `%2f`, `%5c`, `%00`) at any
  of a few decoding depths (`%252e` is `%2e` after one round), and no `%c0` /
  `%c1` bytes, which only occur in overlong UTF-8 encodings of those
  characters. Other escapes (`report%20v2.txt`) are ordinary file names: the
  tools never URL-decode anything, this is defence in depth;
* no `..` component, splitting on `/` *and* `\\` (so `..\\..\\etc` is refused
  too, although `\\` is an ordinary character in Linux file names);
* after symlinks are resolved (`os.path.realpath`, non-strict, so the deepest
  existing ancestor of a not-yet-existing path is what counts, and a dangling
  symlink is judged by its target), the path must be the root, an extra path,
  or below one of them, compared component-wise (`/ws2` is not inside `/ws`).

Checking the name is not enough against a concurrent symlink swap: a name
that was a regular file when it was checked can be a symlink to
`/proc/self/environ` a moment later. So nothing is opened by its full path.
`Workspace.open` walks from the root one component at a time, each relative
to the descriptor of the one above and with `O_NOFOLLOW` (the resolved path
is symlink-free, so a symlink met on the way was swapped in), and checks the
opened descriptor again through `/proc/self/fd`; missing directories are
created the same way (`Workspace.make_dirs`).

Every reader of a workspace file (the fs tools, the system prompt's context
files, flash images) goes through `Workspace.read_file`: one such open, then
type, link count and size checked with `fstat` on that descriptor, and the
bytes read from it, never more than the limit. Whatever was checked is what
is read.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import field
from pathlib import Path
from urllib.parse import unquote

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass

__all__ = ["FileContent", "FileTooLarge", "IsADirectory", "Workspace", "format_size", "refuse_hard_links"]

_MAX_PATH_CHARS = 4096
# `%` + two hex digits; decoded a few rounds deep to catch `%252e` and friends.
_PERCENT = re.compile(r"%([0-9A-Fa-f]{2})")
_MAX_DECODE_ROUNDS = 4
_PERCENT_FORBIDDEN = {ord("."): "'.'", ord("/"): "'/'", ord("\\"): "'\\'", 0: "NUL"}
# 0xC0 and 0xC1 never start valid UTF-8; they only appear in overlong forms such as %c0%ae ('.').
_OVERLONG_LEADS = frozenset({0xC0, 0xC1})
_SEPARATORS = re.compile(r"[/\\]")
_PROC_FD = "/proc/self/fd"
# stat errors that mean "nothing there" (a dangling or looping symlink counts as nothing).
_ABSENT = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})
_READ_CHUNK = 64 * 1024
# A directory met on the walk that is not one any more: O_DIRECTORY | O_NOFOLLOW on a symlink gives
# ENOTDIR (or ELOOP); on a final component, O_NOFOLLOW gives ELOOP.
_SWAPPED = frozenset({errno.ENOTDIR, errno.ELOOP})
_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def format_size(n: int) -> str:
    """A byte count as a person reads it: "812 bytes", "4.0 KiB (4096 bytes)"."""
    if n < 1024:
        return f"{n} bytes"
    size = float(n)
    for unit in ("KiB", "MiB", "GiB"):
        size /= 1024
        if size < 1024 or unit == "GiB":
            break
    return f"{size:.1f} {unit} ({n} bytes)"


class FileTooLarge(ToolRefused):
    """A workspace file over the size its reader accepts (measured on the open descriptor)."""

    def __init__(self, shown: str, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit
        super().__init__(f"refused: {shown} is {format_size(size)}, over the {format_size(limit)} file limit")


class IsADirectory(ToolError):
    """A reader was given a directory where it needs a file."""


@dataclass(frozen=True, slots=True)
class FileContent:
    """What `Workspace.read_file` read: the bytes, the size `fstat` gave, and whether it was cut."""

    data: bytes
    size: int
    truncated: bool = False


def refuse_hard_links(st: os.stat_result, shown: str) -> None:
    """Refuse a file with more than one name: another name may lie outside the workspace.

    A hard link is not a symlink: nothing about the name inside says where else
    the file lives (the daemon's config, an API key file), so reading it could
    show, and appending could change, a file outside. (write_file and edit_file
    replace the name, never the file.)
    """
    if st.st_nlink > 1:
        raise ToolRefused(
            f"refused path {shown!r}: it has {st.st_nlink} hard links, and another one may lie "
            "outside the workspace"
        )


def _read_upto(fd: int, limit: int) -> bytes:
    """At most `limit` bytes from `fd`, up to its end."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, _READ_CHUNK))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _real(path: Path | str) -> Path:
    """Absolute, symlink-free form of an operator-given path (no `~` expansion: config does that)."""
    return Path(os.path.realpath(os.fspath(path)))


def _is_symlink(name: str, dir_fd: int) -> bool:
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def _open_subdir(name: str, dir_fd: int, shown: str) -> int:
    """The directory `name` below `dir_fd`, opened without following a symlink there."""
    try:
        return os.open(name, _DIR_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in _SWAPPED and _is_symlink(name, dir_fd):
            why = "a directory in it became a symlink during the call"
            raise ToolRefused(f"refused path {shown!r}: {why}") from exc
        raise


def _percent_problem(text: str) -> str | None:
    """Why `text` looks like percent-encoded traversal, or None."""
    current = text
    for depth in range(_MAX_DECODE_ROUNDS + 1):
        codes = [int(code, 16) for code in _PERCENT.findall(current)]
        if not codes:
            return None
        for code in codes:
            if code in _PERCENT_FORBIDDEN:
                return f"percent-encoded {_PERCENT_FORBIDDEN[code]} is not allowed"
            if code in _OVERLONG_LEADS:
                return "overlong UTF-8 percent-encoding is not allowed"
        if depth == _MAX_DECODE_ROUNDS:
            return f"percent-encoding nested more than {_MAX_DECODE_ROUNDS} levels deep is not allowed"
        current = unquote(current)
    return None  # pragma: no cover - the loop always returns


@dataclass(frozen=True, slots=True)
class Workspace:
    """The allowed tree: `root`, plus `extra_paths` as further allowed prefixes.

    Both are resolved (symlinks included) at construction, so every later
    comparison is between real paths. Immutable, hence safe to share between
    sessions and threads.
    """

    root: Path
    extra_paths: tuple[Path, ...] = ()
    max_file_bytes: int = 10 * 1024 * 1024
    # Room the write tools leave free on the workspace's file system: the daemon's state reserve
    # when the state database lives on the same one (so a full workspace never takes its last space).
    keep_free_bytes: int = 0
    # root first, then the extra paths; derived, kept for the hot path.
    _roots: tuple[Path, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        root = _real(self.root)
        extras: Iterable[Path | str] = self.extra_paths
        extra = tuple(_real(p) for p in extras)
        if self.max_file_bytes <= 0:
            raise ValueError(f"max_file_bytes must be positive, got {self.max_file_bytes}")
        # Frozen dataclass: normalise through object.__setattr__, once, here.
        object.__setattr__(self, "root", root)
        object.__setattr__(self, "extra_paths", extra)
        object.__setattr__(self, "_roots", (root, *extra))

    # -- checks -------------------------------------------------------------

    def contains(self, path: Path) -> bool:
        """True when the absolute, already-real `path` is a root or lies below one.

        `Path.is_relative_to` compares whole components, so `/x/ws2` is not
        inside `/x/ws` (the classic `str.startswith` bug).
        """
        return any(path == r or path.is_relative_to(r) for r in self._roots)

    def check_syntax(self, user_path: str) -> None:
        """Refuse a path (or glob pattern) by its text alone; touches nothing on disk."""
        if not isinstance(user_path, str):
            raise ToolRefused(f"refused path {user_path!r}: a path must be a string")
        if not user_path.strip():
            raise ToolRefused(f"refused path {user_path!r}: the path is empty")
        if "\x00" in user_path:
            raise ToolRefused(f"refused path {user_path!r}: it contains a NUL byte")
        if len(user_path) > _MAX_PATH_CHARS:
            raise ToolRefused(f"refused path {user_path[:60]!r}...: longer than {_MAX_PATH_CHARS} characters")
        if any(ord(c) < 0x20 or ord(c) == 0x7F for c in user_path):
            raise ToolRefused(f"refused path {user_path!r}: it contains a control character")
        if user_path.startswith("~"):
            raise ToolRefused(
                f"refused path {user_path!r}: '~' is not expanded; use a path relative to the workspace"
            )
        problem = _percent_problem(user_path)
        if problem is not None:
            raise ToolRefused(f"refused path {user_path!r}: {problem}")
        if ".." in _SEPARATORS.split(user_path):
            raise ToolRefused(f"refused path {user_path!r}: '..' components are not allowed")

    def resolve(self, user_path: str, *, must_exist: bool = False, for_write: bool = False) -> Path:
        """Turn a model-given path into a real absolute path inside the workspace.

        Relative paths are taken from the root; absolute paths are fine when
        they lead inside. Raises `ToolRefused` when the path breaks a rule
        (see the module docstring), and `ToolError` when `must_exist` and
        nothing is there, or when `for_write` and the path names a directory or
        another file that is not a regular one.
        """
        self.check_syntax(user_path)
        candidate = Path(user_path) if user_path.startswith("/") else self.root / user_path
        try:
            real = _real(candidate)
        except OSError as exc:
            # realpath reads a link that lstat saw a moment before: a swap in between fails it.
            why = f"it changed while being checked ({exc.strerror or exc})"
            raise ToolRefused(f"refused path {user_path!r}: {why}") from exc
        if not self.contains(real):
            lexical = Path(os.path.normpath(candidate))
            if self.contains(lexical):
                why = f"it leads through a symlink to {real}, outside the workspace"
            else:
                why = "it is outside the workspace"
            raise ToolRefused(f"refused path {user_path!r}: {why}")
        try:
            st: os.stat_result | None = os.stat(real)
        except OSError as exc:
            if exc.errno not in _ABSENT:
                # A name too long, a directory without search permission: a plain error, not a crash.
                raise ToolError(f"cannot use {user_path!r}: {exc.strerror or exc}") from exc
            st = None
        if must_exist and st is None:
            raise ToolError(f"no such file or directory: {user_path!r}")
        if for_write and (user_path.endswith("/") or (st is not None and stat.S_ISDIR(st.st_mode))):
            raise ToolError(f"{user_path!r} is a directory, not a file")
        if for_write and st is not None and not stat.S_ISREG(st.st_mode):
            # Opening a device or FIFO for writing can act on it (a tty's DTR resets a board).
            raise ToolError(f"{user_path!r} is not a regular file")
        return real

    # -- descriptor-level checks (against symlink swaps after resolve) -------

    def verify_fd(self, fd: int, shown: str) -> None:
        """Refuse when the open descriptor `fd` is, in truth, outside the workspace.

        Uses /proc/self/fd. Where that cannot be read the descriptor cannot be
        checked, and a symlink swapped into a parent directory would go
        unnoticed, so the path is refused: fail closed.
        """
        try:
            target = os.readlink(f"{_PROC_FD}/{fd}")
        except OSError as exc:
            raise ToolRefused(
                f"refused path {shown!r}: cannot check where it leads ({_PROC_FD}: {exc.strerror or exc})"
            ) from exc
        target = target.removesuffix(" (deleted)")
        if not self.contains(Path(target)):
            raise ToolRefused(f"refused path {shown!r}: it was redirected to {target} while being opened")

    def _verified(self, fd: int, shown: str) -> int:
        """`fd` once `verify_fd` passes; closed when it does not."""
        try:
            self.verify_fd(fd, shown)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def _root_of(self, path: Path, shown: str) -> Path:
        root = next((r for r in self._roots if path == r or path.is_relative_to(r)), None)
        if root is None:
            raise ToolRefused(f"refused path {shown!r}: it is outside the workspace")
        return root

    def open(self, path: Path, flags: int, mode: int = 0o666, *, shown: str = "") -> int:
        """`os.open` a resolved path without following a symlink at any component; verify the descriptor.

        The walk starts at the root (or extra path) holding `path`, and opens
        each directory below it relative to the one above with `O_NOFOLLOW`,
        then the last component with `flags | O_NOFOLLOW`. A symlink met on the
        way (swapped in after `resolve`) is a refusal; other `OSError`s
        propagate for the caller to word.
        """
        shown = shown or self.display(path)
        root = self._root_of(path, shown)
        parts = path.relative_to(root).parts
        if not parts:
            fd = os.open(root, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
        else:
            dir_fd = self._open_parent(root, parts[:-1], shown)
            try:
                fd = self.open_at(dir_fd, parts[-1], flags, mode, shown=shown, verify=False)
            finally:
                os.close(dir_fd)
        return self._verified(fd, shown)

    def _open_parent(self, root: Path, parts: tuple[str, ...], shown: str) -> int:
        """The descriptor of `root/parts...`, each level opened without following a symlink."""
        fd = os.open(root, _DIR_NOFOLLOW)
        try:
            for part in parts:
                below = _open_subdir(part, fd, shown)
                os.close(fd)
                fd = below
        except BaseException:
            os.close(fd)
            raise
        return fd

    def open_at(
        self, dir_fd: int, name: str, flags: int, mode: int = 0o666, *, shown: str, verify: bool = True
    ) -> int:
        """Open `name` in the verified directory `dir_fd`, never following a symlink there."""
        try:
            fd = os.open(name, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                why = "it is a symlink loop, or became a symlink meanwhile"
                raise ToolRefused(f"refused path {shown!r}: {why}") from exc
            raise
        return self._verified(fd, shown) if verify else fd

    def open_dir(self, path: Path, *, shown: str = "") -> int:
        """Open a resolved directory for `dir_fd=` use or `os.scandir`, verified like `open`."""
        return self.open(path, os.O_RDONLY | os.O_DIRECTORY, shown=shown)

    def make_dirs(self, path: Path, *, shown: str = "") -> int:
        """Create the resolved directory `path` and its missing parents; return its verified descriptor.

        Each level is created and opened relative to the descriptor of the one
        above, never following a symlink: `os.makedirs` follows them, so a
        symlink raced in after `resolve` would have it create directories
        wherever the link leads before any descriptor could be checked.
        """
        shown = shown or self.display(path)
        root = self._root_of(path, shown)
        fd = self.open_dir(root)
        try:
            for part in path.relative_to(root).parts:
                with suppress(FileExistsError):
                    os.mkdir(part, dir_fd=fd)
                below = _open_subdir(part, fd, shown)
                os.close(fd)
                fd = below
            self.verify_fd(fd, shown)
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- reading a file: the one way every reader takes ------------------------

    def read_file(
        self,
        path: Path,
        *,
        limit: int | None = None,
        cut: bool = False,
        shown: str = "",
        dir_fd: int | None = None,
    ) -> FileContent:
        """The content of the regular file at the resolved `path`, read through one safe open.

        Opened once (`open`, or `open_at` relative to a walk's verified
        directory `dir_fd`); its type, link count and size are checked with
        `fstat` on that descriptor, and the bytes come from it. At most `limit`
        bytes (default `max_file_bytes`): a bigger file is refused
        (`FileTooLarge`), or with `cut` its first `limit` bytes are returned,
        marked truncated. A file that grows after the `fstat` is caught by
        reading one byte over the limit. Raises `ToolRefused` for a symlink,
        a redirected descriptor or a hard-linked file, `ToolError` for a
        directory or a special file, `OSError` for the caller to word.
        """
        shown = shown or self.display(path)
        limit = self.max_file_bytes if limit is None else limit
        # O_NONBLOCK: opening a FIFO must not hang the call; it is refused below anyway.
        flags = os.O_RDONLY | os.O_NONBLOCK
        if dir_fd is None:
            fd = self.open(path, flags, shown=shown)
        else:
            fd = self.open_at(dir_fd, path.name, flags, shown=shown)
        try:
            st = os.fstat(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectory(f"{shown} is a directory, not a file")
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{shown} is not a regular file")
            refuse_hard_links(st, shown)
            if st.st_size > limit and not cut:
                raise FileTooLarge(shown, st.st_size, limit)
            data = _read_upto(fd, limit + 1)  # +1: notice a file that grew after fstat
        finally:
            os.close(fd)
        if len(data) <= limit:
            return FileContent(data, st.st_size)
        if not cut:
            raise FileTooLarge(shown, max(len(data), st.st_size), limit)
        return FileContent(data[:limit], st.st_size, truncated=True)

    # -- output --------------------------------------------------------------

    def display(self, path: Path | str) -> str:
        """`path` relative to the root when inside it ("." for the root), else absolute."""
        p = Path(path)
        if p == self.root:
            return "."
        if p.is_relative_to(self.root):
            return p.relative_to(self.root).as_posix()
        return str(p)
