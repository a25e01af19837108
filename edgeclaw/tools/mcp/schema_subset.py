"""An MCP server's `inputSchema`, brought to the JSON-schema subset edgeclaw checks (tools/schema.py).

Servers generate their schemas: Pydantic (the official Python SDK) writes `$defs` and `$ref` for nested
models, `anyOf: [X, {"type": "null"}]` for Optional fields, `format` for dates and URLs; zod (the
TypeScript SDK) writes `$schema`, `additionalProperties` as a schema, `format: "uri"`. Refusing such a
tool would leave out most real servers, so each construct is rewritten here before the schema is
compiled, and what cannot be checked before the call is said in the tool's description (the server
checks its own arguments too):

- `$schema`, `$id`, `$defs`/`definitions`: dropped once the references are resolved;
- `$ref` to `#/$defs/NAME` or `#/definitions/NAME` (or `#`): replaced by the definition, merged with
  the keywords beside it; a definition that refers to itself (a tree) is checked down to where it
  recurs, and accepted as any value from there; nesting is bounded (`MAX_DEPTH`);
- `allOf`: its members merged into one schema (properties united, `required` joined); members that
  disagree on a keyword keep the first and say so;
- `nullable: true` (OpenAPI): `null` added to the type;
- `format`: a hint in the description, never a check;
- keywords the subset does not check (`uniqueItems`, `multipleOf`, `patternProperties`, `not`, ...)
  and `additionalProperties` given as a schema: dropped, named in the note;
- annotations (`readOnly`, `deprecated`, `contentMediaType`, ...): dropped.

A schema that still cannot be used (its root is not an object, a `$ref` to a document elsewhere) is
`SchemaUnusable`, and the tool is left out with that reason (`doctor` lists it).
"""

from __future__ import annotations

import copy
from typing import Any

MAX_DEPTH = 32  # nesting of schemas below the root; deeper parts are accepted as any value
DROPPED_ANNOTATIONS = frozenset(
    {"$schema", "$id", "$anchor", "$comment", "readOnly", "writeOnly", "deprecated", "contentEncoding",
     "contentMediaType", "contentSchema", "$defs", "definitions", "examples"}
)  # fmt: skip
# Checks the subset does not make: the server makes them.
UNCHECKED = frozenset(
    {"uniqueItems", "multipleOf", "patternProperties", "propertyNames", "minProperties", "maxProperties",
     "not", "if", "then", "else", "contains", "minContains", "maxContains", "prefixItems",
     "additionalItems", "unevaluatedItems", "unevaluatedProperties", "dependentRequired",
     "dependentSchemas", "dependencies", "$dynamicRef", "$recursiveRef"}
)  # fmt: skip
SCHEMA_KEYS = ("items",)  # keywords whose value is one schema
SCHEMA_MAPS = ("properties",)  # keywords whose value maps names to schemas
SCHEMA_LISTS = ("anyOf", "oneOf")  # keywords whose value is a list of schemas


class SchemaUnusable(ValueError):
    """The schema cannot be brought to the subset: the message says why."""


