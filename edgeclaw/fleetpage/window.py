"""What the fleet page knows: a bounded in-memory window of what the broker carries.

Nothing here is stored: every device's row comes from its retained `status` and
`health`, the charts from the health messages seen since the server started
(at most `history_s` of them, at most `HISTORY_POINTS` points a device), the
events and the pending approvals from the live topics. A restarted server, or
a second one on the same broker, rebuilds the same rows from the retained
messages at once.

Everything a device controls is bounded: how many devices are remembered
(`max_devices`), the size of a message kept (`MAX_MESSAGE_BYTES`), the events
(`max_events`, all devices together) and the approvals waiting
(`MAX_APPROVALS`, and `MAX_SUSPECT` questions that are not the device's).

Every message is judged against the key pinned for its device (`trust.DeviceKeys`). A message
that does not verify with a device's pinned key (`forged`, or signed with a new key: `key_changed`)
changes nothing: its status, health and events are dropped and counted in the row (`forged`); its
approval question is listed as such, without the means to answer it. Only a question signed by its
device can be answered, and only an event signed by the device closes one. A device that signs
nothing (or whose key this page cannot check) is shown, marked `unverifiable`, and none of its
questions can be answered here: fail closed.
"""

from __future__ import annotations

import json
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import field
from typing import Any

from edgeclaw.net.device_trust import FORGED, KEY_CHANGED, UNVERIFIABLE, VERIFIED, DeviceKeys
from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.fleetpage")

MAX_MESSAGE_BYTES = 64 * 1024
HISTORY_POINTS = 360  # per device: one point per history_s / 360 (10 s for the hour)
MAX_APPROVALS = 256
MAX_SUSPECT = 32  # questions not signed by their device, kept to be shown (the oldest go first)
# The figures of a health message the charts draw (and the table shows).
CHART_FIGURES = ("cpu_temp_c", "load_1m", "mem_used_pct")

# What the device list can be sorted by and filtered on.
SORT_KEYS = (
    "device",
    "state",
    "last_seen",
    "version",
    "board",
    "cpu_temp_c",
    "load_1m",
    "mem_used_pct",
    "outbox_depth",
    "forged",
    "update",
)
# What the search looks in, besides the groups.
SEARCHED = ("device", "state", "board", "version", "sandbox", "hostname", "update", "update_version")
STATE_FILTERS = ("online", "offline", "unknown", VERIFIED, UNVERIFIABLE, KEY_CHANGED, FORGED)

Update = tuple[str, dict[str, Any]]  # (kind, data) for the page's event stream


@dataclass
class DeviceView:
    device: str
    status: dict[str, Any] = field(default_factory=dict)
    health: dict[str, Any] = field(default_factory=dict)
    history: deque[list[float | None]] = field(default_factory=lambda: deque(maxlen=HISTORY_POINTS))
    trust: str = UNVERIFIABLE  # the verdict on its last status
    announced: str | None = None  # the new key a status announced while another is pinned
    forged: int = 0  # messages dropped because they do not verify with the pinned key
    # The row as last built: the device list sorts and searches 10,000 of them per request.
    cached: dict[str, Any] | None = field(default=None, repr=False)

    def trust_note(self, keys: DeviceKeys) -> str:
        """Why the row is not `verified`, in the page's words ("" when it is)."""
        if self.trust == VERIFIED:
            return ""
        if self.trust == KEY_CHANGED:
            return (
                f"announces another key ({self.announced}) than the one pinned: not trusted until re-pinned "
                "(docs/fleet.md#device-keys)"
            )
        if keys.problem:
            return keys.problem
        problem = self.status.get("device_key_problem")
        if isinstance(problem, str) and problem:
            return f"signs nothing: {problem[:300]}"
        if not keys.first_use:
            return "no key is provisioned for it (fleet_page.device_keys), and trust_on_first_use is off"
        return "no signed status seen yet"

    def row(self) -> dict[str, Any]:
        """The table's row: what the status and the health say, null where they say nothing (built
        again after `cached` is cleared, which every change to the view does; never to be changed)."""
        if self.cached is None:
            self.cached = self._build_row()
        return self.cached

    def _build_row(self) -> dict[str, Any]:
        s, h = self.status, self.health
        sandbox = s.get("sandbox") if isinstance(s.get("sandbox"), dict) else {}
        groups = s.get("groups") if isinstance(s.get("groups"), list) else []
        # Where it is with updates (docs/mqtt.md): idle, deferred (waiting for its update lock), pending...
        update = s.get("update") if isinstance(s.get("update"), dict) else {}
        return {
            "device": self.device,
            "state": s.get("state") if s.get("state") in ("online", "offline") else "unknown",
            "since": _number(s.get("since")),
            "last_seen": _number(h.get("ts")),
            "version": _text(s.get("version") or h.get("version")),
            "board": _text(s.get("board") or h.get("board")),
            "hostname": _text(s.get("hostname")),
            "cpu_temp_c": _number(h.get("cpu_temp_c")),
            "load_1m": _number(h.get("load_1m")),
            "mem_used_pct": _number(h.get("mem_used_pct")),
            "outbox_depth": _number(h.get("outbox_depth")),
            "sandbox": _text(sandbox.get("in_force") or sandbox.get("configured")),
            "groups": [g for g in groups if isinstance(g, str)],
            "trust": self.trust,
            "forged": self.forged,
            "update": _text(update.get("state")),
            "update_version": _text(update.get("version")),
            "update_reason": _text(update.get("reason")),
        }


