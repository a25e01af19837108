"""Memory files already in the workspace, taken into the store the first time memory is used.

Once the virtual file system routes `MEMORY.md` and `memory/**` to the
database, files of those names on disk are no longer seen by the fs tools.
So that nothing someone put there seems lost, the first open of the memory
store copies them into the global memory (once: the store records it) and
logs what it took. The files on disk are left as they are.

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


def adopt_workspace_memory(ws: Workspace, memory: MemoryStore) -> list[str]:
    """Copy the workspace's MEMORY.md, memory.md and memory/** into the global memory, once."""
    if memory.meta(ADOPTED_KEY) is not None:
        return []
    taken: list[str] = []
    for rel in _candidates(ws):
        shown = rel
        try:
            data = ws.read_file(ws.resolve(rel), limit=memory.settings.max_document_bytes, shown=shown).data
            text = data.decode("utf-8")
            path = "MEMORY.md" if rel == "memory.md" else rel
            if memory.document(path, GLOBAL) is None:
                memory.put(path, text, scope=GLOBAL)
                taken.append(path)
        except (OSError, ToolError, ToolRefused, UnicodeDecodeError, MemoryStoreError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            log.warning("workspace file %s not taken into memory: %s", shown, why)
    memory.set_meta(ADOPTED_KEY, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
    if taken:
        log.info(
            "took %d workspace file(s) into the global memory (%s); the fs tools now read and write "
            "them in the state database, and the copies on disk are no longer used",
            len(taken),
            ", ".join(taken[:10]) + (" ..." if len(taken) > 10 else ""),
        )
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
