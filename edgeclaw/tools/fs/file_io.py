"""The fs tools' file I/O: inline for small files, in a thread for big ones; reads that refuse
binary and oversized files; atomic whole-file writes and appends through a verified directory
descriptor, checked for room first, so a failed write leaves the old file intact."""

from __future__ import annotations

import asyncio
import fcntl
import os
import stat
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import ParamSpec, TypeVar

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import ToolResult
from edgeclaw.tools.fs.workspace import IsADirectory, Workspace, format_size, refuse_hard_links

INLINE_IO_BYTES = 64 * 1024  # files up to this size are read/written without a thread hop
BINARY_SNIFF_BYTES = 8192  # a NUL byte in this prefix marks a file as binary

_P = ParamSpec("_P")
_R = TypeVar("_R")


# -- small helpers -------------------------------------------------------------


async def blocking(size_hint: int, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """Run blocking `fn` inline for small jobs, in a worker thread for big ones."""
    if size_hint <= INLINE_IO_BYTES:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def os_error(verb: str, shown: str, exc: OSError) -> ToolError:
    return ToolError(f"cannot {verb} {shown}: {exc.strerror or exc}")


def split_lines(text: str) -> list[str]:
    """Lines split on '\\n' only (not `str.splitlines`, whose extra separators shift line numbers)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start a new one
    return lines


def text_result(text: str) -> ToolResult:
    return ToolResult(for_llm=text, for_user=text)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


# Arguments reach the tools through the registry, which has already checked them against each
# tool's schema (types, bounds, required and unknown names), so the tools read them as given.


def encode_text(content: str, ws: Workspace, shown: str) -> bytes:
    try:
        data = content.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ToolError(f"content for {shown} is not encodable as UTF-8: {exc.reason}") from exc
    if len(data) > ws.max_file_bytes:
        raise ToolRefused(
            f"refused: content for {shown} is {format_size(len(data))}, "
            f"over the {format_size(ws.max_file_bytes)} file limit"
        )
    return data


# -- blocking file operations ----------------------------------------------------


def _read_bytes(ws: Workspace, path: Path, shown: str) -> bytes:
    """The whole regular file at `path` (one safe open, see `Workspace.read_file`), refusing binary files."""
    try:
        data = ws.read_file(path, shown=shown).data
    except IsADirectory:
        raise ToolError(f"{shown} is a directory; use list_files") from None
    except OSError as exc:
        raise os_error("read", shown, exc) from exc
    if is_binary(data):
        raise ToolError(f"{shown} is a binary file ({format_size(len(data))}); only text files can be shown")
    return data


def read_text(ws: Workspace, path: Path, shown: str, *, strict: bool) -> str:
    """Decode as UTF-8; `strict` for files that will be written back (no silent U+FFFD damage)."""
    data = _read_bytes(ws, path, shown)
    if not strict:
        return data.decode("utf-8", errors="replace")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolError(f"{shown} is not valid UTF-8 (byte {exc.start}); it cannot be edited") from exc


def _ensure_parent(ws: Workspace, path: Path, shown: str) -> int:
    """Create `path`'s parent directories if needed and return a verified descriptor of the parent."""
    try:
        return ws.make_dirs(path.parent)
    except OSError as exc:
        raise os_error("create the directory for", shown, exc) from exc


def _check_room(ws: Workspace, dir_fd: int, size: int, shown: str) -> None:
    """Refuse a write that would leave less than `ws.keep_free_bytes` free on the file system.

    That space is the daemon's own (see `store.reserve`): the workspace usually shares the state
    database's file system, and a full workspace must not leave sessions or the request ledger
    without room.
    """
    if ws.keep_free_bytes <= 0:
        return
    try:
        st = os.fstatvfs(dir_fd)
    except OSError:
        return  # unknown: the write itself will tell
    free = st.f_bavail * st.f_frsize
    if free - size < ws.keep_free_bytes:
        raise ToolError(
            f"no space left on device for {shown}: writing {format_size(size)} would leave less than "
            f"the {format_size(ws.keep_free_bytes)} kept free for the daemon's own state "
            f"({format_size(max(free, 0))} free); the previous content is unchanged"
        )


def write_atomically(ws: Workspace, path: Path, data: bytes, shown: str) -> bool:
    """Replace `path` with `data` atomically; True when the file was created."""
    dir_fd = _ensure_parent(ws, path, shown)
    name = path.name
    # Hidden, unique, same directory (rename is only atomic within one file system);
    # the name is cut so that the temp name stays within NAME_MAX.
    import secrets  # on first use, not at start

    tmp = f".{name[:200]}.{secrets.token_hex(4)}.tmp"
    tmp_made = False
    try:
        _check_room(ws, dir_fd, len(data), shown)
        try:
            old: os.stat_result | None = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        except FileNotFoundError:
            old = None
        if old is not None and stat.S_ISDIR(old.st_mode):
            raise ToolError(f"{shown} is a directory, not a file")
        if old is not None and stat.S_ISLNK(old.st_mode):
            raise ToolRefused(f"refused path {shown!r}: it turned into a symlink during the call")
        if old is not None and not stat.S_ISREG(old.st_mode):
            raise ToolError(f"{shown} is not a regular file")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(tmp, flags, 0o666, dir_fd=dir_fd)  # 0o666 & ~umask, like any new file
        tmp_made = True
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))  # keep an existing file's permissions
            write_all(fd, data)
            os.fsync(fd)  # boards lose power: the data must be on disk before the rename
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        tmp_made = False
        # Make the rename itself durable; some file systems cannot fsync a directory,
        # and the write has happened anyway.
        with suppress(OSError):
            os.fsync(dir_fd)
        return old is None
    except OSError as exc:
        raise ToolError(
            f"cannot write {shown}: {exc.strerror or exc}; the previous content is unchanged"
        ) from exc
    finally:
        if tmp_made:
            with suppress(OSError):
                os.unlink(tmp, dir_fd=dir_fd)
        os.close(dir_fd)


def append_to(ws: Workspace, path: Path, data: bytes, shown: str) -> int:
    """Append `data` to `path` (created if missing); returns the new size.

    All or nothing: a write that fails half-way (a full disk) is cut back off.
    """
    dir_fd = _ensure_parent(ws, path, shown)
    try:
        # Relative to a verified directory descriptor and with O_NOFOLLOW: no way out.
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
        fd = os.open(path.name, flags, 0o666, dir_fd=dir_fd)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{shown} is not a regular file")
            refuse_hard_links(st, shown)
            try:
                # Two appends racing (big ones run in threads) would both pass the size check
                # below and together pass the limit. Never wait: the event loop may be the caller.
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ToolError(f"{shown} is being written by another call; try again") from None
            st = os.fstat(fd)  # the size now that nobody else is appending
            _check_room(ws, dir_fd, len(data), shown)
            if st.st_size + len(data) > ws.max_file_bytes:
                raise ToolRefused(
                    f"refused: appending {format_size(len(data))} would make {shown} "
                    f"{format_size(st.st_size + len(data))}, over the {format_size(ws.max_file_bytes)} limit"
                )
            try:
                write_all(fd, data)
            except OSError:
                with suppress(OSError):
                    os.ftruncate(fd, st.st_size)
                raise
            return os.fstat(fd).st_size
        finally:
            os.close(fd)  # also releases the lock
    except OSError as exc:
        raise os_error("append to", shown, exc) from exc
    finally:
        os.close(dir_fd)
