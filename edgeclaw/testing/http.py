"""The HTTP seam: a shared client whose requests go to a test's handler, never to the network."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from edgeclaw.backends.http_client import SharedClient

if TYPE_CHECKING:
    import httpx

Handler = Callable[["httpx.Request"], "httpx.Response | Awaitable[httpx.Response]"]


def mock_client(handler: Handler) -> SharedClient:
    """A `SharedClient` (what `OpenAIProvider`, the notifiers and the media services are given)
    whose every request is answered by `handler(request)`, through `httpx.MockTransport`.

        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(200, json={...})

        client = mock_client(answer)
        ...
        await client.aclose()
    """
    import httpx

    return SharedClient(transport=httpx.MockTransport(handler))


__all__ = ["Handler", "mock_client"]
