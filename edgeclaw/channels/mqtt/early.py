"""Messages a request gets before its one answer (partial chat text, tool progress): published in
order by one task started with the first, best effort, and all out before the answer is queued."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

Publish = Callable[[bytes], Awaitable[None]]


class EarlyMessages:
    """The shared part: a subclass queues what it has and calls `_kick`; its `_run` publishes,
    counting `sent`, and returns once `_closing` is set and nothing is left."""

    def __init__(self, publish: Publish) -> None:
        self._publish = publish
        self._wake = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self.sent = 0

    def _kick(self) -> None:
        self._wake.set()
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        raise NotImplementedError

    async def close(self, timeout_s: float = 5.0) -> int:
        """Publish what is queued, then stop; the number of messages published."""
        self._closing = True
        task = self._task
        if task is None:
            return self.sent
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout_s)
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        return self.sent
