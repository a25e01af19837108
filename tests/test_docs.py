"""The configuration reference lists every key the schema accepts."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

from edgeclaw.config.schema import Config

DOC = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text()


def _keys(cls: type, prefix: str = "") -> list[str]:
    out = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if f.name.startswith("_"):
            continue
        tp = hints[f.name]
        inner = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        if dataclasses.is_dataclass(tp) or inner:
            out += _keys(tp if dataclasses.is_dataclass(tp) else inner[0], f"{prefix}{f.name}.")
        elif typing.get_origin(tp) is dict and dataclasses.is_dataclass(typing.get_args(tp)[1]):
            out += _keys(typing.get_args(tp)[1], f"{prefix}{f.name}.NAME.")
        else:
            out.append(f"{prefix}{f.name}")
    return out


def test_every_config_key_is_documented():
    def documented(key: str) -> bool:
        parts = key.split(".")
        return any(f"`{'.'.join(parts[-n:])}`" in DOC for n in (1, 2))

    missing = [k for k in _keys(Config) if not documented(k)]
    assert missing == []
