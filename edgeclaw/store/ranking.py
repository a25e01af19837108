"""Turning ranked lists into one: reciprocal-rank fusion, a recency weight, maximal marginal relevance.

BM25 scores and cosine similarities are on different scales, so they are
not added: each list contributes `1 / (k + rank)` for every item it holds
(Cormack et al., k = 60), which rewards items both lists rank well without
trusting either list's raw numbers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import TypeVar

RRF_K = 60

K = TypeVar("K", bound=Hashable)

_WORD = re.compile(r"\w+", re.UNICODE)


def reciprocal_rank_fusion(rankings: Iterable[Sequence[K]], k: int = RRF_K) -> dict[K, float]:
    """item -> fused score, from lists ordered best first."""
    scores: dict[K, float] = {}
    for ranking in rankings:
        for rank, item in enumerate(ranking, 1):
            scores[item] = scores.get(item, 0.0) + 1.0 / (k + rank)
    return scores


def recency_weight(age_s: float, half_life_s: float) -> float:
    """1 for now, 1/2 one half-life ago, ... (a future timestamp counts as now)."""
    if half_life_s <= 0:
        return 1.0
    return 0.5 ** (max(age_s, 0.0) / half_life_s)


def words(text: str) -> set[str]:
    return {w.lower() for w in _WORD.findall(text)}


def jaccard(a: set[str], b: set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def mmr(
    candidates: Sequence[K],
    relevance: dict[K, float],
    similarity: Callable[[K, K], float],
    limit: int,
    lambda_: float = 0.7,
) -> list[K]:
    """Pick `limit` items that are relevant and unlike the ones already picked (Carbonell & Goldstein).

    `lambda_` 1 is plain relevance order, 0 only diversity. Relevance is scaled to [0, 1] first so it
    weighs the same against a similarity whatever the fused scores' scale.
    """
    if not candidates:
        return []
    top = max(relevance[c] for c in candidates) or 1.0
    rel = {c: relevance[c] / top for c in candidates}
    picked: list[K] = []
    left = list(candidates)
    while left and len(picked) < limit:

        def gain(c: K) -> float:
            redundancy = max((similarity(c, p) for p in picked), default=0.0)
            return lambda_ * rel[c] - (1 - lambda_) * redundancy

        best = max(left, key=gain)
        picked.append(best)
        left.remove(best)
    return picked
