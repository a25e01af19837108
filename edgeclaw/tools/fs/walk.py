"""Directory walks for list_files, search and glob: never following symlinks, never descending into
the `SKIP_DIRS` caches and VCS directories (they can still be targeted explicitly), and stopping after
`WALK_MAX_ENTRIES` entries, so one call stays bounded even on a huge tree."""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Generator
from dataclasses import field
from pathlib import Path

from edgeclaw.errors import ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.tools.fs.workspace import Workspace

WALK_MAX_ENTRIES = 50_000  # directory entries one list/search/glob call may visit
# Walks list these directories but do not descend into them: VCS data and caches drown real results.
SKIP_DIRS = frozenset(
    {".git", ".hg", ".svn", "__pycache__", "node_modules", ".venv"}
    | {".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox"}
)


# -- directory walking -------------------------------------------------------------


@dataclass(slots=True)
class WalkBudget:
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
class WalkEntry:
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


def walk_tree(
    ws: Workspace, start: Path, walk: WalkBudget, *, max_depth: int | None
) -> Generator[WalkEntry, None, None]:
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
                yield WalkEntry(path, entry.name, dir_fd, kind)
                descend = max_depth is None or depth < max_depth
                if kind == "dir" and descend and entry.name not in SKIP_DIRS:
                    queue.append((path, depth + 1))
        finally:
            os.close(dir_fd)
