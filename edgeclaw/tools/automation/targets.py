"""Where a job's output goes, and the outlets that take it there.

A target is `SCHEME:REST`:

| target | goes to |
|---|---|
| `mqtt:TOPIC` | `{prefix}/{dev}/TOPIC` on the broker (store-and-forward, like telemetry) |
| `console` / `console:PORT` | every logged-in console session, or the one on PORT |
| `memory` | today's daily note, `memory/daily/YYYY-MM-DD.md` |
| `message:CHANNEL[:TARGET]` | the `message` tool (console, mqtt, session, pushover, ntfy), as the owner |
| `none` | nowhere: the outcome is kept in the job's runs only |

Channels register an outlet for their scheme when they start (as they register
approvers), so this module knows no wire; a target whose outlet is not there
(the broker channel is off) fails that delivery, which the run records.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import field
from typing import Any

from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.automation")

SCHEMES = ("mqtt", "console", "memory", "message", "none")
MAX_TARGETS = 4
MAX_TOPIC_CHARS = 200
# The first levels under a device that are the device's own reports and commands (the MQTT contract):
# a job's output may not pose as one of them. tests/test_automation.py keeps this in step with the
# MQTT channel's list.
RESERVED_LEVELS = frozenset(
    {"status", "health", "telemetry", "events", "tool", "chat", "approval", "admin", "message", "ha"}
)


class TargetError(ValueError):
    """A target that cannot be used; the message says what is expected."""


class DeliveryError(Exception):
    """A delivery that did not happen; the message says why (it goes into the run's record)."""


@dataclass(frozen=True, slots=True)
class Target:
    """Where a job's output goes: a scheme (mqtt, console, memory, none) and its rest."""

    scheme: str
    rest: str = ""

    def __str__(self) -> str:
        return f"{self.scheme}:{self.rest}" if self.rest else self.scheme


def parse_target(text: str) -> Target:
    raw = text.strip()
    scheme, _, rest = raw.partition(":")
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise TargetError(
            f"target {text!r}: expected mqtt:TOPIC, console, console:PORT, memory, message:CHANNEL:TARGET "
            "or none"
        )
    if scheme == "mqtt":
        problem = topic_problem(rest)
        if problem:
            raise TargetError(f"target {text!r}: {problem}")
    elif scheme in ("memory", "none") and rest:
        raise TargetError(f"target {text!r}: {scheme} takes nothing after it")
    elif scheme == "message":
        if not rest.partition(":")[0]:
            raise TargetError(f"target {text!r}: expected message:CHANNEL or message:CHANNEL:TARGET")
    elif scheme == "console" and rest and any(ord(c) < 0x20 for c in rest):
        raise TargetError(f"target {text!r}: a port path has no control characters")
    return Target(scheme, rest)


def parse_targets(value: str | list[str] | None) -> list[Target]:
    items = [value] if isinstance(value, str) else list(value or [])
    if not items:
        raise TargetError("give a target ('to'): mqtt:TOPIC, console, memory, message:CHANNEL:TARGET or none")
    if len(items) > MAX_TARGETS:
        raise TargetError(f"at most {MAX_TARGETS} targets, got {len(items)}")
    targets = [parse_target(str(t)) for t in items]
    if len({str(t) for t in targets}) != len(targets):
        raise TargetError("the same target is named twice")
    return targets


def topic_problem(topic: str) -> str | None:
    """Why a job may not publish under `{prefix}/{dev}/TOPIC`, or None."""
    if not topic:
        return "expected a topic after 'mqtt:' (e.g. mqtt:sensors/air)"
    if len(topic) > MAX_TOPIC_CHARS:
        return f"the topic is longer than {MAX_TOPIC_CHARS} characters"
    if any(c in topic for c in "#+") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in topic):
        return "the topic may hold no wildcards (+ #) or control characters"
    if topic.startswith("/") or topic.endswith("/") or "//" in topic or topic.startswith("$"):
        return "the topic's levels must not be empty and it must not start with '$'"
    first = topic.split("/", 1)[0]
    if first in RESERVED_LEVELS:
        return f"'{first}/' under the device is the device's own topic (choose another, e.g. sensors/...)"
    return None


@dataclass(frozen=True, slots=True)
class Delivery:
    """One run's output as the outlets get it."""

    job_id: str
    job_name: str
    ok: bool
    text: str  # the tool's text (for_user, else for_llm) or the agent's reply
    error: str | None = None
    data: dict[str, Any] | None = None  # the tool's structured result
    tool: str = ""  # for a tool job
    scheduled: float | None = None  # the slot the run served (None: run by hand)
    run_id: int = 0
    owner: str = ""  # the owner's identity, for outlets that keep per-caller state (memory)
    owner_channel: str = ""
    ts: float = field(default_factory=time.time)

    def payload(self) -> dict[str, Any]:
        """The JSON a machine target (MQTT) gets."""
        out: dict[str, Any] = {"job": self.job_id, "name": self.job_name, "ok": self.ok}
        if self.tool:
            out["tool"] = self.tool
        out["text"] = self.text
        if self.data is not None:
            out["data"] = self.data
        if self.error is not None:
            out["error"] = self.error
        out["run"] = self.run_id
        if self.scheduled is not None:
            out["scheduled"] = round(self.scheduled, 3)
        out["ts"] = round(self.ts, 3)
        return out

    def line(self) -> str:
        """One line for a person (console, daily note)."""
        text = self.text.strip() if self.ok else (self.error or self.text).strip()
        state = "" if self.ok else "failed: "
        return f"[job {self.job_name or self.job_id}] {state}{text}"


Outlet = Callable[[str, Delivery], Awaitable[None]]


class JobOutlets:
    """The job outlets by scheme; channels register theirs while they run."""

    def __init__(self) -> None:
        self._outlets: dict[str, Outlet] = {}

    def register(self, scheme: str, outlet: Outlet) -> None:
        self._outlets[scheme] = outlet

    def unregister(self, scheme: str, outlet: Outlet | None = None) -> None:
        if outlet is None or self._outlets.get(scheme) == outlet:
            self._outlets.pop(scheme, None)

    def has(self, scheme: str) -> bool:
        return scheme in self._outlets

    async def deliver(self, target: Target, delivery: Delivery) -> None:
        if target.scheme == "none":
            return
        outlet = self._outlets.get(target.scheme)
        if outlet is None:
            raise DeliveryError(f"{target}: no {target.scheme} outlet here ({_why_missing(target.scheme)})")
        await outlet(target.rest, delivery)


def _why_missing(scheme: str) -> str:
    return {
        "mqtt": "the MQTT channel is off or not running",
        "console": "no console ports are configured",
        "memory": "memory is off (memory.enabled = false)",
        "message": "the message tool is not available",
    }.get(scheme, "not available")
