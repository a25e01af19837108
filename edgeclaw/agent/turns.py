"""The turns running in each session: serial within a session, each in its own task, stoppable.

A turn (a model turn or a `/call`) holds its session's lock while it runs, so
the next message of that session waits for it; sessions run concurrently. The
turn runs in a task of its own so `/stop` (or Ctrl-C on a terminal, or
shutdown) cancels just that turn, and the session stays locked until the turn
has unwound. Turns nobody waits for (replies delivered later) are kept in a
`TaskSet` and stopped with the others at shutdown.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

from edgeclaw.tasks import TaskSet

log = logging.getLogger("edgeclaw.agent")


class SessionTurns:
    """Per session: its lock and the turn running in it; and the turns nobody waits for."""

    def __init__(self) -> None:
        # Per session: its lock and how many messages hold or wait for it. Dropped at zero, because
        # session keys come from callers (MQTT's "session") and must not pile up for the daemon's life.
        self._locks: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._running: dict[str, asyncio.Task[tuple[str, bool]]] = {}
        self._labels: dict[str, str] = {}  # what each running turn is, for /stop and /status
        self.stopping = False
        # Called with the session key and the turn's task when a turn was stopped (/stop, Ctrl-C).
        self.stop_hooks: list[Callable[[str, object], None]] = []
        self.background = TaskSet()  # turns nobody waits for (deliver_later)

    @contextlib.asynccontextmanager
    async def session_lock(self, key: str) -> AsyncIterator[None]:
        """Turns are serial within a session: hold its lock, created on demand and dropped when unused."""
        lock, users = self._locks.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if not users[0]:
                del self._locks[key]

    async def run(
        self, key: str, label: str, body: Callable[[], Awaitable[tuple[str, bool]]]
    ) -> asyncio.Task[tuple[str, bool]] | None:
        """Run `body` as the session's turn and return its finished task; None when shutting down."""
        async with self.session_lock(key):
            # Checked under the lock: a message queued behind a turn that shutdown cancelled must not start.
            if self.stopping:
                return None
            turn: asyncio.Task[tuple[str, bool]] = asyncio.ensure_future(body())
            self._running[key] = turn
            self._labels[key] = label
            try:
                await asyncio.wait({turn})
            except asyncio.CancelledError:
                # Keep the session locked until the turn has unwound, so the next one cannot start
                # while this one still runs its clean-up (a tool stopping its processes).
                turn.cancel()
                await asyncio.wait({turn})
                raise
            finally:
                self._running.pop(key, None)
                self._labels.pop(key, None)
                if turn.cancelled():
                    self._stopped(key, turn)
        return turn

    def _stopped(self, key: str, turn: object) -> None:
        for hook in self.stop_hooks:
            try:
                hook(key, turn)
            except Exception:
                log.exception("turn-stop hook failed for %s", key)

    def token(self, key: str) -> object | None:
        """The turn running in this session now (compared by identity), or None."""
        return self._running.get(key)

    def running(self, key: str) -> bool:
        return key in self._running

    def label(self, key: str) -> str | None:
        return self._labels.get(key)

    def __len__(self) -> int:
        """How many sessions have a turn running."""
        return len(self._running)

    def stop(self, key: str) -> bool:
        """Cancel the turn running in this session, if any."""
        turn = self._running.get(key)
        if turn is None or turn.done():
            return False
        turn.cancel()
        return True

    async def shutdown(self) -> None:
        """Refuse new turns and cancel the running ones (and those nobody waits for)."""
        self.stopping = True
        running = list(self._running.values())
        for turn in running:
            turn.cancel()
        self.background.cancel()
        if running:
            await asyncio.wait(running)
        await self.background.wait()
