"""Fire-and-forget tasks that are still owned: kept until done, cancelled and awaited on close.

asyncio holds only a weak reference to a task, so a task nobody keeps may be collected before it
finishes; every service that starts work in the background keeps its tasks in a `TaskSet`, which
also gives it one way to stop them (`cancel` / `wait`) at shutdown.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


class TaskSet:
    """The background tasks of one owner: each kept from `spawn` until it is done."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Future[Any]] = set()

    def spawn(self, work: Awaitable[T], name: str | None = None) -> asyncio.Future[T]:
        """Run `work` in a task of its own (a coroutine, or any awaitable) and keep it until done."""
        task = asyncio.ensure_future(work)
        if name is not None and isinstance(task, asyncio.Task):
            task.set_name(name)
        self.add(task)
        return task

    def add(self, task: asyncio.Future[Any]) -> None:
        """Keep a task started elsewhere until it is done."""
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def __len__(self) -> int:
        return len(self._tasks)

    def __iter__(self) -> Iterator[asyncio.Future[Any]]:
        return iter(list(self._tasks))

    def __bool__(self) -> bool:
        return bool(self._tasks)

    def cancel(self) -> None:
        """Ask every task still running to stop (returns at once; `wait` for them)."""
        for task in list(self._tasks):
            task.cancel()

    async def wait(self, grace_s: float | None = None) -> set[asyncio.Future[Any]]:
        """Wait until every task is done (those started meanwhile too), or `grace_s` seconds; the ones
        still running then."""
        loop = asyncio.get_running_loop()
        deadline = None if grace_s is None else loop.time() + grace_s
        while pending := [t for t in self._tasks if not t.done()]:
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                break
            await asyncio.wait(pending, timeout=left)
        return {t for t in self._tasks if not t.done()}

    async def close(self) -> None:
        """Cancel every task and wait until they have all ended."""
        self.cancel()
        await self.wait()
