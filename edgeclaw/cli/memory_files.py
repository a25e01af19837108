"""The memory store and the context files as a directory of plain files, and back.

`edgeclaw memory export DIR` writes::

    DIR/manifest.json                           what each file is (scope, category, times)
    DIR/memory/global/MEMORY.md                 the global memory, at its paths
    DIR/memory/global/memory/greenhouse_fan.md
    DIR/memory/users/ID/...                     one caller's own memory (ID: its identity, escaped)
    DIR/context/AGENT/SOUL.md                   an agent's own context files
    DIR/context/AGENT/users/ID/USER.md          a caller's copies

so a technician can read and edit them with any editor; `import DIR` takes
them back. The manifest keeps what a plain file cannot say (a document's
category, a removed BOOTSTRAP.md); a file without an entry is imported by
where it lies, with its path's default category. Identities are escaped
(`console:=2Fdev=2FttyGS0`: any other character than letters, digits and
`:@+,-_.` as `=XX`), so they are file names and come back exactly.

An export is written to a temporary directory beside DIR and renamed into
place: DIR is there whole, or not at all. An import checks every file before
it changes anything, then writes documents and context files in one
transaction. Files are read through `Workspace.read_file` rooted at DIR: a
symlink in DIR to a file elsewhere (`/etc/shadow`) is refused, not imported.
"""

from __future__ import annotations

import calendar
import json
import os
import shutil
import tempfile
import time
from dataclasses import field
from pathlib import Path
from typing import Any

from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.store.context_files import AGENT_SCOPE, ContextFile, ContextFileStore
from edgeclaw.store.memory import (
    GLOBAL,
    MemoryStore,
    MemoryStoreError,
    check_category,
    check_path,
    default_category,
)
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.memory.context import CONTEXT_FILES

MANIFEST = "manifest.json"
FORMAT = 1


class ExportError(BackendError):
    """An export or import that could not be done; nothing was changed."""


_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789:@+,-_.")


def escape(identity: str) -> str:
    """An identity as one file name: other characters than _SAFE as `=XX` (their UTF-8 bytes).

    Not %-encoding: the workspace rules refuse `%2F` in a path, for good reasons. A leading
    '.' is escaped too (no hidden names, never '..').
    """
    out = []
    for i, char in enumerate(identity):
        if char in _SAFE and not (i == 0 and char == "."):
            out.append(char)
        else:
            out.extend(f"={b:02X}" for b in char.encode("utf-8"))
    return "".join(out) or "=00"


def unescape(name: str) -> str:
    raw = bytearray()
    i = 0
    while i < len(name):
        if (
            name[i] == "="
            and i + 3 <= len(name)
            and all(c in "0123456789ABCDEF" for c in name[i + 1 : i + 3])
        ):
            raw.append(int(name[i + 1 : i + 3], 16))
            i += 3
        else:
            raw.extend(name[i].encode("utf-8"))
            i += 1
    text = raw.decode("utf-8", errors="strict")
    return "" if text == "\x00" else text


