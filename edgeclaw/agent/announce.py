"""The announce queue: results for one parent session, batched when they arrive close together.

Each result waits `debounce_s` for company: another result for the same
parent restarts the wait, up to `max_wait_s` after the first, so fifty
children ending within a tenth of a second reach their parent as one notice
(one model turn), and a steady trickle still gets through. Batches of one
parent are delivered one after the other; different parents' in parallel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import field
from typing import Generic, TypeVar

from edgeclaw.records import dataclass

log = logging.getLogger("edgeclaw.subagents")

T = TypeVar("T")
K = TypeVar("K", bound=Hashable)


@dataclass
class _Pending(Generic[T]):
    items: list[T] = field(default_factory=list)
    first_at: float = 0.0
    timer: asyncio.TimerHandle | None = None


class AnnounceQueue(Generic[K, T]):
    def __init__(
        self,
        deliver: Callable[[K, list[T]], Awaitable[None]],
        *,
        debounce_s: float = 0.5,
        max_wait_s: float | None = None,
    ) -> None:
        self._deliver = deliver
        self.debounce_s = debounce_s
        self.max_wait_s = max_wait_s if max_wait_s is not None else max(4 * debounce_s, debounce_s)
        self._pending: dict[K, _Pending[T]] = {}
        self._delivering: dict[K, asyncio.Task[None]] = {}
        self.paused = False  # shutting down: hold everything (what is held is told at the next start)
        self.batches = 0  # delivered so far, for the benchmark and status

    def add(self, key: K, item: T) -> None:
        loop = asyncio.get_running_loop()
        pending = self._pending.get(key)
        if pending is None:
            pending = self._pending[key] = _Pending(first_at=loop.time())
        pending.items.append(item)
        if pending.timer is not None:
            pending.timer.cancel()
        due = min(loop.time() + self.debounce_s, pending.first_at + self.max_wait_s)
        pending.timer = loop.call_at(due, self._flush, key)

    def remove(self, key: K, match: Callable[[T], bool]) -> int:
        """Take items out before they go (the parent learned the result another way); how many."""
        pending = self._pending.get(key)
        if pending is None:
            return 0
        before = len(pending.items)
        pending.items = [i for i in pending.items if not match(i)]
        if not pending.items:
            if pending.timer is not None:
                pending.timer.cancel()
            del self._pending[key]
        return before - len(pending.items)

    def pending(self, key: K) -> int:
        pending = self._pending.get(key)
        return len(pending.items) if pending is not None else 0

    def flush_now(self, key: K) -> None:
        """Deliver what waits for `key` without waiting out the debounce."""
        if key in self._pending:
            self._flush(key)

    async def idle(self, key: K) -> None:
        """Until nothing waits for `key` and its deliveries are done."""
        while True:
            task = self._delivering.get(key)
            if task is not None:
                await asyncio.wait({task})
                continue
            if key in self._pending and not self.paused:
                self.flush_now(key)
                continue
            return

    def _flush(self, key: K) -> None:
        pending = self._pending.get(key)
        if pending is None or self.paused:
            return
        running = self._delivering.get(key)
        if running is not None and not running.done():
            # One batch at a time per parent: this one goes when the running one is done.
            running.add_done_callback(lambda _t: self._flush(key))
            return
        del self._pending[key]
        if pending.timer is not None:
            pending.timer.cancel()
        self.batches += 1
        task = asyncio.ensure_future(self._run(key, pending.items))
        self._delivering[key] = task
        task.add_done_callback(lambda t: self._delivered(key, t))

    async def _run(self, key: K, items: list[T]) -> None:
        try:
            await self._deliver(key, items)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("announcing %d result(s) to %s failed", len(items), key)

    def _delivered(self, key: K, task: asyncio.Task[None]) -> None:
        if self._delivering.get(key) is task:
            del self._delivering[key]

    async def close(self) -> None:
        """Hold what waits (it stays untold, for the next start) and cancel deliveries under way."""
        self.paused = True
        for pending in self._pending.values():
            if pending.timer is not None:
                pending.timer.cancel()
        tasks = list(self._delivering.values())
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks)
