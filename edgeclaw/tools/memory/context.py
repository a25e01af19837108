"""The seven context files, routed by agent type: whose copy a read sees and a write changes.

| agent type   | file         | read                                  | write            |
|--------------|--------------|---------------------------------------|------------------|
| *open*       | any of seven | the caller's copy, else the agent's   | the caller's     |
| *predefined* | USER.md      | the caller's copy                     | the caller's     |
| *predefined* | the others   | the agent's                           | the agent's      |

"The caller" is `ToolContext.identity`: the console port, the MQTT signing
key or declared sender, the CLI user. An open agent is shaped by each person
who talks to it; a predefined one has one personality, and only what it
knows about each user is theirs.

The agent's own file is the stored one, else the file of that name in the
device's local directory (`STATE/local`, `daemon.local_dir`: written by its
administrator only; read by the caller of `read` through a safe open), so a
device set up by hand keeps working; once stored, the stored file wins. The
workspace's files of those names are never read for it: any caller's command
may write there, and the agent's own file is in every caller's prompt.

BOOTSTRAP.md is the first-run conversation. Written empty it is removed: a
tombstone in the scope the write goes to hides the agent's template (and the
file on disk) there, so the first run does not start over. The prompt offers
it for at most `bootstrap_max_turns` turns, then removes it the same way, for
a model that never does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Literal

from edgeclaw.records import dataclass
from edgeclaw.store.context_files import AGENT_SCOPE, ContextFileStore

AgentType = Literal["open", "predefined"]

# In the order the system prompt shows them.
CONTEXT_FILES = ("SOUL.md", "IDENTITY.md", "AGENTS.md", "TOOLS.md", "USER.md", "HEARTBEAT.md", "BOOTSTRAP.md")
BOOTSTRAP = "BOOTSTRAP.md"
# Read by the heartbeat runs, not put into every chat turn's prompt.
NOT_IN_CHAT_PROMPT = frozenset({"HEARTBEAT.md"})
PER_USER_IN_PREDEFINED = frozenset({"USER.md"})

# The agent's own file on disk when none is stored: name -> text, or None when there is none.
DiskFile = Callable[[str], "str | None"]

# Only "main" falls back to the files of the local directory (a device set up by hand). A named agent's
# own files are only the stored ones (`edgeclaw memory import`, or written by the local CLI or console).
DEFAULT_AGENT = "main"


def reads_disk(agent_id: str) -> bool:
    """Whether this agent's own context files fall back to the local directory's files on disk."""
    return agent_id == DEFAULT_AGENT


@dataclass(frozen=True)
class AgentTypes:
    """Which agents are open and which predefined; an agent not named is `default`."""

    types: Mapping[str, AgentType] = field(default_factory=dict)
    default: AgentType = "open"

    def of(self, agent_id: str) -> AgentType:
        return self.types.get(agent_id, self.default)


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a context file is read from (in order) and written to, for one agent and caller."""

    read: tuple[str, ...]
    write: str

    def whose(self, scope: str) -> str:
        return "the agent's own" if scope == AGENT_SCOPE else "your own"


def placement(name: str, agent_type: AgentType, user: str) -> Placement:
    if agent_type == "open":
        return Placement((user, AGENT_SCOPE), user)
    if name in PER_USER_IN_PREDEFINED:
        return Placement((user,), user)
    return Placement((AGENT_SCOPE,), AGENT_SCOPE)


@dataclass(frozen=True, slots=True)
class Resolved:
    name: str
    content: str
    scope: str  # the scope it was found in
    placement: Placement
    on_disk: bool = False  # the agent's file, read from the workspace (nothing stored for it)


class ContextFiles:
    """Reads and writes context files through the routing above."""

    def __init__(self, store: ContextFileStore, types: AgentTypes, *, bootstrap_max_turns: int = 10) -> None:
        self.store = store
        self.types = types
        self.bootstrap_max_turns = bootstrap_max_turns

    def placement(self, agent_id: str, user: str, name: str) -> Placement:
        return placement(name, self.types.of(agent_id), user)

    def read(self, agent_id: str, user: str, name: str, disk: DiskFile | None = None) -> Resolved | None:
        where = self.placement(agent_id, user, name)
        for scope in where.read:
            row = self.store.get(agent_id, scope, name)
            if row is None:
                continue
            if row.removed:
                return None  # a tombstone hides the fallback too
            return Resolved(name, row.content, scope, where)
        if AGENT_SCOPE in where.read and disk is not None:
            text = disk(name)
            if text is not None:
                return Resolved(name, text, AGENT_SCOPE, where, on_disk=True)
        return None

    def write(self, agent_id: str, user: str, name: str, content: str) -> tuple[str, bool]:
        """Store `content` where this caller's writes go; returns (scope, created).

        BOOTSTRAP.md written empty (or blank) is removed instead: see the module docstring.
        """
        where = self.placement(agent_id, user, name)
        if name == BOOTSTRAP and not content.strip():
            self.store.remove(agent_id, where.write, name, tombstone=True)
            return where.write, False
        return where.write, self.store.put(agent_id, where.write, name, content)

    def for_prompt(self, agent_id: str, user: str, disk: DiskFile | None = None) -> list[Resolved]:
        """The files a chat turn's system prompt holds, in order; counts BOOTSTRAP.md's turns."""
        found: list[Resolved] = []
        for name in CONTEXT_FILES:
            if name in NOT_IN_CHAT_PROMPT:
                continue
            resolved = self.read(agent_id, user, name, disk)
            if resolved is None:
                continue
            if name == BOOTSTRAP and not self._bootstrap_turn(agent_id, user, resolved):
                continue
            found.append(resolved)
        return found

    def _bootstrap_turn(self, agent_id: str, user: str, resolved: Resolved) -> bool:
        """Count a turn of the first run; False (and removed) once it has had its turns."""
        if self.bootstrap_max_turns <= 0:
            return True
        scope = resolved.placement.write
        if resolved.scope != scope or resolved.on_disk:
            # The agent's template (stored, or on disk), met here for the first time: the count
            # belongs where the removal will go, so start a copy there.
            self.store.put(agent_id, scope, BOOTSTRAP, resolved.content)
        uses = self.store.note_use(agent_id, scope, BOOTSTRAP)
        if uses > self.bootstrap_max_turns:
            self.store.remove(agent_id, scope, BOOTSTRAP, tombstone=True)
            return False
        return True
