"""When a job runs: cron expressions, `@hourly`-style aliases, `every` intervals and one-shot times.

Cron expressions are the standard five fields, read by `cronsim` in the job's
time zone, so a daylight-saving change neither skips nor doubles a run the way
Debian cron does not (a 02:30 job on the spring-forward night runs at 03:00;
on the fall-back night it runs once). Intervals and one-shot times are parsed
here: `every` takes `90s`, `5m`, `1h30m`, `2 hours`; a one-shot time takes ISO
8601 (`2025-06-01T07:00`, with or without an offset), `in 10 minutes`,
`today 18:00`, `tomorrow 07:00` or a bare `07:00` (the next one).

Each schedule says what it is anchored to. A cron slot or an ISO time is a
point on the calendar (`wall`): when the clock is stepped, it stays where it
is. An interval or an `in ...` time counts elapsed time (`elapsed`): when the
clock is stepped, it moves with the step, so a job that reads a sensor every
5 minutes neither fires early nor stalls for an hour when NTP corrects a
stale clock.

An edge trigger (`on_edge`) has no slots at all: the job runs when an input
pin changes (`edge`: the pin, which change, the debounce), whatever the
clock says. Its spec is the trigger as JSON.
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Literal

from edgeclaw.records import dataclass

ScheduleKind = Literal["cron", "every", "at", "edge"]
Anchor = Literal["wall", "elapsed"]

# Standard cron's nicknames, as five-field expressions. @reboot has no slot on the calendar.
ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
MIN_INTERVAL_S = 1.0
MAX_INTERVAL_S = 366 * 86400.0
# How far ahead a cron expression may have its next slot (an expression for 30 February never has one).
CRON_HORIZON_DAYS = 5 * 366
EDGE_KINDS = ("rising", "falling", "both", "active", "inactive")
DEFAULT_EDGE_DEBOUNCE_MS = 50
MAX_EDGE_DEBOUNCE_MS = 10_000

_UNITS = {
    "s": 1,
    "sec": 1,
    "secs": 1,
    "second": 1,
    "seconds": 1,
    "m": 60,
    "min": 60,
    "mins": 60,
    "minute": 60,
    "minutes": 60,
    "h": 3600,
    "hr": 3600,
    "hrs": 3600,
    "hour": 3600,
    "hours": 3600,
    "d": 86400,
    "day": 86400,
    "days": 86400,
    "w": 7 * 86400,
    "week": 7 * 86400,
    "weeks": 7 * 86400,
}
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)")
_CLOCK_TIME = re.compile(r"(\d{1,2}):(\d{2})(?::(\d{2}))?")


class ScheduleError(ValueError):
    """A schedule that cannot be understood; the message says what was expected."""


def local_zone() -> tzinfo:
    """The machine's time zone with its DST rules: $TZ, else /etc/localtime, else UTC."""
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError  # its tz path reads sysconfig: on first use

    name = os.environ.get("TZ", "").lstrip(":")
    if name:
        try:
            return ZoneInfo(name)
        except (ZoneInfoNotFoundError, ValueError):
            pass
    try:
        with open("/etc/localtime", "rb") as f:
            return ZoneInfo.from_file(f, key="localtime")
    except (OSError, ValueError):
        return UTC


def zone(name: str) -> tzinfo:
    """An IANA zone by name ("Europe/Berlin"), "UTC", or "" for the machine's own."""
    if not name:
        return local_zone()
    if name.upper() == "UTC":
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleError(
            f"unknown time zone {name!r} (expected an IANA name such as 'Europe/Berlin', or 'UTC')"
        ) from None


def parse_duration(text: str, what: str = "interval") -> float:
    """`90s`, `5m`, `1h30m`, `2 hours`, `1 day`: seconds. A bare number is seconds."""
    raw = text.strip().lower()
    if not raw:
        raise ScheduleError(f"empty {what} (expected e.g. '5m', '90s', '1h30m')")
    try:
        return float(raw)
    except ValueError:
        pass
    total = 0.0
    pos = 0
    for m in _DURATION_PART.finditer(raw):
        if raw[pos : m.start()].strip(" ,") and raw[pos : m.start()].strip(" ,") != "and":
            break
        unit = _UNITS.get(m.group(2))
        if unit is None:
            raise ScheduleError(
                f"{what} {text!r}: unknown unit {m.group(2)!r} (expected s, m, h, d, w or their words)"
            )
        total += float(m.group(1)) * unit
        pos = m.end()
    if pos == 0 or raw[pos:].strip():
        raise ScheduleError(f"{what} {text!r}: expected a number and a unit, e.g. '5m', '90s', '1h30m'")
    return total


def parse_interval(text: str) -> float:
    seconds = parse_duration(text)
    if not MIN_INTERVAL_S <= seconds <= MAX_INTERVAL_S:
        raise ScheduleError(f"interval {text!r}: expected between 1 s and 366 days, got {seconds:g} s")
    return seconds


