"""The audit trail: what the registry records about each call, the other security events, and
running statistics.

Every tool call gives one `AuditRecord`: one info line on the `edgeclaw.audit`
logger and one dict for each sink (the MQTT channel publishes them on
`events`). Approval decisions, admin changes and console logins go through
`AuditTrail` the same way. Statistics feed telemetry and `session_status`.

Neither quotes what a caller sent. Arguments appear only as a digest, and an
error only as the stage plus a reason in our own words ("refused by the
tool's bounds check (FileTooLarge)"), never the message the caller got back,
which names paths, commands and output. Everything is scrubbed besides.

The digest is keyed with a random per-process key: a plain hash of
`{"pin": "1234"}` would give a short argument away to anyone hashing guesses
against the events topic.

Log lines are ``KIND key=value ...``, values with spaces or quotes in JSON
quotes, so they can be read by eye and split by a program:

    tool_call tool=read_file outcome=refused stage=bounds caller=mqtt:ops channel=mqtt
    session=mqtt:ops duration_ms=0.41 args=4f2a9c0d1b7e3a55 error="refused by the tool's bounds
    check (ToolRefused)"
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import Any

from edgeclaw.records import dataclass

_DIGEST_KEY = os.urandom(16)


def args_digest(args: Mapping[str, Any]) -> str:
    """A short digest of the arguments: the same call gives the same digest while the daemon runs."""
    try:
        blob = json.dumps(args, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):  # mixed key types, a cycle, deep nesting
        try:
            blob = repr(sorted(args.items(), key=lambda kv: str(kv[0])))
        except RecursionError:
            blob = "(arguments nested too deeply to digest)"
    import hashlib  # at the first call digested, not at every start

    data = blob.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8, key=_DIGEST_KEY).hexdigest()


def _logfmt_value(value: Any) -> str:
    """A value as it appears in a log line: bare when it is one plain word, else in JSON quotes."""
    if isinstance(value, bool):
        return "true" if value else "false"
    text = value if isinstance(value, str) else str(value)
    if not text or any(c.isspace() or c in '"=\\' or not c.isprintable() for c in text):
        return json.dumps(text, ensure_ascii=False)
    return text


def log_line(kind: str, fields: Mapping[str, Any]) -> str:
    """``KIND key=value ...`` for the fields that are set (None left out)."""
    words = [kind]
    words += [f"{key}={_logfmt_value(value)}" for key, value in fields.items() if value is not None]
    return " ".join(words)


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One tool call, as the events topic and the log show it. Every text field is already scrubbed."""

    ts: float  # wall clock, seconds since the epoch
    tool: str
    session: str
    channel: str
    agent_id: str
    ok: bool
    stage: str  # "ok", "dry_run", or where it stopped: "unknown_tool", "arguments", "policy", ...
    duration_ms: float
    args_digest: str
    error: str | None  # the reason in our own words, never the caller's values; None when ok
    caller: str = ""  # the caller's identity (ToolContext.identity)
    request_id: str = ""  # the channel's request id, when there is one
    refused: bool = False  # stopped before the tool body ran

    @property
    def outcome(self) -> str:
        return "ok" if self.ok else ("refused" if self.refused else "failed")

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "tool": self.tool,
            "caller": self.caller,
            "session": self.session,
            "channel": self.channel,
            "agent": self.agent_id,
            "request_id": self.request_id or None,
            "ok": self.ok,
            "outcome": self.outcome,
            "stage": self.stage,
            "duration_ms": round(self.duration_ms, 3),
            "args_digest": self.args_digest,
            "error": self.error,
        }

    def log_line(self) -> str:
        return log_line(
            "tool_call",
            {
                "tool": self.tool,
                "outcome": self.outcome,
                "stage": self.stage,
                "caller": self.caller,
                "channel": self.channel,
                "session": self.session,
                "request": self.request_id or None,
                "duration_ms": f"{self.duration_ms:.2f}",
                "args": self.args_digest,
                "error": self.error,
            },
        )


AuditSink = Callable[[AuditRecord], None]
audit_log = logging.getLogger("edgeclaw.audit")
# A sink that fails is the registry's trouble, logged where its other faults are.
_registry_log = logging.getLogger("edgeclaw.tools")


