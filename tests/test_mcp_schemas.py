"""MCP servers' input schemas as real servers write them, brought to the subset edgeclaw checks: the
npm reference server `@modelcontextprotocol/server-everything` (zod's `$schema`) over stdio and
streamable HTTP, `mcp-server-time`, and a server of Pydantic models built with the official SDK
(`$defs`, `$ref`, Optional fields, enums, `format`, a model that contains itself)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from edgeclaw.tools.mcp.schema_subset import (
    MAX_DEPTH,
    MAX_PARTS,
    SchemaUnusable,
    described,
    normalise,
    usable,
)
from edgeclaw.tools.model_schema import model_definition
from edgeclaw.tools.schema import compile_schema
from tests.test_mcp_client import CTX, DEMO, TIME_SERVER, demo_stdio, free_port, runtime_with, wait_listening

MODELS = str(Path(__file__).resolve().parent / "mcp_servers" / "models_server.py")
EVERYTHING_VERSION = "2026.8.31"
NODE_CACHE = (
    Path(os.environ.get("EDGECLAW_TEST_CACHE", Path.home() / ".cache" / "edgeclaw-tests"))
    / f"mcp-everything-{EVERYTHING_VERSION}"
)
# What server-everything 2026.8.31 lists, each with arguments a model could send.
EVERYTHING_ARGS: dict[str, dict[str, Any]] = {
    "echo": {"message": "hello"},
    "get-annotated-message": {"messageType": "success", "includeImage": True},
    "get-env": {},
    "get-resource-links": {"count": 2},
    "get-resource-reference": {"resourceType": "Text", "resourceId": 1},
    "get-structured-content": {"location": "Chicago"},
    "get-sum": {"a": 2, "b": 40},
    "get-tiny-image": {},
    "gzip-file-as-resource": {
        "name": "x.gz",
        "data": "data:text/plain;base64,aGVsbG8=",
        "outputType": "resource",
    },
    "toggle-simulated-logging": {},
    "toggle-subscriber-updates": {},
    "trigger-long-running-operation": {"duration": 0.2, "steps": 2},
    # Runs only as an MCP task (taskSupport "required"): created, polled, its result fetched (~4 s).
    "simulate-research-query": {"topic": "soil moisture"},
}


# -- the rewriting, piece by piece --------------------------------------------------------------------
def test_refs_are_inlined_and_a_model_that_contains_itself_is_checked_down_to_where_it_recurs():
    schema = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "properties": {"root": {"$ref": "#/$defs/Node"}},
        "required": ["root"],
        "$defs": {
            "Node": {
                "type": "object",
                "properties": {
                    "label": {"type": "string"},
                    "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}},
                },
                "required": ["label"],
            }
        },
    }
    out, notes = normalise(schema)
    assert "$defs" not in out and "$schema" not in out
    check = compile_schema(out)
    check({"root": {"label": "a", "children": [{"anything": "below the recursion"}]}})
    with pytest.raises(ValueError, match=r"argument 'root.label': expected string"):
        check({"root": {"label": 1}})
    assert notes == ["root.children[]: Node refers to itself; accepted as any value where it recurs"]


def test_a_reference_to_another_place_in_the_schema_is_inlined_as_zod_writes_it():
    """zod-to-json-schema writes a schema used a second time as a pointer to the first use."""
    point = {"type": "object", "properties": {"lat": {"type": "number"}}, "required": ["lat"]}
    out, notes = normalise(
        {
            "type": "object",
            "properties": {
                "from": point,
                "to": {"$ref": "#/properties/from"},
                "stops": {"type": "array", "items": {"$ref": "#/$defs/a~1b%20c"}},  # escaped: "a/b c"
            },
            "$defs": {"a/b c": {"type": "integer"}},
        }
    )
    check = compile_schema(out)
    check({"from": {"lat": 1}, "to": {"lat": 2.5}, "stops": [1, 2]})
    with pytest.raises(ValueError, match=r"argument 'to.lat': expected number"):
        check({"from": {"lat": 1}, "to": {"lat": "2"}})
    with pytest.raises(ValueError, match=r"argument 'stops\[0\]': expected integer"):
        check({"stops": ["1"]})
    assert notes == []
    with pytest.raises(SchemaUnusable, match="only lead to each other"):
        normalise({"type": "object", "properties": {"me": {"$ref": "#/properties/me"}}})
    with pytest.raises(SchemaUnusable, match="does not name a definition"):
        normalise({"type": "object", "properties": {"to": {"$ref": "#/properties/nowhere"}}})


def test_optional_nullable_format_and_draft4_bounds():
    out, notes = normalise(
        {
            "type": "object",
            "properties": {
                "a": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
                "b": {"type": "string", "nullable": True, "enum": ["x", "y"]},
                "when": {"type": "string", "format": "date-time", "description": "The moment."},
                "n": {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            },
        }
    )
    check = compile_schema(out)
    check({"a": None, "b": None, "when": "not a date: the server checks formats", "n": 0.5})
    with pytest.raises(ValueError, match="'a'"):
        check({"a": "1"})
    with pytest.raises(ValueError, match="'n'"):
        check({"n": 0})  # draft 4's exclusiveMinimum: true beside minimum 0
    assert out["properties"]["when"]["description"] == "The moment. (format: date-time)"
    assert notes == []


def test_nullable_beside_branches_a_const_or_a_reference_admits_null():
    out, notes = normalise(
        {
            "type": "object",
            "properties": {
                "either": {"anyOf": [{"type": "integer"}, {"type": "string"}], "nullable": True},
                "one": {"oneOf": [{"type": "boolean"}], "nullable": True},
                "fixed": {"const": "on", "nullable": True},
                "point": {"$ref": "#/definitions/Point", "nullable": True},
                "env": {"type": "object", "additionalProperties": {}},
            },
            "definitions": {"Point": {"type": "object", "properties": {"x": {"type": "number"}}}},
        }
    )
    check = compile_schema(out)
    check({"either": None, "one": None, "fixed": None, "point": None, "env": {"a": [1]}})
    check({"either": "a", "one": True, "fixed": "on", "point": {"x": 1.5}})
    for bad in ({"either": 1.5}, {"one": 1}, {"fixed": "off"}, {"point": {"x": "1"}}):
        with pytest.raises(ValueError, match=f"argument '{next(iter(bad))}"):
            check(bad)
    assert notes == []  # additionalProperties {} is any value: nothing to say


def test_beside_a_reference_the_fields_own_description_wins_and_keeps_a_format_hint():
    defs = {
        "When": {"type": "string", "description": "A moment."},
        "Mode": {"enum": ["a"], "description": "M."},
    }
    out, _ = normalise(
        {
            "type": "object",
            "properties": {
                "at": {"$ref": "#/$defs/When", "description": "Departure.", "format": "date-time"},
                "mode": {"$ref": "#/$defs/Mode", "description": "How to travel."},
                "plain": {"$ref": "#/$defs/Mode"},
            },
            "$defs": defs,
        }
    )
    props = out["properties"]
    assert props["at"]["description"] == "Departure. (format: date-time)"
    assert props["mode"]["description"] == "How to travel."
    assert props["plain"]["description"] == "M."


def test_all_of_is_merged_and_a_disagreement_is_said():
    out, notes = normalise(
        {
            "allOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {"properties": {"b": {"type": "integer"}, "a": {"type": "integer"}}, "required": ["b"]},
            ]
        }
    )
    check = compile_schema(out)
    check({"a": "x", "b": 1})
    with pytest.raises(ValueError, match="'b'"):
        check({"a": "x"})
    assert notes == ["a: allOf members disagree; the first is checked"]


def test_what_only_the_server_checks_is_named_and_not_refused():
    out, notes = normalise(
        {
            "type": "object",
            "properties": {
                "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
                "env": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    )
    compile_schema(out)({"tags": ["a", "a"], "env": {"X": "1"}})
    assert notes == [
        "tags: uniqueItems is not checked before the call",
        "env: the values of extra properties are not checked before the call",
    ]


def test_nesting_is_bounded():
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH + 5):
        deep = {"type": "object", "properties": {"x": deep}}
    out, notes = normalise(deep)
    compile_schema(out)
    assert any(f"nested deeper than {MAX_DEPTH}" in n for n in notes)


def test_members_of_all_of_that_disagree_on_a_type_keep_the_first_and_say_so():
    out, notes = normalise(
        {"type": "object", "properties": {"n": {"allOf": [{"type": "integer"}, {"type": "string"}]}}}
    )
    check = compile_schema(out)
    check({"n": 1})
    with pytest.raises(ValueError, match=r"argument 'n': expected integer"):
        check({"n": "1"})
    assert notes == ["n: allOf members disagree on type; the first is checked"]


@pytest.mark.parametrize(
    "defs",
    [
        {"A": {"$ref": "#/$defs/B"}, "B": {"$ref": "#/$defs/A"}},
        {"A": {"anyOf": [{"type": "string"}, {"$ref": "#/$defs/A"}]}},
        {"A": {"allOf": [{"$ref": "#/$defs/B"}]}, "B": {"nullable": True, "$ref": "#/$defs/A"}},
    ],
)
def test_references_that_only_lead_to_each_other_are_refused_with_the_loop_named(defs):
    schema = {"type": "object", "properties": {"x": {"$ref": "#/$defs/A"}}, "$defs": defs}
    with pytest.raises(
        SchemaUnusable, match=r"^x(\.allOf\[0\])?: the references A -> (B -> )?A only lead to each other"
    ):
        normalise(schema)


def test_a_reference_to_the_whole_schema_at_its_own_place_is_a_loop_too():
    with pytest.raises(SchemaUnusable, match="only lead to each other"):
        normalise({"type": "object", "anyOf": [{"$ref": "#"}]})
    # Through a property it is a tree, checked down to where it recurs.
    out, notes = normalise(
        {"type": "object", "properties": {"next": {"$ref": "#"}, "v": {"type": "integer"}}}
    )
    compile_schema(out)({"next": {"anything": 1}, "v": 1})
    assert notes == ["next: # refers to itself; accepted as any value where it recurs"]


def test_a_definition_used_many_times_over_is_refused_before_it_is_built():
    """Two uses of the next level at each of 30 levels would inline 2**30 copies."""

    def levels(n: int) -> dict[str, Any]:
        defs: dict[str, Any] = {
            f"L{i}": {"type": "object", "properties": {k: {"$ref": f"#/$defs/L{i + 1}"} for k in "ab"}}
            for i in range(n)
        }
        defs[f"L{n}"] = {"type": "integer"}
        return {"type": "object", "properties": {"top": {"$ref": "#/$defs/L0"}}, "$defs": defs}

    started = time.monotonic()
    with pytest.raises(SchemaUnusable, match=f"more than {MAX_PARTS} parts once its references are inlined"):
        normalise(levels(30))
    assert time.monotonic() - started < 2
    out, _ = normalise(levels(8))  # 2**9 fields, each a reference and its target: within the bound
    compile_schema(out)({"top": {"a": {"b": {"a": {"b": {"a": {"b": {"a": {"b": 1}}}}}}}}})


def test_one_of_passes_any_branch_and_a_wrong_type_is_refused_naming_the_field():
    out, _ = normalise(
        {
            "type": "object",
            "properties": {"n": {"oneOf": [{"type": "number"}, {"type": "integer"}], "discriminator": {}}},
            "x-vendor": {"anything": True},
        }
    )
    check = compile_schema(out)
    check({"n": 3})  # integer and number both: exactly-one is the server's to insist on
    with pytest.raises(ValueError, match=r"argument 'n': matches none of the allowed forms"):
        check({"n": "3"})


def test_what_python_cannot_read_is_left_to_the_server_and_the_rest_is_checked():
    out, notes = usable(
        {
            "type": "object",
            "properties": {
                "word": {"type": "string", "pattern": "^\\p{L}+$", "maxLength": 4},
                "size": {"type": "integer", "minimum": 1},
            },
            "required": ["word", "extra"],
            "propertyNames": {"maxLength": 3},
        }
    )
    check = compile_schema(out)
    check({"word": "äb", "size": 1, "extra": [1]})
    with pytest.raises(ValueError, match=r"argument 'word': must be at most 4 characters"):
        check({"word": "abcde", "extra": 1})
    with pytest.raises(ValueError, match=r"argument 'size'"):
        check({"word": "a", "size": 0, "extra": 1})
    with pytest.raises(ValueError, match=r"'extra'"):
        check({"word": "a"})
    assert notes == [
        "word: the pattern ^\\p{L}+$ is not checked before the call",
        "the arguments: propertyNames is not checked before the call",
    ]


def test_enum_members_and_keywords_the_type_refuses_are_dropped_as_json_schema_never_applies_them():
    out, notes = usable(
        {
            "type": "object",
            "properties": {
                "mode": {"type": "string", "enum": ["a", "b", None]},
                "level": {"type": "number", "enum": [1, 2.5, "3"]},
                "either": {"type": "string", "enum": ["x", None], "nullable": True},
                "count": {"type": "integer", "maxLength": 5, "minimum": 1},  # maxLength: never applied
            },
        }
    )
    check = compile_schema(out)
    check({"mode": "a", "level": 1, "either": None, "count": 123456})
    with pytest.raises(ValueError, match=r"argument 'count': must be >= 1"):
        check({"count": 0})
    check({"level": 2.5, "either": "x"})
    for bad in ({"mode": None}, {"level": "3"}, {"mode": "c"}):
        with pytest.raises(ValueError, match=f"argument '{next(iter(bad))}'"):
            check(bad)
    assert notes == []
    with pytest.raises(SchemaUnusable, match="does not compile"):  # nothing left that could be sent
        usable({"type": "object", "properties": {"n": {"type": "integer", "enum": ["1"]}}})


def test_a_schema_that_is_not_json_schema_is_refused_with_the_compilers_reason():
    with pytest.raises(SchemaUnusable, match=r"does not compile: .*unknown type 'integr'"):
        usable({"type": "object", "properties": {"a": {"type": "integr"}}})
    # Required but forbidden: no arguments can ever satisfy it.
    with pytest.raises(SchemaUnusable, match="does not compile"):
        usable({"type": "object", "properties": {}, "required": ["a"], "additionalProperties": False})


def test_a_long_description_is_shortened_before_the_note_is():
    notes = ["tags: uniqueItems is not checked before the call"]
    text = described("word " * 400, notes, 1024)
    assert len(text) <= 1024 and text.endswith(f"(Checked by the server only: {notes[0]}.)"), text
    many = described("short", [f"f{i}: multipleOf is not checked before the call" for i in range(100)], 1024)
    assert (
        len(many) <= 1024
        and many.startswith("short\n(Checked by the server only: ")
        and many.endswith("...)")
    )
    assert described(" plain ", [], 1024) == "plain"


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": "string"}, "not an object of named arguments"),
        ({"type": "object", "properties": {"a": {"$ref": "other.json#/a"}}}, "does not name a definition"),
        ({"type": "object", "properties": {"a": False}}, "accepts nothing"),
        ([], "no inputSchema object"),
    ],
)
def test_schemas_that_cannot_be_used_say_why(schema: Any, says: str):
    with pytest.raises(SchemaUnusable, match=says):
        normalise(schema)


# -- real servers ---------------------------------------------------------------------------------------
async def test_a_server_of_pydantic_models_is_offered_whole_and_nulls_reach_it(tmp_path):
    runtime = runtime_with(
        tmp_path, {"models": {"command": sys.executable, "args": [MODELS], "sandbox": False}}
    )
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["models"]
        assert status["state"] == "connected" and status["broken"] == {}, status
        infos = {i.name: i for i in runtime.registry.infos(CTX)}
        every = {
            "mcp_models_plan",
            "mcp_models_maybe",
            "mcp_models_weekday",
            "mcp_models_tree",
            "mcp_models_pet",
        }
        assert {n for n in infos if n.startswith("mcp_models_")} == every
        assert "Checked by the server only" in infos["mcp_models_tree"].description
        # What models are shown: self-contained, every generated keyword rewritten or gone.
        for name in every:
            shown = json.dumps(model_definition(infos[name], "openai"))
            assert not any(k in shown for k in ('"$ref"', '"$defs"', '"oneOf"', '"discriminator"')), shown

        trip = {
            "name": "coast",
            "stops": [{"place": "Husum", "minutes": 20}, {"place": "Sylt", "minutes": 0}],
        }
        out = await runtime.registry.execute("mcp_models_plan", {"trip": trip}, CTX)
        assert out.ok, out.for_llm
        assert json.loads(out.for_llm) == {
            **trip,
            "mode": "train",
            "stops": [{**s, "note": None} for s in trip["stops"]],
        }
        bad = {**trip, "stops": [{"place": "Husum", "minutes": "twenty"}]}
        refused = await runtime.registry.execute("mcp_models_plan", {"trip": bad}, CTX)
        assert refused.refused and "trip.stops[0].minutes" in (refused.error or "")
        wrong_mode = await runtime.registry.execute("mcp_models_plan", {"trip": {**trip, "mode": "fly"}}, CTX)
        assert wrong_mode.refused and "trip.mode" in (wrong_mode.error or "")

        nulls = await runtime.registry.execute("mcp_models_maybe", {"count": None, "label": "x"}, CTX)
        assert nulls.ok and json.loads(nulls.for_llm) == {"count": None, "label": "x"}
        day = await runtime.registry.execute("mcp_models_weekday", {"at": "2026-12-05T10:00:00"}, CTX)
        assert day.ok and day.for_llm == "Saturday"
        nested = {"label": "a", "children": [{"label": "b", "children": [{"label": "c"}]}]}
        assert (await runtime.registry.execute("mcp_models_tree", {"root": nested}, CTX)).for_llm == "3"

        # A discriminated union (oneOf with a discriminator), an Optional model, int | str.
        dog = await runtime.registry.execute(
            "mcp_models_pet", {"pet": {"kind": "dog"}, "companion": None}, CTX
        )
        assert dog.ok and json.loads(dog.for_llm) == {
            "pet": {"kind": "dog", "good": True},
            "companion": None,
            "tag": 0,
        }, dog.for_llm
        cat = {"pet": {"kind": "cat", "lives": 3}, "companion": {"kind": "cat"}, "tag": "x"}
        both = await runtime.registry.execute("mcp_models_pet", cat, CTX)
        assert both.ok and json.loads(both.for_llm)["companion"] == {"kind": "cat", "lives": 9}, both.for_llm
        fish = await runtime.registry.execute("mcp_models_pet", {"pet": {"kind": "fish"}}, CTX)
        assert fish.refused and "'pet'" in (fish.error or ""), fish.error
        wrong = await runtime.registry.execute("mcp_models_pet", {"pet": {"kind": "dog"}, "tag": 1.5}, CTX)
        assert wrong.refused and "'tag'" in (wrong.error or ""), wrong.error
    finally:
        await runtime.aclose()


async def test_the_time_server_is_offered_whole(tmp_path):
    runtime = runtime_with(tmp_path, {"time": {"command": TIME_SERVER}})
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["time"]
        assert status["state"] == "connected" and status["broken"] == {} and status["tools"] == 2, status
        now = await runtime.registry.execute("mcp_time_get_current_time", {"timezone": "Etc/UTC"}, CTX)
        assert now.ok and json.loads(now.for_llm)["timezone"] == "Etc/UTC", now.for_llm
        args = {"source_timezone": "Europe/Berlin", "time": "12:00", "target_timezone": "Asia/Tokyo"}
        moved = await runtime.registry.execute("mcp_time_convert_time", args, CTX)
        assert moved.ok and json.loads(moved.for_llm)["target"]["timezone"] == "Asia/Tokyo", moved.for_llm
        missing = await runtime.registry.execute("mcp_time_convert_time", {"time": "12:00"}, CTX)
        assert missing.refused and "source_timezone" in (missing.error or ""), missing.error
    finally:
        await runtime.aclose()


@pytest.fixture(scope="session")
def everything() -> str:
    """server-everything's entry point, installed from npm once into the test cache."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        pytest.skip("node and npm are needed for server-everything (scripts/bootstrap --system)")
    package = NODE_CACHE / "node_modules" / "@modelcontextprotocol" / "server-everything"
    if not package.is_dir():
        NODE_CACHE.mkdir(parents=True, exist_ok=True)
        spec = f"@modelcontextprotocol/server-everything@{EVERYTHING_VERSION}"
        done = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--prefix", str(NODE_CACHE), spec],
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    return str(package / "dist" / "index.js")


