"""Scheduled jobs and their runs in the state database.

A job row holds what to do (a tool call with its arguments, or a prompt for a
named agent), when (the schedule's kind, spec, zone and anchor), where the
output goes, and who owns it (the identity, channel and conversation it was
created from, and the tools it could use then): every run is checked against
what that owner may do at the time of the run, and never goes beyond what it
could do when it made the job.

`next_run` is the slot the job waits for (Unix time; NULL when there is none
left). The scheduler writes the following slot *before* a run starts, so a
crash or a power cut during a run never runs that slot twice; the run's row,
started and never finished, is reported `interrupted` at the next start.

Runs are kept per job, the newest `MAX_RUNS_PER_JOB`.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable
from dataclasses import field, replace
from typing import Any

from edgeclaw.records import dataclass
from edgeclaw.store.db import Database, LazyDatabase, Migration

MAX_RUNS_PER_JOB = 50
MAX_DETAIL_CHARS = 2000

MIGRATIONS = [
    Migration(
        "jobs-1",
        [
            """CREATE TABLE jobs (
                id TEXT PRIMARY KEY,
                name TEXT NOT NULL,
                kind TEXT NOT NULL,
                tool TEXT NOT NULL DEFAULT '',
                args TEXT NOT NULL DEFAULT '{}',
                prompt TEXT NOT NULL DEFAULT '',
                agent TEXT NOT NULL DEFAULT 'main',
                schedule_kind TEXT NOT NULL,
                schedule_spec TEXT NOT NULL,
                tz TEXT NOT NULL DEFAULT '',
                anchor TEXT NOT NULL DEFAULT 'wall',
                targets TEXT NOT NULL DEFAULT '[]',
                catch_up TEXT NOT NULL,
                jitter_s REAL NOT NULL DEFAULT 0,
                enabled INTEGER NOT NULL DEFAULT 1,
                owner_caller TEXT NOT NULL,
                owner_channel TEXT NOT NULL,
                owner_chat_id TEXT NOT NULL DEFAULT '',
                owner_peer_kind TEXT NOT NULL DEFAULT 'local',
                owner_agent TEXT NOT NULL DEFAULT 'main',
                created_at REAL NOT NULL,
                updated_at REAL NOT NULL,
                next_run REAL,
                last_run REAL,
                last_outcome TEXT NOT NULL DEFAULT '',
                runs INTEGER NOT NULL DEFAULT 0
            )""",
            """CREATE TABLE job_runs (
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                job_id TEXT NOT NULL,
                trigger TEXT NOT NULL,
                scheduled_at REAL,
                started_at REAL NOT NULL,
                finished_at REAL,
                duration_ms REAL,
                outcome TEXT NOT NULL DEFAULT 'running',
                detail TEXT NOT NULL DEFAULT ''
            )""",
            "CREATE INDEX job_runs_by_job ON job_runs (job_id, id)",
        ],
    ),
    # The tools the owner could use when the job was made (a JSON list; NULL: an administrator's
    # job, or one made before this was kept): a run never goes beyond them.
    Migration("jobs-2", ["ALTER TABLE jobs ADD COLUMN owner_ceiling TEXT"]),
]


@dataclass(frozen=True, slots=True)
class Owner:
    """Who a job acts for: as the channel knew the caller when the job was made (or last redefined)."""

    caller: str
    channel: str
    chat_id: str = ""
    peer_kind: str = "local"
    agent: str = "main"
    # The tools the owner could use when it made the job (None: no limit beyond the owner's policy
    # at run time, as for an administrator's job). A run gets the intersection with what the owner
    # may use at the time of the run (tools.automation.authority).
    ceiling: frozenset[str] | None = None


@dataclass(frozen=True, slots=True)
class Job:
    """A scheduled job as stored: what runs, when, for whom and where its output goes."""

    id: str
    name: str
    kind: str  # "tool" | "prompt"
    schedule_kind: str  # "cron" | "every" | "at"
    schedule_spec: str
    owner: Owner
    catch_up: str  # "skip" | "once"
    targets: tuple[str, ...] = ()
    tool: str = ""
    args: dict[str, Any] = field(default_factory=dict)
    prompt: str = ""
    agent: str = "main"
    tz: str = ""
    anchor: str = "wall"
    jitter_s: float = 0.0
    enabled: bool = True
    created_at: float = 0.0
    updated_at: float = 0.0
    next_run: float | None = None
    last_run: float | None = None
    last_outcome: str = ""
    runs: int = 0

    def public(self) -> dict[str, Any]:
        """The job as tools and the CLI show it (the arguments are the owner's own values)."""
        out: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "schedule": {"kind": self.schedule_kind, "spec": self.schedule_spec, "tz": self.tz},
            "to": list(self.targets),
            "catch_up": self.catch_up,
            "jitter_s": self.jitter_s,
            "enabled": self.enabled,
            "owner": self.owner.caller,
            "owner_channel": self.owner.channel,
            "next_run": self.next_run,
            "last_run": self.last_run,
            "last_outcome": self.last_outcome,
            "runs": self.runs,
        }
        if self.kind == "tool":
            out["tool"], out["args"] = self.tool, self.args
        else:
            out["prompt"], out["agent"] = self.prompt, self.agent
        return out


