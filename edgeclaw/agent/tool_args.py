"""Tool-call arguments as a model wrote them, made safe to keep in the history and send back.

A call's arguments must be a JSON object. Models, small local ones above all, sometimes write
something else: the object wrapped in a code fence, the object encoded twice (a JSON string holding
the JSON), the object followed by stray text, or a call cut off mid-object by the token limit.
Sent back unchanged in the history, invalid arguments make some servers refuse every later request
of the session (llama.cpp's server answers HTTP 500 until the session is reset).

`normalize` repairs what can be repaired without guessing: the fence, the double encoding, the
trailing text after a complete object. Anything else is replaced by a short error object, so the
history stays valid JSON everywhere and the model reads what went wrong; such a call is never run.
"""

from __future__ import annotations

import json
import re
from typing import Any

from edgeclaw.agent.messages import ToolCall
from edgeclaw.records import dataclass

PREVIEW_CHARS = 80  # how much of broken arguments the replacement object quotes back to the model
_JSON_TYPES = {list: "array", int: "number", float: "number", bool: "boolean", type(None): "null"}
_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```$", re.DOTALL)


@dataclass(frozen=True)
class Arguments:
    """A call's arguments after `normalize`."""

    text: str  # JSON text of an object: what is stored, sent back, and (when `problem` is empty) run
    problem: str = ""  # why the model's text could not be used; the call is not run
    repaired: bool = False  # the text differs from the model's, but says the same thing


def normalize(raw: str) -> Arguments:
    """The arguments to keep for a call whose model-written arguments are `raw`."""
    text = raw.strip()
    if not text:
        return Arguments("{}", repaired=raw != "{}")
    value, problem = _object(text)
    if value is None and (fenced := _FENCE.match(text)):
        value, _ = _object(fenced.group(1).strip())
    if value is None:
        try:
            # A complete object followed by stray text ("{...} I will now read it"): the object stands.
            head, end = json.JSONDecoder().raw_decode(text)
        except (ValueError, RecursionError):
            head, end = None, 0
        # Another object or array after the first is not stray text: two calls run together, say.
        if isinstance(head, dict) and end < len(text) and text[end:].lstrip()[:1] not in ("{", "["):
            value = head
    if value is None:
        return Arguments(replacement(problem, raw), problem=problem)
    if text == raw and problem == "":
        return Arguments(raw)  # unchanged: a byte-exact history keeps a server's prompt cache warm
    return Arguments(json.dumps(value, ensure_ascii=False), repaired=True)


def tool_call(call_id: str, name: str, raw: Any) -> ToolCall:
    """A call as a provider parsed it, its arguments normalized; `problem` set when they are unusable.

    `raw` is what the server sent: JSON text (OpenAI, Anthropic streams), an object (Anthropic's
    `input`, Ollama's `arguments`), or nothing.
    """
    if isinstance(raw, dict):
        return ToolCall(call_id, name, json.dumps(raw, ensure_ascii=False))
    if raw is not None and not isinstance(raw, str):  # a list, a number: JSON, but no object
        raw = json.dumps(raw)
    args = normalize(raw or "")
    return ToolCall(call_id, name, args.text, args.problem)


def for_wire(arguments: str) -> str:
    """Arguments as they may go back to a server: a stored history from before they were checked
    (or one edited by hand) must not make the server refuse every later request."""
    return normalize(arguments).text


def replacement(problem: str, raw: str) -> str:
    """The error object that stands in the history for arguments that could not be used."""
    preview = raw if len(raw) <= PREVIEW_CHARS else raw[:PREVIEW_CHARS] + "…"
    return json.dumps({"error": f"invalid arguments: {problem}", "received": preview}, ensure_ascii=False)


def _object(text: str) -> tuple[dict[str, Any] | None, str]:
    """The JSON object `text` holds (also when encoded twice), else None and why not."""
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as e:
        where = "the text ends early (cut off?)" if e.pos >= len(text) else f"at position {e.pos}"
        return None, f"not valid JSON: {e.msg} ({where})"
    except (ValueError, RecursionError):
        return None, "not acceptable JSON (NaN or Infinity, a number too long, or nested too deeply)"
    if isinstance(value, str):
        inner, _ = _object(value.strip())
        if inner is not None:
            return inner, "encoded twice"
        return None, "a JSON string, not an object"
    if not isinstance(value, dict):
        return None, f"a JSON {_JSON_TYPES.get(type(value), 'value')}, not an object"
    return value, ""


def _no_constant(name: str) -> Any:
    # Python reads NaN and Infinity; JSON has no such values and servers refuse them.
    raise ValueError(f"{name} is not JSON")
