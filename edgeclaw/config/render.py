"""A configuration written back out as TOML: `config show` (the effective one) and `config init`.

`show` writes every key with the value in force, so what the daemon would do
is visible in one place; inline values that may be secret are redacted
(secrets themselves are never inline: only the names of their variables and
files appear). `init` writes every key commented out at its default, each
with the comment the schema gives it, so the sample can never drift from the
schema.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import math
import re
import types
import typing
from functools import cache
from pathlib import Path
from typing import Any

from edgeclaw.config.schema import Config

REDACTED = "[REDACTED]"
# Inline values that may hold something secret: a PIN hash can be attacked offline, and custom
# tools' environment values are often tokens.
_SECRET_KEYS = frozenset({"login_hash"})
_SECRET_TABLES = frozenset({"env"})
# Example names for tables keyed by a name of the user's choosing, in the sample.
_EXAMPLE_NAMES = {
    "providers": "local",
    "channels": "mqtt",
    "agents": "main",
    "servers": "time",
    "secrets": "weather",
    "callers": "backend-1",
}

# Example values for required keys, so the sample loads once uncommented.
_EXAMPLE_VALUES = {
    ("ProviderConfig", "model"): "qwen2.5-1.5b-instruct",
    ("CustomToolConfig", "name"): "uptime_pretty",
    ("CustomToolConfig", "command"): "uptime -p",
    ("CustomToolConfig", "description"): "how long the board has been up, in words",
    ("AgentRoute", "agent"): "main",
    ("AgentRoute", "channel"): "console",
    ("NamedAgentConfig", "max_iterations"): 20,
    ("PushoverConfig", "token_env"): "PUSHOVER_TOKEN",
    ("PushoverConfig", "user_env"): "PUSHOVER_USER",
    ("NtfyConfig", "topics"): ["edgeclaw-alerts"],
    ("AgentWebConfig", "ports"): [80, 443],
    ("WebSecretConfig", "env"): "WEATHER_API_KEY",
    ("McpServerConfig", "command"): "mcp-server-time",
    ("CallerConfig", "secret_env"): "EDGECLAW_KEY_BACKEND_1",
    ("CallerConfig", "roles"): ["operate"],
}

_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.match(key) else json.dumps(key, ensure_ascii=False)


def toml_value(value: Any) -> str:
    """One TOML value. JSON's string escapes are TOML's too, so strings are written with them."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str | Path):
        return json.dumps(str(value), ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items()) + "}"
    if dataclasses.is_dataclass(value):
        return toml_value(_plain(value))
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _plain(obj: Any) -> dict[str, Any]:
    return {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj) if not f.name.startswith("_")}


def _is_table(tp: Any) -> bool:
    return dataclasses.is_dataclass(tp) or any(dataclasses.is_dataclass(a) for a in typing.get_args(tp))


def _table_type(tp: Any) -> Any:
    return (
        tp
        if dataclasses.is_dataclass(tp)
        else next(a for a in typing.get_args(tp) if dataclasses.is_dataclass(a))
    )


def _named_tables(tp: Any) -> Any | None:
    """The value type of a `dict[str, SomeTable]` field, else None."""
    if typing.get_origin(tp) is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):
        return typing.get_args(tp)[1]
    return None


def _table_list(tp: Any) -> Any | None:
    """The element type of a `list[SomeTable]` field (an array of tables), else None."""
    if typing.get_origin(tp) is list and dataclasses.is_dataclass(typing.get_args(tp)[0]):
        return typing.get_args(tp)[0]
    return None


# -- config show -------------------------------------------------------------
def render_effective(config: Config, header: list[str] | None = None) -> str:
    """Every key with its value in force, as TOML that loads back to the same config."""
    out = [f"# {line}" for line in header or []]
    _write_table(config, "", out)
    return "\n".join(out).strip() + "\n"


def _redacted(key: str, value: Any) -> Any:
    if key in _SECRET_KEYS and value:
        return REDACTED
    if key in _SECRET_TABLES and isinstance(value, dict):
        return {k: REDACTED for k in value}
    return value


