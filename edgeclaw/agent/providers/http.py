"""The one HTTP path every provider request takes: errors mapped once, for all providers."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

from edgeclaw.agent.messages import Completion, Message
from edgeclaw.agent.providers.base import ProviderError, http_error
from edgeclaw.tools.scrub import Scrubber


class SharedClient:
    """One HTTP client for every provider, created on the first request.

    httpx and its TLS context (the CA bundle) cost a few MiB; a board that only
    ever answers slash commands, or whose model is not used yet, does not pay it.
    """

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


async def post_json(
    client: httpx.AsyncClient,
    provider: str,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    timeout_s: float,
) -> dict[str, Any]:
    """POST a JSON body and return the JSON object answered. Raises ProviderError."""
    import httpx

    try:
        response = await client.post(url, json=body, headers=headers, timeout=timeout_s)
    except httpx.TimeoutException:
        raise ProviderError(f"{provider}: no answer within {timeout_s:g} s", retryable=True) from None
    except httpx.TransportError as e:
        reason = str(e) or type(e).__name__
        raise ProviderError(f"{provider}: cannot reach {url}: {reason}", retryable=True) from None
    except httpx.RequestError as e:  # e.g. DecodingError: a body a proxy mangled; not a TransportError
        reason = str(e) or type(e).__name__
        raise ProviderError(f"{provider}: the answer could not be read: {reason}", retryable=True) from None
    if response.status_code != 200:
        raise http_error(provider, response.status_code, response.text, response.headers.get("retry-after"))
    try:
        data = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        # Usually a connection cut mid-body by a proxy or a crashing server: worth another try.
        raise ProviderError(
            f"{provider}: the answer was not valid JSON (truncated?)", retryable=True
        ) from None
    if not isinstance(data, dict):
        raise ProviderError(f"{provider}: the answer was not a JSON object", retryable=True)
    return data


def malformed(provider: str, what: str) -> ProviderError:
    return ProviderError(f"{provider}: malformed answer: {what}", retryable=True)


class HttpProvider:
    """What every HTTP provider shares: its name, model, endpoint, headers, limits and scrubbing.

    Everything in a request body is scrubbed before it is sent (`complete`): the system prompt
    (context files the model and commands can write), the history (what people typed, what tools
    and the model said) and tool-call arguments. The daemon's own secrets -- API keys, the MQTT
    password, HMAC keys -- never leave in a request; the provider's key goes only in its header.
    """

    kind: str
    default_base_url: str

    def __init__(
        self,
        name: str,
        client: SharedClient,
        *,
        model: str,
        base_url: str = "",
        api_key: str = "",
        timeout_s: float = 60.0,
        max_tokens: int = 1024,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self._client = client
        self._base_url = (base_url or self.default_base_url).rstrip("/")
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._max_tokens = max_tokens
        # The daemon passes its scrubber (every configured secret); alone, at least this key is known.
        self._scrub = scrub or Scrubber([api_key] if api_key else []).scrub

    async def complete(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> Completion:
        """One request, its system prompt and messages scrubbed first. Raises ProviderError."""
        scrub = self._scrub
        return await self._complete(scrub(system), [scrub_message(m, scrub) for m in messages], tools)

    async def _complete(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> Completion:
        """The provider's wire format: build the body, post it, read the answer."""
        raise NotImplementedError(f"{type(self).__name__} does not define its wire format (_complete)")

    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        try:
            return await post_json(self._client.get(), self.name, url, body, headers, self._timeout_s)
        except ProviderError as e:
            # Error bodies are quoted in the message, which reaches the chat and the log; some
            # proxies echo the key they were given ("invalid key sk-..."): never pass it on.
            message = self._scrub(str(e))
            if message != str(e):
                raise ProviderError(message, retryable=e.retryable, retry_after=e.retry_after) from None
            raise


def scrub_message(message: Message, scrub: Callable[[str], str]) -> Message:
    """`message` with its text and tool-call arguments scrubbed (a new message; history is untouched)."""
    calls = [dataclasses.replace(c, arguments=scrub(c.arguments)) for c in message.tool_calls]
    return dataclasses.replace(message, content=scrub(message.content), tool_calls=calls)
