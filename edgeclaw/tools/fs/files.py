"""File-system tools: read, write, edit, append, list, search and glob inside a `Workspace`.

Each tool resolves its paths twice: in `check` (so a dry run or the registry
can refuse early) and again in `execute` (a `check` may be stale or skipped).
All writes go through a verified directory descriptor, and whole-file writes
are atomic (temp file in the same directory, fsync, `os.replace`), so a
failed write leaves the old file intact.

Blocking I/O on small files runs inline, because a thread hop costs more than
reading a few kilobytes; big files and directory walks run in a thread.
Walks never follow symlinks, never descend into the `SKIP_DIRS` caches and
VCS directories (they can still be targeted explicitly), and stop after
`WALK_MAX_ENTRIES` entries, so one call stays bounded even on a huge tree.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import re
import secrets
import stat
from abc import abstractmethod
from collections import deque
from collections.abc import Callable, Generator, Iterator
from contextlib import closing, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, ParamSpec, Protocol, TypeVar

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.pattern_match import (
    Deadline,
    MatchEngineFailed,
    Matcher,
    MatchTimeout,
    Pattern,
    PatternError,
)
from edgeclaw.tools.fs.workspace import FileTooLarge, IsADirectory, Workspace, format_size, refuse_hard_links

__all__ = [
    "EditFileTool",
    "FileAppendTool",
    "GlobTool",
    "ListFilesTool",
    "ReadFileTool",
    "SearchTool",
    "WriteFileTool",
    "fs_tools",
]

READ_MAX_LINES = 2000  # lines per read_file call; the header says how to get the rest
INLINE_IO_BYTES = 64 * 1024  # files up to this size are read/written without a thread hop
BINARY_SNIFF_BYTES = 8192  # a NUL byte in this prefix marks a file as binary
WALK_MAX_ENTRIES = 50_000  # directory entries one list/search/glob call may visit
SEARCH_LINE_CHARS = 300  # matched lines are cut here (minified files have huge lines)
# Walks list these directories but do not descend into them: VCS data and caches drown real results.
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv"}
    | {".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"}
)

_P = ParamSpec("_P")
_R = TypeVar("_R")


# -- small helpers -------------------------------------------------------------


async def _blocking(size_hint: int, fn: Callable[_P, _R], /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """Run blocking `fn` inline for small jobs, in a worker thread for big ones."""
    if size_hint <= INLINE_IO_BYTES:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def _os_error(verb: str, shown: str, exc: OSError) -> ToolError:
    return ToolError(f"cannot {verb} {shown}: {exc.strerror or exc}")


def _split_lines(text: str) -> list[str]:
    """Lines split on '\\n' only (not `str.splitlines`, whose extra separators shift line numbers)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # a final newline ends the last line; it does not start a new one
    return lines


def _result(text: str) -> ToolResult:
    return ToolResult(for_llm=text, for_user=text)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _is_binary(data: bytes) -> bool:
    return b"\x00" in data[:BINARY_SNIFF_BYTES]


# Arguments reach the tools through the registry, which has already checked them against each
# tool's schema (types, bounds, required and unknown names), so the tools read them as given.


def _encode(content: str, ws: Workspace, shown: str) -> bytes:
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
        raise _os_error("read", shown, exc) from exc
    if _is_binary(data):
        raise ToolError(f"{shown} is a binary file ({format_size(len(data))}); only text files can be shown")
    return data


def _read_text(ws: Workspace, path: Path, shown: str, *, strict: bool) -> str:
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
        raise _os_error("create the directory for", shown, exc) from exc


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
            _write_all(fd, data)
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


def _append(ws: Workspace, path: Path, data: bytes, shown: str) -> int:
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
                _write_all(fd, data)
            except OSError:
                with suppress(OSError):
                    os.ftruncate(fd, st.st_size)
                raise
            return os.fstat(fd).st_size
        finally:
            os.close(fd)  # also releases the lock
    except OSError as exc:
        raise _os_error("append to", shown, exc) from exc
    finally:
        os.close(dir_fd)


# -- directory walking -------------------------------------------------------------


@dataclass(slots=True)
class _Walk:
    """Budget and trouble of one walk, reported as notes under the output."""

    max_entries: int = WALK_MAX_ENTRIES
    seen: int = 0
    exhausted: bool = False
    errors: list[str] = field(default_factory=list)

    def notes(self) -> list[str]:
        notes = [f"(cannot read {e})" for e in self.errors[:5]]
        if len(self.errors) > 5:
            notes.append(f"(and {len(self.errors) - 5} more unreadable directories)")
        if self.exhausted:
            notes.append(f"(walk stopped after {self.max_entries} entries; use a narrower path)")
        return notes


