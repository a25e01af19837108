"""The scheduler: one timer for every job, wall-clock slots on a monotonic timer, no polling.

The jobs wait in a heap ordered by their next slot (plus their jitter). One
timer (`call_at` on the event loop's monotonic clock) is armed for the
earliest; when it fires, every job that is due is decided in one go, the
decisions are written in one transaction (each job's next slot first, so a
crash never runs a slot twice), the runs start, and the timer is armed for
the next earliest. With nothing due the process does nothing at all.

Time on a board:

- **Clock steps.** Wall time can jump (NTP setting a stale clock, an
  operator, a resume). The kernel tells us (`backends.clock.StepWatcher`),
  and every wake-up also compares wall and monotonic time. On a step, jobs
  counting elapsed time (`every`, `in ...`) move with it; calendar slots
  (cron, ISO times) stay where they are.
- **Late slots.** A slot more than `late_limit_s` late (the device was off,
  the clock jumped forward past it, the board was suspended) follows the
  job's `catch_up`: `skip` records it as missed, `once` runs it once. Either
  way the job then moves to its first slot after now: never a burst of runs.
- **Clock sync.** Until the clock is synchronised (`ClockSync`) nothing runs:
  a board without an RTC would otherwise run its 06:00 job at the boot
  clock's idea of 06:00. While waiting, the one timer re-asks every
  `sync_recheck_s`, and a clock step re-asks at once; after `sync_max_wait_s`
  (0 = for ever) jobs run by the local clock, with a warning.
- **Overlaps.** A job whose previous run is still going (or waiting for a
  run slot) is not started again: the slot is recorded `skipped`.

Edge-triggered jobs (`on_edge`) are not on the timer: each enabled one has a
watch on its input pin (an `EdgeSource`, the board's GPIO), and an edge
starts a run (trigger `edge`) at once, clock sync or not, as a button press
is no less real on a board whose clock is not set. Edges while the previous
run is going are not runs: the first is recorded `skipped`, the rest counted
in it, so a flapping input cannot flood the database.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import logging
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from edgeclaw.store.jobs import Job, JobStore
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.automation.when import Schedule

log = logging.getLogger("edgeclaw.scheduler")

# A wake-up takes everything due within this much of now (call_at may fire a hair early).
DUE_EPSILON_S = 0.001
# Without a kernel step watcher, sleep at most this long, so a clock step is noticed in time.
FALLBACK_MAX_SLEEP_S = 600.0
RUN_NOW_WAIT_S = 100.0


class TimerHandle(Protocol):
    def cancel(self) -> None: ...


class Clock(Protocol):
    """What the scheduler asks of time; tests give it a clock they turn by hand."""

    def wall(self) -> float: ...

    def mono(self) -> float: ...

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle: ...

    def watch_steps(self, callback: Callable[[], None]) -> bool: ...

    def close(self) -> None: ...


class SyncSource(Protocol):
    source: str

    async def synchronised(self) -> bool: ...


class LoopClock:
    """The event loop's monotonic clock, the system's wall clock, and the kernel's step watcher."""

    def __init__(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._watcher: Any = None

    def wall(self) -> float:
        return time.time()

    def mono(self) -> float:
        return self._loop.time()

    def call_at(self, when: float, callback: Callable[[], None]) -> TimerHandle:
        return self._loop.call_at(when, callback)

    def watch_steps(self, callback: Callable[[], None]) -> bool:
        from edgeclaw.backends.clock import StepWatcher

        self._watcher = StepWatcher(callback)
        return self._watcher.start()

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()


class Executor(Protocol):
    """Runs one job once (see `agent.job_runner.JobRunner`): returns (outcome, detail).

    `note` (given for edge-triggered runs only) says what started the run, for its prompt or output.
    """

    async def run(self, job: Job, run_id: int, trigger: str, slot: float | None) -> tuple[str, str]: ...


class EdgeWatchHandle(Protocol):
    def cancel(self) -> None: ...


class EdgeSource(Protocol):
    """The board's input pins, as the scheduler watches them (`daemon.scheduler.GpioEdges`)."""

    async def watch(
        self, pin: int | str, edge: str, debounce_s: float, callback: Callable[[float, str], None]
    ) -> EdgeWatchHandle:
        """Call `callback(unix_time, description)` on the loop for each matching debounced edge."""
        ...


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
        self.edges = edges
        self._edge_watches: dict[str, EdgeWatchHandle] = {}
        self._edge_setups: dict[str, asyncio.Task[None]] = {}
        self._edges_skipped: dict[str, tuple[int, int]] = {}  # job -> (its skipped run, edges in it)
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
        self._running: dict[str, asyncio.Task[dict[str, Any]]] = {}
        self._tasks: set[asyncio.Task[Any]] = set()
        self._slots = asyncio.Semaphore(self.settings.max_running)
        self._timer: TimerHandle | None = None
        self._offset = 0.0
        self._watching = False
        self._synced = sync is None
        self._sync_since = 0.0
        self._sync_task: asyncio.Task[None] | None = None
        self._recheck_at: float | None = None
        self._closed = False
        self.steps = 0
        self.wakeups = 0
        # For the benchmark and status: how late each job's start was, in seconds (a bounded window).
        self.lateness: list[float] = []

    # -- lifecycle -------------------------------------------------------------------------------
    async def start(self) -> None:
        interrupted = self.store.interrupted()
        if interrupted:
            log.warning(
                "%d job run(s) were going when the daemon stopped: recorded 'interrupted'", interrupted
            )
        for job in self.store.all():
            self._load(job)
        self._offset = self.clock.wall() - self.clock.mono()
        self._watching = self.clock.watch_steps(self._on_step_signal)
        self._sync_since = self.clock.mono()
        log.info(
            "scheduler: %d job(s), clock steps %s",
            len(self._jobs),
            "watched by the kernel" if self._watching else "noticed at wake-ups",
        )
        if self._synced:
            self._arm()
        else:
            self._ask_sync()

    async def aclose(self) -> None:
        self._closed = True
        for job_id in list(self._edge_watches) + list(self._edge_setups):
            self._unwatch(job_id)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.clock.close()
        tasks = [t for t in self._tasks if not t.done()]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)

    async def __aenter__(self) -> Scheduler:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def idle(self) -> None:
        """Wait until no run is going (tests and the benchmark)."""
        while self._tasks:
            await asyncio.wait(list(self._tasks))

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
        self._unwatch(job_id)
        self._arm()

    def job_state(self, job_id: str) -> str:
        if job_id in self._running:
            return "running"
        if not self._synced and job_id in self._jobs:
            return "waiting for clock sync"
        return ""

    def add_periodic(self, name: str, interval_s: float, callback: Callable[[], Awaitable[None]]) -> None:
        entry = Periodic(name, interval_s, callback, self.clock.wall() + interval_s)
        self._periodic[name] = entry
        self._push("@" + name, entry.due)
        if not self._closed:
            self._arm()

    def _load(self, job: Job) -> None:
        if job.schedule_kind == "edge" or job.id in self._edge_watches or job.id in self._edge_setups:
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

    def _push(self, key: str, due: float) -> None:
        self._due[key] = due
        self._seq += 1
        heapq.heappush(self._heap, (due, self._seq, key))

    def jitter(self, job: Job, slot: float) -> float:
        """A delay in [0, jitter_s) that is the same for a job's slot on every start of this device."""
        if job.jitter_s <= 0:
            return 0.0
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
        if not self._synced:
            when = self._recheck_at
            if when is None:
                return  # a sync check is under way; it arms the timer when it ends
        else:
            due = self._earliest()
            if due is None:
                return  # nothing to wait for: no timer, no wake-ups
            delay = max(0.0, due - self.clock.wall())
            if not self._watching:
                delay = min(delay, FALLBACK_MAX_SLEEP_S)
            when = mono + delay
        self._timer = self.clock.call_at(when, self._wake)

    def _wake(self) -> None:
        self._timer = None
        self.wakeups += 1
        try:
            self._check_step()
            if not self._synced:
                self._ask_sync()
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
            if self._synced:
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
            if job.id in self._running:
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
            self._launch(self._jobs[job_id], run_id, trigger, slot)

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

    def _note_skipped_edges(self, job_id: str) -> None:
        """Edges that came during a run end up counted in the one `skipped` record made for them."""
        run, count = self._edges_skipped.pop(job_id, (0, 0))
        if count > 1:
            try:
                self.store.append_detail(run, f" ({count} edges in all)")
            except Exception:
                log.exception("could not record the skipped edges of job %s", job_id)

    def _note_lateness(self, late: float) -> None:
        self.lateness.append(late)
        if len(self.lateness) > 100_000:
            del self.lateness[:50_000]

    # -- running ------------------------------------------------------------------------------------
    def _launch(
        self, job: Job, run_id: int, trigger: str, slot: float | None, note: str = ""
    ) -> asyncio.Task[dict[str, Any]]:
        task = asyncio.get_running_loop().create_task(
            self._run(job, run_id, trigger, slot, note), name=f"job {job.id}"
        )
        self._running[job.id] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def _run(
        self, job: Job, run_id: int, trigger: str, slot: float | None, note: str = ""
    ) -> dict[str, Any]:
        started = time.perf_counter()
        outcome, detail = "error", ""
        try:
            async with self._slots:
                started = time.perf_counter()
                if note:
                    outcome, detail = await self.executor.run(job, run_id, trigger, slot, note=note)  # type: ignore[call-arg]
                else:
                    outcome, detail = await self.executor.run(job, run_id, trigger, slot)
        except asyncio.CancelledError:
            outcome, detail = "interrupted", "the daemon stopped during this run"
            raise
        except Exception as e:
            log.exception("job %s failed", job.id)
            outcome, detail = "error", f"internal error: {type(e).__name__}: {e}"
        finally:
            duration_ms = (time.perf_counter() - started) * 1000.0
            if self._running.get(job.id) is asyncio.current_task():
                del self._running[job.id]
            self._note_skipped_edges(job.id)
            try:
                self.store.finish_run(run_id, job.id, outcome, detail, duration_ms)
            except Exception:
                log.exception("could not record the outcome of job %s run %d", job.id, run_id)
            if self.audit is not None:
                self.audit.emit(
                    "job_run",
                    job=job.id,
                    name=job.name,
                    run=run_id,
                    trigger=trigger,
                    outcome=outcome,
                    duration_ms=round(duration_ms, 3),
                    owner=job.owner.caller,
                    channel=job.owner.channel,
                )
        return {
            "run": run_id,
            "job": job.id,
            "outcome": outcome,
            "detail": detail,
            "duration_ms": round(duration_ms, 3),
        }

    async def run_now(self, job_id: str) -> dict[str, Any]:
        """Run a job at once, as its owner (its schedule is not touched); waits for the outcome."""
        job = self.store.get(job_id)
        if job is None:
            return {"job": job_id, "outcome": "error", "detail": "no such job"}
        if job_id in self._running:
            run_id = self.store.note(
                job_id, "manual", None, "skipped", "the job is running already", None, advance=False
            )
            return {
                "run": run_id,
                "job": job_id,
                "outcome": "skipped",
                "detail": "the job is running already",
            }
        run_id = self.store.start_run(job_id, "manual", None, None, advance=False)
        task = self._launch(job, run_id, "manual", None)
        done, _ = await asyncio.wait({task}, timeout=RUN_NOW_WAIT_S)
        if not done:
            return {
                "run": run_id,
                "job": job_id,
                "outcome": "running",
                "detail": "still running; cron runs shows it",
            }
        return task.result()

    # -- edge triggers ------------------------------------------------------------------------------
    def _load_edge(self, job: Job) -> None:
        """(Re)watch an edge job's pin as it is now defined; a timed or disabled job gets no watch."""
        self._unwatch(job.id)
        self._jobs[job.id] = job
        self._due.pop(job.id, None)
        if job.schedule_kind != "edge" or not job.enabled or self._closed:
            return
        if self.edges is None:
            log.warning("job %s waits for a GPIO edge, but this board has no GPIO pins to watch", job.id)
            return
        trigger = _schedule(job).edge
        task = asyncio.get_running_loop().create_task(
            self._watch(job.id, trigger.pin, trigger.edge, trigger.debounce_ms / 1000), name=f"edge {job.id}"
        )
        self._edge_setups[job.id] = task
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _watch(self, job_id: str, pin: int | str, edge: str, debounce_s: float) -> None:
        assert self.edges is not None
        try:
            handle = await self.edges.watch(
                pin, edge, debounce_s, lambda at, what: self._edge_fired(job_id, at, what)
            )
        except Exception as e:
            # The profile no longer grants the pin, the GPIO library is missing: on the job's record.
            log.warning("job %s: cannot watch GPIO %s: %s", job_id, pin, e)
            try:
                self.store.note(
                    job_id, "edge", None, "error", f"cannot watch GPIO {pin}: {e}", None, advance=False
                )
            except Exception:
                log.exception("job %s: could not record that its pin cannot be watched", job_id)
            return
        finally:
            if self._edge_setups.get(job_id) is asyncio.current_task():
                del self._edge_setups[job_id]
        if self._closed or self._jobs.get(job_id) is None:
            handle.cancel()
            return
        self._edge_watches[job_id] = handle

    def _unwatch(self, job_id: str) -> None:
        setup = self._edge_setups.pop(job_id, None)
        if setup is not None:
            setup.cancel()
        handle = self._edge_watches.pop(job_id, None)
        if handle is not None:
            handle.cancel()

    def edge_watched(self, job_id: str) -> bool:
        """True once an edge job's pin is being watched (status, tests)."""
        return job_id in self._edge_watches

    def _edge_fired(self, job_id: str, at: float, what: str) -> None:
        try:
            self._start_edge_run(job_id, at, what)
        except Exception:
            # A full disk, a closed database: this edge is lost, the next one is tried again.
            log.exception("job %s: could not start the run for %s", job_id, what)

    def _start_edge_run(self, job_id: str, at: float, what: str) -> None:
        job = self._jobs.get(job_id)
        if job is None or not job.enabled or self._closed:
            return
        if job_id in self._running:
            run, count = self._edges_skipped.get(job_id, (0, 0))
            if run:
                self._edges_skipped[job_id] = (run, count + 1)
                return
            run = self.store.note(
                job_id,
                "edge",
                at,
                "skipped",
                f"{what}: the previous run was still going",
                None,
                advance=False,
            )
            self._edges_skipped[job_id] = (run, 1)
            return
        run_id = self.store.start_run(job_id, "edge", at, None, advance=False)
        self._launch(job, run_id, "edge", at, note=what)

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

        task = asyncio.get_running_loop().create_task(beat(), name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- the clock ----------------------------------------------------------------------------------
    def _on_step_signal(self) -> None:
        """The kernel says the clock was set: look now, not at the next wake-up."""
        self._check_step()
        if not self._synced:
            self._recheck_at = None
            self._ask_sync()
        self._arm()

    def _check_step(self) -> None:
        offset = self.clock.wall() - self.clock.mono()
        delta = offset - self._offset
        if abs(delta) < self.settings.step_s:
            return
        self._offset = offset
        self.steps += 1
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

    def _ask_sync(self) -> None:
        if self._sync_task is not None and not self._sync_task.done():
            return
        self._recheck_at = None
        self._sync_task = asyncio.get_running_loop().create_task(self._check_sync(), name="clock sync")

    async def _check_sync(self) -> None:
        assert self.sync is not None
        try:
            ok = await self.sync.synchronised()
        except Exception:
            log.exception("asking whether the clock is synchronised failed")
            ok = False
        if self._closed:
            return
        waited = self.clock.mono() - self._sync_since
        limit = self.settings.sync_max_wait_s
        if ok:
            if waited > 1:
                log.info(
                    "the clock is synchronised (%s) after %.0f s: jobs run now", self.sync.source, waited
                )
            self._synced = True
        elif limit > 0 and waited >= limit:
            log.warning(
                "the clock is still not synchronised after %.0f s: jobs run by the local clock "
                "(automation.clock_sync_max_wait_s)",
                waited,
            )
            self._synced = True
        else:
            if not self._recheck_at and waited < 1:
                log.warning(
                    "the clock is not synchronised (%s): jobs wait for it (automation.clock_sync)",
                    self.sync.source,
                )
            self._recheck_at = self.clock.mono() + self.settings.sync_recheck_s
        if self._synced:
            self._check_step()
            self._offset = self.clock.wall() - self.clock.mono()
        self._arm()

    # -- status --------------------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        due = self._earliest()
        return {
            "jobs": len(self._jobs),
            "enabled": sum(1 for j in self._jobs.values() if j.enabled),
            "running": len(self._running),
            "next_due": round(due, 3) if due is not None else None,
            "clock_synchronised": self._synced,
            "clock_source": getattr(self.sync, "source", "off") if self.sync is not None else "off",
            "clock_steps_watched": self._watching,
            "clock_steps": self.steps,
            "edge_jobs_watched": len(self._edge_watches),
        }


def _schedule(job: Job) -> Schedule:
    return Schedule(job.schedule_kind, job.schedule_spec, job.tz, job.anchor)  # type: ignore[arg-type]


def _slots(n: int) -> str:
    return "1 slot" if n == 1 else f"{n} slots"
