"""Tests for edgeclaw.tools.schema: the compiled JSON-schema subset for tool arguments.

The messages are asserted verbatim where they are part of the contract: they
reach models and people, and a model can only fix a call if the error names
the field and says what was expected.
"""

from __future__ import annotations

import math
import pickle
import re
from collections import OrderedDict
from enum import IntEnum
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeclaw.errors import EdgeclawError
from edgeclaw.tools.schema import ArgumentError, SchemaError, compile_schema

READ_FILE = {
    "type": "object",
    "description": "Read a file from the workspace.",
    "properties": {
        "path": {"type": "string", "minLength": 1, "description": "workspace-relative path"},
        "start_line": {"type": "integer", "minimum": 1},
        "end_line": {"type": "integer", "minimum": 1},
    },
    "required": ["path"],
}


def error_of(schema: dict[str, Any], value: Any) -> ArgumentError:
    with pytest.raises(ArgumentError) as info:
        compile_schema(schema)(value)
    return info.value


def message_of(schema: dict[str, Any], value: Any) -> str:
    return str(error_of(schema, value))


def accepts(schema: dict[str, Any], value: Any) -> bool:
    try:
        compile_schema(schema)(value)
    except ArgumentError:
        return False
    return True


# -- the tool-shaped happy path and the headline messages -------------------


def test_valid_arguments_pass_and_return_none() -> None:
    validate = compile_schema(READ_FILE)
    assert validate({"path": "a.txt"}) is None
    assert validate({"path": "a.txt", "start_line": 1, "end_line": 20}) is None


def test_wrong_type_names_the_field() -> None:
    e = error_of(READ_FILE, {"path": 3})
    assert str(e) == "argument 'path': expected string, got integer"
    assert (e.path, e.message, e.kind) == ("path", "expected string, got integer", "invalid")


def test_missing_required_argument() -> None:
    e = error_of(READ_FILE, {"start_line": 2})
    assert str(e) == "missing required argument 'path'"
    assert (e.path, e.kind) == ("path", "missing")


def test_unknown_argument_lists_the_expected_names_sorted() -> None:
    e = error_of(READ_FILE, {"path": "a", "foo": 1})
    assert str(e) == "unknown argument 'foo' (expected one of: end_line, path, start_line)"
    assert (e.path, e.kind) == ("foo", "unknown")


def test_enum_message() -> None:
    schema = {"type": "object", "properties": {"mode": {"type": "string", "enum": ["r", "w"]}}}
    assert message_of(schema, {"mode": "x"}) == "argument 'mode': must be one of 'r', 'w'; got 'x'"


def test_maximum_message() -> None:
    schema = {"type": "object", "properties": {"speed_hz": {"type": "integer", "maximum": 1_000_000}}}
    assert (
        message_of(schema, {"speed_hz": 5_000_000}) == "argument 'speed_hz': must be <= 1000000; got 5000000"
    )


def test_argument_error_is_a_value_error_and_an_edgeclaw_error() -> None:
    e = error_of(READ_FILE, {"path": 3})
    assert isinstance(e, ValueError)
    assert isinstance(e, EdgeclawError)


def test_argument_error_constructed_directly() -> None:
    # The registry raises these itself for unparsable JSON, with an empty path.
    assert str(ArgumentError("", "arguments are not valid JSON")) == "arguments are not valid JSON"
    assert str(ArgumentError("pins[2]", "is busy")) == "argument 'pins[2]': is busy"


def test_argument_error_pickles() -> None:
    e = error_of(READ_FILE, {"start_line": 2})
    back = pickle.loads(pickle.dumps(e))
    assert (str(back), back.path, back.message, back.kind) == (str(e), e.path, e.message, e.kind)


def test_root_must_be_an_object() -> None:
    e = error_of(READ_FILE, ["a.txt"])
    assert e.path == ""
    assert str(e) == "arguments: expected object, got array"


def test_first_problem_only() -> None:
    # Two problems: the first one met (in argument order) is reported.
    e = error_of(READ_FILE, {"start_line": "x", "bogus": 1})
    assert e.path == "start_line"


# -- nested paths ---------------------------------------------------------------