class FleetWindow:
    """The devices, events and approvals seen on the broker, each bounded."""

    def __init__(
        self,
        prefix: str = "edgeclaw",
        *,
        history_s: float = 3600.0,
        max_devices: int = 20000,
        max_events: int = 500,
        clock: Callable[[], float] = time.time,
        keys: DeviceKeys | None = None,
    ) -> None:
        self.prefix = prefix
        # The key each device must sign with; without one given, keys pinned at first sight in memory.
        self.keys = keys if keys is not None else DeviceKeys()
        self.history_s = history_s
        self.max_devices = max_devices
        self.clock = clock
        self.devices: dict[str, DeviceView] = {}
        self.events: deque[dict[str, Any]] = deque(maxlen=max_events)
        self.approvals: dict[tuple[str, str], dict[str, Any]] = {}  # signed by their device
        self.suspect: deque[dict[str, Any]] = deque(maxlen=MAX_SUSPECT)  # forged or unverifiable
        self._full_logged = False
        self._counts: dict[str, int] | None = None  # how many in each state, until a status changes

    @property
    def subscriptions(self) -> list[str]:
        p = self.prefix
        return [f"{p}/+/status", *self.history_subscriptions]

    @property
    def history_subscriptions(self) -> list[str]:
        """The topics whose messages the kept history writes (all but the status)."""
        p = self.prefix
        return [f"{p}/+/health", f"{p}/+/events", f"{p}/+/approval/request"]

    def take(
        self, topic: str, payload: bytes, signature: str | None = None, correlation: bytes | None = None
    ) -> list[Update]:
        """One message from the broker with its `sig` user property; what changed, for the page's
        stream (nothing when ignored)."""
        head = self.prefix + "/"
        if topic.startswith(head) and not payload:  # an empty retained message: the device was retired
            device, _, what = topic[len(head) :].partition("/")
            return self._forget(device) if what in ("status", "health") and device else []
        judged = self._judged(topic, payload, signature, correlation)
        if judged is None:
            return []
        device, what, data, trust = judged
        if trust in (FORGED, KEY_CHANGED) and what != "approval/request":
            return self._rejected(device, trust, data)
        return _KINDS[what](self, device, data, trust)

    def history_of(
        self, topic: str, payload: bytes, signature: str | None = None, correlation: bytes | None = None
    ) -> list[Update]:
        """What one message adds to the kept history, the window left as it is: for a page that
        writes the history from its shared subscription's copy of a message (one page of the group
        gets it) while its window takes the copy every page gets. The updates `take` would give the
        history: a health point (the history store downsamples), an event (and the decision it
        closes), an approval question; nothing for a message its device's pinned key did not sign."""
        judged = self._judged(topic, payload, signature, correlation)
        if judged is None:
            return []
        device, what, data, trust = judged
        if trust in (FORGED, KEY_CHANGED) and what != "approval/request":
            return []
        if what == "health":
            return [("health", {"device": device, "point": self._point(data)})]
        if what == "events":
            updates: list[Update] = [("event", {**data, "device": device, "verified": trust == VERIFIED})]
            if _closes(data, trust):
                done = {"device": device, "id": str(data.get("approval")), "decision": data["decision"]}
                updates.append(("approval_done", done))
            return updates
        if what == "approval/request" and isinstance(data.get("id"), str) and data["id"]:
            return [("approval", {**data, "device": device, "trust": trust})]
        return []

    def _judged(
        self, topic: str, payload: bytes, signature: str | None, correlation: bytes | None
    ) -> tuple[str, str, dict[str, Any], str] | None:
        """(device, what, the message, the verdict on it), or None for a message that is not one."""
        head = self.prefix + "/"
        if not topic.startswith(head):
            return None
        device, _, what = topic[len(head) :].partition("/")
        if not device or device.startswith("_") or what not in _KINDS:
            return None
        if not payload or len(payload) > MAX_MESSAGE_BYTES:
            return None
        try:
            data = json.loads(payload)
        except (ValueError, UnicodeDecodeError):
            return None
        if not isinstance(data, dict):
            return None
        announced = data.get("device_key") if what == "status" else None
        trust = self.keys.judge(device, topic, payload, correlation, signature, announced=announced)
        return device, what, data, trust

    # -- per topic -------------------------------------------------------------
    def _view(self, device: str) -> DeviceView | None:
        view = self.devices.get(device)
        if view is None:
            if len(self.devices) >= self.max_devices:
                if not self._full_logged:
                    log.warning(
                        "more than %d devices on the broker: the others are not shown", self.max_devices
                    )
                    self._full_logged = True
                return None
            view = self.devices[device] = DeviceView(device)
            self._counts = None
        return view

    def _rejected(self, device: str, trust: str, data: dict[str, Any]) -> list[Update]:
        """A message in `device`'s name that its pinned key did not sign: changes nothing but the count
        (and, for a status signed with a new key, the warning)."""
        view = self._view(device)
        if view is None:
            return []
        view.forged += 1
        view.cached = None
        if trust == KEY_CHANGED:
            view.trust = KEY_CHANGED
            view.announced = str(data.get("device_key"))[:80]
        return [("device", self.row(view))]

    def row(self, view: DeviceView) -> dict[str, Any]:
        return {**view.row(), "trust_note": view.trust_note(self.keys)}

    def _status(self, device: str, data: dict[str, Any], trust: str) -> list[Update]:
        view = self._view(device)
        if view is None:
            return []
        view.status, view.cached = data, None
        view.trust, view.announced = trust, None
        self._counts = None
        return [("device", self.row(view))]

    def _health(self, device: str, data: dict[str, Any], trust: str) -> list[Update]:
        view = self._view(device)
        if view is None:
            return []
        view.health, view.cached = data, None
        point = self._point(data)
        ts = point[0] or 0.0
        history = view.history
        # One point per slot of history_s / HISTORY_POINTS: a fast reporter replaces its last point.
        if history and ts - (history[-1][0] or 0.0) < self.history_s / HISTORY_POINTS:
            history[-1] = point
        else:
            history.append(point)
        while history and (history[0][0] or 0.0) < ts - self.history_s:
            history.popleft()
        return [("device", self.row(view)), ("health", {"device": device, "point": point})]

    def _point(self, health: dict[str, Any]) -> list[float | None]:
        """A health message's point on the charts: [ts, *CHART_FIGURES]."""
        return [_number(health.get("ts")) or self.clock(), *(_number(health.get(k)) for k in CHART_FIGURES)]

    def _event(self, device: str, data: dict[str, Any], trust: str) -> list[Update]:
        if device not in self.devices and len(self.devices) >= self.max_devices:
            return []
        event = {**data, "device": device, "verified": trust == VERIFIED}
        self.events.append(event)
        updates: list[Update] = [("event", event)]
        if _closes(data, trust):
            question_id = str(data.get("approval"))
            if self._close(device, question_id):
                updates.append(
                    ("approval_done", {"device": device, "id": question_id, "decision": data["decision"]})
                )
        return updates

    def _close(self, device: str, question_id: str) -> bool:
        """The question decided: gone from the queue, with every copy of it not signed by the device."""
        found = self.approvals.pop((device, question_id), None) is not None
        for copy in [q for q in self.suspect if q["device"] == device and q.get("id") == question_id]:
            self.suspect.remove(copy)
            found = True
        return found

    def _approval(self, device: str, data: dict[str, Any], trust: str) -> list[Update]:
        question_id = data.get("id")
        if not isinstance(question_id, str) or not question_id:
            return []
        self._drop_expired()
        question = {**data, "device": device, "trust": trust}
        if trust != VERIFIED:
            # Listed to be seen, never to be answered; a copy never replaces the device's own.
            self.suspect.append(question)
            return [("approval", question)]
        if len(self.approvals) >= MAX_APPROVALS:
            return []
        self.approvals[(device, question_id)] = question
        return [("approval", question)]

    def _forget(self, device: str) -> list[Update]:
        if self.devices.pop(device, None) is None:
            return []
        self._counts = None
        return [("gone", {"device": device})]

    def _drop_expired(self) -> None:
        now = self.clock()
        for key, question in list(self.approvals.items()):
            expires = _number(question.get("expires_at"))
            if expires is not None and expires < now:
                del self.approvals[key]
        for question in list(self.suspect):
            expires = _number(question.get("expires_at"))
            if expires is None or expires < now:
                self.suspect.remove(question)

    def decided(self, device: str, question_id: str) -> None:
        """An approval answered from the page: no longer waiting (its event confirms it later)."""
        self._close(device, question_id)

    def question(self, device: str, question_id: str) -> dict[str, Any] | None:
        """The waiting question `question_id` of `device` that the device itself signed, or None."""
        self._drop_expired()
        return self.approvals.get((device, question_id))

    # -- for the page ------------------------------------------------------------
    def snapshot(self, *, rows: bool = True) -> dict[str, Any]:
        """The table (all of it: for scripts; without `rows`, none of it), events and approvals."""
        self._drop_expired()
        snap: dict[str, Any] = {
            "events": list(self.events),
            "approvals": [*self.approvals.values(), *self.suspect],
        }
        if rows:
            snap["devices"] = [self.row(v) for v in sorted(self.devices.values(), key=lambda v: v.device)]
        return snap

    def page(
        self, *, offset: int = 0, limit: int = 100, q: str = "", sort: str = "device", state: str = ""
    ) -> dict[str, Any]:
        """One page of the table, searched (every word of `q` in the name, state, board, version,
        sandbox, hostname, update state and version, or groups), filtered (`state`: online, offline,
        unknown or a trust verdict) and sorted (`sort`, `-sort` descending) here, so a page with
        10,000 devices fetches only the rows it shows."""
        key, reverse = sort.removeprefix("-"), sort.startswith("-")
        if key not in SORT_KEYS:
            raise ValueError(
                f"sort must be one of {', '.join(SORT_KEYS)} (prefix - to reverse), got {sort!r:.40}"
            )
        if state and state not in STATE_FILTERS:
            raise ValueError(f"state must be one of {', '.join(STATE_FILTERS)}, got {state!r:.40}")
        words = q.lower().split()
        rows = []
        for view in self.devices.values():
            row = view.row()
            if state and state not in (row["state"], row["trust"]):
                continue
            if words:
                hay = " ".join([*(row[k] or "" for k in SEARCHED), *row["groups"]]).lower()
                if not all(w in hay for w in words):
                    continue
            rows.append(row)

        def value(row: dict[str, Any]) -> Any:
            return ",".join(row["groups"]) if key == "groups" else row[key]

        # Rows without the figure go last whichever way it is sorted; the name breaks ties.
        present = [r for r in rows if value(r) is not None]
        present.sort(key=lambda r: (value(r), r["device"]), reverse=reverse)
        absent = sorted((r for r in rows if value(r) is None), key=lambda r: r["device"])
        shown = [
            {**row, "trust_note": self.devices[row["device"]].trust_note(self.keys)}
            for row in (present + absent)[offset : offset + limit]
        ]
        return {"total": len(self.devices), "matched": len(rows), "offset": offset, "rows": shown}

    def counts(self) -> dict[str, int]:
        """How many devices are in each state: the page's summary line (counted again only after a
        status changed, not for every page open at every batch)."""
        if self._counts is not None:
            return dict(self._counts)
        counts = {"devices": len(self.devices), "online": 0, "offline": 0, "unknown": 0}
        for view in self.devices.values():
            state = view.status.get("state")
            counts[state if state in ("online", "offline") else "unknown"] += 1
        self._counts = counts
        return dict(counts)

    def device(self, device: str) -> dict[str, Any] | None:
        view = self.devices.get(device)
        if view is None:
            return None
        return {
            "row": self.row(view),
            "status": view.status,
            "health": view.health,
            "history": list(view.history),
            "figures": list(CHART_FIGURES),
            "events": [e for e in self.events if e.get("device") == device],
        }

    def online(self, group: str = "") -> list[str]:
        """The devices online (in `group`, when given): how many answers a broadcast can expect."""
        return sorted(
            v.device
            for v in self.devices.values()
            if v.status.get("state") == "online" and (not group or group in (v.status.get("groups") or []))
        )


_KINDS: dict[str, Callable[[FleetWindow, str, dict[str, Any], str], list[Update]]] = {
    "status": FleetWindow._status,
    "health": FleetWindow._health,
    "events": FleetWindow._event,
    "approval/request": FleetWindow._approval,
}


def _closes(event: dict[str, Any], trust: str) -> bool:
    """Whether `event` is its device's decision on an approval question (which closes it)."""
    return (
        trust == VERIFIED and event.get("kind") == "approval" and event.get("decision") not in (None, "asked")
    )


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def _text(value: Any) -> str | None:
    return value[:200] if isinstance(value, str) else None