@dataclass(frozen=True, slots=True)
class _Entry:
    """One directory entry met by a walk."""

    path: Path
    name: str
    dir_fd: int  # open while the entry is being consumed: open files relative to it
    kind: str  # "dir" | "file" | "link" | "other"


def _kind(entry: os.DirEntry[str]) -> str:
    try:
        if entry.is_symlink():
            return "link"
        if entry.is_dir(follow_symlinks=False):
            return "dir"
        if entry.is_file(follow_symlinks=False):
            return "file"
    except OSError:
        pass
    return "other"


def _walk(ws: Workspace, start: Path, walk: _Walk, *, max_depth: int | None) -> Generator[_Entry, None, None]:
    """Breadth-first, sorted per directory, never following symlinks.

    Breadth-first so that a capped listing shows the top of the tree rather
    than the bottom of its first branch. `max_depth` 0 = only `start`'s entries.
    """
    queue: deque[tuple[Path, int]] = deque([(start, 0)])
    while queue:
        directory, depth = queue.popleft()
        try:
            dir_fd = ws.open_dir(directory)
        except (OSError, ToolRefused) as exc:
            reason = exc.strerror if isinstance(exc, OSError) else str(exc)
            walk.errors.append(f"{ws.display(directory)}: {reason}")
            continue
        try:
            try:
                with os.scandir(dir_fd) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError as exc:
                walk.errors.append(f"{ws.display(directory)}: {exc.strerror}")
                continue
            for entry in entries:
                if walk.seen >= walk.max_entries:
                    walk.exhausted = True
                    return
                walk.seen += 1
                kind = _kind(entry)
                path = directory / entry.name
                yield _Entry(path, entry.name, dir_fd, kind)
                descend = max_depth is None or depth < max_depth
                if kind == "dir" and descend and entry.name not in SKIP_DIRS:
                    queue.append((path, depth + 1))
        finally:
            os.close(dir_fd)


