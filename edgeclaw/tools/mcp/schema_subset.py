"""An MCP server's `inputSchema`, brought to the JSON-schema subset edgeclaw checks (tools/schema.py).

Servers generate their schemas: Pydantic (the official Python SDK) writes `$defs` and `$ref` for nested
models, `anyOf: [X, {"type": "null"}]` for Optional fields, `format` for dates and URLs; zod (the
TypeScript SDK) writes `$schema`, `additionalProperties` as a schema, `format: "uri"`. Refusing such a
tool would leave out most real servers, so each construct is rewritten here before the schema is
compiled, and what cannot be checked before the call is said in the tool's description (the server
checks its own arguments too):

- `$schema`, `$id`, `$defs`/`definitions`: dropped once the references are resolved;
- `$ref` to `#/$defs/NAME`, `#/definitions/NAME`, `#` or any other place in the same schema (a JSON
  pointer, as zod-to-json-schema writes for a schema used twice): replaced by what it names, merged with
  the keywords beside it; a definition that contains itself (a tree) is checked down to where it
  recurs, and accepted as any value from there; references that only lead to each other, with no
  property or item between (`A` is `B`, `B` is `A`), describe no value and the tool is left out;
- `allOf`: its members merged into one schema (properties united, `required` joined); members that
  disagree on a keyword keep the first and say so;
- `nullable: true` (OpenAPI): `null` added to the type;
- `oneOf`: checked as `anyOf` (any one branch passes; the server still insists on exactly one);
- `format`: a hint in the description, never a check;
- any other keyword the subset does not check (`uniqueItems`, `multipleOf`, `patternProperties`,
  `not`, ...) and `additionalProperties` given as a schema: dropped, named in the note;
- annotations (`readOnly`, `deprecated`, `contentMediaType`, `discriminator`, `x-...`): dropped;
- a `pattern` Python's `re` cannot read (ECMA-262's `\\p{L}`): dropped, named in the note;
- a `required` name the properties do not declare: declared as any value (what JSON Schema means by
  it; the subset closes objects by default); `enum` members the `type` refuses and keywords for
  other types (`maxLength` on an integer): dropped, as JSON Schema never applies them.

Inlining is bounded: nesting deeper than `MAX_DEPTH` is accepted as any value, and a schema that
grows past `MAX_PARTS` schemas once its references are inlined (one definition used many times
over, at every level) is refused rather than built.

A schema that still cannot be used (its root is not an object, a `$ref` to a document elsewhere, a
loop of references, too large, not JSON Schema at all) is `SchemaUnusable`, and the tool is left
out with that reason (`doctor` lists it, the log says it).
"""

from __future__ import annotations

import copy
import urllib.parse
from typing import Any

from edgeclaw.tools.schema import KEYWORD_TYPES, SUBSET_KEYWORDS, SchemaError, compile_schema
from edgeclaw.tools.schema_errors import json_type

MAX_DEPTH = 32  # nesting of schemas below the root; deeper parts are accepted as any value
# Schemas in the result once references are inlined: a few hundred for the largest real tools. The
# bound keeps a definition used twice at each of 30 levels (2**30 copies) from being built at all.
MAX_PARTS = 2000
DROPPED_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$anchor", "$comment", "readOnly", "writeOnly", "deprecated", "contentEncoding",
     "contentMediaType", "contentSchema", "$defs", "definitions", "examples", "discriminator"}
)  # fmt: skip
SCHEMA_KEYS = ("items",)  # keywords whose value is one schema
SCHEMA_MAPS = ("properties",)  # keywords whose value maps names to schemas
SCHEMA_LISTS = ("anyOf", "oneOf")  # keywords whose value is a list of schemas


class SchemaUnusable(ValueError):
    """The schema cannot be brought to the subset: the message says why."""