def _iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _ts(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return float(calendar.timegm(time.strptime(text, "%Y-%m-%dT%H:%M:%SZ")))
    except ValueError:
        return None


@dataclass
class ExportReport:
    documents: int = 0
    context_files: int = 0


@dataclass
class ImportReport:
    documents: int = 0
    changed: int = 0
    context_files: int = 0
    problems: list[str] = field(default_factory=list)


def _memory_file(scope: str, path: str) -> str:
    where = "global" if scope == GLOBAL else f"users/{escape(scope)}"
    return f"memory/{where}/{path}"


def _context_file(agent_id: str, scope: str, name: str) -> str:
    where = "" if scope == AGENT_SCOPE else f"users/{escape(scope)}/"
    return f"context/{escape(agent_id)}/{where}{name}"


def export_memory(memory: MemoryStore, contexts: ContextFileStore, directory: Path) -> ExportReport:
    """Write everything into the new directory `directory` (refused when it exists and is not empty)."""
    target = Path(directory)
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise ExportError(f"{target} exists and is not an empty directory; export into a new one")
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    report = ExportReport()
    manifest: dict[str, Any] = {
        "format": FORMAT,
        "exported": _iso(time.time()),
        "documents": [],
        "context_files": [],
    }
    try:
        for doc in memory.all_documents():
            rel = _memory_file(doc.scope, doc.path)
            _write(staging / rel, doc.content)
            manifest["documents"].append(
                {
                    "file": rel,
                    "scope": doc.scope,
                    "path": doc.path,
                    "category": doc.category,
                    "created": _iso(doc.created),
                    "updated": _iso(doc.updated),
                }
            )
            report.documents += 1
        for row in contexts.all():
            rel = _context_file(row.agent_id, row.scope, row.name)
            entry = {"file": rel, "agent": row.agent_id, "scope": row.scope, "name": row.name}
            if row.removed:
                entry["removed"] = True  # a tombstone: no file
            else:
                _write(staging / rel, row.content)
            entry["updated"] = _iso(row.updated)
            manifest["context_files"].append(entry)
            report.context_files += 1
        _write(staging / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")
        if target.exists():
            target.rmdir()  # empty, checked above
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return report


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def import_memory(
    memory: MemoryStore, contexts: ContextFileStore, directory: Path, *, replace: bool = False
) -> ImportReport:
    """Take `directory` (as `export_memory` writes it) into the store; with `replace`, drop the rest.

    Every problem found is reported and nothing is changed when there is one.
    """
    root = Path(directory)
    if not root.is_dir():
        raise ExportError(f"{root} is not a directory")
    ws = Workspace(root, max_file_bytes=memory.settings.max_document_bytes)
    report = ImportReport()
    manifest = _manifest(ws, report)
    described_docs = {e.get("file"): e for e in manifest.get("documents", []) if isinstance(e, dict)}
    described_files = {e.get("file"): e for e in manifest.get("context_files", []) if isinstance(e, dict)}
    documents: list[tuple[str, str, str, str, float, float]] = []
    files: list[ContextFile] = []
    now = time.time()
    for rel in _files(root):
        if rel == MANIFEST:
            continue
        try:
            text = ws.read_file(ws.resolve(rel), shown=rel).data.decode("utf-8")
        except UnicodeDecodeError:
            report.problems.append(f"{rel}: not UTF-8 text")
            continue
        except (OSError, ToolError, ToolRefused) as e:
            report.problems.append(f"{rel}: {e.strerror if isinstance(e, OSError) and e.strerror else e}")
            continue
        try:
            if rel.startswith("memory/"):
                documents.append(_document(rel, text, described_docs.get(rel), now))
            elif rel.startswith("context/"):
                files.append(_context(rel, text, described_files.get(rel), now))
            else:
                report.problems.append(f"{rel}: not under memory/ or context/")
        except (ValueError, MemoryStoreError) as e:
            report.problems.append(f"{rel}: {e}")
    for rel, entry in described_files.items():
        if entry.get("removed") is True:
            try:
                files.append(_context(str(rel), "", entry, now, removed=True))
            except ValueError as e:
                report.problems.append(f"{rel}: {e}")
    if report.problems:
        return report
    contexts.db  # noqa: B018 - its table is made before the import's transaction begins
    report.changed = memory.replace_all(
        documents, prune=replace, also=lambda conn: contexts.write_rows(conn, files, prune=replace)
    )
    report.documents = len(documents)
    report.context_files = len(files)
    return report


def _manifest(ws: Workspace, report: ImportReport) -> dict[str, Any]:
    try:
        data = ws.read_file(ws.resolve(MANIFEST), shown=MANIFEST).data
    except FileNotFoundError:
        return {}
    except (OSError, ToolError, ToolRefused) as e:
        report.problems.append(f"{MANIFEST}: {e}")
        return {}
    try:
        manifest = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        report.problems.append(f"{MANIFEST}: not valid JSON ({e})")
        return {}
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        report.problems.append(f'{MANIFEST}: expected an object with "format": {FORMAT}')
        return {}
    return manifest


def _files(root: Path) -> list[str]:
    """Every regular file and symlink below `root`, relative, sorted (symlinks are refused on read)."""
    found = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        base = Path(dirpath).relative_to(root)
        for name in sorted(filenames):
            if not name.startswith("."):
                found.append((base / name).as_posix())
    return sorted(found)


def _document(
    rel: str, text: str, entry: dict[str, Any] | None, now: float
) -> tuple[str, str, str, str, float, float]:
    parts = rel.split("/")
    if len(parts) >= 3 and parts[1] == "global":
        scope, path = GLOBAL, "/".join(parts[2:])
    elif len(parts) >= 4 and parts[1] == "users":
        scope, path = unescape(parts[2]), "/".join(parts[3:])
    else:
        raise ValueError("expected memory/global/PATH or memory/users/ID/PATH")
    check_path(path)
    category = (entry or {}).get("category") or default_category(path)
    check_category(str(category))
    updated = _ts((entry or {}).get("updated")) or now
    created = _ts((entry or {}).get("created")) or updated
    return scope, path, str(category), text, updated, created


def _context(
    rel: str, text: str, entry: dict[str, Any] | None, now: float, *, removed: bool = False
) -> ContextFile:
    parts = rel.split("/")
    if len(parts) == 3:
        agent, scope, name = unescape(parts[1]), AGENT_SCOPE, parts[2]
    elif len(parts) == 5 and parts[2] == "users":
        agent, scope, name = unescape(parts[1]), unescape(parts[3]), parts[4]
    else:
        raise ValueError("expected context/AGENT/NAME or context/AGENT/users/ID/NAME")
    if name not in CONTEXT_FILES:
        raise ValueError(f"{name!r} is not a context file (expected one of: {', '.join(CONTEXT_FILES)})")
    if not agent:
        raise ValueError("the agent id is empty")
    updated = _ts((entry or {}).get("updated")) or now
    return ContextFile(agent, scope, name, text, removed, 0, updated)