NESTED = {
    "type": "object",
    "properties": {
        "pins": {"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 40}},
        "spi": {
            "type": "object",
            "properties": {
                "bus": {"type": "integer"},
                "devices": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"name": {"type": "string"}, "cs": {"type": "integer"}},
                        "required": ["name"],
                    },
                },
            },
        },
    },
}


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ({"pins": [1, 2, "3"]}, "argument 'pins[2]': expected integer, got string"),
        ({"pins": [1, 2, 41]}, "argument 'pins[2]': must be <= 40; got 41"),
        ({"spi": {"bus": "0"}}, "argument 'spi.bus': expected integer, got string"),
        (
            {"spi": {"devices": [{"name": "a"}, {"name": 7}]}},
            "argument 'spi.devices[1].name': expected string, got integer",
        ),
        ({"spi": {"devices": [{"cs": 1}]}}, "missing required argument 'spi.devices[0].name'"),
        (
            {"spi": {"devices": [{"name": "a", "speed": 1}]}},
            "unknown argument 'spi.devices[0].speed' (expected one of: cs, name)",
        ),
        ({"spi": []}, "argument 'spi': expected object, got array"),
    ],
)
def test_nested_errors_carry_the_full_path(value: dict[str, Any], expected: str) -> None:
    assert message_of(NESTED, value) == expected


def test_odd_keys_are_bracketed_in_paths() -> None:
    e = error_of(READ_FILE, {"path": "a", "no such.key": 1})
    assert e.path == "['no such.key']"


def test_huge_values_are_truncated_in_messages() -> None:
    schema = {"type": "object", "properties": {"mode": {"enum": ["r", "w"]}}}
    msg = message_of(schema, {"mode": "x" * 10_000})
    assert len(msg) < 200
    assert msg.startswith("argument 'mode': must be one of 'r', 'w'; got 'xxx")


# -- type -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_", "good", "bad"),
    [
        ("string", ["", "x"], [1, None, b"x", ["x"]]),
        ("integer", [0, -3, 2**70], [1.5, 3.0, "1", True, False, None]),
        ("number", [0, 1.5, -2, 2**70], ["1", True, None, math.nan, math.inf, -math.inf]),
        ("boolean", [True, False], [0, 1, "true", None]),
        ("null", [None], [0, "", False, []]),
        ("array", [[], [1, "a"]], [(), {}, "ab"]),
        ("object", [{}], [[], "x", None]),
    ],
)
def test_type(type_: str, good: list[Any], bad: list[Any]) -> None:
    # additionalProperties: true so {"type": "object"} here means any object.
    schema = {"type": type_, "additionalProperties": True} if type_ == "object" else {"type": type_}
    for v in good:
        assert accepts(schema, v), v
    for v in bad:
        assert not accepts(schema, v), v


def test_bool_is_not_an_integer() -> None:
    assert message_of({"type": "integer"}, True) == "arguments: expected integer, got boolean"
    assert message_of({"type": "number"}, False) == "arguments: expected number, got boolean"


def test_integral_float_is_not_an_integer_and_the_message_says_what_came() -> None:
    assert message_of({"type": "integer"}, 3.0) == "arguments: expected integer, got number 3.0"
    assert message_of({"type": "integer"}, 3.5) == "arguments: expected integer, got number"


def test_int_subclasses_other_than_bool_are_integers() -> None:
    class Pin(IntEnum):
        LED = 13

    assert accepts({"type": "integer", "maximum": 20}, Pin.LED)
    assert accepts({"type": "object", "additionalProperties": True}, OrderedDict(a=1))


def test_non_finite_numbers_are_refused() -> None:
    assert message_of({"type": "number"}, math.nan) == "arguments: must be a finite number; got nan"
    assert (
        message_of({"type": "number", "maximum": 10}, math.inf)
        == "arguments: must be a finite number; got inf"
    )


def test_non_json_python_values_are_named() -> None:
    assert message_of({"type": "array"}, (1, 2)) == "arguments: expected array, got Python tuple"


def test_type_list() -> None:
    schema = {"type": ["string", "null"]}
    assert accepts(schema, "x")
    assert accepts(schema, None)
    assert message_of(schema, 1) == "arguments: expected string or null, got integer"
    three = {"type": ["string", "integer", "null"]}
    assert message_of(three, 1.5) == "arguments: expected string, integer or null, got number"


