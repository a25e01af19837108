"""The one HTTP path every provider request takes: errors mapped once, for all providers.

Two ways to ask: one JSON body back (`post_json`), or a streamed answer (`open_stream`): server-sent
events (OpenAI-compatible servers, Anthropic) or JSON lines (Ollama). While a stream flows, the
timeout that matters is the wait for the next byte (`idle_timeout_s`): a slow board may take minutes
for a whole answer, but a server that says nothing for two minutes is stuck. The whole answer still
has a ceiling (`timeout_s`), so a server trickling bytes forever cannot hold a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx

from edgeclaw.agent.messages import Completion, Message
from edgeclaw.agent.providers.base import ProviderError, TextSink, http_error
from edgeclaw.backends.http_client import SharedClient
from edgeclaw.tools.scrub import Scrubber

log = logging.getLogger("edgeclaw.providers")

DEFAULT_TIMEOUT_S = 600.0  # the whole answer: a long answer on a slow board, streamed
DEFAULT_IDLE_TIMEOUT_S = 120.0  # no byte for this long: a first turn with tools on a Pi's CPU fits
# How servers refuse a request for carrying tools the model (or the server's setup) cannot take, HTTP 400.
NO_TOOLS_WORDS = (
    "does not support tools",  # Ollama, a model whose template has no tools
    "--enable-auto-tool-choice",  # vLLM started without a tool-call parser
)


def _transport_error(provider: str, url: str, e: Exception) -> ProviderError:
    """A request that failed below HTTP: where it failed, in words."""
    import httpx

    reason = str(e) or type(e).__name__
    if isinstance(e, httpx.TransportError) and not isinstance(e, httpx.ReadError | httpx.RemoteProtocolError):
        return ProviderError(f"{provider}: cannot reach {url}: {reason}", retryable=True)
    # e.g. DecodingError (a body a proxy mangled), a connection dropped mid-answer
    return ProviderError(f"{provider}: the answer could not be read: {reason}", retryable=True)


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
        async with asyncio.timeout(timeout_s):  # httpx's own timeout is per read, not per answer
            request = client.build_request("POST", url, json=body, headers=headers, timeout=timeout_s)
            response = await send(client, request)
    except (httpx.TimeoutException, TimeoutError):
        raise ProviderError(f"{provider}: no answer within {timeout_s:g} s", retryable=True) from None
    except httpx.RequestError as e:
        raise _transport_error(provider, url, e) from None
    if response.status_code != 200:
        raise http_error(provider, response.status_code, response.text, response.headers.get("retry-after"))
    return json_object(provider, response.content)


async def send(client: httpx.AsyncClient, request: httpx.Request, *, stream: bool = False) -> httpx.Response:
    """Send, once more on a fresh connection when a kept-alive one turns out closed.

    llama-server closes the connection after a streamed answer without saying so; the next request
    on it meets "Server disconnected without sending a response" at once. Nothing was answered, so
    sending again is safe, and is not a try of the retry policy (the server did nothing wrong).
    """
    import httpx

    try:
        return await client.send(request, stream=stream)
    except httpx.RemoteProtocolError as e:
        if "without sending a response" not in str(e):
            raise
    return await client.send(request, stream=stream)


def json_object(provider: str, raw: bytes) -> dict[str, Any]:
    """The JSON object a whole answer holds. Raises ProviderError (retryable: usually a cut body)."""
    try:
        data = json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError):
        # Usually a connection cut mid-body by a proxy or a crashing server: worth another try.
        raise ProviderError(
            f"{provider}: the answer was not valid JSON (truncated?)", retryable=True
        ) from None
    if not isinstance(data, dict):
        raise ProviderError(f"{provider}: the answer was not a JSON object", retryable=True)
    return data


class StreamedAnswer:
    """An answer being received: either one JSON body (`whole`), or events arriving (`events`).

    A server asked to stream may still answer with one JSON body (a proxy, an older server, a
    scripted test server): that is read as such.
    """

    def __init__(
        self, provider: str, response: httpx.Response | None, whole: dict[str, Any] | None, idle_s: float
    ) -> None:
        self.provider = provider
        self.whole = whole
        self._response = response
        self._idle_s = idle_s

    async def events(self) -> AsyncIterator[dict[str, Any]]:
        """The answer's JSON events, in order. Raises ProviderError when it stalls or breaks off."""
        import httpx

        if self._response is None:
            return
        try:
            async for line in self._response.aiter_lines():
                event = stream_event(self.provider, line)
                if event is not None:
                    yield event
        except httpx.ReadTimeout:
            raise ProviderError(
                f"{self.provider}: the answer stalled: nothing received for {self._idle_s:g} s",
                retryable=True,
            ) from None
        except httpx.RequestError as e:
            reason = str(e) or type(e).__name__
            raise ProviderError(f"{self.provider}: the answer broke off: {reason}", retryable=True) from None


