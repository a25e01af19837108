"""What a provider is, and the errors that decide between retrying, falling back and giving up."""

from __future__ import annotations

import email.utils
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from edgeclaw.agent.messages import Completion, Message
from edgeclaw.errors import EdgeclawError


class ProviderError(EdgeclawError):
    """A provider could not give a usable answer.

    `retryable` errors (429, 5xx, connection trouble, timeouts, a truncated
    body) are tried again on the same provider; the others (401, 400, …) go
    straight to the next provider in the chain.
    """

    def __init__(self, message: str, *, retryable: bool, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass(frozen=True)
class ToolSpec:
    """Tool definitions in the provider's own format, already filtered by policy."""

    definitions: list[dict[str, Any]]


class Provider(Protocol):
    name: str
    kind: str  # "openai" | "anthropic": also the registry's definition format
    model: str

    async def complete(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> Completion:
        """One request. Raises ProviderError."""
        ...


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


def http_error(provider: str, status: int, body: str, retry_after: str | None) -> ProviderError:
    """Map an HTTP status to a ProviderError with a message a person can act on."""
    detail = body.strip().replace("\n", " ")[:200]
    if status == 429:
        return ProviderError(
            f"{provider}: rate limited (HTTP 429)", retryable=True, retry_after=parse_retry_after(retry_after)
        )
    if status >= 500:
        return ProviderError(
            f"{provider}: server error (HTTP {status})",
            retryable=True,
            retry_after=parse_retry_after(retry_after),
        )
    if status in (401, 403):
        return ProviderError(
            f"{provider}: not authorised (HTTP {status}); check the API key", retryable=False
        )
    return ProviderError(f"{provider}: request refused (HTTP {status}): {detail}", retryable=False)