async def assert_everything_works(runtime: Any, server: str) -> None:
    await runtime.mcp.start()
    status = runtime.mcp.status()[server]
    assert status["state"] == "connected", status
    assert status["broken"] == {}, status
    assert status["tools"] == len(EVERYTHING_ARGS), status
    offered = {
        n.removeprefix(f"mcp_{server}_") for n in runtime.registry.names() if n.startswith(f"mcp_{server}_")
    }
    assert offered == set(EVERYTHING_ARGS)
    for tool, args in EVERYTHING_ARGS.items():
        out = await runtime.registry.execute(f"mcp_{server}_{tool}", args, CTX)
        assert out.ok, (tool, out.error, out.for_llm)
    echo = await runtime.registry.execute(f"mcp_{server}_echo", {"message": "hello"}, CTX)
    assert echo.ok and "hello" in echo.for_llm, echo.for_llm
    total = await runtime.registry.execute(f"mcp_{server}_get-sum", {"a": 2, "b": 40}, CTX)
    assert total.ok and "42" in total.for_llm, total.for_llm
    [gzip] = [i for i in runtime.registry.infos(CTX) if i.name == f"mcp_{server}_gzip-file-as-resource"]
    assert "(format: uri)" in gzip.parameters["properties"]["data"]["description"]
    refused = await runtime.registry.execute(f"mcp_{server}_get-sum", {"a": 2, "b": "40"}, CTX)
    assert refused.refused and "'b'" in (refused.error or "")


