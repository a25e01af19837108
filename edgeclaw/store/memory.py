"""The agent's memory in the state database: documents, their chunks, a full-text index, embeddings.

A *document* is a markdown text at a path (`MEMORY.md`, `memory/greenhouse_fan.md`)
in a *scope*: one caller's own (the scope is its identity, "mqtt:ops")
or the global one (""). A caller sees its own documents first and the global
ones after; a global document with the path of one of the caller's own is
hidden from that caller. A document has a category (`core`, `daily`,
`conversation`, or any other word).

Writing a `.md` document splits it into chunks (`store.chunking`), which an
FTS5 table indexes; the document row, its chunks and the index change in one
transaction, so a power cut leaves the old version or the new one, never a
mix (`store.memory_index`). Embeddings are a cache beside that, keyed by the
chunk text's hash and the model: text that did not change is never embedded
again, and a chunk whose embedding is not there yet (the embedder was down,
the daemon stopped in between) is still found by keywords until
`embed_pending` or `edgeclaw memory reindex` fills it in
(`store.memory_embeddings`).

Search (`search`, `store.memory_search`) ranks chunks by FTS5's `bm25()` and,
when an embedder is configured and answers, by cosine similarity
(`store.vectors`), and fuses the two lists by reciprocal rank
(`store.ranking`); `daily` documents lose weight with age, and MMR can trade
some relevance for diversity. The records and the tables are in
`store.memory_records`.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence

from edgeclaw.backends.embeddings import Embedder, EmbeddingsUnavailable
from edgeclaw.store.db import Database, LazyDatabase
from edgeclaw.store.memory_embeddings import EmbeddingCache
from edgeclaw.store.memory_index import ChunkIndex
from edgeclaw.store.memory_records import (
    BUILTIN_CATEGORIES,
    GLOBAL,
    MIGRATIONS,
    Document,
    DocumentInfo,
    EmbedReport,
    MemorySettings,
    MemoryStoreError,
    PutResult,
    check_category,
    check_path,
    default_category,
    document_from_row,
    indexable,
    key_path,
    path_key,
)
from edgeclaw.store.memory_search import MemorySearch, SearchHit, SearchOutcome, fts_query

# The memory's vocabulary, read from here by its users (the records and the search live beside).
__all__ = [
    "BUILTIN_CATEGORIES",
    "GLOBAL",
    "Document",
    "DocumentInfo",
    "EmbedReport",
    "MemorySettings",
    "MemoryStore",
    "MemoryStoreError",
    "PutResult",
    "SearchHit",
    "SearchOutcome",
    "check_category",
    "check_path",
    "default_category",
    "fts_query",
    "indexable",
    "key_path",
    "path_key",
]


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
        self.chunks = ChunkIndex(self)
        self.embeddings = EmbeddingCache(self)
        self.finder = MemorySearch(self)

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
        return document_from_row(rows[0]) if rows else None

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
        return [document_from_row(r) for r in rows]

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
        self.chunks.check_size(path, content)
        if category is not None:
            check_category(category)
        with self.db.transaction(f"the memory document {path}") as conn:
            return self.chunks.write(conn, scope, path, content, category, self._clock())

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
            current = self.chunks.row(conn, scope, path)
            if current is None and fallback_scope is not None and fallback_scope != scope:
                current = self.chunks.row(conn, fallback_scope, path)
            content = change(current)
            self.chunks.check_size(path, content)
            keep = category if category is not None else (current.category if current else None)
            return self.chunks.write(conn, scope, path, content, keep, self._clock())

    def delete(self, path: str, scope: str) -> bool:
        with self.db.transaction(f"the removal of the memory document {path}") as conn:
            row = conn.execute(
                "SELECT id FROM memory_documents WHERE scope = ? AND path = ?", (scope, path)
            ).fetchone()
            if row is None:
                return False
            self.chunks.drop_chunks(conn, row["id"], keep=set())
            conn.execute("DELETE FROM memory_documents WHERE id = ?", (row["id"],))
        self.finder.forget_vectors()
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
            self.chunks.check_size(path, content)
        changed = 0
        with self.db.transaction("the imported memory documents") as conn:
            wanted = {(scope, path) for scope, path, *_ in items}
            if prune:
                for row in conn.execute("SELECT id, scope, path FROM memory_documents").fetchall():
                    if (row["scope"], row["path"]) not in wanted:
                        self.chunks.drop_chunks(conn, row["id"], keep=set())
                        conn.execute("DELETE FROM memory_documents WHERE id = ?", (row["id"],))
                        changed += 1
            for scope, path, category, content, updated, created in items:
                changed += self.chunks.write(conn, scope, path, content, category, updated, created).changed
            if also is not None:
                also(conn)
        self.finder.forget_vectors()
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
                chunks += self.chunks.insert_chunks(conn, row["id"], row["path"], row["content"])
            conn.execute(
                "DELETE FROM memory_embeddings WHERE text_hash NOT IN (SELECT text_hash FROM memory_chunks)"
            )
            if model is not None:
                conn.execute("DELETE FROM memory_embeddings WHERE model != ?", (model,))
        self.finder.forget_vectors()
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
            report.pending = self.embeddings.pending(self.embedder.model)
            return documents, chunks, report
        self.db.execute(
            "DELETE FROM memory_embeddings WHERE model != ? OR dim != ?",
            (self.embedder.model, dim),
            what="the removal of stale embeddings",
        )
        self.finder.forget_vectors()
        return documents, chunks, await self.embed_pending()

    def check_consistency(self) -> list[str]:
        """Problems found between documents, chunks and the index (empty when all agree)."""
        problems: list[str] = []
        try:
            self.db.execute("INSERT INTO memory_fts (memory_fts) VALUES ('integrity-check')")
        except Exception as e:  # SQLITE_CORRUPT_VTAB and friends
            problems.append(f"full-text index: {e}")
        for row in self.db.query("SELECT id, path, content FROM memory_documents"):
            expected = [c.text for c in self.chunks.chunks_of(row["path"], row["content"])]
            found = [
                r["text"]
                for r in self.db.query(
                    "SELECT text FROM memory_chunks WHERE document_id = ? ORDER BY seq", (row["id"],)
                )
            ]
            if expected != found:
                problems.append(f"{row['path']}: {len(found)} chunks stored, {len(expected)} expected")
        return problems

    def now(self) -> float:
        """The store's clock (time.time unless given another)."""
        return self._clock()

    # -- embeddings and search (memory_embeddings, memory_search) ------------------------------

    async def embed_pending(self, hashes: Sequence[str] = (), *, limit: int | None = None) -> EmbedReport:
        """Embed chunk texts that have no vector for the current model yet: `hashes` first, then others."""
        return await self.embeddings.embed_pending(hashes, limit=limit)

    def save_embeddings(self, model: str, items: Sequence[tuple[str, Sequence[float]]]) -> None:
        self.embeddings.save_embeddings(model, items)

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
        return await self.finder.search(query, user, limit, category, diversify)


def _first_line(text: str) -> str:
    for line in text.splitlines():
        stripped = line.strip().lstrip("#").strip()
        if stripped:
            return stripped[:120]
    return ""
