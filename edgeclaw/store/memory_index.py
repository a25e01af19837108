"""Writing a memory document: its row, its chunks and their full-text index, in the caller's transaction.

Writing a `.md` document splits it into chunks (`store.chunking`), which an
FTS5 table indexes (triggers keep the index in step with the chunk rows);
the document row, its chunks and the index change in one transaction, so a
power cut leaves the old version or the new one, never a mix. Embeddings no
chunk uses any more go with the chunks that used them.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgeclaw.store.chunking import chunk_markdown, text_hash
from edgeclaw.store.memory_records import (
    Document,
    MemoryStoreError,
    PutResult,
    default_category,
    document_from_row,
    indexable,
)

if TYPE_CHECKING:
    from edgeclaw.store.memory import MemoryStore


class ChunkIndex:
    """A store's documents as rows, chunks and index entries, written inside a transaction it is given."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    def check_size(self, path: str, content: str) -> None:
        if not isinstance(content, str):
            raise MemoryStoreError(f"content for {path} must be text")
        size = len(content.encode("utf-8", errors="surrogatepass"))
        limit = self._store.settings.max_document_bytes
        if size > limit:
            raise MemoryStoreError(
                f"content for {path} is {size} bytes, over the {limit}-byte limit of a memory document "
                "(memory.max_document_bytes)"
            )
        try:
            content.encode("utf-8")
        except UnicodeEncodeError as e:
            raise MemoryStoreError(f"content for {path} is not encodable as UTF-8: {e.reason}") from None

    def row(self, conn: sqlite3.Connection, scope: str, path: str) -> Document | None:
        row = conn.execute(
            "SELECT id, scope, path, category, content, created, updated FROM memory_documents "
            "WHERE scope = ? AND path = ?",
            (scope, path),
        ).fetchone()
        return document_from_row(row) if row is not None else None

    def chunks_of(self, path: str, content: str) -> list:
        if not indexable(path):
            return []
        s = self._store.settings
        return chunk_markdown(content, max_tokens=s.chunk_tokens, overlap_tokens=s.overlap_tokens)

    def write(
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
        old = self.row(c, scope, path)
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
        old_hashes = self.drop_chunks(c, doc_id, keep=None)
        chunks = self.chunks_of(path, content)
        self.insert_chunk_rows(c, doc_id, path, chunks)
        new = {ch.text_hash for ch in chunks}
        self.drop_unused_embeddings(c, old_hashes - new)
        model = self._store.embedder.model if self._store.embedder is not None else None
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
        self._store.finder.forget_vectors()
        doc = Document(doc_id, scope, path, category, content, created, now)
        return PutResult(doc, created=old is None, changed=True, chunks=len(chunks), new_hashes=missing)

    def drop_chunks(self, conn: sqlite3.Connection, doc_id: int, keep: set[str] | None) -> set[str]:
        """Delete a document's chunks; returns their text hashes. `keep` not None: drop unused embeddings."""
        hashes = {
            r[0]
            for r in conn.execute(
                "SELECT text_hash FROM memory_chunks WHERE document_id = ?", (doc_id,)
            ).fetchall()
        }
        conn.execute("DELETE FROM memory_chunks WHERE document_id = ?", (doc_id,))
        if keep is not None:
            self.drop_unused_embeddings(conn, hashes - keep)
        return hashes

    @staticmethod
    def drop_unused_embeddings(conn: sqlite3.Connection, hashes: set[str]) -> None:
        """Embeddings of texts no chunk holds any more (another document may hold the same text)."""
        for digest in hashes:
            conn.execute(
                "DELETE FROM memory_embeddings WHERE text_hash = ? AND NOT EXISTS "
                "(SELECT 1 FROM memory_chunks WHERE text_hash = ?)",
                (digest, digest),
            )

    def insert_chunks(self, conn: sqlite3.Connection, doc_id: int, path: str, content: str) -> int:
        chunks = self.chunks_of(path, content)
        self.insert_chunk_rows(conn, doc_id, path, chunks)
        return len(chunks)

    @staticmethod
    def insert_chunk_rows(conn: sqlite3.Connection, doc_id: int, path: str, chunks: Sequence) -> None:
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