@dataclass(frozen=True, slots=True)
class Run:
    """One run of a job: why it started, when, and how it ended."""

    id: int
    job_id: str
    trigger: str  # "schedule" | "catch_up" | "manual" | "edge"
    scheduled_at: float | None
    started_at: float
    finished_at: float | None
    duration_ms: float | None
    outcome: str  # ok, error, refused, skipped, missed, interrupted, running
    detail: str

    def public(self) -> dict[str, Any]:
        return {
            "run": self.id,
            "job": self.job_id,
            "trigger": self.trigger,
            "scheduled_at": self.scheduled_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": None if self.duration_ms is None else round(self.duration_ms, 3),
            "outcome": self.outcome,
            "detail": self.detail,
        }


def new_job_id() -> str:
    import secrets  # the first job made, not every start

    return "j" + secrets.token_hex(4)


class JobStore:
    """The jobs table and the runs table. The database opens on first use (a CLI command that never
    touches jobs never opens it)."""

    def __init__(self, db: Database | Callable[[], Database], clock: Callable[[], float] = time.time) -> None:
        self._database = LazyDatabase(db, MIGRATIONS)
        self.clock = clock

    @property
    def db(self) -> Database:
        return self._database.get()

    # -- jobs ---------------------------------------------------------------------------------
    def add(self, job: Job) -> Job:
        now = self.clock()
        job = replace(job, created_at=now, updated_at=now)
        with self.db.transaction(f"the job {job.name or job.id}") as conn:
            conn.execute(
                """INSERT INTO jobs (id, name, kind, tool, args, prompt, agent, schedule_kind, schedule_spec,
                    tz, anchor, targets, catch_up, jitter_s, enabled, owner_caller, owner_channel,
                    owner_chat_id, owner_peer_kind, owner_agent, created_at, updated_at, next_run,
                    owner_ceiling)
                   VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
                _row_values(job),
            )
        return job

    def save(self, job: Job) -> Job:
        """Write back a job's definition (an update)."""
        job = replace(job, updated_at=self.clock())
        values = _row_values(job)
        with self.db.transaction(f"the job {job.name or job.id}") as conn:
            cur = conn.execute(
                """UPDATE jobs SET name = ?, kind = ?, tool = ?, args = ?, prompt = ?, agent = ?,
                    schedule_kind = ?, schedule_spec = ?, tz = ?, anchor = ?, targets = ?, catch_up = ?,
                    jitter_s = ?, enabled = ?, owner_caller = ?, owner_channel = ?, owner_chat_id = ?,
                    owner_peer_kind = ?, owner_agent = ?, created_at = ?, updated_at = ?, next_run = ?,
                    owner_ceiling = ?
                   WHERE id = ?""",
                (*values[1:], job.id),
            )
            if cur.rowcount == 0:
                raise KeyError(job.id)
        return job

    def get(self, job_id: str) -> Job | None:
        rows = self.db.query("SELECT * FROM jobs WHERE id = ?", (job_id,))
        return _job(rows[0]) if rows else None

    def find(self, ref: str) -> Job | None:
        """By id, else by name when exactly one job has it."""
        job = self.get(ref)
        if job is not None:
            return job
        rows = self.db.query("SELECT * FROM jobs WHERE name = ? LIMIT 2", (ref,))
        return _job(rows[0]) if len(rows) == 1 else None

    def all(self) -> list[Job]:
        return [_job(r) for r in self.db.query("SELECT * FROM jobs ORDER BY created_at, id")]

    def count(self) -> int:
        return int(self.db.query("SELECT count(*) FROM jobs")[0][0])

    def remove(self, job_id: str) -> bool:
        with self.db.transaction("the removal of a job") as conn:
            cur = conn.execute("DELETE FROM jobs WHERE id = ?", (job_id,))
            conn.execute("DELETE FROM job_runs WHERE job_id = ?", (job_id,))
        return cur.rowcount > 0

    def set_next(self, job_id: str, next_run: float | None) -> None:
        self.db.execute(
            "UPDATE jobs SET next_run = ? WHERE id = ?", (next_run, job_id), what="a job's next run"
        )

    def set_next_many(self, changes: list[tuple[float | None, str]]) -> None:
        if not changes:
            return
        with self.db.transaction("the jobs' next runs") as conn:
            conn.executemany("UPDATE jobs SET next_run = ? WHERE id = ?", changes)

    # -- runs ---------------------------------------------------------------------------------
    def start_run(
        self, job_id: str, trigger: str, scheduled_at: float | None, next_run: float | None, *, advance: bool
    ) -> int:
        """Record a run as started and (when `advance`) move the job to its next slot, together."""
        now = self.clock()
        with self.db.transaction("a job run") as conn:
            cur = conn.execute(
                "INSERT INTO job_runs (job_id, trigger, scheduled_at, started_at) VALUES (?, ?, ?, ?)",
                (job_id, trigger, scheduled_at, now),
            )
            if advance:
                conn.execute("UPDATE jobs SET next_run = ? WHERE id = ?", (next_run, job_id))
            run_id = int(cur.lastrowid or 0)
        return run_id

    def finish_run(self, run_id: int, job_id: str, outcome: str, detail: str, duration_ms: float) -> None:
        now = self.clock()
        with self.db.transaction("a job run's outcome") as conn:
            conn.execute(
                "UPDATE job_runs SET finished_at = ?, duration_ms = ?, outcome = ?, detail = ? WHERE id = ?",
                (now, duration_ms, outcome, detail[:MAX_DETAIL_CHARS], run_id),
            )
            conn.execute(
                "UPDATE jobs SET last_run = ?, last_outcome = ?, runs = runs + 1 WHERE id = ?",
                (now, outcome, job_id),
            )
            _trim(conn, job_id)

    def note(
        self,
        job_id: str,
        trigger: str,
        scheduled_at: float | None,
        outcome: str,
        detail: str,
        next_run: float | None,
        *,
        advance: bool = True,
    ) -> int:
        """A run that did not run (skipped for an overlap, missed while the device was down), on record,
        with the job moved on to its next slot in the same transaction."""
        now = self.clock()
        with self.db.transaction("a job run") as conn:
            cur = conn.execute(
                """INSERT INTO job_runs (job_id, trigger, scheduled_at, started_at, finished_at, duration_ms,
                    outcome, detail) VALUES (?, ?, ?, ?, ?, 0, ?, ?)""",
                (job_id, trigger, scheduled_at, now, now, outcome, detail[:MAX_DETAIL_CHARS]),
            )
            conn.execute("UPDATE jobs SET last_outcome = ? WHERE id = ?", (outcome, job_id))
            if advance:
                conn.execute("UPDATE jobs SET next_run = ? WHERE id = ?", (next_run, job_id))
            _trim(conn, job_id)
        return int(cur.lastrowid or 0)

    def record_batch(
        self,
        notes: list[tuple[str, str, float | None, str, str, float | None]],
        starts: list[tuple[str, str, float | None, float | None]],
    ) -> list[int]:
        """One wake-up's decisions in one transaction: runs that did not run (job, trigger, slot, outcome,
        detail, next) and runs that start (job, trigger, slot, next); returns the started runs' ids."""
        now = self.clock()
        ids: list[int] = []
        with self.db.transaction("the jobs' runs") as conn:
            for job_id, trigger, slot, outcome, detail, next_run in notes:
                conn.execute(
                    """INSERT INTO job_runs (job_id, trigger, scheduled_at, started_at, finished_at,
                        duration_ms, outcome, detail) VALUES (?, ?, ?, ?, ?, 0, ?, ?)""",
                    (job_id, trigger, slot, now, now, outcome, detail[:MAX_DETAIL_CHARS]),
                )
                conn.execute(
                    "UPDATE jobs SET next_run = ?, last_outcome = ? WHERE id = ?", (next_run, outcome, job_id)
                )
                _trim(conn, job_id)
            for job_id, trigger, slot, next_run in starts:
                cur = conn.execute(
                    "INSERT INTO job_runs (job_id, trigger, scheduled_at, started_at) VALUES (?, ?, ?, ?)",
                    (job_id, trigger, slot, now),
                )
                conn.execute("UPDATE jobs SET next_run = ? WHERE id = ?", (next_run, job_id))
                ids.append(int(cur.lastrowid or 0))
        return ids

    def append_detail(self, run_id: int, text: str) -> None:
        """Add to a finished run's detail (how many edges a skipped edge run stood for)."""
        self.db.execute(
            "UPDATE job_runs SET detail = substr(detail || ?, 1, ?) WHERE id = ?",
            (text, MAX_DETAIL_CHARS, run_id),
            what="a job run's detail",
        )

    def runs(self, job_id: str | None = None, limit: int = 20) -> list[Run]:
        if job_id is None:
            rows = self.db.query("SELECT * FROM job_runs ORDER BY id DESC LIMIT ?", (limit,))
        else:
            rows = self.db.query(
                "SELECT * FROM job_runs WHERE job_id = ? ORDER BY id DESC LIMIT ?", (job_id, limit)
            )
        return [_run(r) for r in rows]

    def interrupted(self) -> int:
        """Runs a stopped process left unfinished: recorded `interrupted` (they may have had their effect)."""
        now = self.clock()
        with self.db.transaction("the interrupted job runs") as conn:
            rows = conn.execute("SELECT id, job_id FROM job_runs WHERE finished_at IS NULL").fetchall()
            for row in rows:
                conn.execute(
                    "UPDATE job_runs SET finished_at = ?, outcome = 'interrupted', "
                    "detail = 'the daemon stopped while this run was going: it may have had its effect' "
                    "WHERE id = ?",
                    (now, row["id"]),
                )
                conn.execute("UPDATE jobs SET last_outcome = 'interrupted' WHERE id = ?", (row["job_id"],))
        return len(rows)


def _trim(conn: sqlite3.Connection, job_id: str) -> None:
    conn.execute(
        """DELETE FROM job_runs WHERE job_id = ? AND id <= (
            SELECT id FROM job_runs WHERE job_id = ? ORDER BY id DESC LIMIT 1 OFFSET ?)""",
        (job_id, job_id, MAX_RUNS_PER_JOB),
    )


def _row_values(job: Job) -> tuple[Any, ...]:
    o = job.owner
    return (
        job.id,
        job.name,
        job.kind,
        job.tool,
        json.dumps(job.args, ensure_ascii=False, sort_keys=True),
        job.prompt,
        job.agent,
        job.schedule_kind,
        job.schedule_spec,
        job.tz,
        job.anchor,
        json.dumps(list(job.targets)),
        job.catch_up,
        job.jitter_s,
        int(job.enabled),
        o.caller,
        o.channel,
        o.chat_id,
        o.peer_kind,
        o.agent,
        job.created_at,
        job.updated_at,
        job.next_run,
        None if o.ceiling is None else json.dumps(sorted(o.ceiling)),
    )


def _job(r: sqlite3.Row) -> Job:
    return Job(
        id=r["id"],
        name=r["name"],
        kind=r["kind"],
        schedule_kind=r["schedule_kind"],
        schedule_spec=r["schedule_spec"],
        owner=Owner(
            r["owner_caller"],
            r["owner_channel"],
            r["owner_chat_id"],
            r["owner_peer_kind"],
            r["owner_agent"],
            None if r["owner_ceiling"] is None else frozenset(json.loads(r["owner_ceiling"])),
        ),
        catch_up=r["catch_up"],
        targets=tuple(json.loads(r["targets"])),
        tool=r["tool"],
        args=json.loads(r["args"]),
        prompt=r["prompt"],
        agent=r["agent"],
        tz=r["tz"],
        anchor=r["anchor"],
        jitter_s=r["jitter_s"],
        enabled=bool(r["enabled"]),
        created_at=r["created_at"],
        updated_at=r["updated_at"],
        next_run=r["next_run"],
        last_run=r["last_run"],
        last_outcome=r["last_outcome"],
        runs=r["runs"],
    )


def _run(r: sqlite3.Row) -> Run:
    return Run(
        r["id"],
        r["job_id"],
        r["trigger"],
        r["scheduled_at"],
        r["started_at"],
        r["finished_at"],
        r["duration_ms"],
        r["outcome"],
        r["detail"],
    )