async def test_server_everything_over_stdio(tmp_path, everything, caplog):
    node = shutil.which("node")
    runtime = runtime_with(
        tmp_path, {"ev": {"command": node, "args": [everything, "stdio"], "sandbox": False}}
    )
    try:
        with caplog.at_level("WARNING", logger="edgeclaw.mcp"):
            await assert_everything_works(runtime, "ev")
    finally:
        await runtime.aclose()
    said = [r.getMessage() for r in caplog.records if "not registered" in r.getMessage()]
    assert said == [], said


@pytest.fixture
def everything_http(everything: str) -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [shutil.which("node") or "node", everything, "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(port, proc, "server-everything")
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.terminate()
        proc.wait(10)


async def test_server_everything_over_streamable_http(tmp_path, everything_http):
    runtime = runtime_with(tmp_path, {"evh": {"transport": "http", "url": everything_http}})
    try:
        await assert_everything_works(runtime, "evh")
    finally:
        await runtime.aclose()


async def test_doctor_counts_the_tools_left_out(tmp_path):
    from edgeclaw.cli.doctor import mcp_findings

    runtime = runtime_with(tmp_path, {"demo": demo_stdio(flags=["--broken"])})
    try:
        findings = await mcp_findings(runtime)
    finally:
        await runtime.aclose()
    [summary] = [f for f in findings if f.level == "ok"]
    assert "1 left out" in summary.detail
    assert any(f.level == "warn" and "'add' left out" in f.detail for f in findings)


# -- in the default sandbox, as a user configures it ---------------------------------------------------
@pytest.fixture(scope="session")
def everything_installed(everything: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """server-everything where a user would install it (`npm install --prefix /opt/mcp ...`): not in a
    home directory, which the sandbox hides (the test cache is in one)."""
    prefix = tmp_path_factory.mktemp("opt-mcp")
    shutil.copytree(NODE_CACHE / "node_modules", prefix / "node_modules", symlinks=True)
    return str(prefix / Path(everything).relative_to(NODE_CACHE))


def _everything_config(state_env: dict[str, str], everything: str, extra: str = "") -> None:
    node = shutil.which("node")
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        f'board = "sim"\n{extra}\n[mcp.servers.ev]\ncommand = "{node}"\nargs = ["{everything}", "stdio"]\n'
    )


def test_server_everything_in_the_default_sandbox_lists_all_its_tools(
    run_cli, state_env, everything_installed
):
    _everything_config(state_env, everything_installed)
    out = run_cli("tools", "list", timeout=120)
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("mcp_ev_")]
    assert {r[0].removeprefix("mcp_ev_") for r in rows} == set(EVERYTHING_ARGS), out.stdout + out.stderr
    assert all(r[1] == "mcp:ev" for r in rows)


