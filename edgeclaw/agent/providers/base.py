"""What a provider is, and the errors that decide between retrying, falling back and giving up."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from edgeclaw.agent.messages import Completion, Message
from edgeclaw.backends.http_client import error_detail, parse_retry_after
from edgeclaw.errors import EdgeclawError
from edgeclaw.records import dataclass


class ProviderError(EdgeclawError):
    """A provider could not give a usable answer.

    `retryable` errors (429, 5xx, connection trouble, timeouts, a truncated
    body) are tried again on the same provider; the others (401, 400, …) go
    straight to the next provider in the chain. `status` is the HTTP status when
    the server answered with one, `body` its error body as answered (already
    scrubbed); the chain gives up on a 5xx that comes back the same (`signature`):
    the server refuses this request, it did not stumble.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        retry_after: float | None = None,
        status: int | None = None,
        body: str = "",
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after
        self.status = status
        self.body = body

    @property
    def signature(self) -> tuple[int, str] | None:
        """What makes two answers "the same refusal": the status and the server's words."""
        return None if self.status is None else (self.status, error_detail(self.body))

    def with_message(self, message: str) -> ProviderError:
        """The same error with another message (scrubbed, say), every field kept."""
        return ProviderError(
            message,
            retryable=self.retryable,
            retry_after=self.retry_after,
            status=self.status,
            body=self.body,
        )


@dataclass(frozen=True)
class ToolSpec:
    """Tool definitions in the provider's own format, already filtered by policy."""

    definitions: list[dict[str, Any]]


# Receives the answer's text as it arrives, piece by piece (a streamed answer), or whole.
TextSink = Callable[[str], None]


class Provider(Protocol):
    name: str
    kind: str  # "openai" | "anthropic" | "ollama": the wire protocol
    tool_format: str  # the registry's definition format: "openai" (also Ollama's) or "anthropic"
    model: str
    # Whether the model takes tool definitions: None until known (assumed yes), False for a model
    # that does not (Ollama says so in /api/show): it is sent none, and answers in plain text.
    tools_supported: bool | None

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One request; the answer's text also goes to `on_text` as it arrives; `max_tokens` (when
        given) bounds the answer below the configured limit. Raises ProviderError."""
        ...

    async def probe_tools(self) -> bool | None:
        """Learn `tools_supported` from the server when it can say (cached); never raises."""
        ...


# 4xx statuses that say "not now" rather than "not this request".
TRANSIENT_CLIENT_STATUSES = frozenset({408, 409, 425, 429})
# 5xx statuses that say "this server will never do this": no point asking again.
PERMANENT_SERVER_STATUSES = frozenset({501, 505})


def http_error(provider: str, status: int, body: str, retry_after: str | None) -> ProviderError:
    """Map an HTTP status to a ProviderError with a message a person can act on.

    The server's own words are kept, for a 5xx too: "HTTP 500" alone does not say that the chat
    template could not render the request, or that the context is too small.
    """
    detail = error_detail(body)
    said = f": {detail}" if detail else ""
    wait = parse_retry_after(retry_after)
    if status == 429:
        return ProviderError(
            f"{provider}: rate limited (HTTP 429){said}",
            retryable=True,
            retry_after=wait,
            status=status,
            body=body,
        )
    if status >= 500:
        return ProviderError(
            f"{provider}: server error (HTTP {status}){said}",
            retryable=status not in PERMANENT_SERVER_STATUSES,
            retry_after=wait,
            status=status,
            body=body,
        )
    if status in (401, 403):
        return ProviderError(
            f"{provider}: not authorised (HTTP {status}); check the API key{said}",
            retryable=False,
            status=status,
            body=body,
        )
    return ProviderError(
        f"{provider}: request refused (HTTP {status}){said}",
        retryable=status in TRANSIENT_CLIENT_STATUSES,
        retry_after=wait,
        status=status,
        body=body,
    )
