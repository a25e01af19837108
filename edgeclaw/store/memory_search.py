"""Search over the memory's chunks: keywords (FTS5 `bm25()`) and meaning (embeddings), fused.

Chunks are ranked by FTS5's `bm25()` and, when an embedder is configured and
answers, by cosine similarity (`store.vectors`), and the two lists are fused
by reciprocal rank (`store.ranking`); `daily` documents lose weight with
age, and MMR can trade some relevance for diversity. A caller finds its own
chunks and the global ones, less global ones hidden by a document of its own.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Literal

from edgeclaw.backends.embeddings import EmbeddingsUnavailable
from edgeclaw.records import dataclass
from edgeclaw.store import ranking, vectors
from edgeclaw.store.memory_records import GLOBAL, path_key

if TYPE_CHECKING:
    from edgeclaw.store.memory import MemoryStore

KEYWORD_CANDIDATES = 50  # best BM25 chunks taken into the fusion
VECTOR_CANDIDATES = 64  # chunks picked by sign bits for the exact cosine pass
VECTOR_RANKED = 32  # of those, the best by cosine taken into the fusion
MAX_QUERY_TERMS = 32

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
_TERM = re.compile(r"\w+", re.UNICODE)


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


def fts_query(text: str) -> str:
    """The user's words as an FTS5 query: each a quoted term, any may match (bm25 ranks more first).

    Quoting keeps FTS5's own syntax (AND, NEAR, `*`, `:`) out of what a model or a person typed.
    """
    terms: list[str] = []
    for term in _TERM.findall(text.lower()):
        if term not in terms and term not in STOP_WORDS:
            terms.append(term)
    return " OR ".join(f'"{t}"' for t in terms[:MAX_QUERY_TERMS])


class MemorySearch:
    """The hybrid search of one store, with the sign bits of its embedded chunks kept between searches."""

    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        self._vectors: _VectorCache | None = None
        self._stale = True  # the store's own writes since the vector cache was built

    def forget_vectors(self) -> None:
        """The store wrote: build the vector cache again before the next search."""
        self._stale = True

    async def search(
        self, query: str, user: str, limit: int, category: str | None, diversify: bool
    ) -> SearchOutcome:
        """`MemoryStore.search`: the best `limit` chunks for `query` that `user` may see, with scores."""
        keyword = self._keyword(query, user, category)
        ranked_vectors: list[int] = []
        query_vector: list[float] | None = None
        note = ""
        if self._store.embedder is None:
            note = "keyword search only: no embedder is configured (memory.embedder)"
        else:
            try:
                query_vector = vectors.normalise((await self._store.embedder.embed([query]))[0])
            except EmbeddingsUnavailable as e:
                note = f"keyword search only: the embedder {self._store.embedder.name} could not be used: {e}"
            except ValueError:
                note = "keyword search only: the embedder gave a zero vector for the query"
            else:
                ranked_vectors, note = self._nearest(query_vector, user, category)
        mode: Literal["hybrid", "keyword"] = "hybrid" if query_vector is not None and not note else "keyword"
        candidates = self._candidates({*keyword, *ranked_vectors}, user)
        keyword = [i for i in keyword if i in candidates]
        ranked_vectors = [i for i in ranked_vectors if i in candidates]
        fused = ranking.reciprocal_rank_fusion([keyword, ranked_vectors])
        now = self._store.now()
        half_life = self._store.settings.daily_half_life_days * 86400
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
                order[: limit * 4],
                fused,
                self._similarity(candidates, mode),
                limit,
                self._store.settings.mmr_lambda,
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
            rows = self._store.db.query(
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
        version = int(self._store.db.query("PRAGMA data_version")[0][0])
        cache = self._vectors
        if cache is None or cache.model != model or cache.version != version or self._stale:
            self._stale = False
            rows = self._store.db.query(
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
        assert self._store.embedder is not None
        model = self._store.embedder.model
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
        for r in self._store.db.query(f"SELECT id, text_hash FROM memory_chunks WHERE id IN ({marks})", ids):
            hashes.setdefault(r[1], []).append(r[0])
        if not hashes:
            return {}
        found: dict[int, object] = {}
        rows = self._store.db.query(
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
        rows = self._store.db.query(
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
                for r in self._store.db.query(
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
        if mode == "hybrid" and self._store.embedder is not None:
            vecs = self._vectors_of(candidates, self._store.embedder.model)
        words = {i: ranking.words(c.text) for i, c in candidates.items()}

        def similarity(a: int, b: int) -> float:
            if a in vecs and b in vecs:
                return vectors.dot(vecs[a], vecs[b])  # type: ignore[arg-type]
            return ranking.jaccard(words[a], words[b])

        return similarity


def _hit(c: _Candidate, score: float) -> SearchHit:
    return SearchHit(
        c.path, c.scope, c.category, score, c.updated, c.heading, c.text, c.start_line, c.end_line
    )