def test_a_chat_calls_server_everything_in_the_default_sandbox(run_cli, state_env, everything_installed):
    from tests.llm_server import ScriptedLLM, openai_text, openai_tools

    with ScriptedLLM() as llm:
        _everything_config(
            state_env,
            everything_installed,
            '[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
            f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 10\n',
        )
        llm.reply(
            openai_tools(("mcp_ev_get-sum", {"a": 19, "b": 23})),
            openai_tools(("mcp_ev_simulate-research-query", {"topic": "soil moisture"})),
            openai_text("The sum is 42."),
        )
        out = run_cli("chat", "--message", "what is 19 + 23? use the tool", timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "The sum is 42."
        result = next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")
        assert "42" in result["content"], result
        # The tool that runs only as a task, in the sandbox too: its report came back.
        report = [m for m in llm.requests[2]["messages"] if m["role"] == "tool"][-1]
        assert "Research Report: soil moisture" in report["content"], report


async def test_doctor_names_the_tools_checked_in_part_by_the_server_only(tmp_path):
    from edgeclaw.cli.doctor import mcp_findings

    runtime = runtime_with(
        tmp_path, {"models": {"command": sys.executable, "args": [MODELS], "sandbox": False}}
    )
    try:
        findings = await mcp_findings(runtime)
    finally:
        await runtime.aclose()
    assert [f.level for f in findings] == ["ok", "ok"], findings
    assert "5 tools, 1 checked in part by the server only" in findings[0].detail
    assert findings[1].detail == (
        "tool 'tree' checked in part here; by the server only: "
        "root.children[]: Node refers to itself; accepted as any value where it recurs"
    )


def test_from_the_command_line_a_null_reaches_the_server_and_doctor_says_what_it_left_out(run_cli, state_env):
    """The real CLI, the models server in the default sandbox: `tool call` with a null for an Optional
    field, a wrong type refused naming the field, and doctor's MCP lines."""
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        f'board = "sim"\n[mcp.servers.models]\ncommand = "{sys.executable}"\nargs = ["{MODELS}"]\n'
        f'[mcp.servers.demo]\ncommand = "{sys.executable}"\nargs = ["{DEMO}", "--broken"]\n'
    )
    out = run_cli("tool", "call", "mcp_models_maybe", '{"count": null, "label": "x"}', timeout=60)
    assert out.returncode == 0, (out.stdout, out.stderr)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"count": None, "label": "x"}, out.stdout
    bad = run_cli("tool", "call", "mcp_models_maybe", '{"count": "two"}', timeout=60)
    assert bad.returncode != 0 and "argument 'count'" in bad.stdout + bad.stderr, (bad.stdout, bad.stderr)
    doctor = run_cli("doctor", timeout=120)
    lines = [line for line in doctor.stdout.splitlines() if "mcp server models" in line]
    assert any("5 tools, 1 checked in part by the server only" in line for line in lines), doctor.stdout
    assert any("tool 'tree' checked in part here" in line for line in lines), doctor.stdout
    demo = [line for line in doctor.stdout.splitlines() if "mcp server demo" in line]
    assert any(", 1 left out" in line for line in demo), doctor.stdout
    assert any(line.startswith("warn") and "tool 'add' left out: " in line for line in demo), doctor.stdout


