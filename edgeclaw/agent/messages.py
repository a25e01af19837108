"""The conversation as the agent keeps it, independent of any provider's wire format."""

from __future__ import annotations

import json
from dataclasses import field
from typing import Any, Literal

from edgeclaw.records import dataclass

Role = Literal["system", "user", "assistant", "tool"]


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    # JSON text of an object: the model's own text when it was valid (byte-exact, for prompt caches),
    # else repaired or replaced by a short error object (agent.tool_args), never invalid JSON.
    arguments: str
    # Why the model's arguments could not be used ("" = they can): such a call is never run, and its
    # result tells the model its call was malformed. Not stored: the result says it.
    problem: str = ""


@dataclass(frozen=True, slots=True)
class ImagePart:
    """A picture shown to the model with a user message (`image describe`)."""

    media_type: str  # image/png, image/jpeg, image/gif, image/webp
    data: str  # base64 of the file

    @property
    def data_url(self) -> str:
        return f"data:{self.media_type};base64,{self.data}"


@dataclass(slots=True)
class Message:
    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str = ""  # for role == "tool": which call this answers
    name: str = ""  # for role == "tool": the tool's name
    is_error: bool = False  # for role == "tool"
    # Pictures with a user message, in each provider's own form. Not stored with the history: a
    # picture is asked about once, and a session's stored turns stay text.
    images: tuple[ImagePart, ...] = ()

    def estimated_tokens(self) -> int:
        """A cheap estimate (4 characters a token) used for history budgets and status figures."""
        size = len(self.content) + sum(len(c.name) + len(c.arguments) for c in self.tool_calls)
        return size // 4 + 4

    def to_json(self) -> str:
        data: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            data["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id:
            data["tool_call_id"] = self.tool_call_id
            data["name"] = self.name
            data["is_error"] = self.is_error
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Message:
        data = json.loads(text)
        return cls(
            role=data["role"],
            content=data.get("content", ""),
            tool_calls=[ToolCall(c["id"], c["name"], c["arguments"]) for c in data.get("tool_calls", ())],
            tool_call_id=data.get("tool_call_id", ""),
            name=data.get("name", ""),
            is_error=data.get("is_error", False),
        )


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # of input_tokens, how many the server took from its prompt cache


@dataclass(frozen=True, slots=True)
class Completion:
    """One model reply: text, tool calls, or both."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = Usage()
    provider: str = ""
    model: str = ""
    # The answer stopped at the token limit (OpenAI finish_reason "length", Anthropic stop_reason
    # "max_tokens", Ollama done_reason "length"): its tool calls may be cut off, so none is run.
    truncated: bool = False
