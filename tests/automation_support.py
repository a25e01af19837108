"""A clock the tests turn by hand, a clock-sync answer they set, and an executor that records runs.

`FakeClock` keeps wall time and monotonic time apart, as a board's clocks are:
`advance(s)` moves both and fires the timers that fall due, in order;
`step(s)` moves the wall clock alone (an NTP correction, a stale RTC-less boot
clock being set) and tells the step watcher, as the kernel's timerfd would.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from edgeclaw.store.jobs import Job


@dataclass
class _Timer:
    when: float
    callback: Callable[[], None]
    cancelled: bool = False

    def cancel(self) -> None:
        self.cancelled = True


class FakeClock:
    def __init__(self, wall: float = 1_750_000_000.0, *, watch: bool = True) -> None:
        self._wall = wall
        self._mono = 1000.0
        self.timers: list[_Timer] = []
        self.watch = watch
        self._on_step: Callable[[], None] | None = None
        self.armed = 0  # how many timers were ever set: one per wake-up, never a polling loop

    def wall(self) -> float:
        return self._wall

    def mono(self) -> float:
        return self._mono

    def call_at(self, when: float, callback: Callable[[], None]) -> _Timer:
        timer = _Timer(when, callback)
        self.timers.append(timer)
        self.armed += 1
        return timer

    def watch_steps(self, callback: Callable[[], None]) -> bool:
        self._on_step = callback
        return self.watch

    def close(self) -> None:
        self._on_step = None

    @property
    def pending(self) -> list[_Timer]:
        return [t for t in self.timers if not t.cancelled]

    async def advance(self, seconds: float) -> None:
        """Move both clocks, firing due timers in order; lets the runs they start finish."""
        target = self._mono + seconds
        while True:
            due = sorted(
                (t for t in self.timers if not t.cancelled and t.when <= target), key=lambda t: t.when
            )
            if not due:
                break
            timer = due[0]
            self._wall += timer.when - self._mono if timer.when > self._mono else 0.0
            self._mono = max(self._mono, timer.when)
            timer.cancelled = True
            timer.callback()
            for _ in range(5):
                await asyncio.sleep(0)
        self._wall += target - self._mono
        self._mono = target
        for _ in range(5):
            await asyncio.sleep(0)

    async def step(self, seconds: float) -> None:
        """The wall clock is set: it jumps, monotonic time does not."""
        self._wall += seconds
        if self._on_step is not None and self.watch:
            self._on_step()
        for _ in range(5):
            await asyncio.sleep(0)


class FakeSync:
    source = "test"

    def __init__(self, synced: bool = True) -> None:
        self.synced = synced
        self.asked = 0

    async def synchronised(self) -> bool:
        self.asked += 1
        return self.synced


@dataclass
class Recorded:
    job: str
    trigger: str
    slot: float | None
    wall: float


@dataclass
class RecordingExecutor:
    clock: FakeClock
    runs: list[Recorded] = field(default_factory=list)
    hold: asyncio.Event | None = None  # when set, runs wait for it (to make them overlap)
    outcome: str = "ok"

    async def run(self, job: Job, run_id: int, trigger: str, slot: float | None) -> tuple[str, str]:
        self.runs.append(Recorded(job.id, trigger, slot, self.clock.wall()))
        if self.hold is not None:
            await self.hold.wait()
        return self.outcome, ""