# -- whatever a server sends ----------------------------------------------------------------------------
_NAMES = st.sampled_from(["a", "b", "c"])
_LEAF = st.one_of(
    st.just({}),
    st.booleans(),
    st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(
                ["string", "integer", "number", "boolean", "null", "object", "array", "integr"]
            )
            | st.lists(st.sampled_from(["string", "null", "integer"]), max_size=3),
            "$ref": st.sampled_from(
                [
                    "#",
                    "#/$defs/A",
                    "#/$defs/B",
                    "#/definitions/C",
                    "#/properties/a",
                    "#/allOf/0",
                    "other.json#/x",
                    5,
                ]
            ),
            "nullable": st.booleans(),
            "format": st.sampled_from(["uri", "date-time"]),
            "enum": st.lists(st.one_of(st.none(), st.integers(), st.text(max_size=2)), max_size=3),
            "const": st.one_of(st.none(), st.integers(), st.text(max_size=2)),
            "minimum": st.one_of(st.integers(), st.booleans()),
            "exclusiveMinimum": st.booleans(),
            "maxLength": st.integers(-1, 5),
            "pattern": st.sampled_from(["^a+$", "\\p{L}", "(?<n>x)", "["]),
            "required": st.lists(_NAMES, max_size=3) | st.text(max_size=2),
            "uniqueItems": st.booleans(),
            "discriminator": st.just({"propertyName": "a"}),
            "x-extra": st.integers(),
        },
    ),
)


