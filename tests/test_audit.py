"""The audit trail: one info line and one record per tool call, per console login event; the caller's
identity in each; argument values and tool output in none."""

from __future__ import annotations

import json
import logging
import re

import pytest

from edgeclaw.channels.console.login import LoginGate, LoginResult
from edgeclaw.config.pin_hash import hash_pin, parse_pin_hash
from edgeclaw.config.schema import Config
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.audit import AuditRecord, AuditTrail, log_line
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from edgeclaw.tools.policy import PolicyEngine, PolicyLayer, PolicyRules
from edgeclaw.tools.ratelimit import RateLimiter
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.scrub import Scrubber

# What a caller sent; it must appear in the caller's own answer and nowhere in the trail.
VALUE = "/srv/private/payroll-2024.csv"
OUTPUT = "Permission denied: root-only-contents-7731"


class Quoting(Tool):
    """Fails in every way a tool can, each time quoting the caller's value and some output."""

    name = "quoting"
    group = "fs"
    description = "Quotes its argument in every message."
    parameters = {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "how": {"enum": ["ok", "refuse", "error", "flag", "crash"]},
        },
        "required": ["path", "how"],
        "additionalProperties": False,
    }

    async def check(self, args, ctx):
        if args["how"] == "refuse":
            raise ToolRefused(f"{args['path']} is outside the workspace")

    async def execute(self, args, ctx):
        how, path = args["how"], args["path"]
        if how == "error":
            raise ToolError(f"cannot open {path}: {OUTPUT}")
        if how == "flag":
            return ToolResult.error(f"exit status 1\n{OUTPUT} ({path})")
        if how == "crash":
            raise ValueError(f"bad {path}")
        return f"read {path}"


CALLER = ToolContext(
    channel="mqtt", session_key="mqtt:ops", caller="mqtt:key:ops", request_id="req-17", sender="backend"
)


@pytest.fixture
def registry() -> tuple[Registry, list[AuditRecord]]:
    # MQTT widened to every tool, the one documented line an operator would write.
    rules = PolicyRules(channels={"mqtt": PolicyLayer(profile="full")})
    reg = Registry(PolicyEngine(rules), Scrubber(), RateLimiter(1000, 60.0))
    reg.register(Quoting())
    records: list[AuditRecord] = []
    reg.add_audit_sink(records.append)
    return reg, records


def audit_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "edgeclaw.audit"]


def test_the_daemon_logs_at_info_by_default() -> None:
    # The audit lines are info lines: at the daemon's default level they are in the journal.
    assert Config().log_level == "info"


async def test_every_tool_call_is_one_info_line_with_who_what_and_how(registry, caplog) -> None:
    caplog.set_level(logging.INFO, logger="edgeclaw.audit")
    reg, records = registry
    out = await reg.execute("quoting", {"path": VALUE, "how": "ok"}, CALLER)
    assert out.ok
    (line,) = audit_lines(caplog)
    assert line.levelno == logging.INFO
    text = line.getMessage()
    assert re.fullmatch(
        r"tool_call tool=quoting outcome=ok stage=ok caller=mqtt:key:ops channel=mqtt session=mqtt:ops "
        r"request=req-17 duration_ms=\d+\.\d\d args=[0-9a-f]{16}",
        text,
    ), text
    assert f"args={records[0].args_digest}" in text
    event = records[0].as_dict()
    assert (event["caller"], event["outcome"], event["request_id"]) == ("mqtt:key:ops", "ok", "req-17")
    # The caller's own answer is not audit text: it names the path.
    assert VALUE in out.for_llm


CASES = [
    pytest.param(
        {"how": "refuse"},
        "bounds",
        "refused",
        "refused by the tool's bounds check (ToolRefused)",
        id="bounds",
    ),
    pytest.param({"how": "error"}, "tool_error", "failed", "the tool failed (ToolError)", id="tool-error"),
    pytest.param({"how": "flag"}, "tool_error", "failed", "the tool reported an error", id="error-result"),
    pytest.param({"how": "crash"}, "exception", "failed", "internal error (ValueError)", id="exception"),
    pytest.param({"how": "nope"}, "arguments", "refused", "arguments: invalid", id="bad-value"),
    pytest.param({"how": "ok", VALUE: 1}, "arguments", "refused", "arguments: unknown", id="unknown-field"),
]


@pytest.mark.parametrize(("extra", "stage", "outcome", "reason"), CASES)
async def test_failures_are_recorded_without_the_callers_values(
    registry, caplog, extra, stage, outcome, reason
) -> None:
    caplog.set_level(logging.DEBUG)
    reg, records = registry
    out = await reg.execute("quoting", {"path": VALUE} | extra, CALLER)
    assert not out.ok and out.stage == stage
    # The caller is told the details (its own values included) ...
    assert VALUE in out.error or "'nope'" in out.error or "is not one of" in out.error
    # ... the record, the event it becomes and every log line say what happened in our words only.
    (record,) = records
    assert (record.stage, record.outcome, record.error) == (stage, outcome, reason)
    trail = json.dumps(record.as_dict()) + "\n".join(r.getMessage() for r in audit_lines(caplog))
    assert VALUE not in trail and OUTPUT not in trail and "nope" not in trail
    assert f'error="{reason}"' in audit_lines(caplog)[0].getMessage()