@contextlib.asynccontextmanager
async def open_stream(
    client: httpx.AsyncClient,
    provider: str,
    url: str,
    body: dict[str, Any],
    headers: dict[str, str],
    idle_s: float,
) -> AsyncIterator[StreamedAnswer]:
    """POST a JSON body that asks for a streamed answer; errors mapped as `post_json` maps them.

    `idle_s` bounds every wait for the next bytes, the first ones included (the server evaluating a
    long prompt sends nothing until its first token).
    """
    import httpx

    request = client.build_request("POST", url, json=body, headers=headers, timeout=httpx.Timeout(idle_s))
    try:
        response = await send(client, request, stream=True)
    except httpx.TimeoutException:
        raise ProviderError(f"{provider}: nothing received for {idle_s:g} s", retryable=True) from None
    except httpx.RequestError as e:
        raise _transport_error(provider, url, e) from None
    try:
        kind = response.headers.get("content-type", "")
        if response.status_code != 200 or ("event-stream" not in kind and "ndjson" not in kind):
            try:
                raw = await response.aread()
            except httpx.TimeoutException:
                raise ProviderError(
                    f"{provider}: nothing received for {idle_s:g} s", retryable=True
                ) from None
            except httpx.RequestError as e:
                raise _transport_error(provider, url, e) from None
            if response.status_code != 200:
                text = raw.decode("utf-8", errors="replace")
                raise http_error(provider, response.status_code, text, response.headers.get("retry-after"))
            yield StreamedAnswer(provider, None, json_object(provider, raw), idle_s)
            return
        yield StreamedAnswer(provider, response, None, idle_s)
    finally:
        await response.aclose()


def stream_event(provider: str, line: str) -> dict[str, Any] | None:
    """One streamed JSON event from a line ("data: {...}" of server-sent events, or a bare JSON
    line); None for what carries no event (SSE comments and "event:" names, the closing "[DONE]").

    An event that reports an error (llama.cpp and OpenAI `{"error": {...}}`, Anthropic
    `{"type": "error"}`, Ollama `{"error": "..."}`) raises it as the HTTP error it stands for.
    """
    text = line.strip()
    if text.startswith("data:"):
        text = text[5:].strip()
    elif not text.startswith("{"):
        return None
    if not text or text == "[DONE]":
        return None
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        raise malformed(provider, "a streamed event is not valid JSON") from None
    if not isinstance(event, dict):
        raise malformed(provider, "a streamed event is not an object")
    error = event.get("error")
    if error and event.get("type") in (None, "error"):
        code = error.get("code") if isinstance(error, dict) else None
        raise http_error(
            provider, code if isinstance(code, int) and code >= 400 else 500, json.dumps(event), None
        )
    return event


def malformed(provider: str, what: str) -> ProviderError:
    return ProviderError(f"{provider}: malformed answer: {what}", retryable=True)


class StreamReader(Protocol):
    """Builds one Completion from a wire format's stream events."""

    def feed(self, event: dict[str, Any]) -> str:
        """Take one event; return the text it adds ("" for none). Raises ProviderError."""
        ...

    def finish(self) -> Completion:
        """The whole answer. Raises ProviderError when the stream ended before the answer did."""
        ...


