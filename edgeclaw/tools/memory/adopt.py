"""The administrator's memory files, taken into the store the first time memory is used.

The global memory is part of every caller's system prompt, so only the
device's administrator puts files into it: the first open of the memory store
copies `MEMORY.md`, `memory.md` and `memory/**` of the local directory
(`STATE/local`, `daemon.local_dir`) into the global memory, once (the store
records it), and logs what it took.

Files of those names in the *workspace* are never taken: any caller's command
(`exec`) or fs call may have written them, and what one caller writes must not
become part of another's prompt. Found there at the first open, they are named
in a log line that says how an administrator takes them in (`edgeclaw memory
import`, or a copy into the local directory); they stay where they are.

Every file is read through the workspace's safe open; symlinks, special
files, hard-linked files and files over the size limit are left out, each
with a log line.
"""

from __future__ import annotations

import logging
import os
import stat
import time

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.store.memory import GLOBAL, MemoryStore, MemoryStoreError
from edgeclaw.tools.fs.workspace import Workspace

log = logging.getLogger("edgeclaw.tools.memory")

ADOPTED_KEY = "workspace_files_adopted"
MAX_FILES = 2000


def adopt_local_memory(local: Workspace | None, ws: Workspace, memory: MemoryStore) -> list[str]:
    """Copy the local directory's MEMORY.md, memory.md and memory/** into the global memory, once;
    name (never take) what the workspace holds of those names."""
    if memory.meta(ADOPTED_KEY) is not None:
        return []
    left = _candidates(ws)
    if left:
        log.warning(
            "memory files in the workspace are not taken into the global memory: %s (any caller may "
            "have written them; an administrator takes them in with `edgeclaw memory import` or by "
            "copying them into %s before memory's first use)",
            ", ".join(left[:10]) + (" ..." if len(left) > 10 else ""),
            local.root if local is not None else "the state directory's local/",
        )
    taken = _take(local, memory) if local is not None else []
    memory.set_meta(ADOPTED_KEY, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if taken and local is not None:
        log.info(
            "took %d file(s) of %s into the global memory (%s); the copies on disk are no longer used",
            len(taken),
            local.root,
            ", ".join(taken[:10]) + (" ..." if len(taken) > 10 else ""),
        )
    return taken


def _take(local: Workspace, memory: MemoryStore) -> list[str]:
    """The local directory's memory files into the global memory (a path stored already stays)."""
    taken: list[str] = []
    for rel in _candidates(local):
        try:
            limit = memory.settings.max_document_bytes
            text = local.read_file(local.resolve(rel), limit=limit, shown=rel).data.decode("utf-8")
            path = "MEMORY.md" if rel == "memory.md" else rel
            if memory.document(path, GLOBAL) is None:
                memory.put(path, text, scope=GLOBAL)
                taken.append(path)
        except (OSError, ToolError, ToolRefused, UnicodeDecodeError, MemoryStoreError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            log.warning("local file %s not taken into memory: %s", rel, why)
    return taken


def _candidates(ws: Workspace) -> list[str]:
    found: list[str] = []
    for name in ("MEMORY.md", "memory.md"):
        try:
            st = os.stat(ws.root / name, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.append(name)
    pending = ["memory"]
    while pending and len(found) < MAX_FILES:
        rel = pending.pop()
        try:
            fd = ws.open_dir(ws.root / rel)
        except (OSError, ToolError, ToolRefused):
            continue
        try:
            with os.scandir(fd) as it:
                entries = sorted((e.name, e.stat(follow_symlinks=False).st_mode) for e in it)
        except OSError:
            continue
        finally:
            os.close(fd)
        for name, mode in entries:
            if stat.S_ISDIR(mode):
                pending.append(f"{rel}/{name}")
            elif stat.S_ISREG(mode) and not name.startswith("."):
                found.append(f"{rel}/{name}")
    return found
