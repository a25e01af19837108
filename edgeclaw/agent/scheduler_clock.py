"""The scheduler's time: the clocks it reads, whether wall time was stepped, whether it is synchronised.

- **Clock steps.** Wall time can jump (NTP setting a stale clock, an
  operator, a resume). The kernel tells us (`backends.clock.StepWatcher`),
  and every wake-up also compares wall and monotonic time; a disagreement
  beyond `step_s` is a step, handed to the scheduler to move what counts
  elapsed time.
- **Clock sync.** Until the clock is synchronised (`ClockSync`) nothing runs:
  a board without an RTC would otherwise run its 06:00 job at the boot
  clock's idea of 06:00. While waiting, the scheduler's timer re-asks at
  `recheck_at` (every `sync_recheck_s`), and a clock step re-asks at once;
  after `sync_max_wait_s` (0 = for ever) jobs run by the local clock, with a
  warning.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from edgeclaw.agent.scheduler import SchedulerSettings

log = logging.getLogger("edgeclaw.scheduler")


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


class ClockWatch:
    """Wall time as the scheduler may trust it: steps noticed (`check_step`), sync waited for (`ask_sync`).

    `on_step(delta)` is called for each step; `on_sync_checked()` after each sync check, to arm the
    scheduler's timer again (for the jobs, or for the next check at `recheck_at`).
    """

    def __init__(
        self,
        clock: Clock,
        sync: SyncSource | None,
        settings: SchedulerSettings,
        on_step: Callable[[float], None],
        on_sync_checked: Callable[[], None],
    ) -> None:
        self.clock = clock
        self.sync = sync
        self.settings = settings  # step_s, sync_recheck_s, sync_max_wait_s
        self._on_step = on_step
        self._on_sync_checked = on_sync_checked
        self._offset = 0.0
        self.watching = False  # the kernel tells of steps (else they are noticed at wake-ups)
        self.synced = sync is None
        self._sync_since = 0.0
        self._sync_task: asyncio.Task[None] | None = None
        self.recheck_at: float | None = None  # when to ask about sync again (None: a check is going)
        self.closed = False
        self.steps = 0

    def start(self, on_signal: Callable[[], None]) -> None:
        """Take the wall clock's offset now, and ask the kernel to call `on_signal` at a step."""
        self._offset = self.clock.wall() - self.clock.mono()
        self.watching = self.clock.watch_steps(on_signal)
        self._sync_since = self.clock.mono()

    def check_step(self) -> None:
        offset = self.clock.wall() - self.clock.mono()
        delta = offset - self._offset
        if abs(delta) < self.settings.step_s:
            return
        self._offset = offset
        self.steps += 1
        self._on_step(delta)

    def ask_sync(self) -> None:
        if self._sync_task is not None and not self._sync_task.done():
            return
        self.recheck_at = None
        self._sync_task = asyncio.get_running_loop().create_task(self._check_sync(), name="clock sync")

    async def _check_sync(self) -> None:
        assert self.sync is not None
        try:
            ok = await self.sync.synchronised()
        except Exception:
            log.exception("asking whether the clock is synchronised failed")
            ok = False
        if self.closed:
            return
        waited = self.clock.mono() - self._sync_since
        limit = self.settings.sync_max_wait_s
        if ok:
            if waited > 1:
                log.info(
                    "the clock is synchronised (%s) after %.0f s: jobs run now", self.sync.source, waited
                )
            self.synced = True
        elif limit > 0 and waited >= limit:
            log.warning(
                "the clock is still not synchronised after %.0f s: jobs run by the local clock "
                "(automation.clock_sync_max_wait_s)",
                waited,
            )
            self.synced = True
        else:
            if not self.recheck_at and waited < 1:
                log.warning(
                    "the clock is not synchronised (%s): jobs wait for it (automation.clock_sync)",
                    self.sync.source,
                )
            self.recheck_at = self.clock.mono() + self.settings.sync_recheck_s
        if self.synced:
            self.check_step()
            self._offset = self.clock.wall() - self.clock.mono()
        self._on_sync_checked()
