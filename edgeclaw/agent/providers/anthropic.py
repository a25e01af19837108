"""Anthropic Messages API with tool_use / tool_result blocks, whole or streamed (server-sent events)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import field
from typing import Any

from edgeclaw.agent.messages import Completion, Message, ToolCall, Usage
from edgeclaw.agent.providers.endpoints import ANTHROPIC_BASE_URL
from edgeclaw.agent.providers.http import HttpProvider, StreamReader, malformed, usage_int
from edgeclaw.agent.tool_args import for_wire, tool_call
from edgeclaw.records import dataclass

DEFAULT_BASE_URL = ANTHROPIC_BASE_URL
API_VERSION = "2023-06-01"


CACHE_POINT = {"type": "ephemeral"}


def cache_marked(
    system: str, tools: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The system prompt as a text block and the tool definitions, each marked as a cache point.

    Anthropic's prompt caching reuses a prefix (tools, then system, then messages) up to a block
    marked `cache_control`: the tools and the system prompt are the same from turn to turn (the
    volatile parts ride on the newest message, see agent.prompt), so from the second turn on they
    are read from the cache. The last tool is marked too, so an edited context file leaves the
    tools cached. The registry's definitions are shared: the last one is copied, not changed.
    """
    blocks = [{"type": "text", "text": system, "cache_control": CACHE_POINT}] if system else []
    if tools:
        tools = [*tools[:-1], {**tools[-1], "cache_control": CACHE_POINT}]
    return blocks, tools


def _usage(data: Any, previous: Usage | None = None) -> Usage:
    """Anthropic's usage block; cache reads are prompt tokens too, counted apart by the API."""
    previous = previous or Usage()
    if not isinstance(data, dict):
        return previous
    cached = usage_int(data.get("cache_read_input_tokens"))
    fresh = usage_int(data.get("input_tokens")) + usage_int(data.get("cache_creation_input_tokens"))
    return Usage(
        fresh + cached if "input_tokens" in data else previous.input_tokens,
        usage_int(data.get("output_tokens")) if "output_tokens" in data else previous.output_tokens,
        cached if "cache_read_input_tokens" in data else previous.cached_tokens,
    )


class AnthropicProvider(HttpProvider):
    kind = "anthropic"
    tool_format = "anthropic"
    default_base_url = DEFAULT_BASE_URL

    @property
    def _url(self) -> str:
        return self._base_url + ("/messages" if self._base_url.endswith("/v1") else "/v1/messages")

    @property
    def _headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    @staticmethod
    def _wire_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
        """Anthropic wants alternating user/assistant turns; tool results ride in a user turn."""
        out: list[dict[str, Any]] = []

        def add(role: str, blocks: list[dict[str, Any]]) -> None:
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})

        for m in messages:
            if m.role == "tool":
                add(
                    "user",
                    [
                        {
                            "type": "tool_result",
                            "tool_use_id": m.tool_call_id,
                            "content": m.content,
                            "is_error": m.is_error,
                        }
                    ],
                )
            elif m.role == "assistant":
                # The API refuses empty or whitespace-only text blocks (HTTP 400); a stored empty answer
                # would otherwise break every later turn of the session.
                blocks: list[dict[str, Any]] = (
                    [{"type": "text", "text": m.content}] if m.content.strip() else []
                )
                # The API only takes an object as `input`: for_wire makes one of anything stored.
                blocks += [
                    {
                        "type": "tool_use",
                        "id": c.id,
                        "name": c.name,
                        "input": json.loads(for_wire(c.arguments)),
                    }
                    for c in m.tool_calls
                ]
                if blocks:  # nothing to say: leave it out, the user turns around it merge
                    add("assistant", blocks)
            elif m.role == "user":
                # Pictures first, then the question about them (Anthropic's advice for vision).
                pictures = [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": i.media_type, "data": i.data},
                    }
                    for i in m.images
                ]
                add("user", [*pictures, {"type": "text", "text": m.content}])
        return out

    def _body(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]], max_tokens: int
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": max_tokens,
            "messages": self._wire_messages(messages),
        }
        system_blocks, tools = cache_marked(system, tools)
        if system_blocks:
            body["system"] = system_blocks
        if tools:
            body["tools"] = tools
        return body

    def _parse(self, data: dict[str, Any]) -> Completion:
        content = data.get("content")
        if not isinstance(content, list):
            raise malformed(self.name, "no content blocks")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "text":
                texts.append(str(block.get("text", "")))
            elif block.get("type") == "tool_use":
                calls.append(
                    tool_call(str(block.get("id", "")), str(block.get("name", "")), block.get("input"))
                )
        return Completion(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=_usage(data.get("usage")),
            provider=self.name,
            model=str(data.get("model") or self.model),
            truncated=data.get("stop_reason") == "max_tokens",
        )

    def _reader(self) -> StreamReader:
        return _EventReader(self.name, self.model)


@dataclass
class _Block:
    type: str
    id: str = ""
    name: str = ""
    parts: list[str] = field(default_factory=list)  # text, or the tool input's JSON text in pieces
    start_input: Any = None  # the input content_block_start carried (an object, usually empty)


@dataclass
class _EventReader:
    """Messages-API stream events into one answer: blocks by index, tool input from its JSON deltas."""

    provider: str
    model: str
    blocks: dict[int, _Block] = field(default_factory=dict)
    stop_reason: str | None = None
    stopped: bool = False
    usage: Usage = field(default_factory=Usage)
    answered_by: str = ""

    def feed(self, event: dict[str, Any]) -> str:
        kind = event.get("type")
        if kind == "message_start":
            message = event.get("message") if isinstance(event.get("message"), dict) else {}
            self.answered_by = str(message.get("model") or "")
            self.usage = _usage(message.get("usage"), self.usage)
        elif kind == "content_block_start":
            block = event.get("content_block")
            if not isinstance(block, dict):
                raise malformed(self.provider, "content_block_start without a block")
            self.blocks[_index(event)] = _Block(
                str(block.get("type", "")),
                str(block.get("id", "")),
                str(block.get("name", "")),
                [str(block["text"])] if block.get("text") else [],
                block.get("input"),
            )
        elif kind == "content_block_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            block = self.blocks.setdefault(_index(event), _Block("text"))
            if delta.get("type") == "text_delta" and isinstance(delta.get("text"), str):
                block.parts.append(delta["text"])
                return delta["text"] if block.type == "text" else ""
            if delta.get("type") == "input_json_delta" and isinstance(delta.get("partial_json"), str):
                block.parts.append(delta["partial_json"])
        elif kind == "message_delta":
            delta = event.get("delta") if isinstance(event.get("delta"), dict) else {}
            if delta.get("stop_reason"):
                self.stop_reason = str(delta["stop_reason"])
            self.usage = _usage(event.get("usage"), self.usage)
        elif kind == "message_stop":
            self.stopped = True
        return ""

    def finish(self) -> Completion:
        if not self.stopped:
            raise malformed(self.provider, "the stream ended before the answer did (no message_stop)")
        texts: list[str] = []
        calls: list[ToolCall] = []
        for _, block in sorted(self.blocks.items()):
            if block.type == "text":
                texts.append("".join(block.parts))
            elif block.type == "tool_use":
                raw = "".join(block.parts)
                given = raw if raw.strip() else block.start_input  # no deltas: the start's input stands
                calls.append(tool_call(block.id, block.name, given))
        return Completion(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=self.usage,
            provider=self.provider,
            model=self.answered_by or self.model,
            truncated=self.stop_reason == "max_tokens",
        )


def _index(event: dict[str, Any]) -> int:
    index = event.get("index")
    return index if isinstance(index, int) else 0
