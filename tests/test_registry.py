"""The registry path: every step a call goes through, observed from the caller's side."""

from __future__ import annotations

import asyncio
import hashlib
import json

import pytest

from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.tools.audit import AuditRecord, args_digest
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from edgeclaw.tools.outcome import cap_text
from edgeclaw.tools.policy import PolicyEngine, PolicyLayer, PolicyRules
from edgeclaw.tools.ratelimit import RateLimiter
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.schema import SchemaError
from edgeclaw.tools.scrub import Scrubber


class Echo(Tool):
    name = "echo"
    group = "messaging"
    description = "Echo the text back."
    parameters = {
        "type": "object",
        "properties": {"text": {"type": "string"}, "times": {"type": "integer", "minimum": 1, "maximum": 3}},
        "required": ["text"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, args, ctx):
        self.calls += 1
        return ToolResult(for_llm=args["text"] * args.get("times", 1), for_user=f"user: {args['text']}")


class Sleeper(Tool):
    name = "sleeper"
    group = "runtime"
    description = "Sleep."
    parameters = {"type": "object", "properties": {"s": {"type": "number"}}, "additionalProperties": False}
    timeout_s = 0.2

    def __init__(self) -> None:
        self.cancelled = False

    async def execute(self, args, ctx):
        try:
            await asyncio.sleep(args.get("s", 10))
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "woke"


class Faulty(Tool):
    name = "faulty"
    group = "hardware"
    description = "Fails in the way it is told to."
    parameters = {
        "type": "object",
        "properties": {"how": {"enum": ["tool", "backend", "crash", "refuse", "flag", "own_timeout"]}},
        "required": ["how"],
        "additionalProperties": False,
    }

    async def check(self, args, ctx):
        if args["how"] == "refuse":
            raise ToolRefused("address 0x10 is not granted by the board profile")

    async def execute(self, args, ctx):
        how = args["how"]
        if how == "tool":
            raise ToolError("no device acknowledged at 0x48 on bus 1")
        if how == "backend":
            raise BackendError("bus 1 is busy")
        if how == "crash":
            raise KeyError("oops")
        if how == "own_timeout":
            raise TimeoutError
        return ToolResult.error("reported failure")


class Loud(Tool):
    name = "loud"
    group = "fs"
    description = "Prints a lot, some of it secret."
    parameters = {"type": "object", "properties": {"n": {"type": "integer"}}, "additionalProperties": False}

    async def execute(self, args, ctx):
        return ToolResult(
            for_llm="key=" + "sk-proj-" + "A" * 40 + " pw hunter2-secret " + "x" * args.get("n", 0),
            for_user="token: ghp_" + "b" * 36,
        )


def make(rules: PolicyRules | None = None, limit: int = 150, **kw) -> tuple[Registry, list[AuditRecord]]:
    scrubber = Scrubber()
    scrubber.add_secret("hunter2-secret")
    reg = Registry(PolicyEngine(rules or PolicyRules()), scrubber, RateLimiter(limit, 30.0), **kw)
    for tool in (Echo(), Sleeper(), Faulty(), Loud()):
        reg.register(tool)
    records: list[AuditRecord] = []
    reg.add_audit_sink(records.append)
    return reg, records


CTX = ToolContext(session_key="s1")


async def test_ok_call_returns_both_outputs_and_audits():
    reg, records = make()
    out = await reg.execute("echo", {"text": "hi", "times": 2}, CTX)
    assert out.ok and out.for_llm == "hihi" and out.for_user == "user: hi" and out.error is None
    assert out.duration_ms >= 0
    assert [(r.tool, r.ok, r.stage, r.session) for r in records] == [("echo", True, "ok", "s1")]
    assert len(records[0].args_digest) == 16
    assert out.as_dict().keys() == {"ok", "tool", "for_llm", "for_user", "error", "duration_ms"}


async def test_arguments_as_json_text():
    reg, _ = make()
    assert (await reg.execute("echo", '{"text": "x"}', CTX)).for_llm == "x"
    bad = await reg.execute("echo", '{"text": ', CTX)
    assert bad.refused and bad.stage == "arguments" and "not valid JSON" in bad.error


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({}, "text"),
        ({"text": 5}, "'text'"),
        ({"text": "a", "times": 9}, "'times'"),
        ({"text": "a", "colour": "red"}, "'colour'"),
        ([1, 2], "JSON object"),
    ],
)
async def test_schema_errors_name_the_field_and_do_not_run(args, needle):
    reg, records = make()
    out = await reg.execute("echo", args, CTX)
    assert not out.ok and out.refused and out.stage == "arguments"
    assert needle in out.error and out.error.startswith("echo: ")
    assert reg.get("echo").calls == 0
    assert records[-1].stage == "arguments"