def _extend(inner: Any) -> Any:
    return st.fixed_dictionaries(
        {},
        optional={
            "type": st.sampled_from(["object", "array", "string"]),
            "properties": st.dictionaries(_NAMES, inner, max_size=3) | st.lists(inner, max_size=1),
            "items": inner | st.lists(inner, max_size=2),
            "additionalProperties": inner,
            "anyOf": st.lists(inner, max_size=3) | inner,
            "oneOf": st.lists(inner, max_size=3),
            "allOf": st.lists(inner, max_size=3) | inner,
            "required": st.lists(_NAMES, max_size=3),
            "nullable": st.booleans(),
            "$ref": st.sampled_from(["#/$defs/A", "#/$defs/B", "#/definitions/C"]),
        },
    )


_SCHEMAS = st.recursive(_LEAF, _extend, max_leaves=12)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(root=_SCHEMAS, a=_SCHEMAS, b=_SCHEMAS, c=_SCHEMAS)
@example(root={"allOf": [{"properties": [{}]}, {"properties": {"a": {}}}]}, a={}, b={}, c={})
@example(root={"allOf": [{"required": "ab"}, {"required": ["a"]}], "type": "object"}, a={}, b={}, c={})
def test_whatever_a_server_sends_is_either_usable_as_checked_or_refused_with_a_reason(root, a, b, c):
    """Schemas are third-party input: no crash, no hang, and what is accepted compiles as the registry
    will compile it."""
    if isinstance(root, dict):
        root = {**root, "$defs": {"A": a, "B": b}, "definitions": {"C": c}}
    try:
        out, notes = usable(root)
    except SchemaUnusable as e:
        assert str(e)
        event("refused")
        return
    event("usable, with notes" if notes else "usable")
    compile_schema(out)
    assert all(isinstance(n, str) and n for n in notes)
    assert usable(root) == (out, notes)  # the same server, the same tool


