"""Tool parameter schemas as they are shown to models: what every server's grammar builder accepts.

Local servers turn tool schemas into a grammar that constrains the model's output, and their
builders are narrower than JSON Schema: llama-cpp-python's crashes on `maxItems`/`maxLength` of
1024 or more (each allowed repetition becomes a rule; 256 is fine), and llama.cpp's refuses a
`pattern` that is not anchored with `^...$` or uses syntax it does not know (`\\d`, `(?:`, lookaround).

So, in the definitions sent to models only:
- a length or count bound above `MAX_BOUND` is left out of the schema and said in words in its
  description instead ("at most 8000 characters"): the model still knows it, the grammar does not
  have to count that far, and nothing is cut shorter than the tool allows;
- a `pattern` is kept only when it is anchored and uses plain syntax (character classes, groups,
  `?*+{m,n}`, `|`); otherwise it is left out (the description says what the value looks like);
- `$comment` (for people reading the source) is dropped.

The registry still validates every call against the tool's real schema, so what a model sends
beyond a bound it was not shown is refused with the bound named.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgeclaw.tools.base import ToolInfo

MAX_BOUND = 256
_BOUNDS = {
    "maxLength": "at most {} characters",
    "minLength": "at least {} characters",
    "maxItems": "at most {} items",
    "minItems": "at least {} items",
}
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
# Anchored, no escapes, no "(?" constructs: what every grammar builder we know reads.
_PLAIN_PATTERN = re.compile(r"\^(?:[^\\]|\\[\^$.|?*+()\[\]{}\\/-])*\$")


def for_models(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of a parameters schema that every common grammar builder accepts (see the module)."""
    out: dict[str, Any] = {}
    said: list[str] = []
    for key, value in schema.items():
        if key == "$comment":
            continue
        if key in _BOUNDS and isinstance(value, int) and value > MAX_BOUND:
            said.append(_BOUNDS[key].format(value))
        elif key == "pattern" and not (isinstance(value, str) and _plain(value)):
            continue
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: for_models(s) if isinstance(s, dict) else s for name, s in value.items()}
        elif key == "items" and isinstance(value, dict):
            out[key] = for_models(value)
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            out[key] = [for_models(s) if isinstance(s, dict) else s for s in value]
        else:
            out[key] = value
    if said:
        words = ", ".join(said)
        description = out.get("description")
        has_own = isinstance(description, str) and description
        out["description"] = f"{description} ({words})" if has_own else words
    return out


def _plain(pattern: str) -> bool:
    return bool(_PLAIN_PATTERN.fullmatch(pattern)) and "(?" not in pattern


def model_definition(info: ToolInfo, fmt: str) -> dict[str, Any]:
    """A tool's definition for a provider request: OpenAI function format or Anthropic tool format."""
    # What every server's grammar builder accepts; calls are still checked against the real schema.
    parameters = for_models(info.parameters)
    if fmt == "openai":
        function = {"name": info.name, "description": info.description, "parameters": parameters}
        return {"type": "function", "function": function}
    if fmt == "anthropic":
        return {"name": info.name, "description": info.description, "input_schema": parameters}
    raise ValueError(f"unknown definition format {fmt!r} (expected 'openai' or 'anthropic')")
