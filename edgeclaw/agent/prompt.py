"""The system prompt: the workspace's context files plus facts about this board."""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path

CONTEXT_FILES = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md")
MAX_FILE_CHARS = 8000  # a context file is guidance, not a data dump: keep the prompt small on a small model

BASE = (
    "You are edgeclaw, an assistant running on an embedded Linux board. You act through tools; "
    "use them to observe and change the device instead of guessing, and say plainly when a tool "
    "refuses or fails. Keep answers short: they may be read on a serial terminal."
)


class PromptBuilder:
    def __init__(self, workspace: Path, facts: Mapping[str, str], extra: str = "") -> None:
        self.workspace = workspace
        self.facts = dict(facts)
        self.extra = extra

    def build(self) -> str:
        parts = [BASE]
        if self.extra:
            parts.append(self.extra)
        facts = {**self.facts, "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        parts.append("Device facts:\n" + "\n".join(f"- {k}: {v}" for k, v in facts.items() if v))
        for name in CONTEXT_FILES:
            path = self.workspace / name
            try:
                if not path.is_file() or path.is_symlink():
                    continue
                # Read no more than is used: the prompt is built every turn, and the model or a
                # command can make these files large.
                with path.open(encoding="utf-8", errors="replace") as f:
                    text = f.read(MAX_FILE_CHARS + 1)
            except OSError:
                continue
            if len(text) > MAX_FILE_CHARS:
                text = text[:MAX_FILE_CHARS] + f"\n[{name} truncated]"
            parts.append(f"## {name}\n{text.strip()}")
        return "\n\n".join(parts)
