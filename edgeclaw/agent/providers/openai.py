"""OpenAI-compatible chat completions with tool calls.

The same wire format serves OpenAI, OpenRouter, vLLM, LM Studio, Ollama and
llama.cpp's server, which is why it is the default for a local model.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from typing import Any

from edgeclaw.agent.messages import Completion, Message, ToolCall, Usage
from edgeclaw.agent.providers.endpoints import OPENAI_BASE_URL
from edgeclaw.agent.providers.http import HttpProvider, malformed

DEFAULT_BASE_URL = OPENAI_BASE_URL


class OpenAIProvider(HttpProvider):
    kind = "openai"
    default_base_url = DEFAULT_BASE_URL

    @property
    def _url(self) -> str:
        return self._base_url + "/chat/completions"

    @property
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _wire_messages(self, system: str, messages: Sequence[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        for m in messages:
            if m.role == "tool":
                out.append({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.content})
            elif m.role == "assistant" and m.tool_calls:
                out.append(
                    {
                        "role": "assistant",
                        "content": m.content or None,
                        "tool_calls": [
                            {
                                "id": c.id,
                                "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            }
                            for c in m.tool_calls
                        ],
                    }
                )
            else:
                out.append({"role": m.role, "content": m.content})
        return out

    async def _complete(
        self, system: str, messages: Sequence[Message], tools: list[dict[str, Any]]
    ) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": self._wire_messages(system, messages),
            "max_tokens": self._max_tokens,
        }
        if tools:
            body["tools"] = tools
            body["tool_choice"] = "auto"
        data = await self._post(self._url, body, self._headers)
        try:
            message = data["choices"][0]["message"]
        except (KeyError, IndexError, TypeError):
            raise malformed(self.name, "no choices[0].message") from None
        if not isinstance(message, dict):
            raise malformed(self.name, "choices[0].message is not an object")
        calls = []
        for raw in message.get("tool_calls") or ():
            if not isinstance(raw, dict):
                raise malformed(self.name, "a tool call is not an object")
            fn = raw.get("function") or {}
            arguments = fn.get("arguments", "")
            if not isinstance(arguments, str):
                # Some servers send an object instead of the JSON text the spec asks for.
                arguments = json.dumps(arguments)
            calls.append(
                ToolCall(raw.get("id") or f"call_{uuid.uuid4().hex[:12]}", str(fn.get("name", "")), arguments)
            )
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return Completion(
            text=message.get("content") or "",
            tool_calls=tuple(calls),
            usage=Usage(int(usage.get("prompt_tokens", 0) or 0), int(usage.get("completion_tokens", 0) or 0)),
            provider=self.name,
            model=str(data.get("model") or self.model),
        )
