"""Turn parsed TOML into typed dataclasses, collecting every error with its key path.

A small purpose-built converter instead of a validation framework: it keeps
`edgeclaw` start-up cheap, and its messages can name the file, the dotted key
and what was expected, which is what a person editing a config on a board
needs.
"""

from __future__ import annotations

import dataclasses
import sys
import types
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin, get_type_hints

from edgeclaw.errors import ConfigError

T = TypeVar("T")

_TYPE_WORDS = {
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
    Path: "a path string",
}


# What a parsed TOML value is, in words; bool before int because a bool is an int.
_VALUE_WORDS: tuple[tuple[type, str], ...] = (
    (bool, "a boolean"),
    (int, "an integer"),
    (float, "a number"),
    (str, "a string"),
    (list, "an array"),
    (dict, "a table"),
)


def _describe(value: Any) -> str:
    return next((word for tp, word in _VALUE_WORDS if isinstance(value, tp)), type(value).__name__)


def _expected(tp: Any) -> str:
    origin = get_origin(tp)
    if tp in _TYPE_WORDS:
        return _TYPE_WORDS[tp]
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in get_args(tp))
    if origin in (list, tuple):
        return f"an array of {_expected(get_args(tp)[0]).removeprefix('a ').removeprefix('an ')}s"
    if origin is dict:
        return "a table"
    if dataclasses.is_dataclass(tp):
        return "a table"
    if origin in (Union, types.UnionType):
        return " or ".join(_expected(a) for a in get_args(tp) if a is not type(None))
    return str(tp)


_HINTS: dict[type, dict[str, Any]] = {}


def field_types(cls: type) -> dict[str, Any]:
    """Each field's type, evaluated from its annotation (`typing.get_type_hints` for the fields).

    The records' annotations are text (`from __future__ import annotations`); get_type_hints
    compiles and evaluates each one apart, about a third of loading a config. Here a class's are
    evaluated together, as one tuple in its module's namespace, once per process."""
    hints = _HINTS.get(cls)
    if hints is None:
        fields = dataclasses.fields(cls)
        texts = [f.type for f in fields]
        module = sys.modules.get(cls.__module__)
        if module is not None and all(isinstance(t, str) for t in texts):
            # The annotations of edgeclaw's own records, as written in their module; names looked up
            # as get_type_hints looks them up for a class (its module first, then the class).
            source = "(" + "".join(f"{t},\n" for t in texts) + ")"
            values = eval(source, dict(vars(cls)), vars(module))
            hints = dict(zip([f.name for f in fields], values, strict=True))
        else:
            everything = get_type_hints(cls)
            hints = {f.name: everything[f.name] for f in fields}
        _HINTS[cls] = hints
    return hints


