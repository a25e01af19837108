"""One HTTP client made on first use and shared by everything one service sends, and the reading of
what an HTTP service says when it refuses (its error message, its Retry-After).

httpx and its TLS context (the CA bundle) cost a few MiB; a board whose model, notification service
or speech provider is never asked does not pay for them. Redirects are not followed: a service that
answers with one is answered as it said, never chased to another host.
"""

from __future__ import annotations

import email.utils
import json
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx


class SharedClient:
    """An `httpx.AsyncClient` created by the first `get()`, closed (and forgotten) by `aclose()`.

    `transport` is httpx's seam: given (a test's `httpx.MockTransport`, see `edgeclaw.testing`),
    every request goes to it instead of the network.
    """

    def __init__(self, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._client: httpx.AsyncClient | None = None
        self._transport = transport

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(follow_redirects=False, transport=self._transport)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None


DETAIL_CHARS = 300


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Retry-After as seconds: either a number of seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def error_detail(body: str) -> str:
    """What an error body says, in one line: the message of a JSON error (OpenAI, llama.cpp,
    Anthropic, Ollama, ElevenLabs shapes), else the text itself, cut at DETAIL_CHARS."""
    text = body.strip()
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict):
        error = data.get("error", data.get("detail", data))
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message.strip():
            text = message
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_CHARS else text[:DETAIL_CHARS] + "…"
