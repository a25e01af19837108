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
import os
import stat
from abc import abstractmethod
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, ClassVar, Protocol

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.file_io import (
    append_to,
    blocking,
    encode_text,
    is_binary,
    os_error,
    read_text,
    split_lines,
    text_result,
    write_atomically,
)
from edgeclaw.tools.fs.globs import MatchDeadline, compile_glob, has_magic, select_matches
from edgeclaw.tools.fs.pattern_match import (
    Matcher,
    Pattern,
    PatternError,
)
from edgeclaw.tools.fs.walk import SKIP_DIRS, WalkBudget, WalkEntry, walk_tree
from edgeclaw.tools.fs.workspace import FileTooLarge, Workspace, format_size

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
SEARCH_LINE_CHARS = 300  # matched lines are cut here (minified files have huge lines)


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
            raise os_error("read", shown, exc) from exc
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
        return text_result(await blocking(plan.size, self._read, plan))

    def _read(self, plan: _ReadPlan) -> str:
        """Load, decode and cut out the range (in the worker thread for big files: splitting costs too)."""
        text = read_text(self.ws, plan.path, plan.shown, strict=False)
        return render_lines(plan.shown, text, plan.start, plan.end)


def render_lines(shown: str, text: str, start: int = 1, end: int | None = None) -> str:
    """`text` as read_file shows it: a header naming the range, then lines `start`..`end`.

    At most READ_MAX_LINES lines; the header says where the rest starts. Shared with the files
    the virtual file system keeps in the database (`tools.memory.vfs`), so both read alike.
    """
    lines = split_lines(text)
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
        return path, shown, encode_text(args["content"], self.ws, shown)


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
        lines = len(split_lines(data.decode("utf-8")))
        verb = "created" if created else "overwrote"
        return text_result(f"{verb} {shown} ({format_size(len(data))}, {lines} lines)")


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
        return text_result(await asyncio.to_thread(self._edit, path, shown, old_text, new_text, replace_all))

    def _edit(self, path: Path, shown: str, old_text: str, new_text: str, replace_all: bool) -> str:
        text = read_text(self.ws, path, shown, strict=True)
        updated, message = replace_text(text, old_text, new_text, replace_all, shown)
        if updated != text:
            write_atomically(self.ws, path, encode_text(updated, self.ws, shown), shown)
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
        size = await blocking(len(data), append_to, self.ws, path, data, shown)
        return text_result(f"appended {format_size(len(data))} to {shown} (now {format_size(size)})")


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
        return text_result("\n".join(lines))

    def _list(self, start: Path, recursive: bool, limit: int) -> tuple[list[str], bool, WalkBudget]:
        walk = WalkBudget()
        found: list[tuple[tuple[str, ...], str]] = []
        truncated = False
        with closing(walk_tree(self.ws, start, walk, max_depth=None if recursive else 0)) as entries:
            for entry in entries:
                if len(found) >= limit:
                    truncated = True
                    break
                found.append((entry.path.parts, self._row(entry, recursive)))
        # Collected breadth-first, shown in path order so that it reads like a tree.
        found.sort()
        return [row for _, row in found], truncated, walk

    def _row(self, entry: WalkEntry, recursive: bool) -> str:
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
        glob_re = None if self.name_glob is None else compile_glob(matcher, self.name_glob)
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
            raise os_error("search", self.ws.display(path), exc) from exc
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
        return text_result("\n".join(lines))

    def _search(
        self, plan: _SearchPlan, start: Path, limit: int
    ) -> tuple[list[str], int, bool, int, WalkBudget]:
        with Matcher() as matcher:
            regex, glob_re = plan.compile(matcher)
            return self._search_with(regex, glob_re, "/" in (plan.name_glob or ""), start, limit)

    def _search_with(
        self, regex: Pattern, glob_re: Pattern | None, glob_on_path: bool, start: Path, limit: int
    ) -> tuple[list[str], int, bool, int, WalkBudget]:
        walk = WalkBudget()
        deadline = MatchDeadline()
        hits: list[str] = []
        files = too_big = 0
        if start.is_dir():
            walker = walk_tree(self.ws, start, walk, max_depth=None)
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
                if data is None or is_binary(data):
                    continue
                shown = self.ws.display(path)
                # One file's lines are matched as one batch: one round trip to the matching engine.
                lines = split_lines(data.decode("utf-8", errors="replace"))
                matching = select_matches(regex, lines, deadline)
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
        glob_re: Pattern | None, on_path: bool, path: Path, start: Path, deadline: MatchDeadline
    ) -> bool:
        if glob_re is None:
            return True
        subject = path.relative_to(start).as_posix() if on_path else path.name
        return bool(select_matches(glob_re, [subject], deadline, full=True))

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
        split = next((i for i, p in enumerate(parts) if has_magic(p)), len(parts))
        prefix = "/".join(parts[:split])
        base_text = ("/" + prefix) if absolute else (prefix or ".")
        base = self.ws.resolve(base_text)
        limit = args.get("max_results", 200)
        return pattern, base, parts[split:], limit

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        pattern, base, rest, limit = self._prepare(args)
        if not rest:  # no wildcard at all: the path itself, if it is there
            matches = [self._shown(base, base.is_dir())] if base.exists() else []
            walk = WalkBudget()
        else:
            matches, walk = await asyncio.to_thread(self._glob, base, rest)
        matches.sort()
        lines = matches[:limit] or [f"no paths match {pattern!r}"]
        if len(matches) > limit:
            lines.append(
                f"(showing {limit} of {len(matches)} matches; narrow the pattern or raise max_results)"
            )
        lines.extend(walk.notes())
        return text_result("\n".join(lines))

    def _glob(self, base: Path, rest: list[str]) -> tuple[list[str], WalkBudget]:
        walk = WalkBudget()
        matches: list[str] = []
        if not base.is_dir():
            return matches, walk
        deadline = MatchDeadline()
        # Without '**' nothing deeper than the pattern's own depth can match.
        max_depth = None if "**" in rest else len(rest) - 1
        entries = [
            (entry.path, entry.kind == "dir") for entry in walk_tree(self.ws, base, walk, max_depth=max_depth)
        ]
        with Matcher() as matcher:
            regex = compile_glob(matcher, "/".join(rest))
            subjects = [path.relative_to(base).as_posix() for path, _ in entries]
            for index in select_matches(regex, subjects, deadline, full=True):
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