def test_type_list_integer_and_number_keeps_constraints() -> None:
    schema = {"type": ["integer", "null"], "minimum": 0}
    assert accepts(schema, None)
    assert accepts(schema, 0)
    assert message_of(schema, -1) == "arguments: must be >= 0; got -1"
    assert message_of(schema, 2.0) == "arguments: expected integer or null, got number 2.0"
    assert accepts({"type": ["integer", "number"]}, 2.5)


def test_untyped_keywords_apply_only_to_their_own_type() -> None:
    # JSON Schema semantics: without `type`, maxLength constrains strings and nothing else.
    schema = {"maxLength": 2, "minimum": 0}
    assert accepts(schema, "ab")
    assert not accepts(schema, "abc")
    assert accepts(schema, 5)
    assert accepts(schema, 1.5)
    assert not accepts(schema, -1)
    assert accepts(schema, [1, 2, 3])
    assert not accepts(schema, math.nan)  # a numeric keyword means numbers must be finite


def test_empty_schema_and_annotations_accept_anything() -> None:
    for schema in (
        {},
        {"description": "anything", "title": "t", "default": 1, "examples": [1], "$comment": "c"},
    ):
        validate = compile_schema(schema)
        for v in (None, 1, "x", [1], {"a": 1}, 1.5, True):
            validate(v)


# -- objects -----------------------------------------------------------------


def test_objects_are_closed_by_default() -> None:
    assert not accepts({"type": "object", "properties": {"a": {}}}, {"a": 1, "b": 2})
    assert not accepts({"properties": {"a": {}}}, {"b": 2})
    assert message_of({"type": "object"}, {"x": 1}) == "unknown argument 'x' (this tool takes no arguments)"


def test_nested_empty_closed_object_message() -> None:
    schema = {"type": "object", "properties": {"opts": {"type": "object"}}}
    assert message_of(schema, {"opts": {"x": 1}}) == "unknown argument 'opts.x' (no fields are allowed here)"


def test_additional_properties() -> None:
    open_ = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": True}
    assert accepts(open_, {"a": 1, "anything": [1, 2]})
    assert not accepts(open_, {"a": "1"})  # declared properties are still checked
    closed = {"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": False}
    assert not accepts(closed, {"a": 1, "b": 1})


def test_required_only_schema_is_not_closed() -> None:
    # No type/properties: not an "object schema", so it only checks presence (as anyOf branches need).
    assert accepts({"required": ["a"]}, {"a": 1, "b": 2})
    assert not accepts({"required": ["a"]}, {"b": 2})
    assert accepts({"required": ["a"]}, "not an object")


def test_non_string_keys_are_unknown_arguments() -> None:
    e = error_of(READ_FILE, {"path": "a", 1: 2})
    assert e.kind == "unknown"
    assert e.path == "[1]"


# -- numbers ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("keyword", "bound", "good", "bad", "message"),
    [
        ("minimum", 0, [0, 1, 0.5], [-1, -0.1], "must be >= 0; got -1"),
        ("maximum", 10, [10, 9.9, -5], [11, 10.5], "must be <= 10; got 11"),
        ("exclusiveMinimum", 0, [1, 0.001], [0, -1], "must be > 0; got 0"),
        ("exclusiveMaximum", 10, [9, 9.99], [10, 11], "must be < 10; got 10"),
        ("minimum", 0.5, [0.5, 1], [0, 0.49], "must be >= 0.5; got 0"),
    ],
)
def test_numeric_bounds(keyword: str, bound: float, good: list[Any], bad: list[Any], message: str) -> None:
    schema = {"type": "number", keyword: bound}
    for v in good:
        assert accepts(schema, v), v
    for v in bad:
        assert not accepts(schema, v), v
    assert message_of(schema, bad[0]) == f"arguments: {message}"


def test_integer_bounds() -> None:
    schema = {"type": "integer", "minimum": 1, "exclusiveMaximum": 5}
    assert [v for v in range(-2, 8) if accepts(schema, v)] == [1, 2, 3, 4]


def test_huge_integers_compare_exactly() -> None:
    assert not accepts({"type": "integer", "maximum": 2**63}, 2**63 + 1)
    assert accepts({"type": "number", "maximum": 1e300}, 10**300)


# -- strings ----------------------------------------------------------------------


