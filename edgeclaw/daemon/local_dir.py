"""The device's own prompt files: a directory beside the workspace that only its administrator writes.

Whatever is in the workspace may have been written by any caller: the fs
tools write there, and so does every sandboxed command (`exec`), which can
write anywhere in it. So nothing that goes into *another* caller's system
prompt is read from the workspace. The files the administrator sets up by
hand are read from `STATE/local/` instead (the state directory, outside the
workspace, hidden from sandboxed commands and out of the fs tools' reach):

    STATE/local/SOUL.md, AGENTS.md, ...   the default agent's context files, when none is stored
    STATE/local/HEARTBEAT.md              the heartbeat's checklist, when none is stored
    STATE/local/MEMORY.md, memory/**      taken into the global memory at its first use, once
    STATE/local/skills/NAME/SKILL.md      the device's own skills

Read through `Workspace.read_file` rooted there (one open that follows no
symlink). `edgeclaw memory import` (the local CLI) stores them the other
way. Should the workspace (or a `tools.allowed_paths` entry) be configured so
that it holds the local directory, it is not used at all (fail closed;
logged).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from edgeclaw.tools.fs.workspace import Workspace

log = logging.getLogger("edgeclaw.memory")

LOCAL_DIR = "local"


def local_root(state_dir: Path, workspace: Workspace) -> Workspace | None:
    """The local directory as a root for safe reads; None when the fs tools could write it (it
    lies in the workspace or one of `tools.allowed_paths`)."""
    root = Path(os.path.realpath(state_dir / LOCAL_DIR))
    if workspace.contains(root) or any(root in p.parents for p in (workspace.root, *workspace.extra_paths)):
        log.warning(
            "%s lies where callers' tools write (the workspace %s or tools.allowed_paths): its context "
            "files, memory and skills are not used (give the workspace a directory of its own)",
            root,
            workspace.root,
        )
        return None
    try:
        root.mkdir(parents=True, exist_ok=True)  # where the administrator looks for it
    except OSError as e:
        # A CLI user who may not write the state directory: nothing is there, and nothing is read.
        log.debug("cannot create %s: %s", root, e.strerror or e)
    return Workspace(root, max_file_bytes=workspace.max_file_bytes)