def _write_table(obj: Any, name: str, out: list[str]) -> None:
    hints = typing.get_type_hints(type(obj))
    later: list[tuple[str, Any, Any]] = []
    for f in dataclasses.fields(obj):
        if f.name.startswith("_"):
            continue
        value, tp = getattr(obj, f.name), hints[f.name]
        if _is_table(tp) or _named_tables(tp) or _table_list(tp):
            later.append((f.name, value, tp))  # sub-tables come after this table's own keys
            continue
        if value is None:
            continue  # unset (inherits): TOML has no null, and leaving it out means the same
        out.append(f"{toml_key(f.name)} = {toml_value(_redacted(f.name, value))}")
    for key, value, tp in later:
        path = f"{name}.{toml_key(key)}" if name else toml_key(key)
        if value is None:
            continue
        if _named_tables(tp):
            for child, table in value.items():
                out += ["", f"[{path}.{toml_key(child)}]"]
                _write_table(table, f"{path}.{toml_key(child)}", out)
        elif _table_list(tp):
            for table in value:
                out += ["", f"[[{path}]]"]
                _write_table(table, path, out)
        else:
            out += ["", f"[{path}]"]
            _write_table(value, path, out)


# -- config init -------------------------------------------------------------
def render_sample() -> str:
    """Every key commented out at its default, with the schema's comment beside it."""
    out = [
        "# edgeclaw configuration. Every key is shown commented out at its default: uncomment",
        "# what you change. The reference: docs/configuration.md; check a file with",
        "# `edgeclaw config check FILE`.",
        "",
    ]
    _sample_table(Config, "", out)
    return "\n".join(out).rstrip() + "\n"


@cache
def _field_comments(cls: type) -> dict[str, str]:
    """The comment the schema's source gives each field (trailing, or on the lines above)."""
    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments: dict[str, str] = {}
    above: list[str] = []
    for line in source.splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# ").rstrip())
            continue
        match = re.match(r"^\s+(\w+)\s*:", line)
        if match:
            trailing = line.split("  # ", 1)[1].strip() if "  # " in line else ""
            text = " ".join([*above, trailing]).strip()
            if text and not text.startswith(("fmt:", "noqa", "type:")):
                comments[match.group(1)] = text
        above = []
    return comments


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


def _placeholder(tp: Any) -> Any:
    """A value to show for a required key: the first choice of a Literal, else an empty one."""
    origin = typing.get_origin(tp)
    if origin is typing.Literal:
        return typing.get_args(tp)[0]
    if origin in (typing.Union, types.UnionType):
        return _placeholder(next(a for a in typing.get_args(tp) if a is not type(None)))
    if origin is list:
        return []
    if origin is dict:
        return {}
    return {str: "", int: 0, float: 0.0, bool: False}.get(tp, "")


def _sample_table(cls: type, name: str, out: list[str]) -> None:
    hints = typing.get_type_hints(cls)
    comments = _field_comments(cls)
    later: list[tuple[str, Any]] = []
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        tp = hints[f.name]
        if _is_table(tp) or _named_tables(tp) or _table_list(tp):
            later.append((f.name, tp))
            continue
        value = _default(f)
        required = value is dataclasses.MISSING
        unset = value is None
        example = _EXAMPLE_VALUES.get((cls.__name__, f.name))
        if example is not None:
            value = example
        elif required or unset:
            value = _placeholder(tp)
        shown = toml_value(value)
        note = comments.get(f.name, "")
        if required:
            note = f"required{'; ' + note if note else ''}"
        elif unset:
            note = f"unset by default (inherits){'; ' + note if note else ''}"
        line = f"# {toml_key(f.name)} = {shown}"
        out.append(f"{line:<48}  # {note}" if note else line)
    for key, tp in later:
        path = f"{name}.{toml_key(key)}" if name else toml_key(key)
        note = comments.get(key, "")
        if (child := _named_tables(tp)) is not None:
            example = _EXAMPLE_NAMES.get(key, "NAME")
            out += ["", f"# [{path}.{example}]" + (f"  # {note}" if note else "")]
            _sample_table(child, f"{path}.{example}", out)
        elif (child := _table_list(tp)) is not None:
            out += ["", f"# [[{path}]]" + (f"  # {note}" if note else "")]
            _sample_table(child, path, out)
        else:
            out += ["", f"# [{path}]" + (f"  # {note}" if note else "")]
            _sample_table(_table_type(tp), path, out)
