"""Skills: instructions the agent reads when a task calls for them, found on disk and ranked.

A skill is a directory `NAME/` holding `SKILL.md`, which starts with a short
front matter::

    ---
    name: i2c-bus-recovery
    description: Diagnose and recover a stuck I2C bus (devices missing, SDA held low).
    ---
    The body: what to check, in which order, with which tool calls.

Skill directories, in the order a name is looked up (the first one holding a
name wins): the device's local `skills/` (`STATE/local/skills`, which only
its administrator writes), the configured `skills.dirs`, and the system
directory (the skills shipped with edgeclaw unless `skills.system_dir` says
otherwise). Never the workspace's `skills/`: the skills are listed in every
caller's prompt, and any caller's command may write the workspace. Every
file is read through `Workspace.read_file` rooted at its directory: one open
that follows no symlink, checked on its descriptor.

The system prompt lists only names and descriptions; the model reads a skill
with `read_file skills/NAME/SKILL.md` (the virtual file system serves that
path from whichever directory holds NAME, and never writes there).
`skill_search` ranks skills with FTS5's `bm25()` over name, description and
body, fused with cosine similarity when an embedder answers.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Literal

from edgeclaw.backends.embeddings import Embedder, EmbeddingsUnavailable
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.store import ranking, vectors
from edgeclaw.store.chunking import text_hash
from edgeclaw.store.memory import fts_query
from edgeclaw.tools.fs.workspace import Workspace

log = logging.getLogger("edgeclaw.tools.skills")

SKILL_FILE = "SKILL.md"
VIRTUAL_ROOT = "skills"  # the path the fs tools see every skill under
MAX_SKILL_BYTES = 64 * 1024
MAX_DESCRIPTION_CHARS = 400
RESCAN_S = 2.0  # directories are looked at again at most this often
EMBED_BODY_CHARS = 1500
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
BUILTIN_DIR = Path(__file__).resolve().parent.parent.parent / "builtin_skills"


@dataclass(frozen=True, slots=True)
class SkillRoot:
    """A directory of skills: `workspace` rooted where its safe reads start, `prefix` below that."""

    label: str  # "local", "configured", "system": for listings and messages
    workspace: Workspace
    prefix: str = ""

    def relative(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p) or "."


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    body: str
    root: SkillRoot

    @property
    def path(self) -> str:
        """Where the fs tools read it."""
        return f"{VIRTUAL_ROOT}/{self.name}/{SKILL_FILE}"

    @property
    def embed_text(self) -> str:
        return f"{self.name}: {self.description}\n\n{self.body[:EMBED_BODY_CHARS]}"


@dataclass(frozen=True, slots=True)
class SkillHit:
    skill: Skill
    score: float


@dataclass(frozen=True, slots=True)
class SkillSearch:
    hits: list[SkillHit]
    mode: Literal["hybrid", "keyword"]
    note: str = ""


def parse_skill(text: str, name: str) -> tuple[str, str]:
    """(description, body) of a SKILL.md; ValueError saying what is wrong with it."""
    lines = text.replace("\r\n", "\n").split("\n")
    if not lines or lines[0].strip() != "---":
        raise ValueError("it does not start with a front matter ('---' line, name:, description:, '---')")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise ValueError("its front matter has no closing '---' line") from None
    fields: dict[str, str] = {}
    for line in lines[1:end]:
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise ValueError(f"front matter line {line.strip()!r} is not 'key: value'")
        fields[key.strip().lower()] = value.strip().strip("'\"")
    declared = fields.get("name", name)
    if declared != name:
        raise ValueError(f"its front matter names it {declared!r}, but its directory is {name!r}")
    description = " ".join(fields.get("description", "").split())
    if not description:
        raise ValueError("its front matter has no description")
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise ValueError(f"its description is longer than {MAX_DESCRIPTION_CHARS} characters")
    return description, "\n".join(lines[end + 1 :]).strip()


class SkillLibrary:
    def __init__(
        self,
        roots: Sequence[SkillRoot],
        *,
        embedder: Embedder | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.roots = list(roots)
        self.embedder = embedder
        self._clock = clock
        self._lock = threading.Lock()
        self._checked = -RESCAN_S
        self._signature: tuple[object, ...] | None = None
        self._skills: dict[str, Skill] = {}
        self._index: sqlite3.Connection | None = None
        self._names: list[str] = []  # FTS rowid - 1 -> name
        self._vectors: dict[str, tuple[str, list[float]]] = {}  # name -> (text hash, unit vector)
        self._vector_model = ""
        self._problems: dict[str, str] = {}  # where -> why, logged once

    # -- finding skills ----------------------------------------------------------------------

    def skills(self) -> list[Skill]:
        self._refresh()
        return sorted(self._skills.values(), key=lambda s: s.name)

    def get(self, name: str) -> Skill | None:
        self._refresh()
        return self._skills.get(name)

    def _refresh(self) -> None:
        with self._lock:
            now = self._clock()
            if now - self._checked < RESCAN_S and self._index is not None:
                return
            self._checked = now
            signature = tuple(self._stamp(root) for root in self.roots)
            if signature == self._signature and self._index is not None:
                return
            self._signature = signature
            self._load()

    def _entries(self, root: SkillRoot, *parts: str) -> list[tuple[str, str]]:
        """(name, kind) in a directory of `root`, never following symlinks; [] when it is not there."""
        ws = root.workspace
        try:
            fd = ws.open_dir(ws.resolve(root.relative(*parts)))
        except (OSError, ToolError, ToolRefused):
            return []
        try:
            with os.scandir(fd) as it:
                out = []
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    kind = (
                        "dir" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
                    )
                    out.append((entry.name, kind))
                return sorted(out)
        finally:
            os.close(fd)

    def _stamp(self, root: SkillRoot) -> tuple[object, ...]:
        """What changes when a skill is added, removed or edited in `root`."""
        ws = root.workspace
        stamps: list[object] = []
        for name, kind in self._entries(root):
            if kind != "dir":
                continue
            try:
                st = os.stat(ws.resolve(root.relative(name, SKILL_FILE)), follow_symlinks=False)
            except (OSError, ToolError, ToolRefused):
                continue
            stamps.append((name, st.st_mtime_ns, st.st_size, st.st_ino))
        return tuple(stamps)

    def _load(self) -> None:
        skills: dict[str, Skill] = {}
        for root in self.roots:
            for name, kind in self._entries(root):
                if kind != "dir" or name in skills or not _NAME.fullmatch(name):
                    continue
                skill = self._read_skill(root, name)
                if skill is not None:
                    skills[name] = skill
        index = sqlite3.connect(":memory:", check_same_thread=False)
        index.execute(
            "CREATE VIRTUAL TABLE skills USING fts5 (name, description, body,"
            " tokenize='porter unicode61 remove_diacritics 2')"
        )
        names = sorted(skills)
        index.executemany(
            "INSERT INTO skills (rowid, name, description, body) VALUES (?, ?, ?, ?)",
            [(i + 1, skills[n].name, skills[n].description, skills[n].body) for i, n in enumerate(names)],
        )
        old = self._index
        self._skills, self._names, self._index = skills, names, index
        # An edited skill is embedded again: its vector is kept only while its text is the same.
        self._vectors = {
            n: v for n, v in self._vectors.items() if n in skills and v[0] == text_hash(skills[n].embed_text)
        }
        if old is not None:
            old.close()

    def _read_skill(self, root: SkillRoot, name: str) -> Skill | None:
        ws = root.workspace
        where = f"{root.label} skill {name!r} ({ws.root / root.relative(name, SKILL_FILE)})"
        try:
            path = ws.resolve(root.relative(name, SKILL_FILE), must_exist=True)
            content = ws.read_file(path, limit=MAX_SKILL_BYTES, shown=where)
            description, body = parse_skill(content.data.decode("utf-8"), name)
        except (OSError, ToolError, ToolRefused, UnicodeDecodeError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
            if self._problems.get(where) != why:
                self._problems[where] = why
                log.warning("%s left out: %s", where, why)
            return None
        self._problems.pop(where, None)
        return Skill(name, description, body, root)

    # -- reading through the virtual file system ---------------------------------------------

    def _locate(self, rel: str) -> tuple[Skill, str]:
        """`NAME/rest` -> (the skill, rest); ToolError when no directory holds NAME."""
        name, _, rest = rel.partition("/")
        skill = self.get(name)
        if skill is None:
            raise ToolError(f"no such file or directory: '{VIRTUAL_ROOT}/{rel}' (no skill named {name!r})")
        return skill, rest

    def read(self, rel: str, limit: int) -> bytes:
        """The bytes of `skills/REL` (REL = NAME/FILE...), read through one safe open."""
        skill, rest = self._locate(rel)
        if not rest:
            raise ToolError(f"{VIRTUAL_ROOT}/{rel} is a directory; use list_files")
        ws = skill.root.workspace
        path = ws.resolve(skill.root.relative(skill.name, rest), must_exist=True)
        return ws.read_file(path, limit=limit, shown=f"{VIRTUAL_ROOT}/{rel}").data

    def listing(self, rel: str) -> list[str]:
        """Rows for `list_files skills[/NAME[/DIR]]`."""
        if not rel:
            return [f"{VIRTUAL_ROOT}/{s.name}/  ({s.root.label}) {s.description}" for s in self.skills()]
        skill, rest = self._locate(rel)
        parts = [p for p in rest.split("/") if p]
        rows = []
        for name, kind in self._entries(skill.root, skill.name, *parts):
            shown = "/".join([VIRTUAL_ROOT, skill.name, *parts, name])
            rows.append(f"{shown}/" if kind == "dir" else shown)
        return rows

    # -- search ------------------------------------------------------------------------------

    async def search(self, query: str, limit: int = 5) -> SkillSearch:
        self._refresh()
        keyword = self._keyword(query)
        ranked: list[str] = []
        note = ""
        if self.embedder is None:
            note = "keyword search only: no embedder is configured (memory.embedder)"
        elif self._skills:
            try:
                await self._embed_skills()
                query_vector = vectors.normalise((await self.embedder.embed([query]))[0])
            except EmbeddingsUnavailable as e:
                note = f"keyword search only: the embedder {self.embedder.name} could not be used: {e}"
            except ValueError:
                note = "keyword search only: the embedder gave a zero vector"
            else:
                scored = sorted(
                    ((vectors.dot(query_vector, v), n) for n, (_, v) in self._vectors.items()),
                    reverse=True,
                )
                ranked = [n for score, n in scored[: max(limit * 2, 10)] if score > 0]
        fused = ranking.reciprocal_rank_fusion([keyword, ranked])
        order = sorted(fused, key=lambda n: (-fused[n], n))[:limit]
        mode: Literal["hybrid", "keyword"] = "keyword" if note else "hybrid"
        return SkillSearch([SkillHit(self._skills[n], fused[n]) for n in order], mode, note)

    def _keyword(self, query: str) -> list[str]:
        match = fts_query(query)
        if not match or self._index is None:
            return []
        with self._lock:
            rows = self._index.execute(
                "SELECT rowid FROM skills WHERE skills MATCH ? ORDER BY bm25(skills, 5.0, 3.0, 1.0) LIMIT 50",
                (match,),
            ).fetchall()
        return [self._names[r[0] - 1] for r in rows]

    async def _embed_skills(self) -> None:
        assert self.embedder is not None
        if self._vector_model != self.embedder.model:
            self._vectors, self._vector_model = {}, self.embedder.model
        todo = [s for n, s in self._skills.items() if n not in self._vectors]
        if not todo:
            return
        found = await self.embedder.embed([s.embed_text for s in todo])
        for skill, vector in zip(todo, found, strict=True):
            with contextlib.suppress(ValueError):  # a zero vector: found by keywords only
                self._vectors[skill.name] = (text_hash(skill.embed_text), vectors.normalise(vector))
