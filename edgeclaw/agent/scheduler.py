"""The scheduler: one timer for every job, wall-clock slots on a monotonic timer, no polling.

The jobs wait in a heap ordered by their next slot (plus their jitter). One
timer (`call_at` on the event loop's monotonic clock) is armed for the
earliest; when it fires, every job that is due is decided in one go, the
decisions are written in one transaction (each job's next slot first, so a
crash never runs a slot twice), the runs start, and the timer is armed for
the next earliest. With nothing due the process does nothing at all.

Time on a board:

- **Clock steps** and **clock sync**: `agent.scheduler_clock` (`ClockWatch`).
  On a step, jobs counting elapsed time (`every`, `in ...`) move with it;
  calendar slots (cron, ISO times) stay where they are. Until the clock is
  synchronised nothing runs; while waiting, the one timer re-asks.
- **Late slots.** A slot more than `late_limit_s` late (the device was off,
  the clock jumped forward past it, the board was suspended) follows the
  job's `catch_up`: `skip` records it as missed, `once` runs it once. Either
  way the job then moves to its first slot after now: never a burst of runs.
- **Overlaps.** A job whose previous run is still going (or waiting for a
  run slot) is not started again: the slot is recorded `skipped`.

The runs themselves are `agent.job_runs` (`JobRuns`); edge-triggered jobs
(`on_edge`) are not on the timer but on a watch of their input pin
(`agent.edge_triggers`).
"""

from __future__ import annotations

import heapq
import logging
import math
from collections.abc import Awaitable, Callable
from dataclasses import replace
from typing import Any

from edgeclaw.agent.edge_triggers import EdgeSource, EdgeTriggers
from edgeclaw.agent.job_runs import Executor, JobRuns
from edgeclaw.agent.scheduler_clock import Clock, ClockWatch, SyncSource, TimerHandle
from edgeclaw.records import dataclass
from edgeclaw.store.jobs import Job, JobStore
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.automation.when import Schedule

log = logging.getLogger("edgeclaw.scheduler")

# A wake-up takes everything due within this much of now (call_at may fire a hair early).
DUE_EPSILON_S = 0.001
# Without a kernel step watcher, sleep at most this long, so a clock step is noticed in time.
FALLBACK_MAX_SLEEP_S = 600.0


@dataclass
class SchedulerSettings:
    """How the scheduler treats late jobs, clock steps and concurrent runs."""

    late_limit_s: float = 60.0
    step_s: float = 2.0  # a disagreement of wall and monotonic time beyond this is a clock step
    sync_recheck_s: float = 15.0
    sync_max_wait_s: float = 300.0  # 0 = wait for sync for ever
    max_running: int = 4  # job runs at once; more wait for a slot (and count as still running)
    device_id: str = ""  # seeds the jitter, so a fleet's devices spread apart


@dataclass
class Periodic:
    """A built-in timer of the scheduler's own (the heartbeat): every `interval_s` of elapsed time."""

    name: str
    interval_s: float
    callback: Callable[[], Awaitable[None]]
    due: float = 0.0  # wall time
    running: bool = False


