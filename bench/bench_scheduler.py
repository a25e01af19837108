"""Scheduler benchmark: wake-up lateness with 1000 jobs, CPU while idle, memory per 1000 jobs.

  * Lateness: 1000 interval jobs (every 10 s, their phases spread over the interval) in a real
    scheduler on a real event loop and a real state database; for each run, how long after its
    slot the run started (the scheduler's decision, the database write of the next slots, the
    task starting). Baseline, in the same run: a bare `loop.call_at` timer per job at the same
    moments, which is what the event loop alone costs. Target: p99 <= 50 ms.
  * CPU time over 60 idle seconds with 1000 jobs whose next slots are later than that (the
    process's user + system time), beside an event loop with nothing scheduled at all. Target:
    about 0 (one timer, no polling).
  * RSS added per 1000 jobs: resident memory of this process before and after a scheduler loads
    1000 (and 10000) stored jobs.

Run: python bench/bench_scheduler.py [--jobs 1000] [--seconds 30] [--idle-s 60]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from edgeclaw.agent.scheduler import Scheduler, SchedulerSettings  # noqa: E402
from edgeclaw.agent.scheduler_clock import LoopClock  # noqa: E402
from edgeclaw.store.db import Database  # noqa: E402
from edgeclaw.store.jobs import Job, JobStore, Owner, new_job_id  # noqa: E402

OWNER = Owner("cli:bench", "cli")


class Starts:
    """An executor that only notes when each run started, against its slot."""

    def __init__(self) -> None:
        self.late: list[float] = []

    async def run(self, job: Job, run_id: int, trigger: str, slot: float | None) -> tuple[str, str]:
        if slot is not None:
            self.late.append(time.time() - slot)
        return "ok", ""


def fill(store: JobStore, n: int, every_s: float, first_in_s: float) -> list[float]:
    """n interval jobs; returns their first slots (spread over `every_s` after `first_in_s`)."""
    now = time.time()
    slots = []
    rng = random.Random(7)
    with store.db.transaction("bench jobs") as conn:
        for _ in range(n):
            slot = now + first_in_s + rng.random() * every_s
            slots.append(slot)
            job = Job(
                id=new_job_id(),
                name="",
                kind="tool",
                tool="i2c",
                schedule_kind="every",
                schedule_spec=repr(every_s),
                anchor="elapsed",
                owner=OWNER,
                catch_up="skip",
                targets=("none",),
                next_run=slot,
                created_at=now,
                updated_at=now,
            )
            from edgeclaw.store.jobs import _row_values

            columns = (
                "id, name, kind, tool, args, prompt, agent, schedule_kind, schedule_spec, tz, anchor, "
                "targets, catch_up, jitter_s, enabled, owner_caller, owner_channel, owner_chat_id, "
                "owner_peer_kind, owner_agent, created_at, updated_at, next_run"
            )
            values = _row_values(job)
            marks = ", ".join("?" * len(values))
            conn.execute(f"INSERT INTO jobs ({columns}) VALUES ({marks})", values)
    return slots


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000.0


def spread(values: list[float]) -> str:
    return f"p50 {pct(values, 50):6.2f} ms  p99 {pct(values, 99):6.2f} ms  max {max(values) * 1000:6.2f} ms"


async def lateness(workdir: Path, n: int, seconds: float) -> None:
    store = JobStore(Database(workdir / "late.db"))
    every = 10.0
    slots = fill(store, n, every, 2.0)
    starts = Starts()
    sched = Scheduler(store, starts, clock=LoopClock(), settings=SchedulerSettings(max_running=64))
    loop = asyncio.get_running_loop()
    bare: list[float] = []

    def bare_timer(slot: float) -> None:
        bare.append(time.time() - slot)
        nxt = slot + every
        if nxt < end:
            loop.call_at(loop.time() + (nxt - time.time()), bare_timer, nxt)

    end = time.time() + 2.0 + seconds
    for slot in slots:
        loop.call_at(loop.time() + (slot - time.time()), bare_timer, slot)
    await sched.start()
    await asyncio.sleep(end - time.time())
    await sched.aclose()
    runs = starts.late
    print(f"lateness, {n} jobs every {every:g} s for {seconds:g} s ({len(runs)} runs):")
    print(f"  scheduler   {spread(runs)}  (target p99 <= 50 ms)")
    print(f"  bare timers {spread(bare)}  ({len(bare)} timers, the event loop alone, same run)")
    print(f"  wake-ups: {sched.wakeups} for {len(runs)} runs (several due together share one)")


async def idle(workdir: Path, n: int, idle_s: float) -> None:
    store = JobStore(Database(workdir / "idle.db"))
    fill(store, n, 3600.0, idle_s + 60)
    sched = Scheduler(store, Starts(), clock=LoopClock())
    await sched.start()
    await asyncio.sleep(0.5)
    # CLOCK_PROCESS_CPUTIME_ID: user and system time of the whole process, at nanosecond resolution.
    before, wakes = time.process_time(), sched.wakeups
    await asyncio.sleep(idle_s)
    used = time.process_time() - before
    await sched.aclose()
    before = time.process_time()
    await asyncio.sleep(idle_s)
    baseline = time.process_time() - before
    print(f"idle {idle_s:g} s with {n} jobs due later:")
    print(f"  scheduler  CPU {used * 1000:7.2f} ms, {sched.wakeups - wakes} wake-ups")
    print(f"  bare loop  CPU {baseline * 1000:7.2f} ms (nothing scheduled, same run)")


def rss_kib() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


async def memory(workdir: Path) -> None:
    print("RSS added by the jobs a scheduler holds:")
    for n in (1000, 10000):
        store = JobStore(Database(workdir / f"rss-{n}.db"))
        fill(store, n, 3600.0, 3600.0)
        gc.collect()
        base = rss_kib()
        sched = Scheduler(store, Starts(), clock=LoopClock())
        await sched.start()
        gc.collect()
        grown = rss_kib() - base
        print(f"  {n:>6} jobs: +{grown / 1024:6.2f} MiB  ({grown / 1024 / (n / 1000):.2f} MiB per 1000 jobs)")
        await sched.aclose()
        del sched, store
        gc.collect()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--idle-s", type=float, default=60.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        await memory(work)
        await lateness(work, args.jobs, args.seconds)
        await idle(work, args.jobs, args.idle_s)


if __name__ == "__main__":
    asyncio.run(main())
