"""The scheduler's runs: each job's run in a task of its own, a bounded number at once, each recorded.

A job has at most one run going; a run waiting for one of the `max_running`
slots counts as going. Its outcome (or `interrupted` when the daemon stops
during it) is written to the job store and, when there is an audit trail, is
a `job_run` event.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any, Protocol

from edgeclaw.store.jobs import Job, JobStore
from edgeclaw.tasks import TaskSet
from edgeclaw.tools.audit import AuditTrail

log = logging.getLogger("edgeclaw.scheduler")

RUN_NOW_WAIT_S = 100.0


class Executor(Protocol):
    """Runs one job once (see `agent.job_runner.JobRunner`): returns (outcome, detail).

    `note` (given for edge-triggered runs only) says what started the run, for its prompt or output.
    """

    async def run(self, job: Job, run_id: int, trigger: str, slot: float | None) -> tuple[str, str]: ...


class JobRuns:
    """The runs going, by job; started by `launch` (a timer or an edge) or `run_now` (by hand)."""

    def __init__(
        self,
        store: JobStore,
        executor: Executor,
        tasks: TaskSet,
        *,
        max_running: int,
        audit: AuditTrail | None = None,
    ) -> None:
        self.store = store
        self.executor = executor
        self.audit = audit
        self._tasks = tasks  # the scheduler's: cancelled together at its close
        self._running: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self._slots = asyncio.Semaphore(max_running)
        # Called with the job's id as a run ends, before its outcome is written (the edges it skipped).
        self.on_end: Callable[[str], None] = lambda job_id: None

    def __contains__(self, job_id: str) -> bool:
        return job_id in self._running

    def __len__(self) -> int:
        return len(self._running)

    def launch(
        self, job: Job, run_id: int, trigger: str, slot: float | None, note: str = ""
    ) -> asyncio.Future[dict[str, Any]]:
        task = self._tasks.spawn(self._run(job, run_id, trigger, slot, note), name=f"job {job.id}")
        self._running[job.id] = task
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
            self.on_end(job.id)
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
        task = self.launch(job, run_id, "manual", None)
        done, _ = await asyncio.wait({task}, timeout=RUN_NOW_WAIT_S)
        if not done:
            return {
                "run": run_id,
                "job": job_id,
                "outcome": "running",
                "detail": "still running; cron runs shows it",
            }
        return task.result()
