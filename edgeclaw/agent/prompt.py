"""The system prompt: the context files plus facts about this board.

The context files on disk are the device's administrator's: they are read
from the local directory (`STATE/local`, `daemon.local_dir`), never from the
workspace, where every caller's fs calls and sandboxed commands write: what
one caller writes there must not become part of another caller's prompt.
They are read with `Workspace.read_file` rooted there: one open that follows
no symlink, checked on its descriptor. A SOUL.md swapped for a symlink to
`/proc/self/environ` between a check and an open would otherwise put the
daemon's environment, API keys included, into every provider request.

With memory on, a `ContextSource` (`tools.memory.prompt_context`) gives the
sections instead: the context files as the caller sees them (stored per
agent and caller; the local directory's file read as above when none is
stored), what is remembered, the skills. They are fitted, in the order
given, into `budget_chars`.

The layout keeps what changes last. A model server caches the prompt it
evaluated last time and reuses the longest common prefix (llama.cpp's
prompt cache; Anthropic's prompt caching, marked in `providers.anthropic`):
anything volatile early in the prompt makes it re-evaluate all that follows
-- the tool definitions, thousands of tokens -- on every turn, which takes
tens of seconds on a board's CPU. So `build` holds only what stays the same
from turn to turn (the instructions, the board's facts, the context files),
and what changes each turn (the current time) is `volatile_note`, which the
agent loop appends to the newest user message as it is sent: after the
system prompt, the tool definitions and the earlier history.

A model whose context cannot hold the whole prompt gets `shorter`: whole
sections left out (the skills list and the memory summary first, then the
context files from the last), and only then the head cut after its last
whole sentence. Never a marker such as "[cut]": a small model repeats it as
its answer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.fs.workspace import Workspace

log = logging.getLogger("edgeclaw.agent.prompt")

CONTEXT_FILES = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md")
MAX_FILE_CHARS = 8000  # a context file is guidance, not a data dump: keep the prompt small on a small model
# Read no more than is used: the prompt is built every turn, and the model or a command can make these
# files large. UTF-8 takes at most 4 bytes a character.
MAX_FILE_BYTES = 4 * MAX_FILE_CHARS

NOTE_START = "[current time (UTC): "  # volatile_note's start: without_note finds it by this
SECTION = "\n\n## "  # how build() starts each titled section ("## SOUL.md", "## Skills")
# The sections `shorter` leaves out first, least needed first; the other titled sections follow, the
# last first. A section in KEPT is never left out: a subagent's brief is its task.
DROP_FIRST = ("Skills", "Memory")
KEPT = frozenset({"Subagent"})

BASE = (
    "You are edgeclaw, an assistant running on an embedded Linux board. You act through tools; "
    "use them to observe and change the device instead of guessing, and say plainly when a tool "
    "refuses or fails. Keep answers short: they may be read on a serial terminal."
)


class ContextSource(Protocol):
    def context_sections(
        self, agent_id: str, user: str, disk: Callable[[str], str | None]
    ) -> list[tuple[str, str]]:
        """(title, text) sections for this agent and caller, most important first.

        `disk(name)` reads a context file from the workspace (the safe read below), for the
        agent's own file when none is stored.
        """
        ...


class PromptBuilder:
    def __init__(
        self,
        context_dir: Workspace | Path | None,
        facts: Mapping[str, str],
        extra: str = "",
        *,
        context: ContextSource | None = None,
        budget_chars: int = 12000,
        disk_files: bool = True,
    ) -> None:
        # Where the context files on disk are read (the local directory); None: nowhere.
        self._ws = Workspace(context_dir) if isinstance(context_dir, Path) else context_dir
        self.facts = dict(facts)
        self.extra = extra
        self.context = context
        self.budget_chars = budget_chars
        # False: the local directory's context files are not this agent's (a named agent: its files
        # are stored).
        self.disk_files = disk_files and self._ws is not None
        self.clock: Callable[[], float] = time.time  # the time volatile_note tells
        self._skipped: dict[str, str] = {}  # name -> why, so a refusal is logged once, not every turn

    def build(self, agent_id: str = "main", user: str = "") -> str:
        """The system prompt for a turn of `agent_id` with the caller `user` (its identity): only
        what stays the same from turn to turn, so a server's prompt cache keeps it (see above)."""
        parts = [BASE]
        if self.extra:
            parts.append(self.extra)
        facts = self.facts
        parts.append("Device facts:\n" + "\n".join(f"- {k}: {v}" for k, v in facts.items() if v))
        if self.context is not None:
            parts += self._sections(self.context.context_sections(agent_id, user, self._context_file))
            return "\n\n".join(parts)
        for name in CONTEXT_FILES:
            text = self._context_file(name)
            if text is not None:
                parts.append(f"## {name}\n{text.strip()}")
        return "\n\n".join(parts)

    def volatile_note(self) -> str:
        """What changes every turn, for the end of the newest user message: the current time."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        return f"{NOTE_START}{stamp}]"

    def _sections(self, sections: list[tuple[str, str]]) -> list[str]:
        """Each section cut to MAX_FILE_CHARS, all of them together to `budget_chars`."""
        out: list[str] = []
        left = self.budget_chars
        dropped: list[str] = []
        for title, text in sections:
            text = text.strip()
            if len(text) > MAX_FILE_CHARS:
                text = text[:MAX_FILE_CHARS] + f"\n[{title} truncated]"
            if left <= 0 or not text:
                if text:
                    dropped.append(title)
                continue
            if len(text) > left:
                text = text[:left] + f"\n[{title} cut to fit the prompt]"
            left -= len(text)
            out.append(f"## {title}\n{text}")
        if dropped:
            out.append(f"(left out to fit the prompt: {', '.join(dropped)})")
        return out

    def _context_file(self, name: str) -> str | None:
        """The file's text, cut to MAX_FILE_CHARS; None when it is absent or may not be used."""
        ws = self._ws
        if not self.disk_files or ws is None:
            return None
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


