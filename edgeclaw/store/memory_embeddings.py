"""The memory's embeddings: a cache beside the chunks, keyed by the chunk text's hash and the model.

Text that did not change is never embedded again, and a chunk whose
embedding is not there yet (the embedder was down, the daemon stopped in
between) is still found by keywords until `embed_pending` (or `edgeclaw
memory reindex`) fills it in.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from edgeclaw.backends.embeddings import EmbeddingsUnavailable
from edgeclaw.store import vectors
from edgeclaw.store.memory_records import EmbedReport

if TYPE_CHECKING:
    from edgeclaw.store.memory import MemoryStore

log = logging.getLogger("edgeclaw.store.memory")


class EmbeddingCache:
    """The vectors of one store's chunk texts, for its current embedder's model."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store

    async def embed_pending(self, hashes: Sequence[str] = (), *, limit: int | None = None) -> EmbedReport:
        """Embed chunk texts that have no vector for the current model yet: `hashes` first, then others.

        `limit` bounds how many of the others are done (None = all). A failing embedder ends the
        pass with `error` set; what was embedded before stays.
        """
        report = EmbedReport()
        embedder = self._store.embedder
        if embedder is None:
            return report
        model = embedder.model
        missing = (
            "NOT EXISTS (SELECT 1 FROM memory_embeddings e WHERE e.model = ? AND e.text_hash = c.text_hash)"
        )
        todo: dict[str, str] = {}
        if hashes:
            marks = ",".join("?" * len(hashes))
            for r in self._store.db.query(
                f"SELECT text_hash, heading, text FROM memory_chunks c"
                f" WHERE text_hash IN ({marks}) AND {missing}",
                (*hashes, model),
            ):
                todo.setdefault(r["text_hash"], _embed_text(r["heading"], r["text"]))
        wanted = None if limit is None else len(todo) + limit
        if wanted is None or limit:
            sql = f"SELECT text_hash, heading, text FROM memory_chunks c WHERE {missing} ORDER BY id"
            for r in self._store.db.query(
                sql + ("" if wanted is None else f" LIMIT {int(wanted)}"), (model,)
            ):
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
        report.pending = self.pending(model)
        return report

    def pending(self, model: str) -> int:
        """Chunk texts without a vector of `model`."""
        return int(
            self._store.db.query(
                "SELECT count(DISTINCT text_hash) FROM memory_chunks c WHERE NOT EXISTS "
                "(SELECT 1 FROM memory_embeddings e WHERE e.model = ? AND e.text_hash = c.text_hash)",
                (model,),
            )[0][0]
        )

    def save_embeddings(self, model: str, items: Sequence[tuple[str, Sequence[float]]]) -> None:
        rows = []
        now = self._store.now()
        for digest, vector in items:
            try:
                unit = vectors.normalise(vector)
            except ValueError:
                log.warning("embedder %s gave a zero vector for a chunk; it is found by keywords only", model)
                continue
            rows.append((model, digest, len(unit), vectors.to_blob(unit), vectors.sign_bits(unit), now))
        if not rows:
            return
        with self._store.db.transaction("embeddings of memory chunks") as conn:
            conn.executemany(
                "INSERT INTO memory_embeddings (model, text_hash, dim, vector, bits, created)"
                " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (model, text_hash) DO UPDATE SET"
                " dim = excluded.dim, vector = excluded.vector, bits = excluded.bits,"
                " created = excluded.created",
                rows,
            )
        self._changed = True


def _embed_text(heading: str, text: str) -> str:
    return f"{heading}\n{text}" if heading else text
