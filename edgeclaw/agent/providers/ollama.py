"""Ollama's own chat API (`POST /api/chat`), whole or streamed (JSON lines), with tools.

Beside the OpenAI-compatible path (`kind = "openai"` with `base_url = .../v1`), the native API
says more: `POST /api/show` tells whether the model takes tools at all (`capabilities`, or, from
servers older than that field, whether its template renders them), and `keep_alive` keeps the model
loaded between a board's sparse requests instead of reloading it (seconds to minutes on a Pi).

A model without tool support is sent no tools (Ollama would refuse the request with HTTP 400 "does
not support tools"; a server that could not say so in /api/show is asked again without them, see
HttpProvider): it answers in plain text, and slash commands still work. Tool-call arguments arrive
as a JSON object, or from some models as a JSON string: both are taken (agent.tool_args).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from edgeclaw.agent.messages import Completion, Message, ToolCall, Usage
from edgeclaw.agent.providers.base import ProviderError
from edgeclaw.agent.providers.endpoints import OLLAMA_BASE_URL
from edgeclaw.agent.providers.http import HttpProvider, StreamReader, malformed, post_json, usage_int
from edgeclaw.agent.tool_args import for_wire, tool_call
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.providers")

SHOW_TIMEOUT_S = 10.0
SHOW_RETRY_S = 60.0  # an unanswered /api/show is asked again after this long, not on every request


class OllamaProvider(HttpProvider):
    kind = "ollama"
    tool_format = "openai"  # Ollama takes OpenAI-style function definitions
    default_base_url = OLLAMA_BASE_URL

    def __init__(self, *args: Any, keep_alive: str = "", num_ctx: int = 0, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._keep_alive = keep_alive
        # The configured context (context_tokens): Ollama runs a model with its own default otherwise,
        # and cuts a longer prompt from the front without saying so.
        self._num_ctx = num_ctx
        self._shown_at = -SHOW_RETRY_S  # when /api/show was last asked (monotonic); never yet
        self.show: dict[str, Any] | None = None  # the last /api/show answer (model details)

    @property
    def _root(self) -> str:
        return self._base_url.removesuffix("/v1")  # a base_url copied from the OpenAI-compatible setup

    @property
    def _url(self) -> str:
        return self._root + "/api/chat"

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    async def probe_tools(self) -> bool | None:
        """Whether the model takes tools, from `/api/show` (asked once; again after a failure)."""
        if self.tools_supported is not None or time.monotonic() - self._shown_at < SHOW_RETRY_S:
            return self.tools_supported
        self._shown_at = time.monotonic()
        try:
            show = await post_json(
                self._client.get(),
                self.name,
                self._root + "/api/show",
                {"model": self.model},
                self._headers,
                SHOW_TIMEOUT_S,
            )
        except ProviderError as e:
            log.info("%s: cannot tell whether %s takes tools: %s", self.name, self.model, self._scrub(str(e)))
            return None
        self.show = show
        self.tools_supported = takes_tools(show)
        if self.tools_supported is False:
            log.warning(
                "%s: model %s does not support tools: plain chat and slash commands only",
                self.name,
                self.model,
            )
        return self.tools_supported

    def _body(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]], max_tokens: int
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": wire_messages(system, messages),
            "stream": False,
            "options": {"num_predict": max_tokens},
        }
        if self._num_ctx:
            body["options"]["num_ctx"] = self._num_ctx
        if tools:
            body["tools"] = tools
        if self._keep_alive:
            body["keep_alive"] = _keep_alive_value(self._keep_alive)
        return body

    def _parse(self, data: dict[str, Any]) -> Completion:
        message = data.get("message")
        if not isinstance(message, dict):
            raise malformed(self.name, "no message")
        reader = _LineReader(self.name, self.model)
        reader.feed(data)
        if not reader.done:
            raise malformed(self.name, "the answer is not done")
        return reader.finish()

    def _reader(self) -> StreamReader:
        return _LineReader(self.name, self.model)


def takes_tools(show: dict[str, Any]) -> bool:
    """Whether an `/api/show` answer's model takes tools: its capabilities, else its template."""
    capabilities = show.get("capabilities")
    if isinstance(capabilities, list):
        return "tools" in capabilities
    template = show.get("template")
    return isinstance(template, str) and ".Tools" in template  # how Ollama itself decided, before


def _keep_alive_value(text: str) -> str | int:
    """Ollama reads a bare number as seconds, and "-1" (never unload) only as a number."""
    return int(text) if text.lstrip("-").isdigit() else text


def wire_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as `/api/chat` takes it: arguments as objects, results named by tool."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "content": m.content, "tool_name": m.name})
        elif m.role == "assistant" and m.tool_calls:
            calls = [
                {"function": {"name": c.name, "arguments": json.loads(for_wire(c.arguments))}}
                for c in m.tool_calls
            ]
            out.append({"role": "assistant", "content": m.content, "tool_calls": calls})
        elif m.images:
            out.append({"role": m.role, "content": m.content, "images": [i.data for i in m.images]})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


@dataclass
class _LineReader:
    """`/api/chat` JSON lines into one answer: content pieces joined, tool calls as they come."""

    provider: str
    model: str
    text: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    done: bool = False
    done_reason: str = ""
    usage: Usage = field(default_factory=Usage)
    answered_by: str = ""

    def feed(self, event: dict[str, Any]) -> str:
        if isinstance(event.get("model"), str):
            self.answered_by = event["model"]
        message = event.get("message")
        piece = ""
        if isinstance(message, dict):
            content = message.get("content")
            if isinstance(content, str) and content:
                self.text.append(content)
                piece = content
            for raw in message.get("tool_calls") or ():
                fn = raw.get("function") if isinstance(raw, dict) else None
                if not isinstance(fn, dict):
                    raise malformed(self.provider, "a tool call without a function")
                call_id = raw.get("id") if isinstance(raw.get("id"), str) and raw.get("id") else ""
                # The arguments are an object, or (some models) its JSON text: tool_call takes both.
                self.calls.append(
                    tool_call(
                        call_id or f"call_{len(self.calls)}", str(fn.get("name", "")), fn.get("arguments")
                    )
                )
        if event.get("done"):
            self.done = True
            self.done_reason = str(event.get("done_reason") or "")
            self.usage = Usage(usage_int(event.get("prompt_eval_count")), usage_int(event.get("eval_count")))
        return piece

    def finish(self) -> Completion:
        if not self.done:
            raise malformed(self.provider, "the stream ended before the answer did (no done line)")
        return Completion(
            text="".join(self.text),
            tool_calls=tuple(self.calls),
            usage=self.usage,
            provider=self.provider,
            model=self.answered_by or self.model,
            truncated=self.done_reason == "length",
        )
