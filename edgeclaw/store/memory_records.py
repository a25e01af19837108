"""The memory's tables and what is read from them: documents, their scopes, paths and categories.

A *document* is a markdown text at a path (`MEMORY.md`, `memory/greenhouse_fan.md`)
in a *scope*: one caller's own (the scope is its identity, "mqtt:ops")
or the global one (""). A document has a category (`core`, `daily`,
`conversation`, or any other word). The store itself is `store.memory`.
"""

from __future__ import annotations

import re
import sqlite3

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass
from edgeclaw.store.db import Migration

GLOBAL = ""  # the scope every caller sees after its own
BUILTIN_CATEGORIES = ("core", "daily", "conversation")
MAX_PATH_CHARS = 512

MIGRATIONS = [
    Migration(
        "memory-1",
        [
            """CREATE TABLE memory_documents (
                id INTEGER PRIMARY KEY,
                scope TEXT NOT NULL,
                path TEXT NOT NULL,
                category TEXT NOT NULL,
                content TEXT NOT NULL,
                content_hash TEXT NOT NULL,
                created REAL NOT NULL,
                updated REAL NOT NULL,
                UNIQUE (scope, path)
            )""",
            "CREATE INDEX memory_documents_by_path ON memory_documents (path)",
            """CREATE TABLE memory_chunks (
                id INTEGER PRIMARY KEY,
                document_id INTEGER NOT NULL REFERENCES memory_documents (id) ON DELETE CASCADE,
                seq INTEGER NOT NULL,
                title TEXT NOT NULL,
                heading TEXT NOT NULL,
                text TEXT NOT NULL,
                text_hash TEXT NOT NULL,
                start_line INTEGER NOT NULL,
                end_line INTEGER NOT NULL
            )""",
            "CREATE INDEX memory_chunks_by_document ON memory_chunks (document_id, seq)",
            "CREATE INDEX memory_chunks_by_hash ON memory_chunks (text_hash)",
            # External content: the text lives once, in memory_chunks; triggers keep the index in step
            # inside the same transaction as the rows.
            """CREATE VIRTUAL TABLE memory_fts USING fts5 (
                title, text, content='memory_chunks', content_rowid='id',
                tokenize='porter unicode61 remove_diacritics 2'
            )""",
            """CREATE TRIGGER memory_chunks_indexed AFTER INSERT ON memory_chunks BEGIN
                INSERT INTO memory_fts (rowid, title, text) VALUES (new.id, new.title, new.text);
            END""",
            """CREATE TRIGGER memory_chunks_unindexed AFTER DELETE ON memory_chunks BEGIN
                INSERT INTO memory_fts (memory_fts, rowid, title, text)
                VALUES ('delete', old.id, old.title, old.text);
            END""",
            # A rowid table, not WITHOUT ROWID: a 1.5 KiB vector per row would spill every b-tree
            # cell of a WITHOUT ROWID table into overflow pages and make each lookup slow.
            """CREATE TABLE memory_embeddings (
                id INTEGER PRIMARY KEY,
                model TEXT NOT NULL,
                text_hash TEXT NOT NULL,
                dim INTEGER NOT NULL,
                bits BLOB NOT NULL,
                vector BLOB NOT NULL,
                created REAL NOT NULL,
                UNIQUE (model, text_hash)
            )""",
            "CREATE TABLE memory_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        ],
    )
]

_CATEGORY = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_KEY_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_DAILY_NAME = re.compile(r"(^|/)\d{4}-\d{2}-\d{2}[^/]*\.md$")


class MemoryStoreError(BackendError):
    """A memory document could not be stored or found as asked; the message says why."""


def check_path(path: str) -> str:
    """A document path as stored: relative, '/'-separated, no empty, '.' or '..' components."""
    if not isinstance(path, str) or not path.strip():
        raise MemoryStoreError("a memory path must be a non-empty string")
    if len(path) > MAX_PATH_CHARS:
        raise MemoryStoreError(f"memory path {path[:40]!r}... is longer than {MAX_PATH_CHARS} characters")
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise MemoryStoreError(f"memory path {path!r} contains a control character")
    if path.startswith("/") or path.endswith("/"):
        raise MemoryStoreError(f"memory path {path!r} must be relative and name a file")
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts) or "\\" in path:
        raise MemoryStoreError(f"memory path {path!r} has an empty, '.', '..' or '\\' component")
    return path


def check_category(category: str) -> str:
    if not _CATEGORY.fullmatch(category or ""):
        raise MemoryStoreError(
            f"category {category!r}: expected core, daily, conversation, or a word of lowercase "
            "letters, digits, '_' or '-' (at most 32)"
        )
    return category


def key_path(key: str) -> str:
    """`greenhouse_fan` -> `memory/greenhouse_fan.md`; keys may have '/'-separated parts."""
    if not isinstance(key, str) or len(key) > 128:
        raise MemoryStoreError("a memory key must be a string of at most 128 characters")
    parts = key.removesuffix(".md").split("/")
    if not all(_KEY_SEGMENT.fullmatch(p) for p in parts):
        raise MemoryStoreError(
            f"memory key {key!r}: expected letters, digits, '_', '.' or '-' (parts may be separated "
            "by '/'), starting with a letter or digit"
        )
    return "memory/" + "/".join(parts) + ".md"


def path_key(path: str) -> str | None:
    """The key a `memory_store` call would use for `path`, or None (MEMORY.md, non-.md files)."""
    if path.startswith("memory/") and path.endswith(".md"):
        return path[len("memory/") : -len(".md")]
    return None


def default_category(path: str) -> str:
    """A document written as a file gets `daily` under memory/daily/ or for a dated name, else `core`."""
    if path.startswith("memory/daily/") or _DAILY_NAME.search(path):
        return "daily"
    return "core"


def indexable(path: str) -> bool:
    return path.lower().endswith(".md")


@dataclass(frozen=True, slots=True)
class Document:
    id: int
    scope: str
    path: str
    category: str
    content: str
    created: float
    updated: float

    @property
    def key(self) -> str | None:
        return path_key(self.path)

    @property
    def is_global(self) -> bool:
        return self.scope == GLOBAL


@dataclass(frozen=True, slots=True)
class DocumentInfo:
    scope: str
    path: str
    category: str
    size: int
    updated: float
    first_line: str

    @property
    def key(self) -> str | None:
        return path_key(self.path)


@dataclass(frozen=True, slots=True)
class PutResult:
    document: Document
    created: bool
    changed: bool  # False when the content and category were already these
    chunks: int
    new_hashes: tuple[str, ...] = ()  # chunk texts without an embedding yet, for the current model


@dataclass
class MemorySettings:
    chunk_tokens: int = 256
    overlap_tokens: int = 32
    max_document_bytes: int = 1 << 20
    daily_half_life_days: float = 7.0
    mmr_lambda: float = 0.7


@dataclass
class EmbedReport:
    embedded: int = 0
    pending: int = 0  # still without an embedding afterwards
    error: str = ""


def document_from_row(r: sqlite3.Row) -> Document:
    return Document(r["id"], r["scope"], r["path"], r["category"], r["content"], r["created"], r["updated"])