def test_string_lengths() -> None:
    schema = {"type": "string", "minLength": 2, "maxLength": 3}
    assert accepts(schema, "ab")
    assert accepts(schema, "abc")
    assert accepts(schema, "éé")  # code points, not bytes
    assert message_of(schema, "a") == "arguments: must be at least 2 characters long; got 1"
    assert message_of(schema, "abcd") == "arguments: must be at most 3 characters long; got 4"
    assert message_of({"type": "string", "minLength": 1}, "") == "arguments: must not be empty"


def test_pattern_is_a_search_not_a_full_match() -> None:
    schema = {"type": "string", "pattern": "[0-9]"}
    assert accepts(schema, "abc1def")
    assert message_of(schema, "abc") == "arguments: must match pattern '[0-9]'; got 'abc'"


def test_pattern_dollar_does_not_match_before_a_trailing_newline() -> None:
    schema = {"type": "string", "pattern": "^[a-z]+$"}
    assert accepts(schema, "abc")
    assert not accepts(schema, "abc\n")
    # Escaped dollars and dollars inside classes stay literal.
    assert accepts({"type": "string", "pattern": r"^\$[0-9]+$"}, "$12")
    assert accepts({"type": "string", "pattern": "^[$]x$"}, "$x")
    assert accepts({"type": "string", "pattern": "^[]$]+$"}, "]$")


def test_pattern_classes_are_ascii() -> None:
    schema = {"type": "string", "pattern": r"^\d+$"}
    assert accepts(schema, "123")
    assert not accepts(schema, "١٢٣")  # Arabic-Indic digits: \d is [0-9] in JSON Schema


# -- arrays -----------------------------------------------------------------------


def test_array_items_and_lengths() -> None:
    schema = {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 2}
    assert accepts(schema, ["a"])
    assert accepts(schema, ["a", "b"])
    assert message_of(schema, []) == "arguments: must not be empty"
    assert message_of(schema, ["a", "b", "c"]) == "arguments: must have at most 2 items; got 3"
    assert message_of(schema, ["a", 1]) == "argument '[1]': expected string, got integer"
    assert (
        message_of({"type": "array", "minItems": 2}, ["a"]) == "arguments: must have at least 2 items; got 1"
    )


def test_array_without_items_accepts_any_elements() -> None:
    assert accepts({"type": "array"}, [1, "a", None, {"x": 1}])


# -- enum / const -------------------------------------------------------------------


def test_enum_uses_json_equality() -> None:
    schema = {"enum": [1, "a", None, [1, 2], {"k": True}]}
    for v in (1, 1.0, "a", None, [1, 2], [1.0, 2], {"k": True}):
        assert accepts(schema, v), v
    for v in (True, 2, "b", [2, 1], [True, 2], {"k": 1}, {"k": True, "x": 1}, (1, 2), {1}):
        assert not accepts(schema, v), v
    assert not accepts({"enum": [True]}, 1)
    assert not accepts({"enum": [0]}, False)


def test_enum_messages_render_json() -> None:
    assert (
        message_of({"enum": [True, None, 1.5]}, "x") == "arguments: must be one of true, null, 1.5; got 'x'"
    )


def test_long_enum_is_abbreviated() -> None:
    msg = message_of({"enum": [f"v{i}" for i in range(100)]}, "x")
    assert "... (100 values)" in msg


def test_const() -> None:
    schema = {"type": "object", "properties": {"version": {"const": 2}}}
    assert accepts(schema, {"version": 2})
    assert message_of(schema, {"version": 3}) == "argument 'version': must be 2; got 3"


def test_enum_is_copied_at_compile_time() -> None:
    values = ["a", ["b"]]
    validate = compile_schema({"enum": values})
    values[1].append("c")
    values.append("d")
    validate(["b"])
    with pytest.raises(ArgumentError):
        validate("d")


# -- anyOf / oneOf --------------------------------------------------------------------


def test_any_of() -> None:
    schema = {
        "type": "object",
        "properties": {
            "target": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "pattern": "^GPIO"}]}
        },
    }
    assert accepts(schema, {"target": 4})
    assert accepts(schema, {"target": "GPIO4"})
    assert message_of(schema, {"target": -1}) == (
        "argument 'target': matches none of the allowed forms: "
        "(1) must be >= 0; got -1; (2) expected string, got integer"
    )