class HttpProvider:
    """What every HTTP provider shares: its name, model, endpoint, headers, limits and scrubbing.

    Everything in a request body is scrubbed before it is sent (`complete`): the system prompt
    (context files the model and commands can write), the history (what people typed, what tools
    and the model said) and tool-call arguments. The daemon's own secrets -- API keys, the MQTT
    password, HMAC keys -- never leave in a request; the provider's key goes only in its header.

    A wire format defines `_body` (the request), `_parse` (a whole JSON answer) and `_reader` (a
    streamed one); `_stream_body` marks a body as asking for a stream.
    """

    kind: str
    tool_format = "openai"
    default_base_url: str

    def __init__(
        self,
        name: str,
        client: SharedClient,
        *,
        model: str,
        base_url: str = "",
        api_key: str = "",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S,
        stream: bool = True,
        max_tokens: int = 1024,
        scrub: Callable[[str], str] | None = None,
    ) -> None:
        self.name = name
        self.model = model
        self.tools_supported: bool | None = None
        self._client = client
        self._base_url = (base_url or self.default_base_url).rstrip("/")
        self._api_key = api_key
        self._timeout_s = timeout_s
        self._idle_timeout_s = min(idle_timeout_s, timeout_s)
        self._stream = stream
        self._max_tokens = max_tokens
        # The daemon passes its scrubber (every configured secret); alone, at least this key is known.
        self._scrub = scrub or Scrubber([api_key] if api_key else []).scrub

    async def probe_tools(self) -> bool | None:
        """Whether the model takes tools, when the server can say; these servers cannot (None)."""
        return self.tools_supported

    async def complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        on_text: TextSink | None = None,
        max_tokens: int | None = None,
    ) -> Completion:
        """One request, its system prompt and messages scrubbed first. Raises ProviderError.

        With `stream` on, the answer is asked for as a stream and its text goes to `on_text` as it
        arrives; otherwise (or when the server answers in one piece) `on_text` gets it whole.
        `max_tokens` is this request's answer room (fitted to the model's context), at most the
        configured one.
        """
        answer = min(max_tokens, self._max_tokens) if max_tokens else self._max_tokens
        scrub = self._scrub
        system, messages = scrub(system), [scrub_message(m, scrub) for m in messages]
        try:
            return await self._complete(system, messages, tools, on_text, answer)
        except ProviderError as e:
            # A server that refuses tools for this model: remember it, and ask again without them (the
            # model then answers in plain chat; the banner and /status say so).
            if not (tools and e.status == 400 and any(w in e.body for w in NO_TOOLS_WORDS)):
                raise
            self.tools_supported = False
            log.warning(
                "%s: model %s takes no tools: plain chat and slash commands only", self.name, self.model
            )
            return await self._complete(system, messages, [], on_text, answer)

    async def _complete(
        self,
        system: str,
        messages: Sequence[Message],
        tools: list[dict[str, Any]],
        on_text: TextSink | None,
        max_tokens: int,
    ) -> Completion:
        body = self._body(system, messages, tools, max_tokens)
        try:
            async with asyncio.timeout(self._timeout_s):
                if self._stream:
                    return await self._streamed(self._stream_body(body), on_text)
                completion = self._parse(await self._post(self._url, body, self._headers))
        except TimeoutError:
            raise ProviderError(
                f"{self.name}: no complete answer within {self._timeout_s:g} s", retryable=True
            ) from None
        except ProviderError as e:
            raise self._scrubbed(e) from None
        if on_text is not None and completion.text:
            on_text(completion.text)
        return completion

    async def _streamed(self, body: dict[str, Any], on_text: TextSink | None) -> Completion:
        client = self._client.get()
        async with open_stream(
            client, self.name, self._url, body, self._headers, self._idle_timeout_s
        ) as answer:
            if answer.whole is not None:
                completion = self._parse(answer.whole)
                if on_text is not None and completion.text:
                    on_text(completion.text)
                return completion
            reader = self._reader()
            async for event in answer.events():
                text = reader.feed(event)
                if text and on_text is not None:
                    on_text(text)
            return reader.finish()

    # -- what a wire format defines ------------------------------------------
    @property
    def _url(self) -> str:
        raise NotImplementedError(f"{type(self).__name__} does not define its endpoint (_url)")

    @property
    def _headers(self) -> dict[str, str]:
        return {}

    def _body(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]], max_tokens: int
    ) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} does not define its wire format (_body)")

    def _stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "stream": True}

    def _parse(self, data: dict[str, Any]) -> Completion:
        raise NotImplementedError(f"{type(self).__name__} does not define its wire format (_parse)")

    def _reader(self) -> StreamReader:
        raise NotImplementedError(f"{type(self).__name__} does not read streamed answers (_reader)")

    # -- shared --------------------------------------------------------------
    async def _post(self, url: str, body: dict[str, Any], headers: dict[str, str]) -> dict[str, Any]:
        try:
            return await post_json(self._client.get(), self.name, url, body, headers, self._timeout_s)
        except ProviderError as e:
            raise self._scrubbed(e) from None

    def _scrubbed(self, e: ProviderError) -> ProviderError:
        """Error bodies are quoted in the message, which reaches the chat and the log; some proxies
        echo the key they were given ("invalid key sk-..."): never pass it on."""
        message, body = self._scrub(str(e)), self._scrub(e.body)
        if message == str(e) and body == e.body:
            return e
        scrubbed = e.with_message(message)
        scrubbed.body = body
        return scrubbed


def scrub_message(message: Message, scrub: Callable[[str], str]) -> Message:
    """`message` with its text and tool-call arguments scrubbed (a new message; history is untouched)."""
    calls = [dataclasses.replace(c, arguments=scrub(c.arguments)) for c in message.tool_calls]
    return dataclasses.replace(message, content=scrub(message.content), tool_calls=calls)


def usage_int(value: Any) -> int:
    """A token count from a usage block: servers send null, strings or nothing as often as numbers."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError):
        return 0