def parse_cron(text: str) -> str:
    """A five-field cron expression or an alias, checked; returns the five fields."""
    from cronsim import CronSim, CronSimError

    expr = " ".join(text.split())
    if expr.lower() in ALIASES:
        expr = ALIASES[expr.lower()]
    elif expr.startswith("@"):
        known = ", ".join(ALIASES)
        raise ScheduleError(f"unknown cron alias {text!r} (expected one of {known})")
    if len(expr.split()) != 5:
        raise ScheduleError(
            f"cron expression {text!r}: expected five fields (minute hour day-of-month month day-of-week)"
        )
    try:
        CronSim(expr, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as e:
        raise ScheduleError(f"cron expression {text!r}: {e}") from None
    return expr


def parse_at(text: str, now: float, tz: tzinfo) -> tuple[float, Anchor]:
    """A one-shot time: (Unix time, anchor). Relative times (`in 10 minutes`) count elapsed time."""
    raw = " ".join(text.strip().split())
    low = raw.lower()
    if not raw:
        raise ScheduleError("empty time (expected ISO 8601, 'in 10 minutes' or 'tomorrow 07:00')")
    if low == "now":
        return now, "elapsed"
    if low.startswith("in "):
        return now + parse_duration(low[3:], "delay"), "elapsed"
    here = datetime.fromtimestamp(now, tz)
    day: date | None = None
    rest = low
    for word, offset in (("today", 0), ("tomorrow", 1)):
        if low == word or low.startswith(word + " "):
            day = here.date() + timedelta(days=offset)
            rest = low[len(word) :].strip().removeprefix("at ").strip()
            break
    clock = _CLOCK_TIME.fullmatch(rest)
    if clock is not None:
        h, m, s = int(clock.group(1)), int(clock.group(2)), int(clock.group(3) or 0)
        if h > 23 or m > 59 or s > 59:
            raise ScheduleError(f"time {text!r}: no such time of day")
        if day is None:  # a bare time of day: the next one
            candidate = _on_day(here.date(), time(h, m, s), tz)
            if candidate <= now:
                candidate = _on_day(here.date() + timedelta(days=1), time(h, m, s), tz)
            return candidate, "wall"
        return _on_day(day, time(h, m, s), tz), "wall"
    if day is not None:
        raise ScheduleError(f"time {text!r}: expected a time of day after {low.split()[0]!r}, e.g. 07:00")
    try:
        moment = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise ScheduleError(
            f"time {text!r}: expected ISO 8601 (2025-06-01T07:00), 'in 10 minutes', "
            "'today 18:00', 'tomorrow 07:00' or '07:00'"
        ) from None
    if moment.tzinfo is None:
        return _on_day(moment.date(), moment.time(), tz), "wall"
    return moment.timestamp(), "wall"


def _on_day(day: date, at: time, tz: tzinfo) -> float:
    """That wall time on that day in `tz`; a time the spring-forward gap skips becomes the gap's end."""
    naive = datetime.combine(day, at)
    for _ in range(24 * 60):  # a gap is at most a few hours
        moment = naive.replace(tzinfo=tz)
        if datetime.fromtimestamp(moment.timestamp(), tz).replace(tzinfo=None) == naive:
            return moment.timestamp()
        naive = (naive + timedelta(minutes=1)).replace(second=0)
    raise ScheduleError(f"no such local time: {day} {at} in {tz}")


@dataclass(frozen=True, slots=True)
class Schedule:
    """One job's schedule, as stored: the kind, its spec, the zone and the anchor."""

    kind: ScheduleKind
    spec: str  # five cron fields; the interval in seconds; the one-shot Unix time
    tz: str = ""  # cron jobs: the zone their fields are read in ("" = the machine's)
    anchor: Anchor = "wall"  # what a clock step does to its slots (see the module docstring)

    @property
    def interval_s(self) -> float:
        return float(self.spec) if self.kind == "every" else 0.0

    @property
    def recurring(self) -> bool:
        return self.kind != "at"

    @property
    def timed(self) -> bool:
        """False for an edge trigger: it has no slots for the timer."""
        return self.kind != "edge"

    @property
    def edge(self) -> EdgeTrigger:
        if self.kind != "edge":
            raise ValueError(f"a {self.kind} schedule has no edge trigger")
        return EdgeTrigger.from_spec(self.spec)

    def first(self, now: float) -> float | None:
        """The first slot for a job created (or re-scheduled) at `now`."""
        if self.kind == "edge":
            return None
        if self.kind == "at":
            return float(self.spec)
        if self.kind == "every":
            return now + self.interval_s
        return self.next_after(now)

    def next_after(self, t: float) -> float | None:
        """The first slot strictly after `t` (None: a one-shot time, an edge trigger, or a cron that
        never comes)."""
        if self.kind in ("at", "edge"):
            return None
        if self.kind == "every":
            return t + self.interval_s
        from cronsim import CronSim

        start = datetime.fromtimestamp(t, zone(self.tz))
        try:
            found = next(CronSim(self.spec, start))
        except StopIteration:
            return None
        if found - start > timedelta(days=CRON_HORIZON_DAYS):
            return None
        return found.timestamp()

    def slots_between(self, after: float, until: float, limit: int = 1000) -> int:
        """How many slots fall in (after, until], counted up to `limit`."""
        count = 0
        t = after
        while count < limit:
            nxt = self.next_after(t)
            if nxt is None or nxt > until:
                break
            count += 1
            t = nxt
        return count

    def describe(self) -> str:
        if self.kind == "edge":
            return self.edge.describe()
        if self.kind == "every":
            return f"every {format_duration(self.interval_s)}"
        if self.kind == "at":
            return "once at " + datetime.fromtimestamp(float(self.spec), UTC).isoformat(timespec="seconds")
        return f"cron '{self.spec}'" + (f" ({self.tz})" if self.tz else "")


@dataclass(frozen=True)
class EdgeTrigger:
    """What starts an edge-triggered job: a change of an input pin that held for `debounce_ms`."""

    pin: int | str  # a GPIO number or the name the board profile gives the pin
    edge: str = "both"  # rising, falling, both; or active / inactive by the pin's logic
    debounce_ms: int = DEFAULT_EDGE_DEBOUNCE_MS

    @classmethod
    def parse(cls, value: object) -> EdgeTrigger:
        """`{"pin": 27, "edge": "falling", "debounce_ms": 50}`, checked key by key."""
        if not isinstance(value, dict):
            raise ScheduleError('on_edge: expected an object such as {"pin": 27, "edge": "falling"}')
        unknown = sorted(set(value) - {"pin", "edge", "debounce_ms"})
        if unknown:
            raise ScheduleError(
                f"on_edge: unknown key(s) {', '.join(unknown)} (expected pin, edge, debounce_ms)"
            )
        pin = value.get("pin")
        if isinstance(pin, str) and pin.isdigit():
            pin = int(pin)
        number = isinstance(pin, int) and not isinstance(pin, bool) and pin >= 0
        if not (number or (isinstance(pin, str) and pin)):
            raise ScheduleError(f"on_edge.pin: expected a GPIO number or a pin name, got {pin!r}")
        edge = value.get("edge", "both")
        if edge not in EDGE_KINDS:
            raise ScheduleError(f"on_edge.edge: expected one of {', '.join(EDGE_KINDS)}, got {edge!r}")
        debounce = value.get("debounce_ms", DEFAULT_EDGE_DEBOUNCE_MS)
        if (
            isinstance(debounce, bool)
            or not isinstance(debounce, int)
            or not 0 <= debounce <= MAX_EDGE_DEBOUNCE_MS
        ):
            raise ScheduleError(
                f"on_edge.debounce_ms: expected an integer 0-{MAX_EDGE_DEBOUNCE_MS}, got {debounce!r}"
            )
        return cls(pin, edge, debounce)

    @classmethod
    def from_spec(cls, spec: str) -> EdgeTrigger:
        return cls.parse(json.loads(spec))

    def spec(self) -> str:
        return json.dumps({"pin": self.pin, "edge": self.edge, "debounce_ms": self.debounce_ms})

    def describe(self) -> str:
        which = "any" if self.edge == "both" else self.edge
        pin = f"GPIO {self.pin}" if isinstance(self.pin, int) else f"GPIO {self.pin!r}"
        return f"on {which} edge of {pin} (debounce {self.debounce_ms} ms)"


def format_duration(seconds: float) -> str:
    """1h30m, 5m, 90s -> 1m30s."""
    s = round(seconds)
    if s != seconds and seconds < 60:
        return f"{seconds:g}s"
    parts = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if s >= size:
            n, s = divmod(s, size)
            parts.append(f"{n}{unit}")
    return "".join(parts) or "0s"


def parse_schedule(
    *,
    cron: str | None = None,
    every: str | None = None,
    at: str | None = None,
    on_edge: object = None,
    tz: str = "",
    now: float,
) -> Schedule:
    """Exactly one of cron / every / at / on_edge, checked, as a stored `Schedule`."""
    given = [
        k for k, v in (("cron", cron), ("every", every), ("at", at), ("on_edge", on_edge)) if v is not None
    ]
    if len(given) != 1:
        raise ScheduleError(
            "give exactly one of 'cron', 'every', 'at' or 'on_edge'" + (f" (got {given})" if given else "")
        )
    zone(tz)  # an unknown zone is refused whatever the kind
    if on_edge is not None:
        return Schedule("edge", EdgeTrigger.parse(on_edge).spec(), anchor="elapsed")
    if cron is not None:
        expr = parse_cron(cron)
        sched = Schedule("cron", expr, tz)
        if sched.next_after(now) is None:
            raise ScheduleError(f"cron expression {cron!r} never comes in the next {CRON_HORIZON_DAYS} days")
        return sched
    if every is not None:
        return Schedule("every", repr(parse_interval(every)), anchor="elapsed")
    assert at is not None
    when, anchor = parse_at(at, now, zone(tz))
    if when < now - 1:
        raise ScheduleError(f"time {at!r} is in the past")
    return Schedule("at", repr(when), tz if anchor == "wall" else "", anchor)
