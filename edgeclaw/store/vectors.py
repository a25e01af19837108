"""Embedding vectors on a board without a GPU (and usually without numpy).

Vectors are stored normalised, as float32 blobs, so cosine similarity is a
dot product. Beside each one its sign bits are kept (one bit a dimension:
48 bytes for 384 dimensions). A search first compares the query's sign bits
with every stored one, XOR and `int.bit_count()`, which costs about a
hundred nanoseconds a vector in pure Python and needs only the bits in
memory; then it computes the exact cosine for the few best candidates, read
from the database. Sign bits keep the ranking of the nearest vectors well
(the Hamming distance tracks the angle), and the exact pass fixes the order.

With numpy installed the same two steps run vectorised.
"""

from __future__ import annotations

import math
import operator
import sys
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

try:  # optional: only a faster path of the same computation
    import numpy as _np
except ImportError:  # pragma: no cover - depends on the machine
    _np = None

_BIG_ENDIAN = sys.byteorder == "big"


def has_numpy() -> bool:
    return _np is not None


def normalise(vector: Sequence[float]) -> list[float]:
    norm = math.sqrt(math.fsum(x * x for x in vector))
    if norm == 0.0 or not math.isfinite(norm):
        raise ValueError("a zero or non-finite vector cannot be compared")
    return [x / norm for x in vector]


def to_blob(vector: Sequence[float]) -> bytes:
    """float32, little-endian (the file reads the same on any board)."""
    values = array("f", vector)
    if _BIG_ENDIAN:  # pragma: no cover - no such board at hand
        values.byteswap()
    return values.tobytes()


def from_blob(blob: bytes) -> array[float]:
    values = array("f")
    values.frombytes(blob)
    if _BIG_ENDIAN:  # pragma: no cover
        values.byteswap()
    return values


def sign_bits(vector: Sequence[float]) -> bytes:
    """One bit a dimension, set where the value is positive; dimension 0 is the highest bit."""
    number = 0
    for x in vector:
        number = (number << 1) | (x > 0)
    return number.to_bytes((len(vector) + 7) // 8, "big")


def dot(a: Sequence[float], b: Sequence[float]) -> float:
    return math.fsum(map(operator.mul, a, b)) if len(a) < 64 else sum(map(operator.mul, a, b))


class BitIndex:
    """Sign bits of many vectors, grouped (by scope and category), for the first, coarse pass.

    Built once from the database and rebuilt when it changes; holds ids and
    bits only (about 80 bytes a vector in pure Python), never the floats.
    """

    def __init__(self, rows: Iterable[tuple[int, Any, bytes]]) -> None:
        groups: dict[Any, tuple[array[int], list[int]]] = {}
        self.width = 0  # bytes of sign bits a vector (every stored vector has the model's dimension)
        for chunk_id, group, bits in rows:
            ids, values = groups.setdefault(group, (array("q"), []))
            ids.append(chunk_id)
            values.append(int.from_bytes(bits, "big"))
            self.width = len(bits)
        self._groups = groups
        self._matrices: dict[Any, Any] = {}
        if _np is not None:
            for group, (_, values) in groups.items():
                packed = b"".join(v.to_bytes(self.width, "big") for v in values)
                self._matrices[group] = _np.frombuffer(packed, dtype=_np.uint8).reshape(len(values), -1)

    def __len__(self) -> int:
        return sum(len(ids) for ids, _ in self._groups.values())

    @property
    def groups(self) -> list[Any]:
        return list(self._groups)

    def nearest(self, query_bits: bytes, groups: Iterable[Any], n: int) -> list[int]:
        """Ids of (at least, on ties) the `n` vectors closest in Hamming distance, in `groups`."""
        wanted = [g for g in groups if g in self._groups]
        if not wanted or n <= 0:
            return []
        if _np is not None:
            return self._nearest_numpy(query_bits, wanted, n)
        q = int.from_bytes(query_bits, "big")
        distances: list[list[int]] = [[(q ^ b).bit_count() for b in self._groups[g][1]] for g in wanted]
        # The n-th smallest distance by counting (distances are small integers): linear, no sort.
        counts = Counter(d for ds in distances for d in ds)
        threshold, seen = 0, 0
        for distance in sorted(counts):
            threshold = distance
            seen += counts[distance]
            if seen >= n:
                break
        found: list[tuple[int, int]] = []
        for g, ds in zip(wanted, distances, strict=True):
            ids = self._groups[g][0]
            found.extend((d, ids[i]) for i, d in enumerate(ds) if d <= threshold)
        found.sort()
        return [chunk_id for _, chunk_id in found[:n]]

    def _nearest_numpy(self, query_bits: bytes, groups: list[Any], n: int) -> list[int]:
        assert _np is not None
        found_ids = []
        found_d = []
        q = _np.frombuffer(query_bits, dtype=_np.uint8)
        for g in groups:
            matrix = self._matrices[g]
            d = _POPCOUNT[_np.bitwise_xor(matrix, q)].sum(axis=1, dtype=_np.uint32)
            found_ids.append(_np.frombuffer(self._groups[g][0], dtype=_np.int64))
            found_d.append(d)
        ids = _np.concatenate(found_ids)
        d = _np.concatenate(found_d)
        if len(d) > n:
            keep = _np.argpartition(d, n - 1)[:n]
            ids, d = ids[keep], d[keep]
        order = _np.lexsort((ids, d))  # by distance, then id: the same order as the pure path
        return [int(i) for i in ids[order]]


_POPCOUNT = _np.array([bin(i).count("1") for i in range(256)], dtype=_np.uint8) if _np is not None else None
