"""One HTTP client made on first use and shared by everything one service sends.

httpx and its TLS context (the CA bundle) cost a few MiB; a board whose model, notification service
or speech provider is never asked does not pay for them. Redirects are not followed: a service that
answers with one is answered as it said, never chased to another host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx


class SharedClient:
    """An `httpx.AsyncClient` created by the first `get()`, closed (and forgotten) by `aclose()`."""

    def __init__(self) -> None:
        self._client: httpx.AsyncClient | None = None

    def get(self) -> httpx.AsyncClient:
        if self._client is None:
            import httpx

            self._client = httpx.AsyncClient(follow_redirects=False)
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
