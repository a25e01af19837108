"""What the registry records about each call: an audit record and running statistics.

Records go to sinks (the MQTT events topic, a log); statistics feed
telemetry and `session_status`. Arguments are never recorded, only a digest,
so an audit trail cannot leak what a secret-bearing argument held.

The digest is keyed with a random per-process key: a plain hash of
`{"pin": "1234"}` would give a short argument away to anyone hashing guesses
against the events topic.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

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
    data = blob.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=8, key=_DIGEST_KEY).hexdigest()


@dataclass(frozen=True, slots=True)
class AuditRecord:
    ts: float  # wall clock, seconds since the epoch
    tool: str
    session: str
    channel: str
    agent_id: str
    ok: bool
    stage: str  # "ok", "dry_run", or where it stopped: "unknown_tool", "arguments", "policy", ...
    duration_ms: float
    args_digest: str
    error: str | None  # already scrubbed

    def as_dict(self) -> dict[str, Any]:
        return {
            "ts": self.ts,
            "tool": self.tool,
            "session": self.session,
            "channel": self.channel,
            "agent": self.agent_id,
            "ok": self.ok,
            "stage": self.stage,
            "duration_ms": round(self.duration_ms, 3),
            "args_digest": self.args_digest,
            "error": self.error,
        }


@dataclass(slots=True)
class ToolCounters:
    calls: int = 0
    errors: int = 0
    refused: int = 0
    total_ms: float = 0.0


@dataclass(slots=True)
class SessionCounters:
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
    changes, console logins. Each event is one info line in the log and one dict for every sink
    (the MQTT channel publishes them on `events`).

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

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        """Record one event: `kind` ("approval", "admin", "login", ...) and its fields."""
        event: dict[str, Any] = {"kind": kind, "ts": round(time.time(), 3)}
        for key, value in fields.items():
            event[key] = self._scrub(value) if isinstance(value, str) else value
        words = " ".join(f"{k}={v}" for k, v in event.items() if k not in ("kind", "ts") and v is not None)
        trail_log.info("%s %s", kind, words)
        for sink in list(self._sinks):
            try:
                sink(event)
            except Exception:
                # A sink failing (the broker gone) must not undo what was recorded or decided.
                trail_log.exception("audit sink failed")
        return event
