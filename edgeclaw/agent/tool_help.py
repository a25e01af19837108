"""A tool's arguments in words, read from its JSON schema: what `/help TOOL` shows on every channel.

The schema is the one the registry validates against, so the help cannot drift
from what is accepted. Only the keywords our tools use are put into words;
anything else is still enforced, just not described.
"""

from __future__ import annotations

import json
from typing import Any

from edgeclaw.tools.base import ToolInfo

MAX_ENUM_SHOWN = 12


def describe_tool(info: ToolInfo) -> str:
    """The tool's description, then one line per argument: name, type, required, description."""
    lines = [f"{info.name} ({info.group}): {info.description}"]
    props: dict[str, Any] = info.parameters.get("properties", {}) or {}
    required = set(info.parameters.get("required", []) or [])
    if not props:
        lines.append("arguments: none")
        lines.append(f"example: /call {info.name} {{}}")
        return "\n".join(lines)
    lines.append("arguments:")
    width = min(max(len(name) for name in props), 20)
    # Required ones first, in schema order, so the minimal call reads off the top.
    for name in sorted(props, key=lambda n: n not in required):
        schema = props[name] if isinstance(props[name], dict) else {}
        flag = "required" if name in required else "optional"
        text = f"  {name:<{width}}  {describe_type(schema)}, {flag}"
        if schema.get("description"):
            text += f": {schema['description']}"
        lines.append(text)
    lines.append(f"example: /call {info.name} {json.dumps(_example(props, required))}")
    return "\n".join(lines)


def describe_type(schema: dict[str, Any]) -> str:
    """One schema in a few words: "integer 0..255", "one of scan, read_byte", "array of …"."""
    if "anyOf" in schema or "oneOf" in schema:
        options = schema.get("anyOf") or schema.get("oneOf") or []
        return " or ".join(describe_type(o) for o in options if isinstance(o, dict)) or "any value"
    if "const" in schema:
        return json.dumps(schema["const"])
    if "enum" in schema:
        values = [json.dumps(v) if not isinstance(v, str) else v for v in schema["enum"]]
        shown = ", ".join(values[:MAX_ENUM_SHOWN]) + (", …" if len(values) > MAX_ENUM_SHOWN else "")
        return f"one of {shown}"
    kind = schema.get("type", "any value")
    if isinstance(kind, list):
        return " or ".join(str(k) for k in kind)
    if kind in ("integer", "number"):
        return kind + _range(schema.get("minimum"), schema.get("maximum"))
    if kind == "string":
        parts = []
        if "minLength" in schema or "maxLength" in schema:
            parts.append(_length(schema.get("minLength"), schema.get("maxLength"), "characters"))
        if "pattern" in schema:
            parts.append(f"matching {schema['pattern']}")
        return "string" + (f" ({'; '.join(parts)})" if parts else "")
    if kind == "array":
        items = schema.get("items")
        text = "array" + (f" of {describe_type(items)}" if isinstance(items, dict) else "")
        if "minItems" in schema or "maxItems" in schema:
            text += f" ({_length(schema.get('minItems'), schema.get('maxItems'), 'items')})"
        return text
    return str(kind)


def _range(lo: Any, hi: Any) -> str:
    if lo is not None and hi is not None:
        return f" {_num(lo)}..{_num(hi)}"
    if lo is not None:
        return f" ≥ {_num(lo)}"
    if hi is not None:
        return f" ≤ {_num(hi)}"
    return ""


def _num(value: Any) -> str:
    # Big bounds (addresses) read better in hex, the way hardware people write them.
    if isinstance(value, int) and not isinstance(value, bool) and value > 0xFFFF:
        return f"0x{value:x}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def _length(lo: Any, hi: Any, unit: str) -> str:
    if lo is not None and hi is not None:
        return f"{lo} to {hi} {unit}"
    return f"at least {lo} {unit}" if lo is not None else f"at most {hi} {unit}"


def _example(props: dict[str, Any], required: set[str]) -> dict[str, Any]:
    """The required arguments with a plausible value each (the first enum value, the minimum)."""
    out: dict[str, Any] = {}
    for name in props:
        if name in required:
            out[name] = _sample(props[name] if isinstance(props[name], dict) else {})
    return out


def _sample(schema: dict[str, Any]) -> Any:
    options = schema.get("anyOf") or schema.get("oneOf")
    if options and isinstance(options[0], dict):
        return _sample(options[0])
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind in ("integer", "number"):
        return schema.get("minimum", 0)
    if kind == "boolean":
        return False
    if kind == "array":
        return []
    if kind == "object":
        return {}
    return "..."