def _glob_segment(part: str) -> str:
    """One path segment of a glob as a regex: `*`, `?` and `[...]` never match '/'."""
    out: list[str] = []
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := part.find("]", i + 2)) != -1:
            body = part[i + 1 : end]
            negate = body.startswith("!")
            if negate:
                body = body[1:]
            # Escape everything but '-' so ranges work and nothing else is special.
            escaped = "".join("-" if ch == "-" else re.escape(ch) for ch in body)
            out.append(f"[^/{escaped}]" if negate else f"[{escaped}]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


# A pathological pattern ((a+)+$, or .*x over a megabyte line) must not freeze the event loop, every
# channel and the watchdog, nor run forever: matching goes through `pattern_match`, which bounds one
# search by MATCH_BUDGET_S however bad the pattern, with or without the compiled `regex` package.
MATCH_BUDGET_S = 20.0


class _Deadline(Deadline):
    def __init__(self, seconds: float | None = None) -> None:
        super().__init__(MATCH_BUDGET_S if seconds is None else seconds)

    def expired(self) -> ToolError:
        return ToolError(
            f"pattern matching took longer than {self.seconds:g} s; use a simpler pattern or a narrower path"
        )


def _select(pattern: Pattern, subjects: list[str], deadline: _Deadline, *, full: bool = False) -> list[int]:
    try:
        return pattern.select(subjects, deadline, full=full)
    except MatchTimeout:
        raise deadline.expired() from None
    except MatchEngineFailed as exc:
        raise ToolError(f"pattern matching failed: {exc}") from None


def _glob_source(pattern: str) -> str:
    """A '/'-separated glob as a regex, where a `**` segment spans any number of directories."""
    parts = [p for p in pattern.split("/") if p]
    out: list[str] = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(".+" if last else "(?:[^/]+/)*")
        else:
            out.append(_glob_segment(part) + ("" if last else "/"))
    return "".join(out)


def _compile_glob(matcher: Matcher, pattern: str) -> Pattern:
    try:
        return matcher.compile(_glob_source(pattern))
    except PatternError as exc:
        raise ToolError(f"invalid glob pattern {pattern!r}: {exc}") from exc


def _has_magic(part: str) -> bool:
    return any(c in part for c in "*?[")


# -- the tools ---------------------------------------------------------------------


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_PATH_PROP = {"type": "string", "description": "Path relative to the workspace root (or absolute inside it)."}


# The fs tools a `PathRouter` is asked about; the others (e.g. a search) see the disk only.
ROUTED_TOOLS = frozenset({"read_file", "write_file", "edit_file", "file_append", "list_files"})


class PathRouter(Protocol):
    """Claims some paths for storage other than the disk (the memory store: `tools.memory.vfs`).

    `route` judges the path's text only; what it returns None for goes to the disk as usual.
    """

    def route(self, tool: str, user_path: str) -> Any | None: ...

    def check(self, tool: str, route: Any, args: Args) -> None: ...

    async def run(self, tool: str, route: Any, args: Args, ctx: ToolContext) -> ToolResult: ...

    def root_note(self, ctx: ToolContext) -> str: ...


class _FsTool(Tool):
    """Shared plumbing: a workspace, argument checks, and `check` = prepare without doing."""

    group: ClassVar[str] = "fs"
    # Set when memory is on: MEMORY.md, memory/**, the context files and skills/** live elsewhere.
    vfs: PathRouter | None = None

    def __init__(self, workspace: Workspace) -> None:
        self.ws = workspace

    @abstractmethod
    def _prepare(self, args: Args) -> Any:
        """Validate arguments and resolve paths; raise ToolRefused/ToolError; touch no content."""

    def _routed(self, args: Args) -> Any | None:
        """The virtual file system's route for this call's path, or None for the disk."""
        if self.vfs is None:
            return None
        return self.vfs.route(self.name, args.get("path", "."))

    async def check(self, args: Args, ctx: ToolContext) -> None:
        route = self._routed(args)
        if route is not None:
            assert self.vfs is not None
            self.vfs.check(self.name, route, args)
            return
        self._prepare(args)

    async def _virtual(self, args: Args, ctx: ToolContext) -> ToolResult | None:
        """The result when the virtual file system serves this call, else None."""
        route = self._routed(args)
        if route is None:
            return None
        assert self.vfs is not None
        return await self.vfs.run(self.name, route, args, ctx)


@dataclass(frozen=True, slots=True)
class _ReadPlan:
    """What a read_file call will read: the file and the line range."""

    path: Path
    shown: str
    size: int
    start: int
    end: int | None


class ReadFileTool(_FsTool):
    name = "read_file"
    observes_only = True
    description = (
        f"Read a UTF-8 text file. Shows at most {READ_MAX_LINES} lines per call; "
        "start_line/end_line (1-based, inclusive) pick a range. The first output line states the range shown."
    )
    parameters = _schema(
        {
            "path": _PATH_PROP,
            "start_line": {"type": "integer", "minimum": 1, "description": "First line to show (default 1)."},
            "end_line": {"type": "integer", "minimum": 1, "description": "Last line to show (default: end)."},
        },
        ["path"],
    )

    def _prepare(self, args: Args) -> _ReadPlan:
        user_path = args["path"]
        start = args.get("start_line", 1)
        end = args.get("end_line")
        if end is not None and end < start:
            raise ToolError(f"end_line {end} is before start_line {start}")
        path = self.ws.resolve(user_path, must_exist=True)
        shown = self.ws.display(path)
        try:
            st = path.stat()
        except OSError as exc:
            raise _os_error("read", shown, exc) from exc
        if stat.S_ISDIR(st.st_mode):
            raise ToolError(f"{shown} is a directory; use list_files")
        if not stat.S_ISREG(st.st_mode):  # refused before opening: opening a device can act on it
            raise ToolError(f"{shown} is not a regular file")
        if st.st_size > self.ws.max_file_bytes:
            raise FileTooLarge(shown, st.st_size, self.ws.max_file_bytes)
        return _ReadPlan(path, shown, st.st_size, start, end)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if (virtual := await self._virtual(args, ctx)) is not None:
            return virtual
        plan = self._prepare(args)
        return _result(await _blocking(plan.size, self._read, plan))

    def _read(self, plan: _ReadPlan) -> str:
        """Load, decode and cut out the range (in the worker thread for big files: splitting costs too)."""
        text = _read_text(self.ws, plan.path, plan.shown, strict=False)
        return render_lines(plan.shown, text, plan.start, plan.end)


def render_lines(shown: str, text: str, start: int = 1, end: int | None = None) -> str:
    """`text` as read_file shows it: a header naming the range, then lines `start`..`end`.

    At most READ_MAX_LINES lines; the header says where the rest starts. Shared with the files
    the virtual file system keeps in the database (`tools.memory.vfs`), so both read alike.
    """
    lines = _split_lines(text)
    total = len(lines)
    if total == 0:
        return f"[{shown}: empty file]"
    if start > total:
        raise ToolError(f"start_line {start} is past the end of {shown} ({total} lines)")
    last = min(end or total, total, start + READ_MAX_LINES - 1)
    header = f"[{shown}: lines {start}-{last} of {total}"
    if last < total:
        header += f"; next: start_line={last + 1}"
    body = "\n".join(lines[start - 1 : last])
    return f"{header}]\n{body}"


class _ContentTool(_FsTool):
    """A tool that writes given content to a path: both are checked before anything is touched."""

    @staticmethod
    def schema(content_help: str) -> dict[str, Any]:
        content = {"type": "string", "description": content_help}
        return _schema({"path": _PATH_PROP, "content": content}, ["path", "content"])

    def _prepare(self, args: Args) -> tuple[Path, str, bytes]:
        path = self.ws.resolve(args["path"], for_write=True)
        shown = self.ws.display(path)
        return path, shown, _encode(args["content"], self.ws, shown)


class WriteFileTool(_ContentTool):
    name = "write_file"
    description = (
        "Create or overwrite a text file with the given content (atomic: on failure the old file stays). "
        "Creates missing parent directories."
    )
    parameters = _ContentTool.schema("The complete new file content.")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if (virtual := await self._virtual(args, ctx)) is not None:
            return virtual
        path, shown, data = self._prepare(args)
        # Always in a thread, however small: the fsync can take tens of ms on SD cards and eMMC.
        created = await asyncio.to_thread(write_atomically, self.ws, path, data, shown)
        lines = len(_split_lines(data.decode("utf-8")))
        verb = "created" if created else "overwrote"
        return _result(f"{verb} {shown} ({format_size(len(data))}, {lines} lines)")


class EditFileTool(_FsTool):
    name = "edit_file"
    description = (
        "Replace exact text in a file. old_text must occur exactly once (include surrounding lines to make "
        "it unique) unless replace_all is true. Whitespace and indentation must match exactly."
    )
    parameters = _schema(
        {
            "path": _PATH_PROP,
            "old_text": {"type": "string", "description": "Exact text to find (non-empty)."},
            "new_text": {"type": "string", "description": "Replacement text (may be empty)."},
            "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
        },
        ["path", "old_text", "new_text"],
    )

    def _prepare(self, args: Args) -> tuple[Path, str, str, str, bool]:
        old_text = args["old_text"]
        new_text = args["new_text"]
        replace_all = args.get("replace_all", False)
        if not old_text:
            raise ToolError("old_text must not be empty")
        path = self.ws.resolve(args["path"], must_exist=True, for_write=True)
        return path, self.ws.display(path), old_text, new_text, replace_all

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if (virtual := await self._virtual(args, ctx)) is not None:
            return virtual
        path, shown, old_text, new_text, replace_all = self._prepare(args)
        # In a thread: it ends with an fsync'd write (see write_file).
        return _result(await asyncio.to_thread(self._edit, path, shown, old_text, new_text, replace_all))

    def _edit(self, path: Path, shown: str, old_text: str, new_text: str, replace_all: bool) -> str:
        text = _read_text(self.ws, path, shown, strict=True)
        updated, message = replace_text(text, old_text, new_text, replace_all, shown)
        if updated != text:
            write_atomically(self.ws, path, _encode(updated, self.ws, shown), shown)
        return message


def replace_text(text: str, old_text: str, new_text: str, replace_all: bool, shown: str) -> tuple[str, str]:
    """edit_file's replacement: (the new text, what was done); ToolError when old_text is absent or
    ambiguous. Shared with the files the virtual file system keeps in the database."""
    count = text.count(old_text)
    if count == 0:
        hint = ""
        if "\r\n" in text and "\r\n" not in old_text and old_text.replace("\n", "\r\n") in text:
            hint = " (the file uses CRLF line endings; old_text uses LF)"
        raise ToolError(f"old_text not found in {shown}{hint}")
    if count > 1 and not replace_all:
        raise ToolError(
            f"old_text occurs {count} times in {shown}; add surrounding text to make it unique, "
            "or set replace_all=true"
        )
    if old_text == new_text:
        return text, f"no change to {shown}: old_text and new_text are identical"
    first_line = text.count("\n", 0, text.index(old_text)) + 1
    updated = text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    what = f"{count} occurrences" if count > 1 else "1 occurrence"
    return updated, f"edited {shown}: replaced {what} (first at line {first_line})"


class FileAppendTool(_ContentTool):
    name = "file_append"
    description = (
        "Append text to the end of a file, creating it (and parent directories) if missing. "
        "Content is added as-is: include a trailing newline if you want one."
    )
    parameters = _ContentTool.schema("Text to append.")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if (virtual := await self._virtual(args, ctx)) is not None:
            return virtual
        path, shown, data = self._prepare(args)
        size = await _blocking(len(data), _append, self.ws, path, data, shown)
        return _result(f"appended {format_size(len(data))} to {shown} (now {format_size(size)})")


class ListFilesTool(_FsTool):
    name = "list_files"
    observes_only = True
    description = (
        "List a directory (default: workspace root). Directories end with '/'; symlinks show '-> target' "
        "and are not followed. recursive=true walks subdirectories (not .git, node_modules, caches)."
    )
    parameters = _schema(
        {
            "path": {**_PATH_PROP, "description": "Directory to list (default '.')."},
            "recursive": {"type": "boolean", "description": "Include subdirectories (default false)."},
            "max_entries": {
                "type": "integer",
                "minimum": 1,
                "maximum": 5000,
                "description": "Maximum entries shown (default 200).",
            },
        },
        [],
    )

    def _prepare(self, args: Args) -> tuple[Path, str, bool, int]:
        path = self.ws.resolve(args.get("path", "."), must_exist=True)
        shown = self.ws.display(path)
        if not path.is_dir():
            raise ToolError(f"{shown} is a file, not a directory; use read_file")
        recursive = args.get("recursive", False)
        return path, shown, recursive, args.get("max_entries", 200)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if (virtual := await self._virtual(args, ctx)) is not None:
            return virtual
        path, shown, recursive, limit = self._prepare(args)
        rows, truncated, walk = await asyncio.to_thread(self._list, path, recursive, limit)
        if not rows:
            lines = [f"[{shown}: empty directory]"]
        else:
            more = "+" if truncated else ""
            lines = [f"[{shown}: {len(rows)}{more} entries{', recursive' if recursive else ''}]", *rows]
        if truncated:
            lines.append(f"(truncated at {limit} entries; list a subdirectory or raise max_entries)")
        lines.extend(walk.notes())
        if self.vfs is not None and path == self.ws.root and (note := self.vfs.root_note(ctx)):
            lines.append(note)  # what the workspace holds that is not on its disk
        return _result("\n".join(lines))

    def _list(self, start: Path, recursive: bool, limit: int) -> tuple[list[str], bool, _Walk]:
        walk = _Walk()
        found: list[tuple[tuple[str, ...], str]] = []
        truncated = False
        with closing(_walk(self.ws, start, walk, max_depth=None if recursive else 0)) as entries:
            for entry in entries:
                if len(found) >= limit:
                    truncated = True
                    break
                found.append((entry.path.parts, self._row(entry, recursive)))
        # Collected breadth-first, shown in path order so that it reads like a tree.
        found.sort()
        return [row for _, row in found], truncated, walk

    def _row(self, entry: _Entry, recursive: bool) -> str:
        shown = self.ws.display(entry.path)
        if entry.kind == "dir":
            return f"{shown}/ (not descended)" if recursive and entry.name in SKIP_DIRS else f"{shown}/"
        if entry.kind == "link":
            try:
                target = os.readlink(entry.name, dir_fd=entry.dir_fd)
            except OSError:
                return f"{shown} -> ?"
            # Only classified, never followed: realpath just names where it leads.
            real = Path(os.path.realpath(entry.path))
            if not self.ws.contains(real):
                return f"{shown} -> {target} (outside the workspace)"
            if not real.exists():
                return f"{shown} -> {target} (dangling)"
            return f"{shown} -> {target}"
        if entry.kind == "other":
            return f"{shown} (special file)"
        return shown


@dataclass
class _SearchPlan:
    """What a search matches: its pattern and file-name glob, compiled anew by each `Matcher`."""

    pattern: str
    ignore_case: bool
    name_glob: str | None

    def compile(self, matcher: Matcher) -> tuple[Pattern, Pattern | None]:
        try:
            regex = matcher.compile(self.pattern, ignore_case=self.ignore_case)
        except PatternError as exc:
            raise ToolError(f"invalid regular expression {self.pattern!r}: {exc}") from exc
        glob_re = None if self.name_glob is None else _compile_glob(matcher, self.name_glob)
        return regex, glob_re


class SearchTool(_FsTool):
    name = "search"
    observes_only = True
    description = (
        "Search text files for a Python regular expression, line by line. Returns 'file:line: text'. "
        "glob filters file names (e.g. '*.py'; with '/' it matches the path below `path`)."
    )
    parameters = _schema(
        {
            "pattern": {"type": "string", "description": "Python regular expression (re syntax)."},
            "path": {**_PATH_PROP, "description": "File or directory to search (default '.')."},
            "glob": {"type": "string", "description": "Only files matching this glob, e.g. '*.py'."},
            "ignore_case": {"type": "boolean", "description": "Case-insensitive match (default false)."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 1000,
                "description": "Maximum matching lines (default 100).",
            },
        },
        ["pattern"],
    )

    def _prepare(self, args: Args) -> tuple[_SearchPlan, Path]:
        pattern = args["pattern"]
        if not pattern:
            raise ToolError("pattern must not be empty")
        plan = _SearchPlan(pattern, bool(args.get("ignore_case", False)), args.get("glob"))
        if plan.name_glob is not None and not plan.name_glob.strip("/"):
            raise ToolError("glob must not be empty")
        with Matcher() as matcher:  # compiled here so a bad pattern is refused before any file is read
            plan.compile(matcher)
        path = self.ws.resolve(args.get("path", "."), must_exist=True)
        try:
            mode = path.stat().st_mode
        except OSError as exc:
            raise _os_error("search", self.ws.display(path), exc) from exc
        if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):  # refused before opening, as in read_file
            raise ToolError(f"{self.ws.display(path)} is not a regular file or a directory")
        return plan, path

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        plan, path = self._prepare(args)
        limit = args.get("max_results", 100)
        hits, files, truncated, too_big, walk = await asyncio.to_thread(self._search, plan, path, limit)
        where = self.ws.display(path)
        lines = hits or [f"no matches for {plan.pattern!r} in {where}"]
        if truncated:
            lines.append(f"(stopped at {limit} matches; narrow the pattern or path, or raise max_results)")
        elif hits:
            lines.append(f"({len(hits)} matches in {files} files)")
        if too_big:
            lines.append(f"(skipped {too_big} files over the {format_size(self.ws.max_file_bytes)} limit)")
        lines.extend(walk.notes())
        return _result("\n".join(lines))

    def _search(self, plan: _SearchPlan, start: Path, limit: int) -> tuple[list[str], int, bool, int, _Walk]:
        with Matcher() as matcher:
            regex, glob_re = plan.compile(matcher)
            return self._search_with(regex, glob_re, "/" in (plan.name_glob or ""), start, limit)

    def _search_with(
        self, regex: Pattern, glob_re: Pattern | None, glob_on_path: bool, start: Path, limit: int
    ) -> tuple[list[str], int, bool, int, _Walk]:
        walk = _Walk()
        deadline = _Deadline()
        hits: list[str] = []
        files = too_big = 0
        if start.is_dir():
            walker = _walk(self.ws, start, walk, max_depth=None)
            candidates: Iterator[tuple[Path, int | None]] = (
                (e.path, e.dir_fd)
                for e in walker
                if e.kind == "file" and self._glob_ok(glob_re, glob_on_path, e.path, start, deadline)
            )
        else:
            walker = None
            candidates = iter([(start, None)])
        try:
            for path, dir_fd in candidates:
                try:
                    data = self._load(path, dir_fd)
                except FileTooLarge:
                    too_big += 1
                    continue
                if data is None or _is_binary(data):
                    continue
                shown = self.ws.display(path)
                # One file's lines are matched as one batch: one round trip to the matching engine.
                lines = _split_lines(data.decode("utf-8", errors="replace"))
                matching = _select(regex, lines, deadline)
                for index in matching:
                    text = lines[index].rstrip("\r")
                    if len(text) > SEARCH_LINE_CHARS:
                        text = text[:SEARCH_LINE_CHARS] + "…"
                    hits.append(f"{shown}:{index + 1}: {text}")
                    if len(hits) >= limit:
                        return hits, files + 1, True, too_big, walk
                files += bool(matching)
            return hits, files, False, too_big, walk
        finally:
            if walker is not None:
                walker.close()  # closes the walk's open directory descriptor right away

    @staticmethod
    def _glob_ok(
        glob_re: Pattern | None, on_path: bool, path: Path, start: Path, deadline: _Deadline
    ) -> bool:
        if glob_re is None:
            return True
        subject = path.relative_to(start).as_posix() if on_path else path.name
        return bool(_select(glob_re, [subject], deadline, full=True))

    def _load(self, path: Path, dir_fd: int | None) -> bytes | None:
        """File content (one safe open, see `Workspace.read_file`); None for files that cannot be read:
        unreadable, not regular, hard-linked (see `refuse_hard_links`), or a symlink raced in.
        Raises FileTooLarge for a file over the limit."""
        try:
            return self.ws.read_file(path, dir_fd=dir_fd).data
        except FileTooLarge:
            raise
        except (OSError, ToolError, ToolRefused):
            return None