async def test_unknown_tool_refused():
    reg, _ = make()
    out = await reg.execute("rm_rf", {}, CTX)
    assert out.refused and out.stage == "unknown_tool" and "unknown tool 'rm_rf'" in out.error


async def test_policy_refusal_says_why_and_does_not_run():
    reg, _ = make(PolicyRules(deny=("echo",)))
    out = await reg.execute("echo", {"text": "a"}, CTX)
    assert out.refused and out.stage == "policy" and "tools.deny" in out.error
    assert reg.get("echo").calls == 0
    assert "echo" not in [i.name for i in reg.infos(CTX)]


async def test_rate_limit_is_per_caller_not_per_session_and_limited_calls_do_not_run():
    reg, _ = make(PolicyRules(channels={"mqtt": PolicyLayer(profile="full")}), limit=3)
    alice = ToolContext(channel="mqtt", session_key="mqtt:a", caller="mqtt:key:alice")
    for _ in range(3):
        assert (await reg.execute("echo", {"text": "a"}, alice)).ok
    limited = await reg.execute("echo", {"text": "a"}, alice)
    assert limited.refused and limited.stage == "rate_limit"
    assert "caller 'mqtt:key:alice' may make 3 tool calls at once" in limited.error
    assert reg.get("echo").calls == 3
    # A new session name does not give the same caller a new allowance; another caller has its own.
    elsewhere = ToolContext(channel="mqtt", session_key="mqtt:other", caller="mqtt:key:alice")
    assert (await reg.execute("echo", {"text": "a"}, elsewhere)).stage == "rate_limit"
    bob = ToolContext(channel="mqtt", session_key="mqtt:a", caller="mqtt:key:bob")
    assert (await reg.execute("echo", {"text": "a"}, bob)).ok


async def test_dry_run_runs_checks_but_not_the_body_and_uses_no_rate_slot():
    reg, _ = make(limit=1)
    out = await reg.execute("echo", {"text": "a"}, CTX, dry_run=True)
    assert out.ok and out.stage == "dry_run" and reg.get("echo").calls == 0
    refused = await reg.execute("faulty", {"how": "refuse"}, CTX, dry_run=True)
    assert refused.refused and refused.stage == "bounds" and "not granted" in refused.error
    assert (await reg.execute("echo", {"text": "a"}, CTX)).ok  # the slot was still free


async def test_timeout_cancels_the_body():
    reg, _ = make()
    out = await reg.execute("sleeper", {"s": 5}, CTX)
    assert not out.ok and not out.refused and out.stage == "timeout"
    assert "timed out after 0.2 s" in out.error
    assert reg.get("sleeper").cancelled


AUDIT_REASONS = {
    "tool": "the tool failed (ToolError)",
    "backend": "the tool failed (BackendError)",
    "crash": "internal error (KeyError)",
    "refuse": "refused by the tool's bounds check (ToolRefused)",
    "flag": "the tool reported an error",
    "own_timeout": "operation timed out",
}


@pytest.mark.parametrize(
    ("how", "stage", "refused", "needle"),
    [
        ("tool", "tool_error", False, "no device acknowledged at 0x48 on bus 1"),
        ("backend", "tool_error", False, "bus 1 is busy"),
        ("crash", "exception", False, "internal error: KeyError"),
        ("refuse", "bounds", True, "not granted by the board profile"),
        ("flag", "tool_error", False, "reported failure"),
        ("own_timeout", "tool_error", False, "operation timed out"),
    ],
)
async def test_failures_become_results(how, stage, refused, needle):
    reg, records = make()
    out = await reg.execute("faulty", {"how": how}, CTX)
    assert (out.ok, out.stage, out.refused) == (False, stage, refused)
    assert needle in out.error and out.for_llm == out.error
    # The audit record says what went wrong in the registry's words; the caller's answer has the details.
    assert records[-1].error == AUDIT_REASONS[how]
    assert records[-1].outcome == ("refused" if refused else "failed")


async def test_outputs_are_scrubbed_and_capped():
    reg, _ = make(max_output_bytes=2048)
    out = await reg.execute("loud", {"n": 10_000}, CTX)
    assert "sk-proj-" not in out.for_llm and "hunter2-secret" not in out.for_llm
    assert "[REDACTED]" in out.for_llm and "ghp_" not in out.for_user
    assert len(out.for_llm.encode()) <= 2048 + 100
    assert "output truncated" in out.for_llm