def _field(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


class _Normaliser:
    def __init__(self, root: dict[str, Any]) -> None:
        self.root = root
        self.notes: list[str] = []
        self.parts = 0

    def note(self, where: str, text: str) -> None:
        line = f"{where or 'the arguments'}: {text}"
        if line not in self.notes:
            self.notes.append(line)

    def resolve(self, ref: object, where: str) -> tuple[str, Any]:
        """The part of this schema a `$ref` points at: `#/$defs/NAME` (Pydantic), `#/definitions/NAME`,
        or any JSON pointer into the document (zod-to-json-schema writes `#/properties/from` for a
        schema used a second time)."""
        node: Any = self.root
        if isinstance(ref, str) and ref.startswith("#") and (ref == "#" or ref.startswith("#/")):
            for token in ref[2:].split("/") if ref != "#" else []:
                token = urllib.parse.unquote(token).replace("~1", "/").replace("~0", "~")
                if isinstance(node, dict) and token in node:
                    node = node[token]
                elif isinstance(node, list) and token.isdigit() and int(token) < len(node):
                    node = node[int(token)]
                else:
                    break
            else:
                return ref, node
        raise SchemaUnusable(
            f"{where or 'the arguments'}: $ref {ref!r} does not name a definition in this schema"
        )

    def schema(
        self, schema: Any, where: str, depth: int, refs: tuple[str, ...], here: tuple[str, ...]
    ) -> dict[str, Any]:
        """`schema` in the subset. `refs`: the references being inlined on the way down to it;
        `here`: those among them inlined at this same place of the value (no property or item
        between), where one coming round again is a loop that describes no value."""
        if schema is True:
            return {}
        if schema is False:
            raise SchemaUnusable(f"{where or 'the arguments'}: the schema false accepts nothing")
        if not isinstance(schema, dict):
            raise SchemaUnusable(
                f"{where or 'the arguments'}: a schema must be an object, got {type(schema).__name__}"
            )
        if depth > MAX_DEPTH:
            self.note(where, f"nested deeper than {MAX_DEPTH} levels, not checked below")
            return {}
        self.parts += 1
        if self.parts > MAX_PARTS:
            raise SchemaUnusable(
                f"its input schema has more than {MAX_PARTS} parts once its references are inlined"
            )
        out: dict[str, Any] = {}
        if "$ref" in schema:
            ref, target = self.resolve(schema["$ref"], where)
            if ref in here:
                loop = " -> ".join(_short(r) for r in (*here[here.index(ref) :], ref))
                raise SchemaUnusable(
                    f"{where or 'the arguments'}: the references {loop} only lead to each other "
                    "and describe no value"
                )
            if ref in refs:
                self.note(where, f"{_short(ref)} refers to itself; accepted as any value where it recurs")
                return {}
            out = self.schema(target, where, depth + 1, (*refs, ref), (*here, ref))
        hinted = False  # the description here already carries the format hint
        for key, value in schema.items():
            if key == "$ref" or key in DROPPED_ANNOTATIONS or key.startswith("x-"):
                continue
            if key == "format":
                out["description"] = _with_hint(schema.get("description") or out.get("description"), value)
                hinted = True
            elif key == "nullable":
                if value is True:
                    out["nullable"] = True
            elif key == "allOf":
                if not isinstance(value, list):
                    raise SchemaUnusable(f"{where or 'the arguments'}: allOf must be a list")
                for n, member in enumerate(value):
                    self.merge(out, self.schema(member, f"{where}.allOf[{n}]", depth + 1, refs, here), where)
            elif key == "additionalProperties" and not isinstance(value, bool):
                out[key] = True
                if value != {}:  # {} is any value: nothing is lost
                    self.note(where, "the values of extra properties are not checked before the call")
            elif key in SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {
                    name: self.schema(sub, _field(where, name), depth + 1, refs, ())
                    for name, sub in value.items()
                }
            elif key in SCHEMA_KEYS and isinstance(value, dict | bool):
                out[key] = self.schema(value, f"{where}[]", depth + 1, refs, ())
            elif key in SCHEMA_KEYS and isinstance(value, list):
                self.note(where, "a tuple of item schemas is not checked before the call")
            elif key in SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self.schema(s, where, depth + 1, refs, here) for s in value]
            elif key == "description":
                if not hinted:  # beside a $ref, the field's own words win over the definition's
                    out[key] = copy.deepcopy(value)
            elif key not in SUBSET_KEYWORDS:
                self.note(where, f"{key} is not checked before the call")
            else:
                self.merge(out, {key: copy.deepcopy(value)}, where)
        self.pattern(out, where)
        _required_declared(out)
        _enum_within_type(out)
        _keywords_within_type(out)
        _bounds_of_draft4(out)
        if out.pop("nullable", False):
            _allow_null(out)
        if "oneOf" in out and "anyOf" not in out:
            # Any one branch passes here; exactly one is the server's to insist on (overlapping
            # branches, e.g. integer and number, would otherwise refuse a valid 3).
            out["anyOf"] = out.pop("oneOf")
        return out

    def pattern(self, schema: dict[str, Any], where: str) -> None:
        """A `pattern` Python's `re` cannot read (ECMA-262's `\\p{L}`, `(?<name>...)`) is the server's
        to check: the subset would refuse the whole tool over it."""
        pattern = schema.get("pattern")
        if not isinstance(pattern, str):
            return
        try:
            compile_schema({"type": "string", "pattern": pattern})
        except SchemaError:
            del schema["pattern"]
            self.note(where, f"the pattern {pattern} is not checked before the call")

    def merge(self, into: dict[str, Any], other: dict[str, Any], where: str) -> None:
        for key, value in other.items():
            if key not in into:
                into[key] = value
            elif key == "properties" and isinstance(into[key], dict) and isinstance(value, dict):
                for name, sub in value.items():
                    if name in into["properties"] and into["properties"][name] != sub:
                        self.note(
                            f"{where}.{name}" if where else name,
                            "allOf members disagree; the first is checked",
                        )
                    into["properties"].setdefault(name, sub)
            elif key == "required" and isinstance(into[key], list) and isinstance(value, list):
                into["required"] = [*into["required"], *(r for r in value if r not in into["required"])]
            elif key in ("description", "title", "default"):
                continue
            elif into[key] != value:
                self.note(where, f"allOf members disagree on {key}; the first is checked")


