"""What the system prompt takes from the store: context files, a memory summary, the skills' names.

`PromptBuilder` (agent.prompt) asks `context_sections(agent_id, user, disk)`
each turn and fits the sections into its budget in the order given: the
context files (routed by agent type, see `tools.memory.context`), then a
short list of what is remembered, then the skills by name and description
only (the model reads one with `read_file` when it needs it).

A failing database costs the turn these sections, not the turn: it is logged
once and the prompt is built without them.
"""

from __future__ import annotations

import logging
import sqlite3

from edgeclaw.errors import BackendError
from edgeclaw.store.memory import GLOBAL, MemoryStore
from edgeclaw.tools.memory.context import BOOTSTRAP, ContextFiles, DiskFile
from edgeclaw.tools.skills.library import SkillLibrary

log = logging.getLogger("edgeclaw.tools.memory")

BOOTSTRAP_NOTE = (
    "\n\nThis is the first conversation with this user. Follow the instructions above; when they "
    "are done, remove this file: write_file BOOTSTRAP.md with empty content."
)
SUMMARY_ROWS = 50  # documents looked at for the memory summary (it is cut to its budget anyway)


class PromptContext:
    def __init__(
        self,
        contexts: ContextFiles,
        memory: MemoryStore | None = None,
        skills: SkillLibrary | None = None,
        *,
        memory_chars: int = 1500,
        max_skills: int = 30,
    ) -> None:
        self.contexts = contexts
        self.memory = memory
        self.skills = skills
        self.memory_chars = memory_chars
        self.max_skills = max_skills
        self._failing = ""

    def context_sections(self, agent_id: str, user: str, disk: DiskFile) -> list[tuple[str, str]]:
        sections: list[tuple[str, str]] = []
        try:
            for found in self.contexts.for_prompt(agent_id, user, disk):
                if found.name == BOOTSTRAP:
                    sections.append((f"{BOOTSTRAP} (first run)", found.content.strip() + BOOTSTRAP_NOTE))
                else:
                    sections.append((found.name, found.content))
            summary = self.memory_summary(user)
            if summary:
                sections.append(("Memory", summary))
        except (BackendError, sqlite3.Error) as e:
            if self._failing != str(e):
                self._failing = str(e)
                log.error("the system prompt is built without stored context files and memory: %s", e)
            return sections
        self._failing = ""
        listing = self.skills_listing()
        if listing:
            sections.append(("Skills", listing))
        return sections

    def memory_summary(self, user: str) -> str:
        if self.memory is None or self.memory_chars <= 0:
            return ""
        docs = self.memory.documents(user, core_and_recent_first=True, limit=SUMMARY_ROWS)
        if not docs:
            return ""
        head = "Remembered (memory_search finds more, memory_get reads one whole):"
        lines = [head]
        size = len(head)
        for d in docs:
            whose = ", global" if d.scope == GLOBAL else ""
            line = f"- {d.key or d.path} ({d.category}{whose}): {d.first_line}"
            if size + len(line) + 1 > self.memory_chars:
                lines.append(f"- ... and more ({len(docs) - len(lines) + 1}+ not shown)")
                break
            lines.append(line)
            size += len(line) + 1
        return "\n".join(lines)

    def skills_listing(self) -> str:
        if self.skills is None or self.max_skills <= 0:
            return ""
        skills = self.skills.skills()
        if not skills:
            return ""
        lines = ["Before a task one of these covers, read it with read_file (skill_search ranks them):"]
        lines += [f"- {s.name}: {s.description} ({s.path})" for s in skills[: self.max_skills]]
        if len(skills) > self.max_skills:
            lines.append(f"- ... and {len(skills) - self.max_skills} more: use skill_search")
        return "\n".join(lines)