class AuditSinks:
    """Where each tool call's audit record goes: an info line on the `edgeclaw.audit` log, and
    every sink added (the daemon's event stream, tests)."""

    __slots__ = ("_sinks",)

    def __init__(self) -> None:
        self._sinks: list[AuditSink] = []

    def add(self, sink: AuditSink) -> None:
        self._sinks.append(sink)

    def remove(self, sink: AuditSink) -> None:
        if sink in self._sinks:
            self._sinks.remove(sink)

    @property
    def wanted(self) -> bool:
        """Would a record go anywhere? (Otherwise the registry does not build one.)"""
        return bool(self._sinks) or audit_log.isEnabledFor(logging.INFO)

    def emit(self, record: AuditRecord) -> None:
        if audit_log.isEnabledFor(logging.INFO):
            audit_log.info("%s", record.log_line())
        for sink in self._sinks:
            try:
                sink(record)
            except Exception:
                # An audit sink failing must not turn a good call into a failed one.
                _registry_log.exception("audit sink failed")


@dataclass(slots=True)
class ToolCounters:
    """Calls of one tool since start: how many, how many failed or were refused, total time."""

    calls: int = 0
    errors: int = 0
    refused: int = 0
    total_ms: float = 0.0


@dataclass(slots=True)
class SessionCounters:
    """Tool calls of one session since start, and its last tool and activity."""

    calls: int = 0
    errors: int = 0
    last_tool: str = ""
    last_activity: float = 0.0  # wall clock


# Session names come from callers: the per-session table keeps the most recently active ones, and
# forgets a session idle this long, so its size never depends on how many names were invented.
MAX_SESSIONS_TRACKED = 1024
SESSION_IDLE_FORGET_S = 24 * 3600.0


@dataclass
class ToolStats:
    """Running totals since start, per tool and per session (least recently active dropped first)."""

    started: float = field(default_factory=time.time)
    tools: dict[str, ToolCounters] = field(default_factory=dict)
    # Least recently active first, so dropping the idlest is O(1).
    sessions: OrderedDict[str, SessionCounters] = field(default_factory=OrderedDict)

    def record(
        self, tool: str, session: str, ok: bool, refused: bool, duration_ms: float, now: float
    ) -> None:
        t = self.tools.get(tool)
        if t is None:
            t = self.tools[tool] = ToolCounters()
        t.calls += 1
        t.total_ms += duration_ms
        if refused:
            t.refused += 1
        elif not ok:
            t.errors += 1
        sessions = self.sessions
        s = sessions.get(session)
        if s is None:
            s = sessions[session] = SessionCounters()
        else:
            sessions.move_to_end(session)
        s.calls += 1
        if not ok:
            s.errors += 1
        s.last_tool = tool
        s.last_activity = now
        while len(sessions) > MAX_SESSIONS_TRACKED or (
            next(iter(sessions.values())).last_activity < now - SESSION_IDLE_FORGET_S
        ):
            sessions.popitem(last=False)

    def totals(self) -> dict[str, int]:
        return {
            "calls": sum(t.calls for t in self.tools.values()),
            "errors": sum(t.errors for t in self.tools.values()),
            "refused": sum(t.refused for t in self.tools.values()),
        }


EventSink = Callable[[dict[str, Any]], None]
trail_log = logging.getLogger("edgeclaw.audit")


class AuditTrail:
    """Where every security-relevant event goes besides tool calls: approval decisions, admin
    changes, console logins. Each event is one line in the log (info, or the level asked for) and
    one dict for every sink (the MQTT channel publishes them on `events`).

    Events carry names, outcomes, channels and identities, never argument values; the text is
    scrubbed before it leaves, because identities and names come from callers too.
    """

    def __init__(self, scrub: Callable[[str], str] | None = None) -> None:
        self._scrub = scrub or (lambda text: text)
        self._sinks: list[EventSink] = []

    def add_sink(self, sink: EventSink) -> None:
        self._sinks.append(sink)

    def remove_sink(self, sink: EventSink) -> None:
        if sink in self._sinks:
            self._sinks.remove(sink)

    def _scrubbed(self, value: Any) -> Any:
        """`value` with every string in it scrubbed, however nested (a list of names is text too)."""
        if isinstance(value, str):
            return self._scrub(value)
        if isinstance(value, list | tuple):
            return [self._scrubbed(item) for item in value]
        if isinstance(value, dict):
            return {self._scrub(str(k)): self._scrubbed(v) for k, v in value.items()}
        return value

    def emit(self, kind: str, /, *, level: int = logging.INFO, **fields: Any) -> dict[str, Any]:
        """Record one event: `kind` ("approval", "admin", "login", ...) and its fields."""
        event: dict[str, Any] = {"kind": kind, "ts": round(time.time(), 3)}
        for key, value in fields.items():
            event[key] = self._scrubbed(value)
        trail_log.log(
            level, "%s", log_line(kind, {k: v for k, v in event.items() if k not in ("kind", "ts")})
        )
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:
                # A sink failing (the broker gone) must not undo what was recorded or decided.
                trail_log.exception("audit sink failed")
        return event