def test_one_of_selecting_required_fields() -> None:
    schema = {
        "type": "object",
        "properties": {"pin": {"type": "integer"}, "name": {"type": "string"}},
        "oneOf": [{"required": ["pin"]}, {"required": ["name"]}],
    }
    assert accepts(schema, {"pin": 3})
    assert accepts(schema, {"name": "led"})
    assert message_of(schema, {}) == (
        "arguments: matches none of the allowed forms: "
        "(1) missing required argument 'pin'; (2) missing required argument 'name'"
    )
    assert message_of(schema, {"pin": 3, "name": "led"}) == (
        "arguments: must match exactly one of the allowed forms; matches forms 1 or 2"
    )


def test_any_of_branch_errors_show_nested_paths() -> None:
    schema = {
        "type": "object",
        "properties": {
            "bus": {
                "anyOf": [
                    {"type": "object", "properties": {"i2c": {"type": "integer"}}, "required": ["i2c"]},
                    {"type": "string"},
                ]
            }
        },
    }
    assert message_of(schema, {"bus": {"i2c": "1"}}) == (
        "argument 'bus': matches none of the allowed forms: "
        "(1) argument 'bus.i2c': expected integer, got string; (2) expected string, got object"
    )


# -- schema errors (raised by compile_schema) --------------------------------------------


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        (
            {"type": "string", "maxLenght": 3},
            "schema: unknown keyword 'maxLenght' (did you mean 'maxLength'?)",
        ),
        (
            {"type": "string", "format": "uri"},
            "schema: keyword 'format' is not supported by edgeclaw's schema subset",
        ),
        ({"$ref": "#/$defs/x"}, "schema: keyword '$ref' is not supported by edgeclaw's schema subset"),
        ({"type": "array", "uniqueItems": True}, "schema: keyword 'uniqueItems' is not supported"),
        ({"type": "strng"}, "schema: unknown type 'strng'"),
        ({"type": []}, "schema: 'type' must be a type name or a non-empty list of them"),
        ({"type": ["string", "string"]}, "schema: 'type' lists a type twice"),
        (
            {"type": "integer", "maxLength": 3},
            "schema: keyword 'maxLength' applies to string values, but the type is integer",
        ),
        ({"type": "string", "minimum": 0}, "schema: keyword 'minimum' applies to integer or number values"),
        ({"type": "string", "minLength": -1}, "schema: 'minLength' must be a non-negative integer, got -1"),
        (
            {"type": "string", "minLength": True},
            "schema: 'minLength' must be a non-negative integer, got true",
        ),
        (
            {"type": "string", "minLength": 3, "maxLength": 2},
            "schema: minLength 3 is greater than maxLength 2",
        ),
        ({"type": "array", "minItems": 3, "maxItems": 2}, "schema: minItems 3 is greater than maxItems 2"),
        ({"type": "integer", "minimum": "0"}, "schema: 'minimum' must be a finite number, got '0'"),
        ({"type": "number", "maximum": math.inf}, "schema: 'maximum' must be a finite number, got inf"),
        ({"type": "number", "exclusiveMinimum": True}, "draft-04 boolean form is not supported"),
        ({"type": "integer", "minimum": 5, "maximum": 4}, "schema: the numeric bounds exclude every value"),
        (
            {"type": "integer", "minimum": 5, "exclusiveMaximum": 5},
            "schema: the numeric bounds exclude every value",
        ),
        ({"type": "string", "pattern": "("}, "schema: 'pattern' '(' is not a valid regular expression"),
        ({"type": "string", "pattern": 5}, "schema: 'pattern' must be a string"),
        ({"type": "array", "items": [{"type": "string"}]}, "'items' must be a single schema"),
        (
            {"type": "object", "additionalProperties": {"type": "string"}},
            "'additionalProperties' must be true or false",
        ),
        ({"type": "object", "required": ["a"]}, "schema: required 'a' not in 'properties'"),
        (
            {"type": "object", "properties": {"a": {}}, "required": "a"},
            "'required' must be a list of property names",
        ),
        (
            {"type": "object", "properties": {"a": {}}, "required": ["a", "a"]},
            "'required' lists a name twice",
        ),
        ({"type": "object", "properties": []}, "'properties' must be an object, got array"),
        ({"enum": []}, "schema: 'enum' must be a non-empty list"),
        ({"enum": "ab"}, "schema: 'enum' must be a non-empty list"),
        ({"enum": [math.nan]}, "is not a JSON value"),
        (
            {"type": "string", "enum": ["a", 1]},
            "schema: enum value 1 can never be accepted: expected string, got integer",
        ),
        ({"type": "string", "maxLength": 1, "enum": ["a", "bb"]}, "enum value 'bb' can never be accepted"),
        ({"type": "integer", "const": "1"}, "schema: const value '1' can never be accepted"),
        ({"anyOf": []}, "schema: 'anyOf' must be a non-empty list of schemas"),
        ({"oneOf": {"type": "string"}}, "schema: 'oneOf' must be a non-empty list of schemas"),
        (True, "schema: a schema must be an object, got boolean"),
        (
            {"type": "object", "properties": {"a": True}},
            "schema at properties.a: a schema must be an object, got boolean",
        ),
        (
            {
                "type": "object",
                "properties": {"pins": {"type": "array", "items": {"type": "integer", "format": "int32"}}},
            },
            "schema at properties.pins.items: keyword 'format' is not supported",
        ),
        ({"anyOf": [{"type": "string"}, {"tpye": "null"}]}, "schema at anyOf[1]: unknown keyword 'tpye'"),
    ],
)
def test_schema_errors(schema: Any, message: str) -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema(schema)
    assert str(info.value).startswith(message) or message in str(info.value), str(info.value)


