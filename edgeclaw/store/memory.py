"""The agent's memory in the state database: documents, their chunks, a full-text index, embeddings.

A *document* is a markdown text at a path (`MEMORY.md`, `memory/greenhouse_fan.md`)
in a *scope*: one caller's own (the scope is its identity, "mqtt:sender:ops")
or the global one (""). A caller sees its own documents first and the global
ones after; a global document with the path of one of the caller's own is
hidden from that caller. A document has a category (`core`, `daily`,
`conversation`, or any other word).

Writing a `.md` document splits it into chunks (`store.chunking`), which an
FTS5 table indexes; the document row, its chunks and the index change in one
transaction, so a power cut leaves the old version or the new one, never a
mix. Embeddings are a cache beside that, keyed by the chunk text's hash and
the model: text that did not change is never embedded again, and a chunk
whose embedding is not there yet (the embedder was down, the daemon stopped
in between) is still found by keywords until `embed_pending` or
`edgeclaw memory reindex` fills it in.

Search (`search`) ranks chunks by FTS5's `bm25()` and, when an embedder is
configured and answers, by cosine similarity (`store.vectors`), and fuses
the two lists by reciprocal rank (`store.ranking`); `daily` documents lose
weight with age, and MMR can trade some relevance for diversity.
"""

from __future__ import annotations

import logging
import re
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from edgeclaw.backends.embeddings import Embedder, EmbeddingsUnavailable
from edgeclaw.errors import BackendError
from edgeclaw.store import ranking, vectors
from edgeclaw.store.chunking import chunk_markdown, text_hash
from edgeclaw.store.db import Database, LazyDatabase, Migration

log = logging.getLogger("edgeclaw.store.memory")

GLOBAL = ""  # the scope every caller sees after its own
BUILTIN_CATEGORIES = ("core", "daily", "conversation")
MAX_PATH_CHARS = 512
KEYWORD_CANDIDATES = 50  # best BM25 chunks taken into the fusion
VECTOR_CANDIDATES = 64  # chunks picked by sign bits for the exact cosine pass
VECTOR_RANKED = 32  # of those, the best by cosine taken into the fusion
MAX_QUERY_TERMS = 32

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

# Words that match nearly every English chunk: left out of keyword queries (the meaning of a question
# is in its other words, and scoring a match of every chunk is what a keyword search costs).
STOP_WORDS = frozenset(
    [
        "a", "about", "an", "and", "are", "as", "at", "be", "but", "by", "can", "could", "did", "do", "does",
        "for", "from", "had", "has", "have", "how", "i", "if", "in", "is", "it", "its", "me", "my", "of",
        "on", "or", "our", "so", "than", "that", "the", "their", "them", "then", "there", "these", "they",
        "this", "to", "was", "we", "were", "what", "when", "where", "which", "who", "why", "will", "with",
        "would", "you", "your"
    ]
)  # fmt: skip
_CATEGORY = re.compile(r"[a-z0-9][a-z0-9_-]{0,31}")
_KEY_SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_TERM = re.compile(r"\w+", re.UNICODE)
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


@dataclass(frozen=True, slots=True)
class SearchHit:
    path: str
    scope: str
    category: str
    score: float
    updated: float
    heading: str
    text: str
    start_line: int
    end_line: int

    @property
    def key(self) -> str | None:
        return path_key(self.path)


@dataclass(frozen=True, slots=True)
class SearchOutcome:
    hits: list[SearchHit]
    mode: Literal["hybrid", "keyword"]
    note: str = ""  # why the search was keyword-only, when it was


@dataclass(frozen=True, slots=True)
class _Candidate:
    chunk_id: int
    path: str
    scope: str
    category: str
    updated: float
    heading: str
    text: str
    start_line: int
    end_line: int
    text_hash: str


@dataclass
class _VectorCache:
    model: str
    version: int
    index: vectors.BitIndex


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