async def test_a_schema_the_rewriting_did_not_foresee_costs_that_tool_only(tmp_path, monkeypatch):
    from edgeclaw.tools.mcp import schema_subset

    real = schema_subset.usable

    def failing_for_add(schema: Any) -> Any:
        if "a" in schema.get("properties", {}):
            raise AttributeError("an unforeseen shape")
        return real(schema)

    monkeypatch.setattr(schema_subset, "usable", failing_for_add)
    runtime = runtime_with(tmp_path, {"demo": demo_stdio()})
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["demo"]
        assert status["state"] == "connected", status
        assert status["broken"] == {
            "add": "its input schema could not be read (AttributeError: an unforeseen shape)"
        }
        assert (await runtime.registry.execute("mcp_demo_echo", {"text": "hi"}, CTX)).for_llm == "hi"
    finally:
        await runtime.aclose()


async def test_a_task_that_outlives_the_call_s_time_is_cancelled(tmp_path, everything):
    """The research task takes ~4 s; with a 1 s bound the call ends then, saying so, and the task is
    cancelled on the server (tasks/cancel) rather than left running."""
    node = shutil.which("node")
    server = {"command": node, "args": [everything, "stdio"], "sandbox": False, "timeout_s": 1}
    runtime = runtime_with(tmp_path, {"ev": server})
    try:
        await runtime.mcp.start()
        started = time.monotonic()
        out = await runtime.registry.execute("mcp_ev_simulate-research-query", {"topic": "x"}, CTX)
        took = time.monotonic() - started
    finally:
        await runtime.aclose()
    assert not out.ok and "did not answer within 1 s" in (out.error or ""), out.error
    assert took < 3.5
