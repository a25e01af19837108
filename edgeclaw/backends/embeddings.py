"""Text embeddings from a provider's embeddings endpoint, for memory and skill search.

Two wire formats: the OpenAI-compatible `POST {base_url}/embeddings`
(`{"model", "input": [...]}` answered with `{"data": [{"index", "embedding"}]}`),
which llama.cpp's server, Ollama's `/v1` and the hosted APIs speak, and
Ollama's own `POST /api/embed` (answered with `{"embeddings": [[...]]}`).

Nothing here knows HTTP or a retry schedule of its own: the daemon hands in
the one request path the chat providers use (errors mapped once, carrying
`retryable` and `retry_after`) and their retry policy, so an embedder backs
off, honours Retry-After and gives up exactly as a chat provider does. Texts
are scrubbed before they leave, like every provider request.

An embedder that cannot be reached is not asked again for `cooldown_s`: the
memory tools then search by keywords alone, say so, and do not make every
call wait for a timeout.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Literal, Protocol

from edgeclaw.errors import BackendError, EdgeclawError
from edgeclaw.records import dataclass

EmbeddingApi = Literal["openai", "ollama"]


class EmbeddingsUnavailable(BackendError):
    """No vectors: the embedder is not configured, cannot be reached, or answered nonsense."""


class Embedder(Protocol):
    name: str  # the provider it belongs to, for messages
    model: str  # stored beside every vector: vectors of two models are never compared

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One vector per text, in order. Raises EmbeddingsUnavailable."""
        ...

    def unavailable_reason(self) -> str | None:
        """Why the embedder is not being asked right now (cooling down after a failure), or None."""
        ...


class PostJson(Protocol):
    """POST a JSON body, return the JSON object answered; errors carry `retryable`/`retry_after`."""

    def __call__(
        self, url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float
    ) -> Awaitable[dict[str, Any]]: ...


class Backoff(Protocol):
    attempts: int

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None: ...


def embeddings_url(api: EmbeddingApi, base_url: str) -> str:
    """Where `api` is served below a provider's base URL (`http://host:8080/v1` and the like).

    Ollama's native endpoint lives at the server's root, not under `/v1`, so a trailing `/v1` of
    the provider's base URL is dropped for it.
    """
    base = base_url.rstrip("/")
    if api == "ollama":
        return base.removesuffix("/v1") + "/api/embed"
    return base + "/embeddings"


@dataclass
class EmbedderHealth:
    ok: bool | None = None  # None = not asked yet
    last_error: str = ""
    failed_at: float = 0.0
    requests: int = 0
    texts: int = 0


class HttpEmbedder:
    def __init__(
        self,
        name: str,
        *,
        api: EmbeddingApi,
        url: str,
        model: str,
        post: PostJson,
        retry: Backoff,
        api_key: str = "",
        batch_size: int = 32,
        timeout_s: float = 30.0,
        cooldown_s: float = 60.0,
        scrub: Callable[[str], str] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.name = name
        self.api = api
        self.url = url
        self.model = model
        self._post = post
        self._retry = retry
        self._headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.batch_size = batch_size
        self.timeout_s = timeout_s
        self.cooldown_s = cooldown_s
        self._scrub = scrub or (lambda text: text)
        self._sleep = sleep
        self._clock = clock
        self.health = EmbedderHealth()

    def unavailable_reason(self) -> str | None:
        h = self.health
        if h.ok is False and self._clock() - h.failed_at < self.cooldown_s:
            left = self.cooldown_s - (self._clock() - h.failed_at)
            return f"{h.last_error} (not asked again for {left:.0f} s)"
        return None

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        reason = self.unavailable_reason()
        if reason is not None:
            raise EmbeddingsUnavailable(reason)
        vectors: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            vectors.extend(await self._batch(texts[start : start + self.batch_size]))
        return vectors

    async def _batch(self, texts: Sequence[str]) -> list[list[float]]:
        body = {"model": self.model, "input": [self._scrub(t) for t in texts]}
        attempts = max(1, self._retry.attempts)
        for attempt in range(attempts):
            self.health.requests += 1
            try:
                data = await self._post(self.url, body, self._headers, self.timeout_s)
                vectors = self._parse(data, len(texts))
            except EdgeclawError as e:
                retryable = bool(getattr(e, "retryable", False))
                delay = self._retry.delay(attempt, getattr(e, "retry_after", None)) if retryable else None
                if delay is None or attempt + 1 >= attempts:
                    self._failed(str(e))
                    raise EmbeddingsUnavailable(str(e)) from None
                await self._sleep(delay)
                continue
            self.health.ok, self.health.last_error = True, ""
            self.health.texts += len(texts)
            return vectors
        raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _failed(self, error: str) -> None:
        self.health.ok = False
        self.health.last_error = error
        self.health.failed_at = self._clock()

    def _parse(self, data: dict[str, Any], count: int) -> list[list[float]]:
        if self.api == "ollama":
            raw = data.get("embeddings")
            if not isinstance(raw, list):
                raise self._malformed("no 'embeddings' list")
            vectors = raw
        else:
            items = data.get("data")
            if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
                raise self._malformed("no 'data' list of objects")
            # Servers may answer out of order; `index` says which input each vector is for.
            try:
                ordered = sorted(items, key=lambda i: int(i.get("index", 0)))
            except (TypeError, ValueError):
                raise self._malformed("an 'index' that is not a number") from None
            vectors = [i.get("embedding") for i in ordered]
        if len(vectors) != count:
            raise self._malformed(f"{len(vectors)} vectors for {count} texts")
        out: list[list[float]] = []
        dim = None
        for v in vectors:
            if not isinstance(v, list) or not v or not all(isinstance(x, int | float) for x in v):
                raise self._malformed("a vector that is not a non-empty list of numbers")
            if dim is not None and len(v) != dim:
                raise self._malformed(f"vectors of {dim} and {len(v)} dimensions in one answer")
            if not all(math.isfinite(x) for x in v):
                raise self._malformed("a vector with a non-finite value")
            dim = len(v)
            out.append([float(x) for x in v])
        return out

    def _malformed(self, what: str) -> EmbeddingsUnavailable:
        return EmbeddingsUnavailable(f"{self.name}: malformed embeddings answer from {self.url}: {what}")
