"""A small, fast validator for the JSON-schema subset tools use to declare their parameters.

Tool arguments come from LLMs, MQTT payloads and the CLI, so every call is
checked against the tool's schema before anything runs, and a bad call gets an
error that names the field (``argument 'pins[2]': expected integer, got
string``) so a model can correct itself.

We do not use the ``jsonschema`` package: its import time and per-call cost
are too high for a small board, where the whole dispatch budget is ~30 µs.
Instead `compile_schema` turns a schema into a tree of closures once, at tool
registration. Calling the result does no schema interpretation: each node is
one Python function whose constraints are already bound as local cells, so a
typical 2-4 field object validates in a few µs.

The subset
----------
``type`` (string, integer, number, boolean, object, array, null, or a list of
these), ``properties``, ``required``, ``additionalProperties`` (true/false
only), ``enum``, ``const``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
``exclusiveMaximum`` (numbers, draft-06+ form), ``minLength``, ``maxLength``,
``pattern``, ``items`` (one schema), ``minItems``, ``maxItems``, ``anyOf`` and
``oneOf``. The annotations ``description``, ``title``, ``default``,
``examples`` and ``$comment`` are ignored. Anything else (``format``,
``$ref``, ``uniqueItems``, a typo like ``maxLenght``...) is a `SchemaError`
at compile time: we fail closed rather than silently skip a check the tool
author believed was enforced.

Deliberate departures from JSON Schema
--------------------------------------
* **Objects are closed by default.** A schema with ``type: object`` or with
  ``properties`` and *no* ``additionalProperties`` behaves as if it said
  ``additionalProperties: false``. Tools must not receive arguments they never
  declared (models hallucinate them); write ``additionalProperties: true`` to
  accept free-form keys.
* **Integers are strict.** ``3.0`` is not an ``integer`` (JSON Schema says it
  is): a float reaching a tool that does ``range(n)`` or register arithmetic
  is a bug waiting to happen, and every sender we have can write ``3``.
* **bool is not a number.** Python's ``True`` is an ``int``; JSON's ``true``
  is not, so booleans never pass ``integer``/``number`` and ``enum: [1]``
  does not accept ``true``.
* **No NaN or infinity.** ``json.loads`` accepts ``NaN``/``Infinity``; a
  ``number`` rejects them (they also slip past every bound comparison).
* **Patterns** use `re.search` (unanchored, as JSON Schema specifies), compiled
  with `re.ASCII` so ``\\d`` and ``\\w`` mean what they mean in ECMA-262, and
  an unescaped ``$`` outside a character class is rewritten to ``\\Z``: in
  Python ``$`` also matches before a trailing newline, which would let
  ``"name\\n"`` through ``^[a-z]+$``.
* Schemas must be objects; boolean schemas (``true``/``false``) are refused.

Arrays are ``list`` (not tuple) and objects are ``dict`` (subclasses allowed),
as produced by `json.loads`.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from edgeclaw.tools.schema_errors import (
    INF,
    TYPES,
    ArgumentError,
    Invalid,
    SchemaError,
    Seg,
    copy_json,
    is_json_value,
    join_or,
    json_equal,
    json_type,
    plural,
    render_path,
    show,
    to_error,
    type_error,
)

__all__ = ["KEYWORD_TYPES", "SUBSET_KEYWORDS", "ArgumentError", "SchemaError", "Validator", "compile_schema"]

Validator = Callable[[Any], None]
_Check = Callable[[Any], None]


# -- the keyword table -------------------------------------------------------

_NUMERIC = frozenset({"integer", "number"})
_STRING = frozenset({"string"})
_ARRAY = frozenset({"array"})
_OBJECT = frozenset({"object"})

# keyword -> the instance types it constrains (None: any type).
_KEYWORDS: dict[str, frozenset[str] | None] = {
    "type": None,
    "enum": None,
    "const": None,
    "anyOf": None,
    "oneOf": None,
    "minimum": _NUMERIC,
    "maximum": _NUMERIC,
    "exclusiveMinimum": _NUMERIC,
    "exclusiveMaximum": _NUMERIC,
    "minLength": _STRING,
    "maxLength": _STRING,
    "pattern": _STRING,
    "items": _ARRAY,
    "minItems": _ARRAY,
    "maxItems": _ARRAY,
    "properties": _OBJECT,
    "required": _OBJECT,
    "additionalProperties": _OBJECT,
}
_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$comment"})
# Every keyword a schema may carry here, and the instance types each constrains (None: any): what
# other schemas (MCP servers') are brought to before they are compiled.
SUBSET_KEYWORDS = frozenset(_KEYWORDS) | _ANNOTATIONS
KEYWORD_TYPES: Mapping[str, frozenset[str] | None] = MappingProxyType(_KEYWORDS)
# Real JSON-schema keywords we refuse on purpose, so the error can say "not supported" rather than "unknown".
_UNSUPPORTED = frozenset(
    {
        "$ref", "$defs", "definitions", "$id", "$schema", "$anchor", "$dynamicRef", "allOf", "not",
        "if", "then", "else", "format", "multipleOf", "uniqueItems", "contains", "minContains",
        "maxContains", "prefixItems", "additionalItems", "unevaluatedItems", "unevaluatedProperties",
        "patternProperties", "propertyNames", "minProperties", "maxProperties", "dependentRequired",
        "dependentSchemas", "dependencies", "contentEncoding", "contentMediaType", "readOnly",
        "writeOnly", "deprecated", "nullable",
    }
)  # fmt: skip


def _fail(where: list[Seg], problem: str) -> SchemaError:
    return SchemaError(render_path(where), problem)


def _check_keywords(schema: Mapping[str, Any], where: list[Seg], types: tuple[str, ...] | None) -> None:
    for kw in schema:
        if kw in _ANNOTATIONS:
            continue
        if kw not in _KEYWORDS:
            if kw in _UNSUPPORTED:
                raise _fail(where, f"keyword {kw!r} is not supported by edgeclaw's schema subset")
            import difflib  # error path only

            close = difflib.get_close_matches(str(kw), [*_KEYWORDS, *_ANNOTATIONS], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise _fail(where, f"unknown keyword {kw!r}{hint}")
        applies = _KEYWORDS[kw]
        if applies is not None and types is not None and applies.isdisjoint(types):
            # e.g. maxLength on an integer: never checked, so certainly a mistake.
            raise _fail(
                where,
                f"keyword {kw!r} applies to {join_or(sorted(applies))} values, "
                f"but the type is {join_or(list(types))}",
            )


def _parse_types(schema: Mapping[str, Any], where: list[Seg]) -> tuple[str, ...] | None:
    raw = schema.get("type")
    if raw is None:
        if "type" in schema:
            raise _fail(where, "'type' must be a type name or a list of them, not null")
        return None
    names = [raw] if isinstance(raw, str) else raw
    if not isinstance(names, list) or not names:
        raise _fail(where, "'type' must be a type name or a non-empty list of them")
    for name in names:
        if name not in TYPES:
            raise _fail(where, f"unknown type {name!r} (expected one of: {', '.join(TYPES)})")
    if len(set(names)) != len(names):
        raise _fail(where, f"'type' lists a type twice: {names!r}")
    return tuple(names)


def _count(schema: Mapping[str, Any], kw: str, where: list[Seg]) -> int | None:
    v = schema.get(kw)
    if v is None:
        return None
    if type(v) is not int or v < 0:  # not isinstance: True is not a count
        raise _fail(where, f"{kw!r} must be a non-negative integer, got {show(v)}")
    return v


def _count_range(schema: Mapping[str, Any], low_kw: str, high_kw: str, where: list[Seg]) -> tuple[int, int]:
    """A (minLength, maxLength)-style pair of counts, with 0 and sys.maxsize for the missing ones."""
    lo = _count(schema, low_kw, where) or 0
    hi = _count(schema, high_kw, where)
    if hi is not None and lo > hi:
        raise _fail(where, f"{low_kw} {lo} is greater than {high_kw} {hi}")
    return lo, sys.maxsize if hi is None else hi


def _bound(schema: Mapping[str, Any], kw: str, where: list[Seg]) -> int | float | None:
    v = schema.get(kw)
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        extra = (
            " (the draft-04 boolean form is not supported; give the bound itself)"
            if isinstance(v, bool)
            else ""
        )
        raise _fail(where, f"{kw!r} must be a finite number, got {show(v)}{extra}")
    return v


# -- per-type node builders --------------------------------------------------
# Each returns one closure that checks the type and that type's keywords. The
# constraint values are plain locals, with neutral defaults (0, maxsize, ±inf)
# instead of None where that lets the hot path skip an `is None` test.


def _string_node(schema: Mapping[str, Any], where: list[Seg], expected: str) -> _Check:
    lo, top = _count_range(schema, "minLength", "maxLength", where)
    pattern = schema.get("pattern")
    search = None
    if pattern is not None:
        if not isinstance(pattern, str):
            raise _fail(where, f"'pattern' must be a string, got {show(pattern)}")
        try:
            search = re.compile(_ecma_dollar(pattern), re.ASCII).search
        except re.error as e:
            raise _fail(where, f"'pattern' {pattern!r} is not a valid regular expression: {e}") from None

    if lo == 0 and top == sys.maxsize and search is None:

        def check_str(x: Any) -> None:
            if not isinstance(x, str):
                raise type_error(expected, False, x)

        return check_str

    def check_str_constrained(x: Any) -> None:
        if not isinstance(x, str):
            raise type_error(expected, False, x)
        n = len(x)  # code points, as JSON Schema counts
        if n < lo:
            raise Invalid(
                "must not be empty"
                if lo == 1
                else f"must be at least {plural(lo, 'character')} long; got {n}"
            )
        if n > top:
            raise Invalid(f"must be at most {plural(top, 'character')} long; got {n}")
        if search is not None and search(x) is None:
            raise Invalid(f"must match pattern {pattern!r}; got {show(x)}")

    return check_str_constrained


def _ecma_dollar(pattern: str) -> str:
    """Rewrite unescaped `$` outside character classes to `\\Z`.

    ECMA-262's `$` (without the m flag) matches only at the very end; Python's also before a final newline.
    """
    if "$" not in pattern:
        return pattern
    out: list[str] = []
    i, n, in_class = 0, len(pattern), False
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # In Python a `]` right after `[` or `[^` is a literal, not the end of the class.
            out.append(c)
            i += 1
            if i < n and pattern[i] == "^":
                out.append("^")
                i += 1
            if i < n and pattern[i] == "]":
                out.append("]")
                i += 1
            continue
        elif c == "$":
            c = r"\Z"
        out.append(c)
        i += 1
    return "".join(out)


def _numeric_node(schema: Mapping[str, Any], where: list[Seg], expected: str, integer: bool) -> _Check:
    lo = _bound(schema, "minimum", where)
    hi = _bound(schema, "maximum", where)
    xlo = _bound(schema, "exclusiveMinimum", where)
    xhi = _bound(schema, "exclusiveMaximum", where)
    floor = max((b for b in (lo, xlo) if b is not None), default=None)
    ceil = min((b for b in (hi, xhi) if b is not None), default=None)
    if floor is not None and ceil is not None:
        strict = (floor == xlo and xlo is not None) or (ceil == xhi and xhi is not None)
        if floor > ceil or (floor == ceil and strict):
            raise _fail(where, "the numeric bounds exclude every value")
    bounded = floor is not None or ceil is not None
    lo_ = -INF if lo is None else lo
    hi_ = INF if hi is None else hi
    xlo_ = -INF if xlo is None else xlo
    xhi_ = INF if xhi is None else xhi

    def out_of_bounds(x: int | float) -> None:
        # Only reached when some bound fails; kept out of the closures to keep them short.
        if x < lo_:
            raise Invalid(f"must be >= {show(lo)}; got {show(x)}")
        if x <= xlo_:
            raise Invalid(f"must be > {show(xlo)}; got {show(x)}")
        if x > hi_:
            raise Invalid(f"must be <= {show(hi)}; got {show(x)}")
        raise Invalid(f"must be < {show(xhi)}; got {show(x)}")

    if integer:
        # `type(x) is int` is the fast path; the isinstance pair admits IntEnum but not bool.
        if not bounded:

            def check_int(x: Any) -> None:
                if type(x) is not int and (isinstance(x, bool) or not isinstance(x, int)):
                    raise type_error(expected, True, x)

            return check_int

        def check_int_bounded(x: Any) -> None:
            if type(x) is not int and (isinstance(x, bool) or not isinstance(x, int)):
                raise type_error(expected, True, x)
            if x < lo_ or x <= xlo_ or x > hi_ or x >= xhi_:
                out_of_bounds(x)

        return check_int_bounded

    def check_number(x: Any) -> None:
        t = type(x)
        if t is float:
            if not -INF < x < INF:  # False for NaN too
                raise Invalid(f"must be a finite number; got {x!r}")
        elif t is not int:
            if isinstance(x, bool) or not isinstance(x, int | float):
                raise type_error(expected, False, x)
            if isinstance(x, float) and not -INF < x < INF:
                raise Invalid(f"must be a finite number; got {x!r}")
        if bounded and (x < lo_ or x <= xlo_ or x > hi_ or x >= xhi_):
            out_of_bounds(x)

    return check_number


def _boolean_node(expected: str) -> _Check:
    def check_bool(x: Any) -> None:
        if x is not True and x is not False:
            raise type_error(expected, False, x)

    return check_bool


def _null_node(expected: str) -> _Check:
    def check_null(x: Any) -> None:
        if x is not None:
            raise type_error(expected, False, x)

    return check_null


def _array_node(schema: Mapping[str, Any], where: list[Seg], expected: str) -> _Check:
    lo, top = _count_range(schema, "minItems", "maxItems", where)
    item: _Check | None = None
    if "items" in schema:
        raw = schema["items"]
        if isinstance(raw, list):
            raise _fail(where, "'items' must be a single schema (the list form is not supported)")
        item = _compile(raw, [*where, "items"], False)
        if item is _accept_any:
            item = None

    def check_array(x: Any) -> None:
        if not isinstance(x, list):
            raise type_error(expected, False, x)
        n = len(x)
        if n < lo:
            raise Invalid(
                "must not be empty" if lo == 1 else f"must have at least {plural(lo, 'item')}; got {n}"
            )
        if n > top:
            raise Invalid(f"must have at most {plural(top, 'item')}; got {n}")
        if item is not None:
            for i, v in enumerate(x):
                try:  # free when nothing is raised (3.11 zero-cost exceptions)
                    item(v)
                except Invalid as e:
                    e.segs.append(i)
                    raise

    return check_array


def _object_node(
    schema: Mapping[str, Any], where: list[Seg], expected: str, root: bool, closed_default: bool
) -> _Check:
    raw_props = schema.get("properties", {})
    if not isinstance(raw_props, Mapping):
        raise _fail(where, f"'properties' must be an object, got {json_type(raw_props)}")
    props: dict[str, _Check] = {}
    for name, sub in raw_props.items():
        if not isinstance(name, str):
            raise _fail(where, f"property names must be strings, got {show(name)}")
        props[name] = _compile(sub, [*where, "properties", name], False)

    raw_req = schema.get("required", [])
    if not isinstance(raw_req, list) or not all(isinstance(r, str) for r in raw_req):
        raise _fail(where, "'required' must be a list of property names")
    if len(set(raw_req)) != len(raw_req):
        raise _fail(where, f"'required' lists a name twice: {raw_req!r}")
    required = tuple(raw_req)

    ap = schema.get("additionalProperties", None)
    if ap is None:
        if "additionalProperties" in schema:
            raise _fail(where, "'additionalProperties' must be true or false")
        closed = closed_default  # see the module docstring: objects are closed unless they say otherwise
    elif ap is True or ap is False:
        closed = not ap
    else:
        raise _fail(where, "'additionalProperties' must be true or false (a schema there is not supported)")

    if closed:
        undeclared = [r for r in required if r not in props]
        if undeclared:
            raise _fail(
                where,
                f"required {join_or([repr(r) for r in undeclared])} not in 'properties', "
                "and undeclared properties are refused (additionalProperties is false by default)",
            )
    if props:
        hint = f"expected one of: {', '.join(sorted(props))}"
    else:
        hint = "this tool takes no arguments" if root else "no fields are allowed here"
    get = props.get

    def check_object(x: Any) -> None:
        if not isinstance(x, dict):
            raise type_error(expected, False, x)
        for key, value in x.items():
            c = get(key)
            if c is None:
                if closed:
                    raise Invalid(hint, "unknown", key)
                continue
            try:
                c(value)
            except Invalid as e:
                e.segs.append(key)
                raise
        for name in required:
            if name not in x:
                raise Invalid("", "missing", name)

    return check_object


# -- enum / const / anyOf / oneOf ------------------------------------------------


def _members(values: list[Any], where: list[Seg], kw: str) -> Callable[[Any], bool]:
    """A membership test with JSON equality, precomputed for the cheap common cases."""
    for v in values:
        if not is_json_value(v):
            raise _fail(where, f"{kw!r} value {show(v)} is not a JSON value")
    if all(type(v) is str for v in values):
        strings = frozenset(values)  # the usual case: a set of modes/names

        def is_member_str(x: Any) -> bool:
            return isinstance(x, str) and x in strings

        return is_member_str

    # Scalars are keyed by (kind, value) so true and 1 differ while 1 and 1.0 agree.
    def key(v: Any) -> tuple[str, Any]:
        t = json_type(v)
        return ("number" if t == "integer" else t, v)

    scalars = frozenset(key(v) for v in values if not isinstance(v, list | dict))
    containers = [copy_json(v) for v in values if isinstance(v, list | dict)]

    def is_member(x: Any) -> bool:
        if isinstance(x, list | dict):
            return any(json_equal(x, c) for c in containers)
        try:
            return key(x) in scalars
        except TypeError:  # an unhashable non-JSON value
            return False

    return is_member


def _enum_check(values: list[Any], where: list[Seg], kw: str) -> _Check:
    is_member = _members(values, where, kw)
    if kw == "const":
        allowed = show(values[0])
        head = f"must be {allowed}"
    else:
        shown = [show(v) for v in values[:32]]
        more = f", ... ({len(values)} values)" if len(values) > 32 else ""
        head = f"must be one of {', '.join(shown)}{more}"

    def check_enum(x: Any) -> None:
        if not is_member(x):
            raise Invalid(f"{head}; got {show(x)}")

    return check_enum


def _branches(schema: Mapping[str, Any], kw: str, where: list[Seg], root: bool) -> list[_Check]:
    raw = schema[kw]
    if not isinstance(raw, list) or not raw:
        raise _fail(where, f"{kw!r} must be a non-empty list of schemas")
    return [_compile(sub, [*where, kw, i], root) for i, sub in enumerate(raw)]


def _any_of(branches: list[_Check]) -> _Check:
    # Cost: free when the first branch matches; one exception per failed branch otherwise.
    def check_any_of(x: Any) -> None:
        errors: list[Invalid] = []
        for b in branches:
            try:
                b(x)
            except Invalid as e:
                errors.append(e)
            else:
                return
        raise Invalid("matches none of the allowed forms", alternatives=errors)

    return check_any_of


def _one_of(branches: list[_Check]) -> _Check:
    # Cost: every branch always runs (exactly-one needs them all); prefer anyOf when branches are disjoint.
    def check_one_of(x: Any) -> None:
        errors: list[Invalid] = []
        matched: list[int] = []
        for i, b in enumerate(branches, 1):
            try:
                b(x)
            except Invalid as e:
                errors.append(e)
            else:
                matched.append(i)
        if len(matched) == 1:
            return
        if not matched:
            raise Invalid("matches none of the allowed forms", alternatives=errors)
        forms = join_or([str(i) for i in matched])
        raise Invalid(f"must match exactly one of the allowed forms; matches forms {forms}")

    return check_one_of


# -- assembling a node ---------------------------------------------------------


def _accept_any(x: Any) -> None:
    """The validator of a schema with no constraints ({} or annotations only)."""


def _chain(checks: list[_Check]) -> _Check:
    if not checks:
        return _accept_any
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks

        def check_two(x: Any) -> None:
            first(x)
            second(x)

        return check_two
    frozen = tuple(checks)

    def check_all(x: Any) -> None:
        for c in frozen:
            c(x)

    return check_all


def _type_node(
    schema: Mapping[str, Any], where: list[Seg], types: tuple[str, ...] | None, root: bool
) -> _Check | None:
    """The check for `type` plus the type-specific keywords; None if the node constrains no type."""
    if types is None:
        # No `type`: each keyword constrains only values of its own type (JSON Schema semantics),
        # so build checkers just for the types some keyword talks about; other values pass.
        wanted = {t for kw in schema if (a := _KEYWORDS.get(kw)) is not None for t in a}
        if "integer" in wanted:
            wanted.discard("integer")  # numeric keywords without a type accept any number
        open_types = True
    else:
        wanted = set(types)
        open_types = False
    expected = join_or(list(types)) if types is not None else "any"
    int_only = types is not None and "integer" in types and "number" not in types

    by_type: dict[str, _Check] = {}
    for t in sorted(wanted):
        if t == "string":
            by_type[t] = _string_node(schema, where, expected)
        elif t == "number":
            by_type["number"] = by_type["integer"] = _numeric_node(schema, where, expected, integer=False)
        elif t == "integer":
            if "number" not in wanted:
                by_type["integer"] = _numeric_node(schema, where, expected, integer=True)
        elif t == "boolean":
            by_type[t] = _boolean_node(expected)
        elif t == "null":
            by_type[t] = _null_node(expected)
        elif t == "array":
            by_type[t] = _array_node(schema, where, expected)
        elif t == "object":
            closed_default = "properties" in schema or (types is not None and "object" in types)
            by_type[t] = _object_node(schema, where, expected, root, closed_default)

    if types is not None and len(types) == 1:
        return by_type[types[0]]  # the common case: the closure checks its own type, no dispatch
    if not by_type:
        return None
    get = by_type.get

    def check_types(x: Any) -> None:
        c = get(json_type(x))
        if c is not None:
            c(x)
        elif not open_types:
            raise type_error(expected, int_only, x)

    return check_types


def _compile(schema: Any, where: list[Seg], root: bool) -> _Check:
    if not isinstance(schema, Mapping):
        raise _fail(where, f"a schema must be an object, got {json_type(schema)}")
    types = _parse_types(schema, where)
    _check_keywords(schema, where, types)

    base = _type_node(schema, where, types, root)
    checks: list[_Check] = [] if base is None else [base]
    for kw in ("enum", "const"):
        if kw not in schema:
            continue
        if kw == "enum":
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise _fail(where, "'enum' must be a non-empty list")
        else:
            values = [schema["const"]]
        if base is not None:
            # A member the rest of the schema refuses can never be sent: an authoring mistake.
            for v in values:
                try:
                    base(v)
                except Invalid as e:
                    raise _fail(
                        where, f"{kw} value {show(v)} can never be accepted: {to_error(e, []).message}"
                    ) from None
        checks.append(_enum_check(values, where, kw))
    if "anyOf" in schema:
        checks.append(_any_of(_branches(schema, "anyOf", where, root)))
    if "oneOf" in schema:
        checks.append(_one_of(_branches(schema, "oneOf", where, root)))
    return _chain(checks)


def compile_schema(schema: Mapping[str, Any]) -> Validator:
    """Compile `schema` into a validator that raises `ArgumentError` on the first problem found.

    Raises `SchemaError` if the schema is malformed or uses a keyword outside
    the supported subset (see the module docstring). The validator keeps no
    reference to `schema`, so later edits to the dict do not change it.
    """
    root = _compile(schema, [], True)

    def validate(args: Any) -> None:
        try:
            root(args)
        except Invalid as e:
            raise to_error(e, []) from None

    return validate
