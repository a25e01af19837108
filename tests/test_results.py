"""What a call gives back: one text, structured data beside it, and a cut that says so wherever it is read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from edgeclaw.channels.console.render import layout, to_rows
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from edgeclaw.tools.outcome import TRUNCATION_NOTE, cap_text
from edgeclaw.tools.policy import PolicyEngine, PolicyRules
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.scrub import Scrubber

CTX = ToolContext(session_key="results")


class Figures(Tool):
    """Returns whatever structured data the test hands it."""

    name = "figures"
    group = "hardware"
    description = "Return figures."
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self) -> None:
        self.data: Any = None

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(for_llm="some figures", data=self.data)


def registry(max_output_bytes: int = 32 * 1024) -> tuple[Registry, Figures]:
    scrubber = Scrubber()
    scrubber.add_secret("hunter2-secret")
    reg = Registry(PolicyEngine(PolicyRules()), scrubber, max_output_bytes=max_output_bytes)
    tool = Figures()
    reg.register(tool)
    return reg, tool


async def test_data_is_passed_on_and_as_dict_adds_it_only_when_present():
    reg, tool = registry()
    plain = await reg.execute("figures", {}, CTX)
    assert plain.data is None
    assert set(plain.as_dict()) == {"ok", "tool", "for_llm", "for_user", "error", "duration_ms"}
    tool.data = {"bus": 1, "addresses": ["0x48"], "ok": True, "ratio": 0.5, "none": None}
    out = await reg.execute("figures", {}, CTX)
    assert out.ok and out.data == tool.data
    assert json.loads(json.dumps(out.as_dict()))["data"] == tool.data


async def test_secrets_in_data_are_scrubbed_string_by_string():
    reg, tool = registry()
    tool.data = {"note": 'pw "hunter2-secret"', "nested": [{"key": "sk-proj-" + "A" * 40}], "n": 3}
    out = await reg.execute("figures", {}, CTX)
    dumped = json.dumps(out.data)
    assert "hunter2-secret" not in dumped and "sk-proj-" not in dumped
    assert out.data is not None and out.data["n"] == 3 and "[REDACTED]" in out.data["note"]


async def test_data_over_the_output_limit_is_left_out_and_the_texts_say_so():
    reg, tool = registry(max_output_bytes=1024)
    tool.data = {"block": "ab " * 2000}
    out = await reg.execute("figures", {}, CTX)
    assert out.ok and out.data is None
    assert "[structured data left out: " in out.for_llm and "1024-byte limit" in out.for_llm


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (["not", "a", "dict"], "is a list, not a dict"),
        ({"when": object()}, "holds a object"),
        ({"x": float("nan")}, "NaN"),
        ({1: "int key"}, "not a str"),
        ({"big": 10**400}, "too long"),
    ],
)
async def test_data_that_is_not_json_is_the_tools_bug(data, words):
    reg, tool = registry()
    tool.data = data
    out = await reg.execute("figures", {}, CTX)
    assert not out.ok and out.stage == "exception" and words in (out.error or "")


def test_a_deeply_nested_data_tree_is_refused_not_a_recursion_error():
    import asyncio

    reg, tool = registry()
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(5000):
        node["x"] = {}
        node = node["x"]
    tool.data = deep
    out = asyncio.run(reg.execute("figures", {}, CTX))
    assert not out.ok and "nested over" in (out.error or "")


def test_the_registry_note_survives_the_consoles_row_limit():
    text = cap_text("\n".join(f"line {i:04d} " + "x" * 60 for i in range(2000)), 32 * 1024)
    assert TRUNCATION_NOTE.search(text.splitlines()[-1])
    rows = to_rows(text, 80)
    b = layout(text, 80, 400, keep_last=TRUNCATION_NOTE.fullmatch)
    assert len(b.rows) == 400 and b.cut == len(rows) - 401
    assert b.tail and TRUNCATION_NOTE.fullmatch(b.tail[-1])
    assert "line 0000" in b.rows[0]


def test_tool_call_prints_a_commands_output_without_an_extra_blank_line(run_cli):
    out = run_cli("tool", "call", "exec", '{"command": "printf \'one\\\\ntwo\\\\n\'"}')
    assert out.returncode == 0, out.stderr
    assert out.stdout == "one\ntwo\n"
    scan = run_cli("tool", "call", "i2c", '{"action": "scan", "bus": 1}', "--board", "sim")
    assert scan.stdout.endswith("  0x77  device 'enclosure' (bmp280)\n")  # the last device found
    assert not scan.stdout.endswith("\n\n")