def _short(ref: str) -> str:
    return ref.rpartition("/")[2] or "the schema"


def _with_hint(description: object, fmt: object) -> str:
    text = description if isinstance(description, str) else ""
    hint = f"(format: {fmt})"
    return f"{text} {hint}".strip() if hint not in text else text


def _required_declared(schema: dict[str, Any]) -> None:
    """A required name the properties do not declare may, in JSON Schema, hold any value; objects are
    closed by default in the subset, so it is declared here as any value (an object that says
    `additionalProperties: false` as well can never be satisfied, and stays refused)."""
    required, props, kind = schema.get("required"), schema.get("properties", {}), schema.get("type")
    closed = "properties" in schema or kind == "object" or (isinstance(kind, list) and "object" in kind)
    if not closed or "additionalProperties" in schema or not isinstance(required, list):
        return
    if not isinstance(props, dict):
        return
    missing = [name for name in required if isinstance(name, str) and name not in props]
    if missing:
        schema["properties"] = {**props, **{name: {} for name in missing}}


def _enum_within_type(schema: dict[str, Any]) -> None:
    """Members of `enum` that `type` refuses can never be sent (`{"type": "string", "enum": ["a",
    null]}`, as some generators write a nullable enum without the type saying so): JSON Schema lets
    them lie there dead, the subset refuses such a schema, so they are dropped. None left: as it is,
    and refused."""
    kind, members = schema.get("type"), schema.get("enum")
    allowed = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else None
    if allowed is None or not isinstance(members, list):
        return
    if "number" in allowed:
        allowed.add("integer")
    live = [m for m in members if json_type(m) in allowed]
    if live and len(live) < len(members):
        schema["enum"] = live


def _keywords_within_type(schema: dict[str, Any]) -> None:
    """A keyword for other types than `type` names (`maxLength` on an integer) is never applied in
    JSON Schema; the subset refuses it as a likely mistake of a tool's author, which for a server's
    generated schema would cost the tool for nothing. Dropped."""
    kind = schema.get("type")
    types = {kind} if isinstance(kind, str) else set(kind) if isinstance(kind, list) else None
    if types is None:
        return
    for key in [
        k for k in schema if (applies := KEYWORD_TYPES.get(k)) is not None and applies.isdisjoint(types)
    ]:
        del schema[key]


def _bounds_of_draft4(schema: dict[str, Any]) -> None:
    """Draft 4's `exclusiveMinimum: true` beside `minimum`, in the draft 6 form the subset reads."""
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        flag = schema.get(exclusive)
        if not isinstance(flag, bool):
            continue
        del schema[exclusive]
        if flag and bound in schema:
            schema[exclusive] = schema.pop(bound)


def _allow_null(schema: dict[str, Any]) -> None:
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        schema["type"] = [*kind, "null"]
    if "const" in schema and "enum" not in schema:
        schema["enum"] = [schema.pop("const")]
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]
    for key in SCHEMA_LISTS:
        # Each branch would refuse null on its own: null is one more branch.
        if isinstance(schema.get(key), list) and {"type": "null"} not in schema[key]:
            schema[key] = [*schema[key], {"type": "null"}]


def normalise(schema: Any) -> tuple[dict[str, Any], list[str]]:
    """The schema in edgeclaw's subset, and what is not checked before the call (empty: everything
    is). SchemaUnusable when the tool cannot be offered."""
    if not isinstance(schema, dict):
        raise SchemaUnusable("no inputSchema object")
    worker = _Normaliser(schema)
    out = worker.schema(schema, "", 0, ("#",), ("#",))
    kind = out.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise SchemaUnusable(f"its input schema is of type {kind!r}, not an object of named arguments")
    return out, worker.notes


def usable(schema: Any) -> tuple[dict[str, Any], list[str]]:
    """`normalise`, and the result compiled as the registry will: SchemaUnusable, with the compiler's
    reason, when it does not (a schema that is not valid JSON Schema, such as a type that does not
    exist, is the server's mistake, not a construct to work around)."""
    out, notes = normalise(schema)
    try:
        compile_schema(out)
    except SchemaError as e:
        raise SchemaUnusable(f"its input schema does not compile: {e}") from None
    return out, notes


def described(description: str, notes: list[str], limit: int) -> str:
    """The tool's description with what is checked only by the server, within `limit` characters: the
    server's own text is shortened first, so the note (at most half the room) is never what is cut."""
    text = description.strip()
    if not notes:
        return text[:limit]
    said = f"(Checked by the server only: {'; '.join(notes)}.)"
    half = limit // 2
    if len(said) > half:
        said = said[: half - 4] + "...)"
    room = limit - len(said) - 1
    if len(text) > room:
        text = text[: max(room - 3, 0)] + "..."
    return f"{text}\n{said}".strip()