class Scheduler:
    """The job table on one timer: decides what is due, records it, and starts the runs."""

    def __init__(
        self,
        store: JobStore,
        executor: Executor,
        *,
        clock: Clock,
        sync: SyncSource | None = None,
        settings: SchedulerSettings | None = None,
        audit: AuditTrail | None = None,
        edges: EdgeSource | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.clock = clock
        self.sync = sync
        self.settings = settings or SchedulerSettings()
        self.audit = audit
        self._jobs: dict[str, Job] = {}
        self._due: dict[str, float] = {}  # key -> the due time its live heap entry has
        self._heap: list[tuple[float, int, str]] = []
        self._seq = 0
        self._periodic: dict[str, Periodic] = {}
        self._tasks = TaskSet()  # runs, edge watches being set up, built-in timers' beats
        self._runs = JobRuns(store, executor, self._tasks, max_running=self.settings.max_running, audit=audit)
        self._edges = EdgeTriggers(edges, store, self._jobs, self._runs, self._tasks)
        self._runs.on_end = self._edges.run_ended
        self._time = ClockWatch(clock, sync, self.settings, self._clock_stepped, on_sync_checked=self._arm)
        self._timer: TimerHandle | None = None
        self._closed = False
        self.wakeups = 0
        # For the benchmark and status: how late each job's start was, in seconds (a bounded window).
        self.lateness: list[float] = []

    @property
    def edges(self) -> EdgeSource | None:
        return self._edges.edges

    @property
    def steps(self) -> int:
        """Clock steps seen since start."""
        return self._time.steps

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        interrupted = self.store.interrupted()
        if interrupted:
            log.warning(
                "%d job run(s) were going when the daemon stopped: recorded 'interrupted'", interrupted
            )
        for job in self.store.all():
            self._load(job)
        self._time.start(self._on_step_signal)
        log.info(
            "scheduler: %d job(s), clock steps %s",
            len(self._jobs),
            "watched by the kernel" if self._time.watching else "noticed at wake-ups",
        )
        if self._time.synced:
            self._arm()
        else:
            self._time.ask_sync()

    async def aclose(self) -> None:
        self._closed = self._time.closed = True
        self._edges.close()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.clock.close()
        await self._tasks.close()

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def idle(self) -> None:
        """Wait until no run is going (tests and the benchmark)."""
        await self._tasks.wait()

    # -- the jobs' table, as the tools change it --------------------------------------------------
    def changed(self, job_id: str) -> None:
        job = self.store.get(job_id)
        if job is None:
            self.removed(job_id)
            return
        self._load(job)
        self._arm()

    def removed(self, job_id: str) -> None:
        self._jobs.pop(job_id, None)
        self._due.pop(job_id, None)
        self._edges.unwatch(job_id)
        self._arm()

    def job_state(self, job_id: str) -> str:
        if job_id in self._runs:
            return "running"
        if not self._time.synced and job_id in self._jobs:
            return "waiting for clock sync"
        return ""

    def add_periodic(self, name: str, interval_s: float, callback: Callable[[], Awaitable[None]]) -> None:
        entry = Periodic(name, interval_s, callback, self.clock.wall() + interval_s)
        self._periodic[name] = entry
        self._push("@" + name, entry.due)
        if not self._closed:
            self._arm()

    def _load(self, job: Job) -> None:
        if job.schedule_kind == "edge" or job.id in self._edges:
            self._load_edge(job)
            if job.schedule_kind == "edge":
                return
        if job.enabled and job.next_run is None and job.schedule_kind != "at":
            # A recurring job without a slot (switched on again, or stored by an older version).
            nxt = _schedule(job).next_after(self.clock.wall())
            job = replace(job, next_run=nxt)
            self.store.set_next(job.id, nxt)
        self._jobs[job.id] = job
        if job.enabled and job.next_run is not None:
            self._push(job.id, job.next_run + self.jitter(job, job.next_run))
        else:
            self._due.pop(job.id, None)

    def _load_edge(self, job: Job) -> None:
        """(Re)watch an edge job's pin as it is now defined; a timed or disabled job gets no watch."""
        self._edges.unwatch(job.id)
        self._jobs[job.id] = job
        self._due.pop(job.id, None)
        if job.schedule_kind == "edge" and job.enabled:
            self._edges.watch(job.id, _schedule(job).edge)

    def _push(self, key: str, due: float) -> None:
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))

    def jitter(self, job: Job, slot: float) -> float:
        """A delay in [0, jitter_s) that is the same for a job's slot on every start of this device."""
        if job.jitter_s <= 0:
            return 0.0
        import hashlib  # on first use, not at start

        seed = hashlib.sha256(f"{self.settings.device_id}:{job.id}:{slot:.0f}".encode()).digest()
        return int.from_bytes(seed[:8], "big") / 2**64 * job.jitter_s

    # -- the one timer --------------------------------------------------------------------------
    def _earliest(self) -> float | None:
        heap = self._heap
        while heap:
            due, _, key = heap[0]
            if self._due.get(key) == due:
                return due
            heapq.heappop(heap)  # a stale entry: the job changed, was removed or ran
        return None

    def _arm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._closed:
            return
        mono = self.clock.mono()
        if not self._time.synced:
            when = self._time.recheck_at
            if when is None:
                return  # a sync check is under way; it arms the timer when it ends
        else:
            due = self._earliest()
            if due is None:
                return  # nothing to wait for: no timer, no wake-ups
            delay = max(0.0, due - self.clock.wall())
            if not self._time.watching:
                delay = min(delay, FALLBACK_MAX_SLEEP_S)
            when = mono + delay
        self._timer = self.clock.call_at(when, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self.wakeups += 1
        try:
            self._time.check_step()
            if not self._time.synced:
                self._time.ask_sync()
                return
            now = self.clock.wall()
            due: list[tuple[str, float]] = []
            heap = self._heap
            while heap and heap[0][0] <= now + DUE_EPSILON_S:
                when, _, key = heapq.heappop(heap)
                if self._due.get(key) != when:
                    continue
                del self._due[key]
                due.append((key, when))
            if due:
                self._fire(due, now)
        except Exception:
            log.exception("the scheduler's wake-up failed")
        finally:
            if self._time.synced:
                self._arm()

    # -- deciding ---------------------------------------------------------------------------------
    def _fire(self, due: list[tuple[str, float]], now: float) -> None:
        notes: list[tuple[str, str, float | None, str, str, float | None]] = []
        starts: list[tuple[str, str, float | None, float | None]] = []
        limit = self.settings.late_limit_s
        for key, when in due:
            if key.startswith("@"):
                self._fire_periodic(key[1:], now)
                continue
            job = self._jobs.get(key)
            if job is None or not job.enabled or job.next_run is None:
                continue
            slot = job.next_run
            nxt = self.following(job, slot, now)
            late = now - when
            if job.id in self._runs:
                notes.append((job.id, "schedule", slot, "skipped", "the previous run was still going", nxt))
            elif late > limit:
                missed = _schedule(job).slots_between(slot, now) + 1 if job.schedule_kind != "at" else 1
                if job.catch_up == "once":
                    starts.append((job.id, "catch_up", slot, nxt))
                else:
                    notes.append(
                        (
                            job.id,
                            "catch_up",
                            slot,
                            "missed",
                            f"{_slots(missed)} missed (catch_up = skip)",
                            nxt,
                        )
                    )
            else:
                starts.append((job.id, "schedule", slot, nxt))
                self._note_lateness(late)
            self._jobs[job.id] = replace(job, next_run=nxt)
        ids = self.store.record_batch(notes, starts) if notes or starts else []
        for (job_id, _trigger, _slot, nxt), _ in zip(starts, ids, strict=True):
            job = self._jobs[job_id]
            if nxt is not None:
                self._push(job_id, nxt + self.jitter(job, nxt))
        for job_id, _trigger, _slot, _outcome, _detail, nxt in notes:
            job = self._jobs[job_id]
            if nxt is not None:
                self._push(job_id, nxt + self.jitter(job, nxt))
        for (job_id, trigger, slot, _nxt), run_id in zip(starts, ids, strict=True):
            self._runs.launch(self._jobs[job_id], run_id, trigger, slot)

    def following(self, job: Job, slot: float, now: float) -> float | None:
        """The job's next slot after the one being served, and after now: a late job never bursts."""
        sched = _schedule(job)
        if not sched.recurring:
            return None
        nxt = sched.next_after(slot)
        if nxt is not None and nxt <= now:
            if sched.kind == "every":  # keep the phase: the first slot of the same series after now
                step = sched.interval_s
                nxt = slot + (math.floor((now - slot) / step) + 1) * step
            else:
                nxt = sched.next_after(now)
        return nxt

    def _note_lateness(self, late: float) -> None:
        self.lateness.append(late)
        if len(self.lateness) > 100_000:
            del self.lateness[:50_000]

    # -- running ------------------------------------------------------------------------------------
    async def run_now(self, job_id: str) -> dict[str, Any]:
        """Run a job at once, as its owner (its schedule is not touched); waits for the outcome."""
        return await self._runs.run_now(job_id)

    def edge_watched(self, job_id: str) -> bool:
        """True once an edge job's pin is being watched (status, tests)."""
        return self._edges.watching(job_id)

    # -- built-in timers (the heartbeat) -----------------------------------------------------------
    def _fire_periodic(self, name: str, now: float) -> None:
        entry = self._periodic.get(name)
        if entry is None:
            return
        # The next one counts from now: a late or skipped beat is not made up.
        entry.due = now + entry.interval_s
        self._push("@" + name, entry.due)
        if entry.running:
            log.info("%s: the previous one is still going; skipped", name)
            return
        entry.running = True

        async def beat() -> None:
            try:
                await entry.callback()
            except Exception:
                log.exception("%s failed", name)
            finally:
                entry.running = False

        self._tasks.spawn(beat(), name=name)

    # -- the clock ----------------------------------------------------------------------------------
    def _on_step_signal(self) -> None:
        """The kernel says the clock was set: look now, not at the next wake-up."""
        self._time.check_step()
        if not self._time.synced:
            self._time.recheck_at = None
            self._time.ask_sync()
        self._arm()

    def _clock_stepped(self, delta: float) -> None:
        """Jobs counting elapsed time move with a step of the wall clock; calendar slots stay."""
        moved: list[tuple[float | None, str]] = []
        for job in list(self._jobs.values()):
            if job.anchor == "elapsed" and job.next_run is not None:
                job = replace(job, next_run=job.next_run + delta)
                self._jobs[job.id] = job
                moved.append((job.next_run, job.id))
        if moved:
            self.store.set_next_many(moved)
        for entry in self._periodic.values():
            entry.due += delta
        self._rebuild()
        log.warning(
            "the wall clock was stepped by %+.1f s: %d interval job(s) moved with it, calendar slots kept",
            delta,
            len(moved),
        )
        if self.audit is not None:
            self.audit.emit("clock_step", delta_s=round(delta, 3), moved=len(moved))

    def _rebuild(self) -> None:
        self._heap.clear()
        self._due.clear()
        for job in self._jobs.values():
            if job.enabled and job.next_run is not None:
                self._push(job.id, job.next_run + self.jitter(job, job.next_run))
        for name, entry in self._periodic.items():
            self._push("@" + name, entry.due)

    # -- status --------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        due = self._earliest()
        return {
            "jobs": len(self._jobs),
            "enabled": sum(1 for j in self._jobs.values() if j.enabled),
            "running": len(self._runs),
            "next_due": round(due, 3) if due is not None else None,
            "clock_synchronised": self._time.synced,
            "clock_source": getattr(self.sync, "source", "off") if self.sync is not None else "off",
            "clock_steps_watched": self._time.watching,
            "clock_steps": self.steps,
            "edge_jobs_watched": len(self._edges),
        }


def _schedule(job: Job) -> Schedule:
    return Schedule(job.schedule_kind, job.schedule_spec, job.tz, job.anchor)  # type: ignore[arg-type]


def _slots(n: int) -> str:
    return "1 slot" if n == 1 else f"{n} slots"
