"""Staged rollouts: one tool call, or one update, sent to a group's devices in waves, halted when
too many fail.

A rollout takes the devices online in its group (or the ones it names) when it starts, and calls
them wave by wave: the canary wave first (the devices named as canaries, else the first `canary`
of the list), then batches of `batch_size`. Each device is called once, on its own topic, with the
page's command key, exactly as `POST /api/call` does, and its outcome is final:

- `ok`: it answered, and the answer says ok;
- `failed`: it answered with an error, or the page could not send the call;
- `no_answer`: nothing came back within `wait_s` (offline, busy, or a device that crashed);
- `skipped`: the rollout halted or was stopped before its wave.

An update rollout (`"kind": "update"`) sends each device the gateway's `update` with the page's
admin key instead, and a device's outcome is what its own signed status says once it has restarted:
`ok` when it kept the new version, `failed` when it rolled back (`fleetpage.update_rollout`), and
`deferred` when its update lock still held the update at the end of the wait (not a failure).

After each wave the failures so far (failed and no_answer) are counted; past `max_failures` the
rollout halts and the devices not reached are skipped. Every wave's progress goes to the open pages
as a `rollout` event, and each device's outcome to the history (`answers`, with the rollout's id),
so a page opened later, or after a restart, still shows what happened where.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Awaitable, Callable, Set
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from edgeclaw.fleetpage.history import HistoryStore
    from edgeclaw.fleetpage.metrics import PageMetrics

log = logging.getLogger("edgeclaw.fleetpage")

MAX_KEPT = 20  # finished rollouts kept for the page (the history keeps every outcome)
MAX_RUNNING = 4
# Devices of one rollout waited for at once, whatever the batch size: four rollouts together stay
# within the commands the page's broker side lets wait (MAX_WAITING), so none is refused for that.
MAX_IN_FLIGHT = 60
FAILED = ("failed", "no_answer")

Call = Callable[[str, str, dict[str, Any], float], Awaitable[dict[str, Any]]]
# One device's update step: (device, the update's arguments, wait) -> its outcome.
UpdateCall = Callable[[str, dict[str, Any], float], Awaitable[dict[str, Any]]]
KINDS = ("tool", "update")
UPDATE_MAX_WAIT_S = 3600.0  # an update fetches, installs and restarts: minutes on a small board


class RolloutRefused(ValueError):
    """A request about rollouts refused: the reason is for the page's user, `status` the HTTP one
    (400 a bad plan, 404 no such rollout, 409 one that cannot start now)."""

    def __init__(self, message: str, status: int = 409) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class RolloutPlan:
    tool: str  # "update" for an update rollout
    args: dict[str, Any]  # the tool's arguments, or the update's (url, sha256, signature, ...)
    kind: str = "tool"  # one of KINDS
    group: str = ""  # "" = every device online
    canary: int = 1  # devices in the first wave (when `canary_devices` names none)
    canary_devices: tuple[str, ...] = ()
    batch_size: int = 10
    max_failures: int = 0  # failures the rollout goes on past; one more halts it
    wait_s: float = 30.0  # for each device's answer (an update: to be back with its verdict)

    def waves(self, devices: list[str]) -> list[list[str]]:
        """The canary wave, then the rest in batches, each device once."""
        named = [d for d in self.canary_devices if d in devices]
        canary = named or devices[: self.canary]
        rest = [d for d in devices if d not in canary]
        waves = [canary] if canary else []
        waves += [rest[i : i + self.batch_size] for i in range(0, len(rest), self.batch_size)]
        return waves


@dataclass
class Rollout:
    id: str
    plan: RolloutPlan
    waves: list[list[str]]
    started: float
    state: str = "running"  # running, done, halted, stopped
    reason: str = ""
    wave: int = 0  # the wave being called (1-based once started)
    ended: float | None = None
    outcomes: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def devices(self) -> list[str]:
        return [d for wave in self.waves for d in wave]

    def counts(self) -> dict[str, int]:
        counts = {"ok": 0, "failed": 0, "no_answer": 0, "deferred": 0, "skipped": 0, "pending": 0}
        for device in self.devices:
            outcome = self.outcomes.get(device)
            counts[outcome["state"] if outcome else "pending"] += 1
        return counts

    def view(self, *, devices: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "id": self.id,
            "kind": self.plan.kind,
            "tool": self.plan.tool,
            "group": self.plan.group,
            "state": self.state,
            "reason": self.reason,
            "wave": self.wave,
            "waves": len(self.waves),
            "canary": self.waves[0] if self.waves else [],
            "batch_size": self.plan.batch_size,
            "max_failures": self.plan.max_failures,
            "counts": self.counts(),
            "started": self.started,
            "ended": self.ended,
        }
        if devices:
            out["devices"] = {d: self.outcomes.get(d, {"state": "pending"}) for d in self.devices}
        return out


def outcome_of(answer: dict[str, Any]) -> dict[str, Any]:
    """A device's answer as its outcome: ok, or failed with the error it gave."""
    if answer.get("ok") is True:
        return {"state": "ok"}
    error = answer.get("error")
    if isinstance(error, dict):
        error = error.get("message") or error.get("code")
    return {"state": "failed", "error": str(error or "the device answered without ok")[:500]}