class _Converter:
    def __init__(self, source: str) -> None:
        self.source = source
        self.errors: list[ConfigError] = []

    def fail(self, key: str, problem: str) -> None:
        self.errors.append(ConfigError(self.source, key, problem))

    def convert(self, value: Any, tp: Any, key: str) -> Any:
        origin = get_origin(tp)
        if origin in (Union, types.UnionType):
            options = [a for a in get_args(tp) if a is not type(None)]
            for option in options:
                if self._matches(value, option):
                    return self.convert(value, option, key)
            self.fail(key, f"expected {_expected(tp)}, got {_describe(value)}")
            return None
        if origin is Literal:
            allowed = get_args(tp)
            if value not in allowed or isinstance(value, bool) != any(isinstance(a, bool) for a in allowed):
                self.fail(key, f"expected one of {', '.join(repr(a) for a in allowed)}, got {value!r}")
            return value
        if origin in (list, tuple):
            if not isinstance(value, list):
                self.fail(key, f"expected {_expected(tp)}, got {_describe(value)}")
                return []
            (item_type, *_) = get_args(tp)
            converted = [self.convert(v, item_type, f"{key}[{i}]") for i, v in enumerate(value)]
            items = [v for v in converted if v is not None]  # the failed ones are errors already
            return tuple(items) if origin is tuple else items
        if origin is dict:
            if not isinstance(value, dict):
                self.fail(key, f"expected a table, got {_describe(value)}")
                return {}
            _, value_type = get_args(tp)
            table = {k: self.convert(v, value_type, f"{key}.{k}") for k, v in value.items()}
            return {k: v for k, v in table.items() if v is not None}
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                self.fail(key, f"expected a table, got {_describe(value)}")
                return None
            return self.build(tp, value, key)
        if not self._matches(value, tp):
            self.fail(key, f"expected {_expected(tp)}, got {_describe(value)}")
            return None
        if tp is float:
            return float(value)
        if tp is Path:
            return Path(value)
        return value

    @staticmethod
    def _matches(value: Any, tp: Any) -> bool:
        # TOML booleans are Python ints; a port number of `true` is a mistake, not 1.
        if tp is bool:
            return isinstance(value, bool)
        if tp is int:
            return isinstance(value, int) and not isinstance(value, bool)
        if tp is float:
            return isinstance(value, int | float) and not isinstance(value, bool)
        if tp in (str, Path):
            return isinstance(value, str)
        origin = get_origin(tp)
        if origin in (list, tuple):
            return isinstance(value, list)
        if origin is dict or dataclasses.is_dataclass(tp):
            return isinstance(value, dict)
        if origin is Literal:
            return value in get_args(tp)
        return True

    def build(self, cls: type[T], data: dict[str, Any], prefix: str) -> T:
        hints = field_types(cls)
        fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
        kwargs: dict[str, Any] = {}
        for raw_key, value in data.items():
            key = f"{prefix}.{raw_key}" if prefix else raw_key
            name = raw_key.replace("-", "_")
            if name not in fields or name.startswith("_"):
                known = ", ".join(sorted(k for k in fields if not k.startswith("_")))
                self.fail(key, f"unknown key (expected one of: {known})")
                continue
            converted = self.convert(value, hints[name], key)
            if converted is not None:
                kwargs[name] = converted
        required = [
            n
            for n, f in fields.items()
            if n not in kwargs
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        for name in required:
            key = f"{prefix}.{name}" if prefix else name
            if not any(e.key == key or e.key.startswith(key + ".") for e in self.errors):
                self.fail(key, f"required key is missing (expected {_expected(hints[name])})")
            # A stand-in, so the checks across keys still run over the rest of the file and report
            # everything in one pass; the object is never used, because an error was recorded.
            kwargs[name] = _placeholder(hints[name])
        return cls(**kwargs)


def build_dataclass(cls: type[T], data: dict[str, Any], source: str) -> tuple[T | None, list[ConfigError]]:
    """Build `cls` from a TOML table. Returns the object (None when unusable) and all errors found."""
    obj, errors = build_lenient(cls, data, source)
    return (obj if not errors else None), errors


def build_lenient(cls: type[T], data: dict[str, Any], source: str) -> tuple[T, list[ConfigError]]:
    """Build `cls` from a TOML table even when parts are wrong, and list every error.

    Wrong or unknown keys are left at their defaults (required ones get a stand-in), so the
    checks that look across keys can run over the rest and everything is reported in one
    pass. The object is only for those checks when there are errors.
    """
    converter = _Converter(source)
    obj = converter.build(cls, data, "")
    return obj, converter.errors


def _placeholder(tp: Any) -> Any:
    """A value of type `tp` standing in for a missing required key."""
    origin = get_origin(tp)
    if origin is Literal:
        return get_args(tp)[0]
    if origin in (Union, types.UnionType):
        return _placeholder(next(a for a in get_args(tp) if a is not type(None)))
    if origin in (list, tuple):
        return [] if origin is list else ()
    if origin is dict:
        return {}
    if tp is Path:
        return Path()
    if dataclasses.is_dataclass(tp):
        return _Converter("").build(tp, {}, "")
    return tp() if tp in (str, int, float, bool) else None


__all__ = ["build_dataclass", "build_lenient"]