def test_cap_text_keeps_characters_whole():
    text = "é" * 5000
    capped = cap_text(text, 1024)
    assert len(capped.encode()) <= 1024 and "truncated" in capped
    assert capped.startswith("é")
    assert cap_text("short", 1024) == "short"


async def test_one_instance_serves_concurrent_sessions():
    reg, records = make()
    results = await asyncio.gather(
        *(reg.execute("echo", {"text": str(i)}, ToolContext(session_key=f"s{i}")) for i in range(50))
    )
    assert [r.for_llm for r in results] == [str(i) for i in range(50)]
    assert {r.session for r in records} == {f"s{i}" for i in range(50)}
    assert reg.stats.tools["echo"].calls == 50


async def test_definitions_follow_the_policy_in_both_formats():
    reg, _ = make(PolicyRules(profile="minimal", also_allow=("echo",)))
    openai = reg.definitions(CTX, "openai")
    assert [d["function"]["name"] for d in openai] == ["echo"]
    assert openai[0]["type"] == "function" and openai[0]["function"]["parameters"]["required"] == ["text"]
    anthropic = reg.definitions(CTX, "anthropic")
    assert anthropic == [
        {"name": "echo", "description": "Echo the text back.", "input_schema": Echo.parameters}
    ]


def test_bad_schema_fails_at_registration():
    class Broken(Echo):
        name = "broken"
        parameters = {"type": "object", "properties": {"x": {"type": "strnig"}}}

    reg, _ = make()
    with pytest.raises(SchemaError):
        reg.register(Broken())
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Echo())


async def test_drain_gives_grace_then_cancels_in_flight_calls():
    reg, _ = make()
    reg.get("sleeper").timeout_s = 30
    reg.register(reg.get("sleeper"), replace=True)
    quick = asyncio.create_task(reg.execute("sleeper", {"s": 0.05}, CTX))
    slow = asyncio.create_task(reg.execute("sleeper", {"s": 30}, CTX))
    await asyncio.sleep(0.01)
    assert reg.in_flight == 2
    await asyncio.wait_for(reg.drain(0.3), 5)
    assert (await quick).ok  # finished inside the grace period
    out = await slow
    assert out.stage == "cancelled" and "shutting down" in out.error
    late = await reg.execute("echo", {"text": "a"}, CTX)
    assert late.refused and "shutting down" in late.error


async def test_a_failing_audit_sink_does_not_fail_the_call():
    reg, _ = make()

    def broken(record):
        raise RuntimeError("sink down")

    reg.add_audit_sink(broken)
    assert (await reg.execute("echo", {"text": "a"}, CTX)).ok


# -- fail closed: nothing a caller sends, and no fault in a check, escapes as an exception -----


class Free(Tool):
    """Takes any value under `data`, as custom and MQTT-facing tools may."""

    name = "free"
    group = "messaging"
    description = "Accepts anything."
    parameters = {"type": "object", "properties": {"data": {}}, "additionalProperties": False}

    async def execute(self, args, ctx):
        return "ok"


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply", id="deep-json"),
        pytest.param('{"text": "a", "times": ' + "9" * 5000 + "}", "too many digits", id="huge-integer"),
    ],
)
async def test_hostile_json_arguments_are_refused_not_raised(args, needle):
    reg, records = make()
    out = await reg.execute("echo", args, CTX)
    assert out.refused and out.stage == "arguments" and needle in out.error
    assert records[-1].stage == "arguments"


async def test_deeply_nested_mapping_arguments_are_audited_without_crashing():
    reg, records = make()
    reg.register(Free())
    deep: list = []
    for _ in range(5000):
        deep = [deep]
    out = await reg.execute("free", {"data": deep}, CTX)
    assert out.ok and len(records[-1].args_digest) == 16


async def test_a_policy_that_cannot_be_evaluated_refuses_the_call():
    reg, _ = make(PolicyRules(profile="no-such-profile"))  # validate() would have said so
    out = await reg.execute("echo", {"text": "a"}, CTX)
    # "internal", not "exception": nothing ran (an exception stage means the body raised).
    assert not out.ok and out.refused and out.stage == "internal" and "internal error" in out.error
    assert reg.get("echo").calls == 0


async def test_a_result_that_is_not_text_becomes_an_error_result():
    class Sloppy(Echo):
        name = "sloppy"

        async def execute(self, args, ctx):
            return ToolResult(for_llm=None)  # type: ignore[arg-type]

    reg, _ = make()
    reg.register(Sloppy())
    out = await reg.execute("sloppy", {"text": "a"}, CTX)
    assert not out.ok and out.stage == "exception" and "not a str" in out.error