class Rollouts:
    """The page's rollouts: started, run in the background, listed, stopped; and their part of the
    page's API (`api`).

    A rollout is the page's own: it writes its history itself, in a share group too (the other pages
    never see its calls), each device's outcome and the end once, keyed by the rollout's id."""

    def __init__(
        self,
        call: Call,
        publish: Callable[[list[tuple[str, dict[str, Any]]]], None],
        history: Callable[[], HistoryStore | None],
        metrics: PageMetrics,
        *,
        names: Set[str],
        max_wait_s: float,
        update: UpdateCall | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._call = call
        self._update = update  # None: the page holds no admin key, so no update rollouts
        self._publish = publish  # a wave's progress, to the open pages
        self._history = history
        self._metrics = metrics
        self._names = names
        self._max_wait_s = max_wait_s
        self._clock = clock
        self._rollouts: dict[str, Rollout] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    async def api(
        self, method: str, path: str, body: dict[str, Any], online: Callable[[str], list[str]]
    ) -> dict[str, Any]:
        """`GET /api/rollouts`, `GET /api/rollout/ID`, `POST /api/rollout` (a plan: `plan_from`) and
        `POST /api/rollout/stop` (`{"id"}`); RolloutRefused with the status to answer."""
        if method == "GET" and path == "/api/rollouts":
            return {"rollouts": self.list()}
        if method == "GET" and path.startswith("/api/rollout/"):
            rollout = self._rollouts.get(path[len("/api/rollout/") :])
            if rollout is None:
                raise RolloutRefused("no such rollout (finished ones are in the history)", 404)
            return rollout.view()
        if method == "POST" and path == "/api/rollout":
            plan = plan_from(body, self._max_wait_s, self._names)
            try:
                rollout = self.start(plan, online(plan.group))
            except RolloutRefused:
                self._metrics.command("rollout", "refused")
                raise
            self._metrics.command("rollout", "ok")
            return {"ok": True, "rollout": rollout.view()}
        if method == "POST" and path == "/api/rollout/stop":
            rollout_id = body.get("id")
            return {
                "ok": True,
                "rollout": (await self.stop(rollout_id if isinstance(rollout_id, str) else "")).view(),
            }
        raise RolloutRefused(f"{method} {path} is not served here", 404)

    def _tell(self, view: dict[str, Any]) -> None:
        self._publish([("rollout", view)])
        history = self._history()
        if history is not None and view["state"] != "running":
            summary = {k: v for k, v in view.items() if k != "devices"}
            history.add("events", "", {"event": "rollout", **summary}, ref=view["id"])
            self._metrics.handed("events")

    def _record(self, device: str, outcome: dict[str, Any]) -> None:
        history = self._history()
        if history is not None:
            history.add("answers", device, outcome, ref=f"{outcome['rollout']}:{device}")
            self._metrics.handed("answers")

    def start(self, plan: RolloutPlan, devices: list[str]) -> Rollout:
        if not devices:
            where = f"in group {plan.group!r}" if plan.group else "on the broker"
            raise RolloutRefused(f"no device online {where}: nothing to roll out to")
        unknown = sorted(set(plan.canary_devices) - set(devices))
        if unknown:
            raise RolloutRefused(f"canary devices not online in this group: {', '.join(unknown)}")
        if plan.kind == "update" and self._update is None:
            raise RolloutRefused(
                "this fleet page holds no admin key (mqtt.admin_secret_env or admin_secret_file): "
                "it cannot roll out updates"
            )
        if sum(1 for r in self._rollouts.values() if r.state == "running") >= MAX_RUNNING:
            raise RolloutRefused(f"{MAX_RUNNING} rollouts are running already: stop one or wait")
        rollout = Rollout("ro-" + secrets.token_hex(6), plan, plan.waves(sorted(devices)), self._clock())
        self._rollouts[rollout.id] = rollout
        self._forget_old()
        self._tasks[rollout.id] = asyncio.get_running_loop().create_task(self._run(rollout))
        self._tell(rollout.view())
        return rollout

    def get(self, rollout_id: str) -> Rollout | None:
        return self._rollouts.get(rollout_id)

    def list(self) -> list[dict[str, Any]]:
        return [r.view(devices=False) for r in sorted(self._rollouts.values(), key=lambda r: -r.started)]

    async def stop(self, rollout_id: str) -> Rollout:
        """Stop a running rollout: calls in flight are let go (their devices count as not reached)."""
        rollout = self._rollouts.get(rollout_id)
        if rollout is None:
            raise RolloutRefused(f"no rollout {rollout_id!r:.60}", 404)
        task = self._tasks.get(rollout_id)
        if rollout.state == "running" and task is not None:
            task.cancel()
            await asyncio.wait((task,))
        return rollout

    async def close(self) -> None:
        for rollout_id in list(self._tasks):
            await self.stop(rollout_id)

    async def _run(self, rollout: Rollout) -> None:
        plan = rollout.plan
        limit = asyncio.Semaphore(MAX_IN_FLIGHT)
        try:
            for n, wave in enumerate(rollout.waves, start=1):
                rollout.wave = n
                results = await asyncio.gather(*(self._one(rollout, device, limit) for device in wave))
                for device, outcome in zip(wave, results, strict=True):
                    self._settle(rollout, device, outcome)
                failures = sum(1 for o in rollout.outcomes.values() if o["state"] in FAILED)
                if failures > plan.max_failures and n < len(rollout.waves):
                    which = "the canary wave" if n == 1 else f"wave {n}"
                    self._end(
                        rollout,
                        "halted",
                        f"{failures} device(s) failed by the end of {which} (more than "
                        f"max_failures = {plan.max_failures})",
                    )
                    return
                self._tell(rollout.view())
            failures = sum(1 for o in rollout.outcomes.values() if o["state"] in FAILED)
            self._end(rollout, "done", f"{failures} device(s) failed in the last wave" if failures else "")
        except asyncio.CancelledError:
            self._end(rollout, "stopped", "stopped from the page")
            raise
        except Exception as e:  # a bug here must not leave the rollout "running" for ever
            log.exception("rollout %s failed", rollout.id)
            self._end(rollout, "halted", f"the rollout itself failed: {e}")
        finally:
            self._tasks.pop(rollout.id, None)

    async def _one(self, rollout: Rollout, device: str, limit: asyncio.Semaphore) -> dict[str, Any]:
        async with limit:
            return await self._reach(rollout, device)

    async def _reach(self, rollout: Rollout, device: str) -> dict[str, Any]:
        plan = rollout.plan
        try:
            if plan.kind == "update" and self._update is not None:
                return await self._update(device, plan.args, plan.wait_s)
            answer = await self._call(device, plan.tool, plan.args, plan.wait_s)
        except TimeoutError:
            return {"state": "no_answer", "error": f"no answer within {rollout.plan.wait_s:g} s"}
        except asyncio.CancelledError:
            raise
        except Exception as e:  # not sent (CommandRefused), or the device is gone from the broker
            return {"state": "failed", "error": str(e)[:500]}
        return outcome_of(answer)

    def _settle(self, rollout: Rollout, device: str, outcome: dict[str, Any]) -> None:
        """A device's outcome, once: the first is final (a device is called once per rollout)."""
        if device in rollout.outcomes:
            return
        wave = next(n for n, members in enumerate(rollout.waves, start=1) if device in members)
        outcome = {**outcome, "wave": wave, "ts": self._clock()}
        rollout.outcomes[device] = outcome
        self._record(device, {"rollout": rollout.id, "tool": rollout.plan.tool, **outcome})

    def _end(self, rollout: Rollout, state: str, reason: str) -> None:
        for device in rollout.devices:
            if device not in rollout.outcomes:
                self._settle(rollout, device, {"state": "skipped"})
        rollout.state, rollout.reason, rollout.ended = state, reason, self._clock()
        if state != "done":
            log.warning("rollout %s of %s %s: %s", rollout.id, rollout.plan.tool, state, reason)
        self._tell(rollout.view())

    def _forget_old(self) -> None:
        finished = sorted(
            (r for r in self._rollouts.values() if r.state != "running"), key=lambda r: r.started
        )
        for old in finished[: max(0, len(finished) - MAX_KEPT)]:
            del self._rollouts[old.id]


class BadPlan(RolloutRefused):
    def __init__(self, message: str) -> None:
        super().__init__(message, 400)


def plan_from(body: dict[str, Any], max_wait_s: float, names: Set[str]) -> RolloutPlan:
    """A plan from `POST /api/rollout`'s JSON body; RolloutRefused naming the field that is wrong.
    `names` are the characters a device, group or tool name may have."""

    def name(key: str, value: Any, *, empty: bool = False) -> str:
        if not isinstance(value, str) or (not value and not empty) or len(value) > 128 or set(value) - names:
            raise BadPlan(f"{key} must be a name (letters, digits, _ . -), got {value!r:.60}")
        return value

    def count(key: str, default: int, least: int) -> int:
        value = body.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise BadPlan(f"{key} must be a whole number >= {least}, got {value!r:.40}")
        return value

    kind = body.get("kind", "tool")
    if kind not in KINDS:
        raise BadPlan(f"kind must be one of {', '.join(KINDS)}, got {kind!r:.40}")
    if kind == "update":
        tool, args, max_wait_s = "update", update_args(body.get("update")), UPDATE_MAX_WAIT_S
    else:
        tool, args = name("tool", body.get("tool")), body.get("args", {})
    if not isinstance(args, dict):
        raise BadPlan("args must be a JSON object")
    canaries = body.get("canary_devices", [])
    if not isinstance(canaries, list) or len(canaries) > 100:
        raise BadPlan("canary_devices must be a list of device names (at most 100)")
    wait = body.get("wait_s", min(600.0 if kind == "update" else 30.0, max_wait_s))
    if isinstance(wait, bool) or not isinstance(wait, int | float) or not 0 < wait <= max_wait_s:
        raise BadPlan(f"wait_s must be a number of seconds, at most {max_wait_s:g}")
    return RolloutPlan(
        tool=tool,
        args=args,
        kind=kind,
        group=name("group", body.get("group", ""), empty=True),
        canary=count("canary", 1, 1),
        canary_devices=tuple(name("canary_devices", d) for d in canaries),
        batch_size=count("batch_size", 10, 1),
        max_failures=count("max_failures", 0, 0),
        wait_s=float(wait),
    )


UPDATE_FIELDS = ("url", "sha256", "signature", "allow_downgrade", "force")


def update_args(value: Any) -> dict[str, Any]:
    """An update rollout's `update` object: what each device's gateway `update` gets. Checked here
    for its shape only; each device checks the file itself (its SHA-256, signature and version)."""
    if not isinstance(value, dict):
        raise BadPlan("update must be a JSON object: url, sha256 and (when the devices check them) signature")
    unknown = sorted(set(value) - set(UPDATE_FIELDS))
    if unknown:
        raise BadPlan(
            f"update: unknown field(s) {', '.join(unknown)[:200]} (known: {', '.join(UPDATE_FIELDS)})"
        )
    url = value.get("url")
    if not isinstance(url, str) or not url.startswith(("https://", "http://")) or len(url) > 2048:
        raise BadPlan("update.url must be the http(s) URL of the wheel or bundle the devices fetch")
    if not isinstance(value.get("sha256"), str) or not _HEX64.fullmatch(value["sha256"]):
        raise BadPlan("update.sha256 must be the file's SHA-256 as 64 hex digits")
    signature = value.get("signature")
    if signature is not None and (not isinstance(signature, str) or not _HEX128.fullmatch(signature)):
        raise BadPlan("update.signature must be the file's Ed25519 signature as 128 hex digits")
    for flag in ("allow_downgrade", "force"):
        if flag in value and not isinstance(value[flag], bool):
            raise BadPlan(f"update.{flag} must be true or false")
    return {k: value[k] for k in UPDATE_FIELDS if value.get(k) is not None}


_HEX64 = re.compile(r"[0-9a-fA-F]{64}")
_HEX128 = re.compile(r"[0-9a-fA-F]{128}")
