"""The fallback chain: each provider in the configured order, with retries, until one answers.

Retryable failures (429, 5xx, connection trouble, timeouts, truncated
bodies) are retried on the same provider with jittered exponential backoff,
honouring Retry-After up to a cap; a Retry-After beyond the cap moves on to
the next provider at once rather than stalling a technician's turn. A 5xx
that comes back the same is given up on this provider after its second try;
4xx answers (but 408, 425 and 429) are never retried: the next provider is
asked at once, and the server's own words are kept in the error.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field
from typing import Any

from edgeclaw.agent.messages import Completion, Message
from edgeclaw.agent.providers.base import Provider, ProviderError, TextSink
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.providers")

# (provider name, definition format) -> tool definitions filtered for that provider
ToolsFor = Callable[[str, str], list[dict[str, Any]]]
# (provider, system, messages, tools) -> the same, shaped to that provider's model (its context size),
# and the answer's room in what the context leaves (None: the provider's configured max_tokens)
FitRequest = Callable[
    [Provider, str, Sequence[Message], list[dict[str, Any]]],
    Awaitable[tuple[str, Sequence[Message], list[dict[str, Any]], int | None]],
]
Sleep = Callable[[float], Awaitable[None]]


class AllProvidersFailed(ProviderError):
    def __init__(self, failures: list[str]) -> None:
        self.failures = failures
        summary = "; ".join(failures) if failures else "no provider is configured"
        super().__init__(f"no language model could answer ({summary})", retryable=False)


@dataclass
class ProviderHealth:
    ok: bool | None = None  # None = not tried yet
    last_error: str = ""
    last_ok: float = 0.0
    requests: int = 0
    failures: int = 0


@dataclass
class RetryPolicy:
    attempts: int = 3  # per provider
    base_delay_s: float = 0.5
    max_delay_s: float = 8.0
    max_retry_after_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait before try `attempt + 2`, or None to give up (a Retry-After over the cap).

        Shared by every HTTP client that retries the way the chat providers do (the embeddings
        client too): a server's Retry-After is honoured up to `max_retry_after_s`, otherwise the
        wait doubles from `base_delay_s` up to `max_delay_s`, jittered.
        """
        if retry_after is not None:
            return None if retry_after > self.max_retry_after_s else retry_after
        ceiling = min(self.max_delay_s, self.base_delay_s * (2**attempt))
        return random.uniform(ceiling / 2, ceiling)  # jitter: a fleet does not retry in lockstep


@dataclass
class ProviderChain:
    providers: Sequence[Provider]
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Sleep = asyncio.sleep
    health: dict[str, ProviderHealth] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for p in self.providers:
            self.health.setdefault(p.name, ProviderHealth())

    def __bool__(self) -> bool:
        return bool(self.providers)

    def _delay(self, attempt: int, error: ProviderError) -> float | None:
        """Seconds to wait before the next attempt, or None to give up on this provider."""
        return self.retry.delay(attempt, error.retry_after)

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools_for: ToolsFor,
        fit: FitRequest | None = None,
        on_text: TextSink | None = None,
    ) -> Completion:
        """The first answer any provider gives. `on_text` receives its text as it arrives.

        When an attempt that had sent text on fails, the next attempt (a retry or the next provider)
        starts the answer over: a sink with a `restart()` method is told first, so what it showed
        of the broken answer is not taken for the beginning of the new one.
        """
        failures: list[str] = []
        streamed = False

        def deliver(text: str) -> None:
            nonlocal streamed
            streamed = True
            on_text(text)  # type: ignore[misc]  # only handed on when on_text is set

        for provider in self.providers:
            health = self.health[provider.name]
            # A model that takes no tools (Ollama says so) is sent none: it answers in plain text.
            supported = await provider.probe_tools()
            tools = tools_for(provider.name, provider.tool_format) if supported is not False else []
            refused: tuple[int, str] | None = None
            sent_system, sent, answer_tokens = system, messages, None
            if fit is not None:  # each provider's own context: a fallback may take more than the first
                sent_system, sent, tools, answer_tokens = await fit(provider, system, messages, tools)
            for attempt in range(self.retry.attempts):
                health.requests += 1
                if streamed:
                    streamed = False
                    restart = getattr(on_text, "restart", None)
                    if callable(restart):
                        restart()
                try:
                    completion = await provider.complete(
                        sent_system, sent, tools, deliver if on_text is not None else None, answer_tokens
                    )
                except ProviderError as e:
                    health.ok, health.last_error = False, str(e)
                    health.failures += 1
                    log.warning("%s (attempt %d of %d)", e, attempt + 1, self.retry.attempts)
                    # The same server error twice is this request's doing (a chat template that cannot
                    # render it, a context too small), not a stumble: asking again will not help.
                    repeated = e.signature is not None and e.signature == refused
                    refused = e.signature if e.status is not None and e.status >= 500 else None
                    delay = self._delay(attempt, e) if e.retryable and not repeated else None
                    if delay is None or attempt + 1 >= self.retry.attempts:
                        failures.append(str(e))
                        break
                    await self.sleep(delay)
                    continue
                health.ok, health.last_error, health.last_ok = True, "", time.time()
                return completion
        raise AllProvidersFailed(failures)