def shorter(system: str, max_chars: int) -> tuple[str, list[str]]:
    """`system` in at most `max_chars`, of whole parts (see the module's docstring), and the titles of
    the sections left out."""
    if len(system) <= max_chars:
        return system, []
    head, *rest = system.split(SECTION)
    sections = [(part.partition("\n")[0].strip(), SECTION + part) for part in rest]
    order = sorted(
        (i for i, (title, _) in enumerate(sections) if title not in KEPT),
        key=lambda i: (
            DROP_FIRST.index(sections[i][0]) if sections[i][0] in DROP_FIRST else len(DROP_FIRST),
            -i,
        ),
    )
    left_out: list[str] = []
    kept = dict(enumerate(sections))
    for i in order:
        if len(head) + sum(len(text) for _, text in kept.values()) <= max_chars:
            break
        left_out.append(kept.pop(i)[0])
    tail = "".join(text for _, text in kept.values())
    if len(head) + len(tail) > max_chars:
        head = whole_sentences(head, max(0, max_chars - len(tail)))
    return head + tail, left_out


def whole_sentences(text: str, max_chars: int) -> str:
    """The longest start of `text` within `max_chars` that ends at the end of a sentence or a line
    (else of a word; a text of neither is cut where it must be)."""
    if len(text) <= max_chars:
        return text
    window = text[: max_chars + 1]
    ends = [i + 1 for i, c in enumerate(window[:-1]) if c in ".!?" and window[i + 1] in " \n"]
    ends += [i for i, c in enumerate(window) if c == "\n"]
    end = max(ends, default=0) or window.rfind(" ")
    return text[: end if end > 0 else max_chars].rstrip()


def without_note(text: str) -> str:
    """A user message as the person wrote it: the volatile note the loop appended taken off."""
    head, sep, tail = text.rpartition("\n\n" + NOTE_START)
    return head if sep and "\n" not in tail else text
