"""OpenAI-compatible chat completions with tool calls, whole or streamed (server-sent events).

The same wire format serves OpenAI, OpenRouter, vLLM, LM Studio, Ollama and
llama.cpp's server, which is why it is the default for a local model.

What the servers that are not OpenAI need, learned against them: an assistant message with tool
calls carries `"content": ""`, never null (llama-cpp-python's server answers HTTP 500 to null);
tool-call arguments going back are always a JSON object's text (llama-server refuses every later
request of a session whose history holds invalid ones).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from edgeclaw.agent.messages import Completion, Message, ToolCall, Usage
from edgeclaw.agent.providers.endpoints import OPENAI_BASE_URL
from edgeclaw.agent.providers.http import HttpProvider, StreamReader, malformed, usage_int
from edgeclaw.agent.tool_args import for_wire, tool_call
from edgeclaw.records import dataclass

DEFAULT_BASE_URL = OPENAI_BASE_URL


def wire_messages(system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
    """The conversation as OpenAI-compatible servers take it."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.role == "tool":
            out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
        elif m.role == "assistant" and m.tool_calls:
            out.append(
                {
                    "role": "assistant",
                    "content": m.content,  # "" rather than null: see the module's notes
                    "tool_calls": [
                        {
                            "id": c.id,
                            "type": "function",
                            "function": {"name": c.name, "arguments": for_wire(c.arguments)},
                        }
                        for c in m.tool_calls
                    ],
                }
            )
        elif m.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": m.content}]
            parts += [{"type": "image_url", "image_url": {"url": i.data_url}} for i in m.images]
            out.append({"role": m.role, "content": parts})
        else:
            out.append({"role": m.role, "content": m.content})
    return out


def _usage(data: Any) -> Usage:
    """OpenAI's usage block; cached tokens as OpenAI and llama.cpp report them."""
    if not isinstance(data, dict):
        return Usage()
    details = data.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    return Usage(
        usage_int(data.get("prompt_tokens")), usage_int(data.get("completion_tokens")), usage_int(cached)
    )


def _cached_from_timings(data: dict[str, Any], usage: Usage) -> Usage:
    """llama-server also says in `timings.cache_n` how much of the prompt came from its cache."""
    timings = data.get("timings")
    if usage.cached_tokens or not isinstance(timings, dict) or "cache_n" not in timings:
        return usage
    return Usage(usage.input_tokens, usage.output_tokens, usage_int(timings.get("cache_n")))


class OpenAIProvider(HttpProvider):
    kind = "openai"
    tool_format = "openai"
    default_base_url = DEFAULT_BASE_URL

    @property
    def _url(self) -> str:
        return self._base_url + "/chat/completions"

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _wire_messages(self, system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
        return wire_messages(system, messages)

    def _body(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]], max_tokens: int
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": wire_messages(system, messages),
            "max_tokens": max_tokens,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        return body

    def _stream_body(self, body: dict[str, Any]) -> dict[str, Any]:
        # Without include_usage a streamed answer carries no token counts at all.
        return {**body, "stream": True, "stream_options": {"include_usage": True}}

    def _parse(self, data: dict[str, Any]) -> Completion:
        try:
            choice = data["choices"][0]
            message = choice["message"]
        except (KeyError, IndexError, TypeError):
            raise malformed(self.name, "no choices[0].message") from None
        if not isinstance(message, dict):
            raise malformed(self.name, "choices[0].message is not an object")
        calls = []
        for raw in message.get("tool_calls") or ():
            if not isinstance(raw, dict):
                raise malformed(self.name, "a tool call is not an object")
            fn = raw.get("function") or {}
            if not isinstance(fn, dict):
                raise malformed(self.name, "a tool call's function is not an object")
            # Some servers send an object instead of the JSON text the spec asks for: both are taken.
            calls.append(tool_call(_call_id(raw.get("id")), str(fn.get("name", "")), fn.get("arguments")))
        content = message.get("content")
        return Completion(
            text=content if isinstance(content, str) else "",
            tool_calls=tuple(calls),
            usage=_cached_from_timings(data, _usage(data.get("usage"))),
            provider=self.name,
            model=str(data.get("model") or self.model),
            truncated=choice.get("finish_reason") == "length",
        )

    def _reader(self) -> StreamReader:
        return _ChunkReader(self.name, self.model)


def _call_id(value: Any) -> str:
    return value if isinstance(value, str) and value else f"call_{uuid.uuid4().hex[:12]}"


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


@dataclass
class _ChunkReader:
    """Chat-completion chunks into one answer: text deltas joined, tool calls assembled by index."""

    provider: str
    model: str
    text: list[str] = field(default_factory=list)
    calls: dict[int, _PartialCall] = field(default_factory=dict)
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    answered_by: str = ""

    def feed(self, event: dict[str, Any]) -> str:
        if isinstance(event.get("usage"), dict):
            self.usage = _cached_from_timings(event, _usage(event["usage"]))
        if isinstance(event.get("model"), str) and event["model"]:
            self.answered_by = event["model"]
        choices = event.get("choices")
        if not isinstance(choices, list) or not choices:
            return ""  # the closing usage chunk has none
        choice = choices[0]
        if not isinstance(choice, dict):
            raise malformed(self.provider, "a streamed choice is not an object")
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise malformed(self.provider, "a streamed delta is not an object")
        for raw in delta.get("tool_calls") or ():
            self._call_delta(raw)
        content = delta.get("content")
        if isinstance(content, str) and content:
            self.text.append(content)
            return content
        return ""

    def _call_delta(self, raw: Any) -> None:
        if not isinstance(raw, dict):
            raise malformed(self.provider, "a streamed tool call is not an object")
        index = raw.get("index")
        call_id = raw.get("id") if isinstance(raw.get("id"), str) else ""
        if not isinstance(index, int):
            # No index (some servers): a new id starts a new call, anything else continues the last.
            last = max(self.calls, default=-1)
            index = last + 1 if last < 0 or (call_id and call_id != self.calls[last].id) else last
        call = self.calls.setdefault(index, _PartialCall())
        if call_id and not call.id:
            call.id = call_id
        fn = raw.get("function") or {}
        if not isinstance(fn, dict):
            raise malformed(self.provider, "a streamed tool call's function is not an object")
        if isinstance(fn.get("name"), str) and fn["name"] and not call.name:
            call.name = fn["name"]
        arguments = fn.get("arguments")
        if isinstance(arguments, dict):  # an object, not text: the whole arguments at once
            call.arguments = [json.dumps(arguments, ensure_ascii=False)]
        elif isinstance(arguments, str):
            call.arguments.append(arguments)

    def finish(self) -> Completion:
        if self.finish_reason is None:
            raise malformed(self.provider, "the stream ended before the answer did (no finish_reason)")
        calls: list[ToolCall] = [
            tool_call(_call_id(c.id), c.name, "".join(c.arguments)) for _, c in sorted(self.calls.items())
        ]
        return Completion(
            text="".join(self.text),
            tool_calls=tuple(calls),
            usage=self.usage,
            provider=self.provider,
            model=self.answered_by or self.model,
            truncated=self.finish_reason == "length",
        )
