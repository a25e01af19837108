"""The scheduler's edge-triggered jobs (`on_edge`): a watch on each one's input pin, a run per edge.

Edge jobs are not on the timer: each enabled one has a watch on its input pin
(an `EdgeSource`, the board's GPIO), and an edge starts a run (trigger
`edge`) at once, clock sync or not, as a button press is no less real on a
board whose clock is not set. Edges while the previous run is going are not
runs: the first is recorded `skipped`, the rest counted in it, so a flapping
input cannot flood the database.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from typing import Protocol

from edgeclaw.agent.job_runs import JobRuns
from edgeclaw.store.jobs import Job, JobStore
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.automation.when import EdgeTrigger

log = logging.getLogger("edgeclaw.scheduler")


class EdgeWatchHandle(Protocol):
    def cancel(self) -> None: ...


class EdgeSource(Protocol):
    """The board's input pins, as the scheduler watches them (`daemon.scheduler.GpioEdges`)."""

    async def watch(
        self, pin: int | str, edge: str, debounce_s: float, callback: Callable[[float, str], None]
    ) -> EdgeWatchHandle:
        """Call `callback(unix_time, description)` on the loop for each matching debounced edge."""
        ...


class EdgeTriggers:
    """The pin watches of the edge jobs among `jobs` (the scheduler's table), and the runs they start."""

    def __init__(
        self,
        edges: EdgeSource | None,
        store: JobStore,
        jobs: Mapping[str, Job],
        runs: JobRuns,
        tasks: TaskSet,
    ) -> None:
        self.edges = edges
        self.store = store
        self._jobs = jobs
        self._runs = runs
        self._tasks = tasks  # the scheduler's: cancelled together at its close
        self._watches: dict[str, EdgeWatchHandle] = {}
        self._setups: dict[str, asyncio.Future[None]] = {}
        self._skipped: dict[str, tuple[int, int]] = {}  # job -> (its skipped run, edges in it)
        self.closed = False

    def __contains__(self, job_id: str) -> bool:
        """The job has a watch, or one being set up."""
        return job_id in self._watches or job_id in self._setups

    def __len__(self) -> int:
        """How many pins are being watched."""
        return len(self._watches)

    def watching(self, job_id: str) -> bool:
        return job_id in self._watches

    def watch(self, job_id: str, trigger: EdgeTrigger) -> None:
        """Watch an enabled edge job's pin (after `unwatch`, when it was watched before)."""
        if self.closed:
            return
        if self.edges is None:
            log.warning("job %s waits for a GPIO edge, but this board has no GPIO pins to watch", job_id)
            return
        self._setups[job_id] = self._tasks.spawn(
            self._watch(job_id, trigger.pin, trigger.edge, trigger.debounce_ms / 1000), name=f"edge {job_id}"
        )

    async def _watch(self, job_id: str, pin: int | str, edge: str, debounce_s: float) -> None:
        assert self.edges is not None
        try:
            handle = await self.edges.watch(
                pin, edge, debounce_s, lambda at, what: self._fired(job_id, at, what)
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
            if self._setups.get(job_id) is asyncio.current_task():
                del self._setups[job_id]
        if self.closed or self._jobs.get(job_id) is None:
            handle.cancel()
            return
        self._watches[job_id] = handle

    def unwatch(self, job_id: str) -> None:
        setup = self._setups.pop(job_id, None)
        if setup is not None:
            setup.cancel()
        handle = self._watches.pop(job_id, None)
        if handle is not None:
            handle.cancel()

    def close(self) -> None:
        """No more watches, and no more runs started by an edge."""
        self.closed = True
        for job_id in list(self._watches) + list(self._setups):
            self.unwatch(job_id)

    def run_ended(self, job_id: str) -> None:
        """Edges that came during a run end up counted in the one `skipped` record made for them."""
        run, count = self._skipped.pop(job_id, (0, 0))
        if count > 1:
            try:
                self.store.append_detail(run, f" ({count} edges in all)")
            except Exception:
                log.exception("could not record the skipped edges of job %s", job_id)

    def _fired(self, job_id: str, at: float, what: str) -> None:
        try:
            self._start_run(job_id, at, what)
        except Exception:
            # A full disk, a closed database: this edge is lost, the next one is tried again.
            log.exception("job %s: could not start the run for %s", job_id, what)

    def _start_run(self, job_id: str, at: float, what: str) -> None:
        job = self._jobs.get(job_id)
        if job is None or not job.enabled or self.closed:
            return
        if job_id in self._runs:
            run, count = self._skipped.get(job_id, (0, 0))
            if run:
                self._skipped[job_id] = (run, count + 1)
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
            self._skipped[job_id] = (run, 1)
            return
        run_id = self.store.start_run(job_id, "edge", at, None, advance=False)
        self._runs.launch(job, run_id, "edge", at, note=what)
