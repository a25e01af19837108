"""What a failed schema check says: `SchemaError` (a tool's schema is wrong), `ArgumentError` (a
call's arguments are), the internal signal the validator's closures raise and the path it carries, and
the JSON view of Python values the checks and their messages share (types, equality, how a value is
shown).
"""

from __future__ import annotations

import math
import re
from typing import Any

from edgeclaw.errors import EdgeclawError

Seg = str | int  # one step of a path: a property name or an array index


# -- errors -----------------------------------------------------------------


class SchemaError(EdgeclawError):
    """A schema is itself invalid or uses a keyword outside the supported subset.

    Raised by `compile_schema`, i.e. when a tool is registered, so the tool's
    author finds out at start-up rather than on the first call.
    """

    def __init__(self, location: str, problem: str) -> None:
        self.location = location  # e.g. "properties.pins.items"; "" for the root
        self.problem = problem
        super().__init__(f"schema at {location}: {problem}" if location else f"schema: {problem}")


class ArgumentError(EdgeclawError, ValueError):
    """Arguments do not match the tool's schema.

    ``path`` names the offending field (``"pins[2]"``, ``"spi.mode"``; ``""``
    for the arguments as a whole) and ``message`` says what is wrong without
    the path. ``kind`` is ``"invalid"``, ``"missing"`` (a required field is
    absent) or ``"unknown"`` (a field the schema does not declare).
    """

    def __init__(self, path: str, message: str, kind: str = "invalid", text: str | None = None) -> None:
        self.path = path
        self.message = message
        self.kind = kind
        if text is None:
            text = f"argument {path!r}: {message}" if path else message
        super().__init__(text)

    def __reduce__(self) -> tuple[Any, ...]:
        # The default reduce would call __init__(text) and fail; keep pickling working.
        return (type(self), (self.path, self.message, self.kind, str(self)))


class Invalid(Exception):  # an internal signal; never escapes compile_schema's validator
    """Raised inside the closure tree; turned into an `ArgumentError` at the root.

    Path segments are appended as the exception unwinds (innermost first), so
    the happy path never builds a path string.
    """

    def __init__(
        self,
        message: str,
        kind: str = "invalid",
        seg: Seg | None = None,
        alternatives: list[Invalid] | None = None,
    ) -> None:
        self.message = message
        self.kind = kind
        self.segs: list[Seg] = [] if seg is None else [seg]
        self.alternatives = alternatives


IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*\Z")


def render_path(segs: list[Seg]) -> str:
    out: list[str] = []
    for seg in segs:
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif isinstance(seg, str) and IDENT.match(seg):
            out.append(f".{seg}" if out else seg)
        else:  # odd keys (spaces, dots, non-strings) are bracketed so the path stays unambiguous
            out.append(f"[{show(seg)}]")
    return "".join(out)


def to_error(e: Invalid, prefix: list[Seg]) -> ArgumentError:
    segs = prefix + e.segs[::-1]
    path = render_path(segs)
    message = e.message
    if e.alternatives is not None:
        parts = []
        for i, alt in enumerate(e.alternatives, 1):
            sub = to_error(alt, segs)
            # An alternative failing at this same node reads best without repeating the path.
            same = sub.path == path and sub.kind == "invalid"
            parts.append(f"({i}) {sub.message if same else sub}")
        message = f"{message}: {'; '.join(parts)}"
    if e.kind == "missing":
        return ArgumentError(
            path, "missing required argument", "missing", f"missing required argument {path!r}"
        )
    if e.kind == "unknown":
        return ArgumentError(
            path, f"unknown argument ({message})", "unknown", f"unknown argument {path!r} ({message})"
        )
    text = f"argument {path!r}: {message}" if path else f"arguments: {message}"
    return ArgumentError(path, message, "invalid", text)


# -- JSON view of Python values ---------------------------------------------

TYPES = ("string", "integer", "number", "boolean", "object", "array", "null")
EXACT_TYPE: dict[type, str] = {
    str: "string",
    bool: "boolean",  # before int: `isinstance(True, int)` holds
    int: "integer",
    float: "number",
    dict: "object",
    list: "array",
    type(None): "null",
}
INF = math.inf


def json_type(x: Any) -> str:
    """The JSON type name of a value; bool is "boolean", never "integer"."""
    t = EXACT_TYPE.get(type(x))
    if t is not None:
        return t
    # Subclasses (IntEnum, StrEnum, OrderedDict...), in EXACT_TYPE's order: bool before int, since it is one.
    for base, name in EXACT_TYPE.items():
        if isinstance(x, base):
            return name
    # Not a JSON value at all (tuple, bytes, set...): say so plainly.
    return f"Python {type(x).__name__}"


def show(v: Any, limit: int = 60) -> str:
    """A short, JSON-flavoured rendering of a value for an error message (bounded length)."""
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, str):
        return repr(v) if len(v) <= limit else f"{v[:limit]!r}..."
    if isinstance(v, float):
        return repr(v)
    if isinstance(v, int):
        try:
            s = str(v)
        except ValueError:  # beyond sys.int_max_str_digits
            return "a very large integer"
        return s if len(s) <= limit else f"{s[:limit]}... ({len(s)} digits)"
    import reprlib  # error path only; keeps import time off the happy path

    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    return r.repr(v)


def join_or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


def plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def type_error(expected: str, int_only: bool, x: Any) -> Invalid:
    got = json_type(x)
    if int_only and got == "number" and math.isfinite(x) and x.is_integer():
        # The one type error that surprises people: say exactly what arrived.
        got = f"number {x!r}"
    return Invalid(f"expected {expected}, got {got}")


def json_equal(a: Any, b: Any) -> bool:
    """Equality with JSON semantics: 1 == 1.0, but true != 1, also inside containers."""
    ta, tb = json_type(a), json_type(b)
    if ta in ("integer", "number") and tb in ("integer", "number"):
        return bool(a == b)
    if ta != tb:
        return False
    if ta == "array":
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta == "object":
        return a.keys() == b.keys() and all(json_equal(a[k], b[k]) for k in a)
    return bool(a == b)


def is_json_value(v: Any) -> bool:
    t = json_type(v)
    if t == "number":
        return math.isfinite(v)
    if t == "array":
        return all(is_json_value(x) for x in v)
    if t == "object":
        return all(isinstance(k, str) and is_json_value(x) for k, x in v.items())
    return t in TYPES


def copy_json(v: Any) -> Any:
    # enum/const members are captured by the validator; copy so later edits to the schema cannot change it.
    if isinstance(v, list):
        return [copy_json(x) for x in v]
    if isinstance(v, dict):
        return {k: copy_json(x) for k, x in v.items()}
    return v