def test_cap_text_stays_within_a_limit_smaller_than_its_note():
    assert len(cap_text("x" * 1000, 10).encode()) <= 10
    assert len(cap_text("é" * 1000, 11).encode()) <= 11


async def test_unknown_tool_names_are_audited_short_and_scrubbed():
    reg, records = make()
    out = await reg.execute("hunter2-secret" + "x" * 5000, {}, CTX)
    assert out.refused and out.stage == "unknown_tool"
    assert "hunter2-secret" not in records[-1].tool and len(records[-1].tool) <= 64


def test_args_digest_is_keyed_so_short_arguments_cannot_be_guessed():
    args = {"pin": "1234"}
    plain = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    assert args_digest(args) == args_digest(dict(args))  # stable within the process
    assert args_digest(args) != hashlib.sha256(plain.encode()).hexdigest()[:16]
    assert args_digest(args) != args_digest({"pin": "1235"})


async def test_a_registered_secret_is_scrubbed_from_json_output():
    secret = 'pässwort "geheim"'

    class Reporter(Echo):
        name = "reporter"

        async def execute(self, args, ctx):
            text = json.dumps({"config": {"note": secret}})  # ensure_ascii: "p\u00e4sswort \"geheim\""
            return ToolResult(for_llm=text, for_user=text)

    reg, _ = make()
    reg.scrubber.add_secret(secret)
    reg.register(Reporter())
    out = await reg.execute("reporter", {"text": "a"}, CTX)
    assert out.ok and "geheim" not in out.for_llm and "geheim" not in (out.for_user or "")


# -- deferred families: named now, built on first use ---------------------------------------------
class Counting:
    """A family loader that says how often it ran and can be told to fail or to drift."""

    def __init__(self) -> None:
        self.runs = 0
        self.fail: Exception | None = None
        self.build = lambda: [Echo(), Sleeper()]

    def __call__(self) -> list[Tool]:
        self.runs += 1
        if self.fail is not None:
            raise self.fail
        return self.build()


DEFERRED = {"echo": "messaging", "sleeper": "runtime"}


def bare(rules: PolicyRules | None = None) -> Registry:
    return Registry(PolicyEngine(rules or PolicyRules()), Scrubber(), RateLimiter(150, 30.0))


async def test_a_deferred_family_is_named_at_once_and_built_once_on_first_call():
    reg = bare(PolicyRules(deny=("group:runtime",)))
    load = Counting()
    reg.register_deferred(DEFERRED, load)
    assert reg.names() == ["echo", "sleeper"] and load.runs == 0
    # The policy knows the groups without building anything: a rule on a group applies before
    # the family is built.
    assert reg.policy.allowed(CTX) == frozenset({"echo"}) and load.runs == 0
    assert reg.policy.validate() == [] and load.runs == 0
    outcome = await reg.execute("echo", {"text": "hi"}, CTX)
    assert outcome.ok and outcome.for_llm == "hi" and load.runs == 1
    refused = await reg.execute("sleeper", {"s": 0}, CTX)
    assert refused.refused and refused.stage == "policy"
    assert [i.name for i in reg.infos()] == ["echo", "sleeper"] and load.runs == 1


async def test_a_deferred_family_that_fails_to_build_refuses_each_call_and_is_tried_again():
    reg = bare()
    load = Counting()
    load.fail = ImportError("no module named 'espeak'")
    reg.register_deferred(DEFERRED, load)
    first = await reg.execute("echo", {"text": "hi"}, CTX)
    assert not first.ok and first.refused and first.stage == "internal"
    assert "espeak" in first.error
    assert reg.names() == ["echo", "sleeper"]  # still named, not silently gone
    load.fail = None
    assert (await reg.execute("echo", {"text": "hi"}, CTX)).ok and load.runs == 2


def test_a_deferred_family_must_build_exactly_what_it_named():
    reg = bare()
    load = Counting()
    load.build = lambda: [Echo()]  # sleeper named but not built
    reg.register_deferred(DEFERRED, load)
    with pytest.raises(RuntimeError, match="registered as"):
        reg.get("echo")
    other = bare()
    other.register_deferred({"echo": "runtime"}, lambda: [Echo()])  # built in another group
    with pytest.raises(RuntimeError, match="registered as"):
        other.get("echo")


def test_deferred_names_are_taken_like_registered_ones():
    reg = bare()
    reg.register_deferred(DEFERRED, Counting())
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Echo())
    with pytest.raises(ValueError, match="already registered"):
        reg.register_deferred({"echo": "messaging"}, Counting())
    reg.unregister("sleeper")  # builds the family, then removes the one tool
    assert reg.names() == ["echo"]