def fts_query(text: str) -> str:
    """The user's words as an FTS5 query: each a quoted term, any may match (bm25 ranks more first).

    Quoting keeps FTS5's own syntax (AND, NEAR, `*`, `:`) out of what a model or a person typed.
    """
    terms: list[str] = []
    for term in _TERM.findall(text.lower()):
        if term not in terms and term not in STOP_WORDS:
            terms.append(term)
    return " OR ".join(f'"{t}"' for t in terms[:MAX_QUERY_TERMS])


class MemoryStore:
    """Documents, chunks, the full-text index and the embedding cache; hybrid search over them."""

    def __init__(
        self,
        db: Database | Callable[[], Database],
        *,
        settings: MemorySettings | None = None,
        embedder: Embedder | None = None,
        on_open: Callable[[MemoryStore], None] | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._database = LazyDatabase(db, MIGRATIONS, (lambda: on_open(self)) if on_open else None)
        self.settings = settings or MemorySettings()
        self.embedder = embedder
        self._clock = clock
        self._vectors: _VectorCache | None = None
        self._changed = True  # our own writes since the vector cache was built

    @property
    def db(self) -> Database:
        return self._database.get()

    # -- meta --------------------------------------------------------------------------------

    def meta(self, key: str) -> str | None:
        rows = self.db.query("SELECT value FROM memory_meta WHERE key = ?", (key,))
        return rows[0]["value"] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        self.db.execute(
            "INSERT INTO memory_meta (key, value) VALUES (?, ?) "
            "ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            (key, value),
            what="a memory setting",
        )

    # -- reading -----------------------------------------------------------------------------

    def document(self, path: str, scope: str) -> Document | None:
        rows = self.db.query(
            "SELECT id, scope, path, category, content, created, updated FROM memory_documents "
            "WHERE scope = ? AND path = ?",
            (scope, path),
        )
        return _document(rows[0]) if rows else None

    def visible(self, path: str, user: str) -> Document | None:
        """The caller's own document at `path`, else the global one."""
        return self.document(path, user) or (self.document(path, GLOBAL) if user != GLOBAL else None)

    def documents(
        self,
        user: str,
        *,
        prefix: str | None = None,
        category: str | None = None,
        core_and_recent_first: bool = False,
        limit: int | None = None,
    ) -> list[DocumentInfo]:
        """What `user` sees: its own documents and the global ones it has no own version of.

        In path order, or `core_and_recent_first` (core documents, then by time, newest first).
        """
        sql = (
            "SELECT scope, path, category, length(CAST(content AS BLOB)) AS size, updated,"
            " substr(content, 1, 200) AS head FROM memory_documents d"
            " WHERE scope IN (?, '')"
            " AND NOT (scope = '' AND ? != '' AND EXISTS"
            " (SELECT 1 FROM memory_documents u WHERE u.scope = ? AND u.path = d.path))"
        )
        params: list[object] = [user, user, user]
        if prefix:
            sql += " AND (path = ? OR substr(path, 1, ?) = ?)"
            params += [prefix, len(prefix) + 1, prefix + "/"]
        if category:
            sql += " AND category = ?"
            params.append(category)
        if core_and_recent_first:
            sql += " ORDER BY category = 'core' DESC, updated DESC, path"
        else:
            sql += " ORDER BY path, scope DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [
            DocumentInfo(
                r["scope"], r["path"], r["category"], r["size"], r["updated"], _first_line(r["head"])
            )
            for r in self.db.query(sql, params)
        ]

    def all_documents(self) -> list[Document]:
        rows = self.db.query(
            "SELECT id, scope, path, category, content, created, updated FROM memory_documents "
            "ORDER BY scope, path"
        )
        return [_document(r) for r in rows]

    def counts(self) -> dict[str, int]:
        """Documents, chunks and embedded chunks (for the current model), for status and reports."""
        model = self.embedder.model if self.embedder is not None else ""
        row = self.db.query(
            "SELECT (SELECT count(*) FROM memory_documents) AS documents,"
            " (SELECT count(*) FROM memory_chunks) AS chunks,"
            " (SELECT count(*) FROM memory_chunks c WHERE EXISTS (SELECT 1 FROM memory_embeddings e"
            "  WHERE e.model = ? AND e.text_hash = c.text_hash)) AS embedded",
            (model,),
        )[0]
        return {"documents": row["documents"], "chunks": row["chunks"], "embedded": row["embedded"]}

    # -- writing -----------------------------------------------------------------------------

    def put(self, path: str, content: str, *, scope: str, category: str | None = None) -> PutResult:
        """Create or replace the document at (`scope`, `path`): row, chunks and index in one transaction.

        `category` None keeps an existing document's category (a new one gets `default_category`).
        """
        path = check_path(path)
        self._check_size(path, content)
        if category is not None:
            check_category(category)
        with self.db.transaction(f"the memory document {path}") as conn:
            return self._write(conn, scope, path, content, category, self._clock())

    def update(
        self,
        path: str,
        scope: str,
        change: Callable[[Document | None], str],
        *,
        fallback_scope: str | None = None,
        category: str | None = None,
    ) -> PutResult:
        """Read, change and write back in one transaction, so two sessions editing at once lose nothing.

        `change` gets the document at (`scope`, `path`) -- or, when there is none, the one at
        (`fallback_scope`, `path`) -- or None, and returns the new content (it may raise to abort).
        """
        path = check_path(path)
        if category is not None:
            check_category(category)
        with self.db.transaction(f"the memory document {path}") as conn:
            current = self._row(conn, scope, path)
            if current is None and fallback_scope is not None and fallback_scope != scope:
                current = self._row(conn, fallback_scope, path)
            content = change(current)
            self._check_size(path, content)
            keep = category if category is not None else (current.category if current else None)
            return self._write(conn, scope, path, content, keep, self._clock())

    def delete(self, path: str, scope: str) -> bool:
        with self.db.transaction(f"the removal of the memory document {path}") as conn:
            row = conn.execute(
                "SELECT id FROM memory_documents WHERE scope = ? AND path = ?", (scope, path)
            ).fetchone()
            if row is None:
                return False
            self._drop_chunks(conn, row["id"], keep=set())
            conn.execute("DELETE FROM memory_documents WHERE id = ?", (row["id"],))
        self._changed = True
        return True

    def replace_all(
        self,
        documents: Iterable[tuple[str, str, str, str, float, float]],
        *,
        prune: bool,
        also: Callable[[sqlite3.Connection], object] | None = None,
    ) -> int:
        """Write many (scope, path, category, content, updated, created) documents in one transaction.

        With `prune`, every document not among them is deleted: the store then holds exactly these.
        `also` runs inside the same transaction (the context files of an import), so all of it
        lands or none. Returns how many documents were written, changed or deleted.
        """
        items = list(documents)
        for _scope, path, category, content, *_ in items:
            check_path(path)
            check_category(category)
            self._check_size(path, content)
        changed = 0
        with self.db.transaction("the imported memory documents") as conn:
            wanted = {(scope, path) for scope, path, *_ in items}
            if prune:
                for row in conn.execute("SELECT id, scope, path FROM memory_documents").fetchall():
                    if (row["scope"], row["path"]) not in wanted:
                        self._drop_chunks(conn, row["id"], keep=set())
                        conn.execute("DELETE FROM memory_documents WHERE id = ?", (row["id"],))
                        changed += 1
            for scope, path, category, content, updated, created in items:
                changed += self._write(conn, scope, path, content, category, updated, created).changed
            if also is not None:
                also(conn)
        self._changed = True
        return changed

    def reindex(self) -> tuple[int, int]:
        """Chunk every document again (after a chunk-size change, or to rebuild the index).

        One transaction: the index is rebuilt whole or not at all. Embeddings of texts no chunk uses
        any more, and of other models than the current one, are dropped. Returns (documents, chunks).
        """
        docs = chunks = 0
        model = self.embedder.model if self.embedder is not None else None
        with self.db.transaction("the rebuilt memory index") as conn:
            conn.execute("DELETE FROM memory_chunks")
            conn.execute("INSERT INTO memory_fts (memory_fts) VALUES ('rebuild')")
            for row in conn.execute("SELECT id, path, content FROM memory_documents").fetchall():
                docs += 1
                chunks += self._insert_chunks(conn, row["id"], row["path"], row["content"])
            conn.execute(
                "DELETE FROM memory_embeddings WHERE text_hash NOT IN (SELECT text_hash FROM memory_chunks)"
            )
            if model is not None:
                conn.execute("DELETE FROM memory_embeddings WHERE model != ?", (model,))
        self._changed = True
        return docs, chunks

    async def rebuild(self) -> tuple[int, int, EmbedReport]:
        """`edgeclaw memory reindex`: chunk everything again, then embed it all with the current model.

        Vectors of other models go, and so do the current model's when it now answers with another
        dimension (a different model served under the same name): they could not be compared.
        """
        documents, chunks = self.reindex()
        report = EmbedReport()
        if self.embedder is None:
            return documents, chunks, report
        try:
            dim = len((await self.embedder.embed(["dimension check"]))[0])
        except EmbeddingsUnavailable as e:
            report.error = str(e)
            report.pending = self._pending(self.embedder.model)
            return documents, chunks, report
        self.db.execute(
            "DELETE FROM memory_embeddings WHERE model != ? OR dim != ?",
            (self.embedder.model, dim),
            what="the removal of stale embeddings",
        )
        self._changed = True
        return documents, chunks, await self.embed_pending()

    def check_consistency(self) -> list[str]:
        """Problems found between documents, chunks and the index (empty when all agree)."""
        problems: list[str] = []
        try:
            self.db.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")
        except Exception as e:  # SQLITE_CORRUPT_VTAB and friends
            problems.append(f"full-text index: {e}")
        for row in self.db.query("SELECT id, path, content FROM memory_documents"):
            expected = [c.text for c in self._chunks_of(row["path"], row["content"])]
            found = [
                r["text"]
                for r in self.db.query(
                    "SELECT text FROM memory_chunks WHERE document_id = ? ORDER BY seq", (row["id"],)
                )
            ]
            if expected != found:
                problems.append(f"{row['path']}: {len(found)} chunks stored, {len(expected)} expected")
        return problems

    def _check_size(self, path: str, content: str) -> None:
        if not isinstance(content, str):
            raise MemoryStoreError(f"content for {path} must be text")
        size = len(content.encode("utf-8", errors="surrogatepass"))
        limit = self.settings.max_document_bytes
        if size > limit:
            raise MemoryStoreError(
                f"content for {path} is {size} bytes, over the {limit}-byte limit of a memory document "
                "(memory.max_document_bytes)"
            )
        try:
            content.encode("utf-8")
        except UnicodeEncodeError as e:
            raise MemoryStoreError(f"content for {path} is not encodable as UTF-8: {e.reason}") from None

    def _row(self, conn: sqlite3.Connection, scope: str, path: str) -> Document | None:
        row = conn.execute(
            "SELECT id, scope, path, category, content, created, updated FROM memory_documents "
            "WHERE scope = ? AND path = ?",
            (scope, path),
        ).fetchone()
        return _document(row) if row is not None else None

    def _chunks_of(self, path: str, content: str) -> list:
        if not indexable(path):
            return []
        s = self.settings
        return chunk_markdown(content, max_tokens=s.chunk_tokens, overlap_tokens=s.overlap_tokens)

    def _write(
        self,
        conn: sqlite3.Connection,
        scope: str,
        path: str,
        content: str,
        category: str | None,
        now: float,
        created: float | None = None,
    ) -> PutResult:
        c = conn
        old = self._row(c, scope, path)
        category = category or (old.category if old else default_category(path))
        digest = text_hash(content)
        if old is not None and old.category == category and text_hash(old.content) == digest:
            return PutResult(old, created=False, changed=False, chunks=0)
        if old is None:
            cursor = c.execute(
                "INSERT INTO memory_documents"
                " (scope, path, category, content, content_hash, created, updated)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (scope, path, category, content, digest, created or now, now),
            )
            doc_id = int(cursor.lastrowid)
            created = created or now
        else:
            doc_id, created = old.id, old.created
            c.execute(
                "UPDATE memory_documents SET category = ?, content = ?, content_hash = ?, updated = ?"
                " WHERE id = ?",
                (category, content, digest, now, doc_id),
            )
        old_hashes = self._drop_chunks(c, doc_id, keep=None)
        chunks = self._chunks_of(path, content)
        self._insert_chunk_rows(c, doc_id, path, chunks)
        new = {ch.text_hash for ch in chunks}
        self._drop_unused_embeddings(c, old_hashes - new)
        model = self.embedder.model if self.embedder is not None else None
        missing: tuple[str, ...] = ()
        if model is not None and new:
            have = {
                r[0]
                for r in c.execute(
                    f"SELECT text_hash FROM memory_embeddings WHERE model = ? AND text_hash IN "
                    f"({','.join('?' * len(new))})",
                    (model, *new),
                ).fetchall()
            }
            missing = tuple(sorted(new - have))
        self._changed = True
        doc = Document(doc_id, scope, path, category, content, created, now)
        return PutResult(doc, created=old is None, changed=True, chunks=len(chunks), new_hashes=missing)

    def _drop_chunks(self, conn: sqlite3.Connection, doc_id: int, keep: set[str] | None) -> set[str]:
        """Delete a document's chunks; returns their text hashes. `keep` not None: drop unused embeddings."""
        hashes = {
            r[0]
            for r in conn.execute(
                "SELECT text_hash FROM memory_chunks WHERE document_id = ?", (doc_id,)
            ).fetchall()
        }
        conn.execute("DELETE FROM memory_chunks WHERE document_id = ?", (doc_id,))
        if keep is not None:
            self._drop_unused_embeddings(conn, hashes - keep)
        return hashes

    @staticmethod
    def _drop_unused_embeddings(conn: sqlite3.Connection, hashes: set[str]) -> None:
        """Embeddings of texts no chunk holds any more (another document may hold the same text)."""
        for digest in hashes:
            conn.execute(
                "DELETE FROM memory_embeddings WHERE text_hash = ? AND NOT EXISTS "
                "(SELECT 1 FROM memory_chunks WHERE text_hash = ?)",
                (digest, digest),
            )

    def _insert_chunks(self, conn: sqlite3.Connection, doc_id: int, path: str, content: str) -> int:
        chunks = self._chunks_of(path, content)
        self._insert_chunk_rows(conn, doc_id, path, chunks)
        return len(chunks)

    @staticmethod
    def _insert_chunk_rows(conn: sqlite3.Connection, doc_id: int, path: str, chunks: Sequence) -> None:
        conn.executemany(
            "INSERT INTO memory_chunks"
            " (document_id, seq, title, heading, text, text_hash, start_line, end_line)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (doc_id, ch.seq, f"{path} {ch.heading}".strip(), ch.heading, ch.text, ch.text_hash,
                 ch.start_line, ch.end_line)
                for ch in chunks
            ],
        )  # fmt: skip

    # -- embeddings --------------------------------------------------------------------------

    async def embed_pending(self, hashes: Sequence[str] = (), *, limit: int | None = None) -> EmbedReport:
        """Embed chunk texts that have no vector for the current model yet: `hashes` first, then others.

        `limit` bounds how many of the others are done (None = all). A failing embedder ends the
        pass with `error` set; what was embedded before stays.
        """
        report = EmbedReport()
        embedder = self.embedder
        if embedder is None:
            return report
        model = embedder.model
        missing = (
            "NOT EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.model = ? AND e.text_hash = c.text_hash)"
        )
        todo: dict[str, str] = {}
        if hashes:
            marks = ",".join("?" * len(hashes))
            for r in self.db.query(
                f"SELECT text_hash, heading, text FROM memory_chunks c"
                f" WHERE text_hash IN ({marks}) AND {missing}",
                (*hashes, model),
            ):
                todo.setdefault(r["text_hash"], _embed_text(r["heading"], r["text"]))
        wanted = None if limit is None else len(todo) + limit
        if wanted is None or limit:
            sql = f"SELECT text_hash, heading, text FROM memory_chunks c WHERE {missing} ORDER BY id"
            for r in self.db.query(sql + ("" if wanted is None else f" LIMIT {int(wanted)}"), (model,)):
                if wanted is not None and len(todo) >= wanted:
                    break
                todo.setdefault(r["text_hash"], _embed_text(r["heading"], r["text"]))
        items = list(todo.items())
        step = max(1, getattr(embedder, "batch_size", 32))
        for start in range(0, len(items), step):
            batch = items[start : start + step]
            try:
                found = await embedder.embed([text for _, text in batch])
            except EmbeddingsUnavailable as e:
                report.error = str(e)
                break
            self.save_embeddings(model, [(h, v) for (h, _), v in zip(batch, found, strict=True)])
            report.embedded += len(batch)
        report.pending = self._pending(model)
        return report

    def _pending(self, model: str) -> int:
        return int(
            self.db.query(
                "SELECT count(DISTINCT text_hash) FROM memory_chunks c WHERE NOT EXISTS "
                "(SELECT 1 FROM memory_embeddings e WHERE e.model = ? AND e.text_hash = c.text_hash)",
                (model,),
            )[0][0]
        )

    def save_embeddings(self, model: str, items: Sequence[tuple[str, Sequence[float]]]) -> None:
        rows = []
        now = self._clock()
        for digest, vector in items:
            try:
                unit = vectors.normalise(vector)
            except ValueError:
                log.warning("embedder %s gave a zero vector for a chunk; it is found by keywords only", model)
                continue
            rows.append((model, digest, len(unit), vectors.to_blob(unit), vectors.sign_bits(unit), now))
        if not rows:
            return
        with self.db.transaction("embeddings of memory chunks") as conn:
            conn.executemany(
                "INSERT INTO memory_embeddings (model, text_hash, dim, vector, bits, created)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (model, text_hash) DO UPDATE SET"
                " dim = excluded.dim, vector = excluded.vector, bits = excluded.bits,"
                " created = excluded.created",
                rows,
            )
        self._changed = True

    # -- search ------------------------------------------------------------------------------

    async def search(
        self,
        query: str,
        user: str,
        *,
        limit: int = 5,
        category: str | None = None,
        diversify: bool = False,
    ) -> SearchOutcome:
        """The best chunks for `query` that `user` may see, with scores; hybrid when it can be."""
        keyword = self._keyword(query, user, category)
        ranked_vectors: list[int] = []
        query_vector: list[float] | None = None
        note = ""
        if self.embedder is None:
            note = "keyword search only: no embedder is configured (memory.embedder)"
        else:
            try:
                query_vector = vectors.normalise((await self.embedder.embed([query]))[0])
            except EmbeddingsUnavailable as e:
                note = f"keyword search only: the embedder {self.embedder.name} could not be used: {e}"
            except ValueError:
                note = "keyword search only: the embedder gave a zero vector for the query"
            else:
                ranked_vectors, note = self._nearest(query_vector, user, category)
        mode: Literal["hybrid", "keyword"] = "hybrid" if query_vector is not None and not note else "keyword"
        candidates = self._candidates({*keyword, *ranked_vectors}, user)
        keyword = [i for i in keyword if i in candidates]
        ranked_vectors = [i for i in ranked_vectors if i in candidates]
        fused = ranking.reciprocal_rank_fusion([keyword, ranked_vectors])
        now = self._clock()
        half_life = self.settings.daily_half_life_days * 86400
        for chunk_id in fused:
            c = candidates[chunk_id]
            if c.category == "daily":
                fused[chunk_id] *= ranking.recency_weight(now - c.updated, half_life)
        # Ties: the caller's own memory before the global one, then the newer.
        order = sorted(
            fused, key=lambda i: (-fused[i], candidates[i].scope == GLOBAL, -candidates[i].updated)
        )
        if diversify and len(order) > limit:
            order = ranking.mmr(
                order[: limit * 4], fused, self._similarity(candidates, mode), limit, self.settings.mmr_lambda
            )
        hits = [_hit(candidates[i], fused[i]) for i in order[:limit]]
        return SearchOutcome(hits, mode, note)

    def _keyword(self, query: str, user: str, category: str | None) -> list[int]:
        """The caller's best KEYWORD_CANDIDATES chunks by bm25, exactly.

        FTS5 ranks first, alone (scoring every match is the cost; joining each match to its
        document on the way would double it), in a window of the best; the window's visible
        chunks, in rank order, are the caller's best ones as long as the window holds enough of
        them. When it does not (other callers' documents crowd it), the window grows.
        """
        match = fts_query(query)
        if not match:
            return []
        window = KEYWORD_CANDIDATES * 2
        while True:
            rows = self.db.query(
                "SELECT f.rowid, d.scope, d.category FROM (SELECT rowid, bm25(memory_fts, 2.0, 1.0) AS score"
                " FROM memory_fts WHERE memory_fts MATCH ? ORDER BY score LIMIT ?) f"
                " JOIN memory_chunks c ON c.id = f.rowid JOIN memory_documents d ON d.id = c.document_id"
                " ORDER BY f.score, f.rowid",
                (match, window),
            )
            visible = [
                r[0] for r in rows if r[1] in (user, GLOBAL) and (category is None or r[2] == category)
            ]
            if len(visible) >= KEYWORD_CANDIDATES or len(rows) < window:
                return visible[:KEYWORD_CANDIDATES]
            window *= 8

    def _index(self, model: str) -> vectors.BitIndex:
        """The sign bits of every embedded chunk, rebuilt after a write (ours or another process's)."""
        version = int(self.db.query("PRAGMA data_version")[0][0])
        cache = self._vectors
        if cache is None or cache.model != model or cache.version != version or self._changed:
            self._changed = False
            rows = self.db.query(
                "SELECT c.id, d.scope, d.category, e.bits FROM memory_chunks c"
                " JOIN memory_documents d ON d.id = c.document_id"
                " JOIN memory_embeddings e ON e.model = ? AND e.text_hash = c.text_hash",
                (model,),
            )
            index = vectors.BitIndex((r[0], (r[1], r[2]), r[3]) for r in rows)
            del rows
            self._vectors = cache = _VectorCache(model, version, index)
        return cache.index

    def _nearest(self, query: list[float], user: str, category: str | None) -> tuple[list[int], str]:
        """Chunk ids by cosine similarity to `query`, best first; and a note when it could not be done."""
        assert self.embedder is not None
        model = self.embedder.model
        index = self._index(model)
        if not len(index):
            return [], "keyword search only: no memory chunk has an embedding yet (edgeclaw memory reindex)"
        query_bits = vectors.sign_bits(query)
        if index.width != len(query_bits):
            return [], (
                f"keyword search only: the stored vectors of {model} do not have the query's "
                f"{len(query)} dimensions; run edgeclaw memory reindex"
            )
        groups = [
            g for g in index.groups if g[0] in (user, GLOBAL) and (category is None or g[1] == category)
        ]
        ids = index.nearest(query_bits, groups, VECTOR_CANDIDATES)
        if not ids:
            return [], ""
        found = self._vectors_of(ids, model)
        scored = sorted(((vectors.dot(query, v), i) for i, v in found.items()), reverse=True)
        return [i for score, i in scored[:VECTOR_RANKED] if score > 0], ""

    def _vectors_of(self, chunk_ids: Iterable[int], model: str) -> dict[int, object]:
        ids = list(chunk_ids)
        if not ids:
            return {}
        # Two lookups, not a join: SQLite's plan for the join with an IN list costs ~100 times more.
        marks = ",".join("?" * len(ids))
        hashes: dict[str, list[int]] = {}
        for r in self.db.query(f"SELECT id, text_hash FROM memory_chunks WHERE id IN ({marks})", ids):
            hashes.setdefault(r[1], []).append(r[0])
        if not hashes:
            return {}
        found: dict[int, object] = {}
        rows = self.db.query(
            f"SELECT text_hash, vector FROM memory_embeddings WHERE model = ? AND text_hash IN"
            f" ({','.join('?' * len(hashes))})",
            (model, *hashes),
        )
        for digest, blob in rows:
            vector = vectors.from_blob(blob)
            for chunk_id in hashes[digest]:
                found[chunk_id] = vector
        return found

    def _candidates(self, chunk_ids: set[int], user: str) -> dict[int, _Candidate]:
        """The chunks with their documents, less global ones hidden by a document of the caller's own."""
        if not chunk_ids:
            return {}
        ids = sorted(chunk_ids)
        rows = self.db.query(
            "SELECT c.id, d.path, d.scope, d.category, d.updated, c.heading, c.text, c.start_line,"
            " c.end_line, c.text_hash FROM memory_chunks c JOIN memory_documents d ON d.id = c.document_id"
            f" WHERE c.id IN ({','.join('?' * len(ids))})",
            ids,
        )
        found = {r[0]: _Candidate(*r) for r in rows}
        global_paths = {c.path for c in found.values() if c.scope == GLOBAL}
        if global_paths and user != GLOBAL:
            paths = sorted(global_paths)
            own = {
                r[0]
                for r in self.db.query(
                    "SELECT path FROM memory_documents WHERE scope = ?"
                    f" AND path IN ({','.join('?' * len(paths))})",
                    (user, *paths),
                )
            }
            found = {i: c for i, c in found.items() if not (c.scope == GLOBAL and c.path in own)}
        return found

    def _similarity(self, candidates: dict[int, _Candidate], mode: str) -> Callable[[int, int], float]:
        """How alike two chunks are, for MMR: cosine of their vectors, else shared words."""
        vecs: dict[int, object] = {}
        if mode == "hybrid" and self.embedder is not None:
            vecs = self._vectors_of(candidates, self.embedder.model)
        words = {i: ranking.words(c.text) for i, c in candidates.items()}

        def similarity(a: int, b: int) -> float:
            if a in vecs and b in vecs:
                return vectors.dot(vecs[a], vecs[b])  # type: ignore[arg-type]
            return ranking.jaccard(words[a], words[b])

        return similarity


def _embed_text(heading: str, text: str) -> str:
    return f"{heading}\n{text}" if heading else text


def _document(r: sqlite3.Row) -> Document:
    return Document(r["id"], r["scope"], r["path"], r["category"], r["content"], r["created"], r["updated"])


def _first_line(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return stripped[:120]
    return ""


def _hit(c: _Candidate, score: float) -> SearchHit:
    return SearchHit(
        c.path, c.scope, c.category, score, c.updated, c.heading, c.text, c.start_line, c.end_line
    )