async def test_an_unknown_tool_name_is_recorded_cut_and_scrubbed(registry, caplog) -> None:
    caplog.set_level(logging.INFO, logger="edgeclaw.audit")
    reg, records = registry
    name = "exfil-sk-proj-" + "Q1w2E3r4" * 6
    out = await reg.execute(name, {}, CALLER)
    assert out.stage == "unknown_tool" and records[0].error == "unknown tool"
    assert "Q1w2E3r4" not in audit_lines(caplog)[0].getMessage() and "Q1w2E3r4" not in records[0].tool


async def test_an_identity_the_caller_declares_is_scrubbed_in_the_trail(registry, caplog) -> None:
    caplog.set_level(logging.INFO, logger="edgeclaw.audit")
    reg, records = registry
    token = "ghp_" + "Zx9" * 12
    ctx = ToolContext(channel="mqtt", session_key=f"mqtt:{token}", caller=f"mqtt:sender:{token}")
    await reg.execute("quoting", {"path": "a", "how": "ok"}, ctx)
    assert token not in json.dumps(records[0].as_dict()) and token not in caplog.text
    assert records[0].caller == "mqtt:sender:[REDACTED]"


def test_trail_lines_quote_what_needs_quoting_and_leave_out_what_is_unset(caplog) -> None:
    caplog.set_level(logging.DEBUG, logger="edgeclaw.audit")
    trail = AuditTrail(Scrubber(["s3cret-approver"]).scrub)
    events: list[dict] = []
    trail.add_sink(events.append)
    trail.emit(
        "approval", decision="deny", by="s3cret-approver", reason='timed out "after" 120 s', n=3, x=None
    )
    trail.emit("login", level=logging.WARNING, outcome="failed")
    first, second = audit_lines(caplog)
    assert (
        first.getMessage()
        == ('approval decision=deny by=[REDACTED] reason="timed out \\"after\\" 120 s" n=3')
        and first.levelno == logging.INFO
    )
    assert second.getMessage() == "login outcome=failed" and second.levelno == logging.WARNING
    assert events[0]["by"] == "[REDACTED]" and events[0]["kind"] == "approval"


def test_trail_fields_are_scrubbed_however_nested() -> None:
    trail = AuditTrail(Scrubber(["s3cret-approver"]).scrub)
    event = trail.emit("admin", names=["ok", "s3cret-approver"], detail={"by": {"who": "s3cret-approver"}})
    assert "s3cret-approver" not in json.dumps(event)
    assert event["names"] == ["ok", "[REDACTED]"] and event["detail"] == {"by": {"who": "[REDACTED]"}}


def test_log_line_values_with_control_characters_are_quoted() -> None:
    # A caller's name with a newline must not forge a second log line.
    assert log_line("k", {"caller": "a\ntool_call tool=x"}) == 'k caller="a\\ntool_call tool=x"'
    assert log_line("k", {"ok": True, "empty": ""}) == 'k ok=true empty=""'


async def test_console_logins_failures_lockouts_and_logouts_are_trail_events(caplog) -> None:
    caplog.set_level(logging.INFO, logger="edgeclaw.audit")
    pin_hash = parse_pin_hash(hash_pin("2468", "pbkdf2-sha256"))
    trail = AuditTrail()
    events: list[dict] = []
    trail.add_sink(events.append)
    gate = LoginGate(pin_hash, max_failures=2, lockout_s=60, failure_delay_s=0, trail=trail)
    assert (await gate.attempt("2468", "/dev/ttyGS0")).result is LoginResult.OK
    gate.log_logout("/dev/ttyGS0", "Ctrl-D")
    await gate.attempt("1357", "/dev/ttyGS0")
    await gate.attempt("9753", "/dev/ttyAMA0")
    assert (await gate.attempt("2468", "/dev/ttyGS0")).result is LoginResult.LOCKED
    shown = [(e["kind"], e.get("outcome"), e["caller"]) for e in events]
    assert shown == [
        ("login", "ok", "console:/dev/ttyGS0"),
        ("logout", None, "console:/dev/ttyGS0"),
        ("login", "failed", "console:/dev/ttyGS0"),
        ("login", "locked_out", "console:/dev/ttyAMA0"),
        ("login", "refused", "console:/dev/ttyGS0"),
    ]
    assert events[2]["failures"] == 1 and events[3]["lockout_s"] == 60
    assert all(e["channel"] == "console" for e in events)
    lines = [r.getMessage() for r in audit_lines(caplog)]
    assert lines[1] == "logout caller=console:/dev/ttyGS0 channel=console reason=Ctrl-D"
    # Nothing typed is ever in the trail.
    for entry in ("2468", "1357", "9753"):
        assert entry not in json.dumps(events) and entry not in "\n".join(lines)
