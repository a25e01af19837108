"""Anthropic Messages API with tool_use / tool_result blocks."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from edgeclaw.agent.messages import Completion, Message, ToolCall, Usage
from edgeclaw.agent.providers.endpoints import ANTHROPIC_BASE_URL
from edgeclaw.agent.providers.http import HttpProvider, malformed

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


class AnthropicProvider(HttpProvider):
    kind = "anthropic"
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
                for c in m.tool_calls:
                    try:
                        value = json.loads(c.arguments) if c.arguments.strip() else {}
                    except json.JSONDecodeError:
                        value = None
                    # The API only takes an object here; a model's broken arguments are kept as text.
                    blocks.append(
                        {
                            "type": "tool_use",
                            "id": c.id,
                            "name": c.name,
                            "input": value if isinstance(value, dict) else {"_raw": c.arguments},
                        }
                    )
                if blocks:  # nothing to say: leave it out, the user turns around it merge
                    add("assistant", blocks)
            elif m.role == "user":
                add("user", [{"type": "text", "text": m.content}])
        return out

    async def _complete(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self._max_tokens,
            "messages": self._wire_messages(messages),
        }
        system_blocks, tools = cache_marked(system, tools)
        if system_blocks:
            body["system"] = system_blocks
        if tools:
            body["tools"] = tools
        data = await self._post(self._url, body, self._headers)
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
                    ToolCall(
                        str(block.get("id", "")),
                        str(block.get("name", "")),
                        json.dumps(block.get("input", {})),
                    )
                )
        usage = data.get("usage") or {}
        return Completion(
            text="".join(texts),
            tool_calls=tuple(calls),
            usage=Usage(int(usage.get("input_tokens", 0) or 0), int(usage.get("output_tokens", 0) or 0)),
            provider=self.name,
            model=str(data.get("model") or self.model),
        )