class GlobTool(_FsTool):
    name = "glob"
    observes_only = True
    description = (
        "Find paths matching a glob such as '**/*.toml' or 'src/*.py' ('**' spans directories). "
        "Returns paths relative to the workspace, sorted; directories end with '/'."
    )
    parameters = _schema(
        {
            "pattern": {"type": "string", "description": "Glob relative to the workspace root."},
            "max_results": {
                "type": "integer",
                "minimum": 1,
                "maximum": 5000,
                "description": "Maximum paths returned (default 200).",
            },
        },
        ["pattern"],
    )

    def _prepare(self, args: Args) -> tuple[str, Path, list[str], int]:
        pattern = args["pattern"]
        # Same text rules as a path ('..', '~', %-encoding, NUL...), before splitting it.
        self.ws.check_syntax(pattern)
        absolute = pattern.startswith("/")
        parts = [p for p in pattern.split("/") if p]
        # The literal leading directories are resolved like any path; only the rest is matched.
        split = next((i for i, p in enumerate(parts) if _has_magic(p)), len(parts))
        prefix = "/".join(parts[:split])
        base_text = ("/" + prefix) if absolute else (prefix or ".")
        base = self.ws.resolve(base_text)
        limit = args.get("max_results", 200)
        return pattern, base, parts[split:], limit

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        pattern, base, rest, limit = self._prepare(args)
        if not rest:  # no wildcard at all: the path itself, if it is there
            matches = [self._shown(base, base.is_dir())] if base.exists() else []
            walk = _Walk()
        else:
            matches, walk = await asyncio.to_thread(self._glob, base, rest)
        matches.sort()
        lines = matches[:limit] or [f"no paths match {pattern!r}"]
        if len(matches) > limit:
            lines.append(
                f"(showing {limit} of {len(matches)} matches; narrow the pattern or raise max_results)"
            )
        lines.extend(walk.notes())
        return _result("\n".join(lines))

    def _glob(self, base: Path, rest: list[str]) -> tuple[list[str], _Walk]:
        walk = _Walk()
        matches: list[str] = []
        if not base.is_dir():
            return matches, walk
        deadline = _Deadline()
        # Without '**' nothing deeper than the pattern's own depth can match.
        max_depth = None if "**" in rest else len(rest) - 1
        entries = [
            (entry.path, entry.kind == "dir") for entry in _walk(self.ws, base, walk, max_depth=max_depth)
        ]
        with Matcher() as matcher:
            regex = _compile_glob(matcher, "/".join(rest))
            subjects = [path.relative_to(base).as_posix() for path, _ in entries]
            for index in _select(regex, subjects, deadline, full=True):
                matches.append(self._shown(*entries[index]))
        return matches, walk

    def _shown(self, path: Path, is_dir: bool) -> str:
        shown = self.ws.display(path)
        return f"{shown}/" if is_dir and shown != "." else shown


def fs_tools(workspace: Workspace) -> list[Tool]:
    """One instance of every fs tool, all bound to `workspace`."""
    return [
        ReadFileTool(workspace),
        WriteFileTool(workspace),
        EditFileTool(workspace),
        FileAppendTool(workspace),
        ListFilesTool(workspace),
        SearchTool(workspace),
        GlobTool(workspace),
    ]