class _Normaliser:
    def __init__(self, root: dict[str, Any]) -> None:
        self.defs: dict[str, Any] = {}
        for key in ("definitions", "$defs"):
            table = root.get(key)
            if isinstance(table, dict):
                self.defs.update({f"#/{key}/{name}": value for name, value in table.items()})
        self.root = root
        self.notes: list[str] = []

    def note(self, where: str, text: str) -> None:
        line = f"{where or 'the arguments'}: {text}"
        if line not in self.notes:
            self.notes.append(line)

    def resolve(self, ref: object, where: str) -> tuple[str, Any]:
        if ref == "#":
            return "#", self.root
        if not isinstance(ref, str) or ref not in self.defs:
            raise SchemaUnusable(f"{where}: $ref {ref!r} does not name a definition in this schema")
        return ref, self.defs[ref]

    def schema(self, schema: Any, where: str, depth: int, refs: tuple[str, ...]) -> dict[str, Any]:
        if schema is True:
            return {}
        if schema is False:
            raise SchemaUnusable(f"{where}: the schema false accepts nothing")
        if not isinstance(schema, dict):
            raise SchemaUnusable(f"{where}: a schema must be an object, got {type(schema).__name__}")
        if depth > MAX_DEPTH:
            self.note(where, f"nested deeper than {MAX_DEPTH} levels, not checked below")
            return {}
        out: dict[str, Any] = {}
        if "$ref" in schema:
            ref, target = self.resolve(schema["$ref"], where)
            if ref in refs:
                name = ref.rpartition("/")[2] or "the schema"
                self.note(where, f"{name} refers to itself; accepted as any value where it recurs")
                return {}
            out = self.schema(target, where, depth + 1, (*refs, ref))
        for key, value in schema.items():
            if key == "$ref" or key in DROPPED_ANNOTATIONS:
                continue
            if key in UNCHECKED:
                self.note(where, f"{key} is not checked before the call")
            elif key == "format":
                out["description"] = _with_hint(out.get("description") or schema.get("description"), value)
            elif key == "nullable":
                if value is True:
                    out["nullable"] = True
            elif key == "allOf":
                if not isinstance(value, list):
                    raise SchemaUnusable(f"{where}: allOf must be a list")
                for n, member in enumerate(value):
                    self.merge(out, self.schema(member, f"{where}.allOf[{n}]", depth + 1, refs), where)
            elif key == "additionalProperties" and not isinstance(value, bool):
                out[key] = True
                self.note(where, "the values of extra properties are not checked before the call")
            elif key in SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {
                    name: self.schema(sub, f"{where}.{name}" if where else name, depth + 1, refs)
                    for name, sub in value.items()
                }
            elif key in SCHEMA_KEYS and isinstance(value, dict | bool):
                out[key] = self.schema(value, f"{where}[]", depth + 1, refs)
            elif key in SCHEMA_KEYS and isinstance(value, list):
                self.note(where, "a tuple of item schemas is not checked before the call")
            elif key in SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self.schema(s, f"{where}", depth + 1, refs) for s in value]
            elif key == "description" and "description" in out:
                continue  # already carries a format hint
            else:
                self.merge(out, {key: copy.deepcopy(value)}, where)
        _bounds_of_draft4(out)
        if out.pop("nullable", False):
            _allow_null(out)
        return out

    def merge(self, into: dict[str, Any], other: dict[str, Any], where: str) -> None:
        for key, value in other.items():
            if key not in into:
                into[key] = value
            elif key == "properties":
                for name, sub in value.items():
                    if name in into["properties"] and into["properties"][name] != sub:
                        self.note(
                            f"{where}.{name}" if where else name,
                            "allOf members disagree; the first is checked",
                        )
                    into["properties"].setdefault(name, sub)
            elif key == "required":
                into["required"] = [*into["required"], *(r for r in value if r not in into["required"])]
            elif key in ("description", "title", "default"):
                continue
            elif into[key] != value:
                self.note(where, f"allOf members disagree on {key}; the first is checked")


def _with_hint(description: object, fmt: object) -> str:
    text = description if isinstance(description, str) else ""
    hint = f"(format: {fmt})"
    return f"{text} {hint}".strip() if hint not in text else text


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
    if isinstance(schema.get("enum"), list) and None not in schema["enum"]:
        schema["enum"] = [*schema["enum"], None]


def normalise(schema: Any) -> tuple[dict[str, Any], list[str]]:
    """The schema in edgeclaw's subset, and what is not checked before the call (empty: everything
    is). SchemaUnusable when the tool cannot be offered."""
    if not isinstance(schema, dict):
        raise SchemaUnusable("no inputSchema object")
    worker = _Normaliser(schema)
    out = worker.schema(schema, "", 0, ("#",))
    kind = out.get("type", "object")
    if kind != "object" and not (isinstance(kind, list) and "object" in kind):
        raise SchemaUnusable(f"its input schema is of type {kind!r}, not an object of named arguments")
    return out, worker.notes


def described(description: str, notes: list[str]) -> str:
    """The tool's description with what is checked only by the server."""
    if not notes:
        return description
    return f"{description}\n(Checked by the server only: {'; '.join(notes)}.)".strip()
