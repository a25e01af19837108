"""The system prompt: the workspace's context files plus facts about this board.

The context files live in the workspace, where the model and sandboxed
commands write too, so they are read like any other workspace file
(`Workspace.read_file`): one open that follows no symlink, checked on its
descriptor. A SOUL.md swapped for a symlink to `/proc/self/environ` between
a check and an open would otherwise put the daemon's environment, API keys
included, into every provider request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from pathlib import Path

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.workspace import Workspace

log = logging.getLogger("edgeclaw.agent.prompt")

CONTEXT_FILES = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md")
MAX_FILE_CHARS = 8000  # a context file is guidance, not a data dump: keep the prompt small on a small model
# Read no more than is used: the prompt is built every turn, and the model or a command can make these
# files large. UTF-8 takes at most 4 bytes a character.
MAX_FILE_BYTES = 4 * MAX_FILE_CHARS

BASE = (
    "You are edgeclaw, an assistant running on an embedded Linux board. You act through tools; "
    "use them to observe and change the device instead of guessing, and say plainly when a tool "
    "refuses or fails. Keep answers short: they may be read on a serial terminal."
)


class PromptBuilder:
    def __init__(self, workspace: Workspace | Path, facts: Mapping[str, str], extra: str = "") -> None:
        self._ws = workspace if isinstance(workspace, Workspace) else Workspace(workspace)
        self.workspace = self._ws.root
        self.facts = dict(facts)
        self.extra = extra
        self._skipped: dict[str, str] = {}  # name -> why, so a refusal is logged once, not every turn

    def build(self) -> str:
        parts = [BASE]
        if self.extra:
            parts.append(self.extra)
        facts = {**self.facts, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        parts.append("Device facts:\n" + "\n".join(f"- {k}: {v}" for k, v in facts.items() if v))
        for name in CONTEXT_FILES:
            text = self._context_file(name)
            if text is not None:
                parts.append(f"## {name}\n{text.strip()}")
        return "\n\n".join(parts)

    def _context_file(self, name: str) -> str | None:
        """The file's text, cut to MAX_FILE_CHARS; None when it is absent or may not be used."""
        ws = self._ws
        try:
            content = ws.read_file(ws.resolve(name), limit=MAX_FILE_BYTES, cut=True, shown=name)
        except FileNotFoundError:
            self._skipped.pop(name, None)
            return None
        except (OSError, ToolError, ToolRefused) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            if self._skipped.get(name) != why:
                self._skipped[name] = why
                log.warning("context file %s left out of the system prompt: %s", name, why)
            return None
        self._skipped.pop(name, None)
        text = content.data.decode("utf-8", errors="replace")
        if content.truncated or len(text) > MAX_FILE_CHARS:
            text = text[:MAX_FILE_CHARS] + f"\n[{name} truncated]"
        return text
