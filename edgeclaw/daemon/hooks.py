"""The runtime's lifecycle: what runs once every channel is up, what gets the shutdown grace, and
what is released at the close.

Installers register their steps here while the runtime is built; the daemon (or the CLI command
that built the runtime) calls `ready`, `drain` and `aclose` in that order.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable

from edgeclaw.errors import EdgeclawError
from edgeclaw.tasks import TaskSet

log = logging.getLogger("edgeclaw.runtime")

ReadyStep = Callable[[], Awaitable[None] | None]
DrainStep = Callable[[float], Awaitable[None]]
CloseStep = Callable[[], Awaitable[None] | None]


class Lifecycle:
    """Ready, drain and close hooks, run in their order by the process that owns the runtime."""

    def __init__(self) -> None:
        self._ready_hooks: list[ReadyStep] = []
        self._drain_hooks: list[DrainStep] = []
        self._closers: list[CloseStep] = []
        self._is_ready = False
        self._late_steps = TaskSet()  # ready steps added after start-up, kept until done

    def on_ready(self, hook: ReadyStep) -> None:
        """Run once every channel is up (`edgeclaw run` before READY=1): e.g. tell parents about
        subagents a crash interrupted, now that their channels can show it. A hook added later
        (something built on first use, after start-up) runs at once."""
        self._ready_hooks.append(hook)
        if self._is_ready:
            while self._ready_hooks:
                step = self._ready_hooks.pop(0)
                pending = self._start_step(step)
                if pending is not None:
                    self._late_steps.spawn(self._finish_step(step, pending))

    async def ready(self) -> None:
        # Popped as they run: a step may add another (the agent loop built on demand adds its
        # subagents' recovery), which then runs in turn.
        while self._ready_hooks:
            step = self._ready_hooks.pop(0)
            pending = self._start_step(step)
            if pending is not None:
                await self._finish_step(step, pending)
        self._is_ready = True

    def _start_step(self, step: ReadyStep) -> Awaitable[None] | None:
        """Call one start-up step; what is left to await of it, if anything. Failures are logged."""
        try:
            result = step()
        except Exception as e:
            _step_failed(step, e)
            return None
        return result if inspect.isawaitable(result) else None

    async def _finish_step(self, step: Callable[[], object], pending: Awaitable[None]) -> None:
        try:
            await pending
        except Exception as e:
            _step_failed(step, e)

    def on_drain(self, hook: DrainStep) -> None:
        """Work to finish within the shutdown grace (in-flight tool calls, subagents still running)."""
        self._drain_hooks.append(hook)

    async def drain(self, grace_s: float) -> None:
        """On a stop: every drain hook gets `grace_s`, all at once."""
        results = await asyncio.gather(*(hook(grace_s) for hook in self._drain_hooks), return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                log.error("draining failed", exc_info=result)

    def on_close(self, closer: CloseStep) -> None:
        """Register a release step (bus handles, child processes, the database); run in reverse on close."""
        self._closers.append(closer)

    async def aclose(self) -> None:
        """Run the release steps, newest first: what was registered first (the state database) goes
        last, so turns being cancelled by the agent's shutdown still write their history."""
        while self._closers:
            closer = self._closers.pop()
            try:
                result = closer()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("error while releasing %r", closer)


def _step_failed(step: Callable[[], object], e: Exception) -> None:
    if isinstance(e, EdgeclawError):  # meant for people (the database cannot be opened, ...)
        log.error("start-up step %s failed: %s", getattr(step, "__qualname__", step), e)
    else:
        log.error("start-up step %r failed", step, exc_info=e)