def test_schema_error_carries_location() -> None:
    with pytest.raises(SchemaError) as info:
        compile_schema({"type": "object", "properties": {"a": {"type": "string", "minLength": "1"}}})
    assert info.value.location == "properties.a"
    assert isinstance(info.value, EdgeclawError)


def test_default_tool_parameters_compile() -> None:
    # The Tool base class default: a tool that takes no arguments.
    validate = compile_schema({"type": "object", "properties": {}, "additionalProperties": False})
    validate({})
    with pytest.raises(ArgumentError):
        validate({"x": 1})


def test_validator_does_not_see_later_schema_edits() -> None:
    schema: dict[str, Any] = {"type": "object", "properties": {"a": {"type": "integer"}}}
    validate = compile_schema(schema)
    schema["properties"]["b"] = {"type": "string"}
    schema["properties"]["a"]["type"] = "string"
    validate({"a": 1})
    with pytest.raises(ArgumentError):
        validate({"b": "x"})


# -- property-based: generated schemas and values that satisfy them ------------------------

PATTERNS = ["^[a-z]+$", "^[A-Z][a-z0-9_]*$", "[0-9]", "^(r|w|rw)$", "^/dev/(i2c|spidev)[0-9]"]
NAMES = st.text("abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=8)


@st.composite
def string_schemas(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(["plain", "lengths", "pattern", "enum"]))
    schema: dict[str, Any] = {"type": "string", "description": "generated"}
    if kind == "lengths":
        lo = draw(st.integers(0, 5))
        schema["minLength"] = lo
        schema["maxLength"] = lo + draw(st.integers(0, 10))
    elif kind == "pattern":
        schema["pattern"] = draw(st.sampled_from(PATTERNS))
    elif kind == "enum":
        schema["enum"] = draw(st.lists(st.text(max_size=5), min_size=1, max_size=5, unique=True))
    return schema


@st.composite
def numeric_schemas(draw: st.DrawFn) -> dict[str, Any]:
    type_ = draw(st.sampled_from(["integer", "number"]))
    schema: dict[str, Any] = {"type": type_}
    lo = draw(st.none() | st.integers(-1000, 1000))
    if lo is not None:
        schema[draw(st.sampled_from(["minimum", "exclusiveMinimum"]))] = lo
    if draw(st.booleans()):
        # Leave room for at least one integer between exclusive bounds.
        schema[draw(st.sampled_from(["maximum", "exclusiveMaximum"]))] = (lo or 0) + draw(
            st.integers(2, 1000)
        )
    return schema


LEAVES = (
    string_schemas()
    | numeric_schemas()
    | st.sampled_from([{"type": "boolean"}, {"type": "null"}, {"type": ["string", "null"]}, {}, {"const": 7}])
)


def extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    arrays = st.builds(
        lambda items, lo, extra: {"type": "array", "items": items, "minItems": lo, "maxItems": lo + extra},
        children,
        st.integers(0, 2),
        st.integers(0, 3),
    )

    @st.composite
    def objects(draw: st.DrawFn) -> dict[str, Any]:
        props = draw(st.dictionaries(NAMES, children, max_size=4))
        required = [k for k in props if draw(st.booleans())]
        schema: dict[str, Any] = {"type": "object", "properties": props, "required": required}
        if draw(st.booleans()):
            schema["additionalProperties"] = draw(st.booleans())
        return schema

    any_of = st.lists(children, min_size=1, max_size=3).map(lambda bs: {"anyOf": bs})
    return arrays | objects() | any_of


SCHEMAS = st.recursive(LEAVES, extend, max_leaves=12)


def values_for(schema: dict[str, Any]) -> st.SearchStrategy[Any]:
    """A strategy for values that satisfy `schema` (only the shapes SCHEMAS generates)."""
    if "const" in schema:
        return st.just(schema["const"])
    if "enum" in schema:
        return st.sampled_from(schema["enum"])
    if "anyOf" in schema:
        return st.one_of([values_for(b) for b in schema["anyOf"]])
    type_ = schema.get("type")
    if type_ is None:
        return st.from_type(type(None)) | st.integers() | st.text()
    if isinstance(type_, list):
        return st.one_of([values_for({"type": t}) for t in type_])
    if type_ == "string":
        if "pattern" in schema:
            # fullmatch=True: Hypothesis then never appends the trailing newline a Python `$` would allow.
            return st.from_regex(re.compile(schema["pattern"], re.ASCII), fullmatch=True)
        return st.text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength"))
    if type_ in ("integer", "number"):
        lo = schema.get("minimum", schema.get("exclusiveMinimum"))
        hi = schema.get("maximum", schema.get("exclusiveMaximum"))
        if type_ == "integer":
            return st.integers(
                None if lo is None else lo + ("exclusiveMinimum" in schema),
                None if hi is None else hi - ("exclusiveMaximum" in schema),
            )
        return st.floats(
            lo,
            hi,
            exclude_min="exclusiveMinimum" in schema,
            exclude_max="exclusiveMaximum" in schema,
            allow_nan=False,
            allow_infinity=False,
        )
    if type_ == "boolean":
        return st.booleans()
    if type_ == "null":
        return st.none()
    if type_ == "array":
        return st.lists(values_for(schema["items"]), min_size=schema["minItems"], max_size=schema["maxItems"])
    assert type_ == "object"
    props = schema["properties"]
    required = {k: values_for(props[k]) for k in schema["required"]}
    optional = {k: values_for(s) for k, s in props.items() if k not in schema["required"]}
    return st.fixed_dictionaries(required, optional=optional)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_valid_values_pass(data: st.DataObject) -> None:
    schema = data.draw(SCHEMAS, label="schema")
    validate = compile_schema(schema)
    validate(data.draw(values_for(schema), label="value"))


OBJECT_SCHEMAS = st.builds(
    lambda props, n_required: {
        "type": "object",
        "properties": props,
        "required": list(props)[:n_required],
    },
    st.dictionaries(NAMES, LEAVES, min_size=1, max_size=5),
    st.integers(0, 5),
)


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_unknown_argument_is_refused_by_name(data: st.DataObject) -> None:
    schema = data.draw(OBJECT_SCHEMAS, label="schema")
    value = dict(data.draw(values_for(schema), label="value"))
    extra = data.draw(NAMES.filter(lambda k: k not in schema["properties"]), label="extra")
    value[extra] = 1
    e = error_of(schema, value)
    # The generated value is otherwise valid, so the only possible problem is the extra key.
    assert (e.kind, e.path) == ("unknown", extra)
    assert (
        str(e) == f"unknown argument '{extra}' (expected one of: {', '.join(sorted(schema['properties']))})"
    )


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_generated_missing_required_is_refused_by_name(data: st.DataObject) -> None:
    schema = data.draw(OBJECT_SCHEMAS.filter(lambda s: s["required"]), label="schema")
    value = dict(data.draw(values_for(schema), label="value"))
    gone = data.draw(st.sampled_from(schema["required"]), label="removed")
    del value[gone]
    e = error_of(schema, value)
    assert (e.kind, e.path, str(e)) == ("missing", gone, f"missing required argument '{gone}'")


@given(st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.booleans())
def test_integer_type_matches_json_semantics(x: int | float | bool) -> None:
    expected = type(x) is int
    assert accepts({"type": "integer"}, x) is expected
    assert accepts({"type": "number"}, x) is (type(x) is not bool)
