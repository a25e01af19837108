"""`cron` and `schedule`: jobs that run on their own, kept in the state database.

A job is a direct tool call with its arguments (no model needed: read the
BME280 every 5 minutes and publish it) or a prompt for a named agent (a turn
in the job's own session). Its owner is whoever created it (the caller's
identity, channel and conversation, from `ToolContext`): every run goes
through the registry as that owner, with the policy, approvals, rate limits
and audit of the moment of the run, and within the tools the owner had when it
made the job, whatever agent a prompt job names (`authority`).

Who may change a job: its owner, and the device's administrators (the local
CLI and the signed MQTT admin topic, `ADMIN_CHANNELS`). A change by someone
else to *what* a job does (tool, arguments, prompt, agent, targets) makes
them its owner, so a job never acts for a person who did not ask for it.

The scheduler that runs the jobs belongs to the daemon (`JobControl`); in a
process without one (`edgeclaw tool call cron` with no daemon running) jobs
are stored and picked up at the daemon's next start, and `run` says it
needs the daemon.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any, Protocol

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.store.jobs import Job, JobStore, Owner, new_job_id
from edgeclaw.tools.automation.authority import ADMIN_CHANNELS, JobAuthority, owner_context
from edgeclaw.tools.automation.targets import TargetError, parse_targets
from edgeclaw.tools.automation.when import (
    Schedule,
    ScheduleError,
    format_duration,
    parse_duration,
    parse_schedule,
    zone,
)
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

MAX_JOBS = 2000
MAX_PROMPT_CHARS = 8000
MAX_NAME_CHARS = 80
MAX_JITTER_S = 3600.0
RUNS_DEFAULT = 10
# What a change to by someone else takes the job over for (see the module docstring).
DEFINITION_FIELDS = ("tool", "args", "prompt", "agent", "to")

# (name, arguments, context) -> None when the owner could make this call now, else why not.
CallCheck = Callable[[str, dict[str, Any], ToolContext], Awaitable[str | None]]


class JobControl(Protocol):
    """The daemon's scheduler, as the tools see it."""

    def changed(self, job_id: str) -> None: ...

    def removed(self, job_id: str) -> None: ...

    async def run_now(self, job_id: str) -> dict[str, Any]: ...

    def job_state(self, job_id: str) -> str: ...


TARGET_SCHEMA = {
    "anyOf": [
        {"type": "string", "maxLength": 300},
        {"type": "array", "items": {"type": "string", "maxLength": 300}, "minItems": 1, "maxItems": 4},
    ],
    "description": "where the output goes: mqtt:TOPIC (under the device's prefix), console, "
    "console:PORT, memory (today's daily note), message:CHANNEL:TARGET, none",
}
WHAT_PROPERTIES: dict[str, Any] = {
    "name": {"type": "string", "maxLength": MAX_NAME_CHARS, "description": "a short name for the job"},
    "tool": {"type": "string", "maxLength": 100, "description": "a tool to call directly (no model)"},
    "args": {"type": "object", "additionalProperties": True, "description": "the tool's arguments"},
    "prompt": {
        "type": "string",
        "maxLength": MAX_PROMPT_CHARS,
        "description": "instead of a tool: a message for the agent, run as a turn in the job's own session",
    },
    "agent": {"type": "string", "maxLength": 64, "description": "the agent that runs the prompt (main)"},
    "to": TARGET_SCHEMA,
    "tz": {"type": "string", "maxLength": 64, "description": "IANA time zone for cron fields and times"},
    "catch_up": {
        "enum": ["skip", "once"],
        "description": "slots missed while the device was off: skip them, or run once (default: skip; "
        "once for one-shot jobs)",
    },
    "jitter": {"type": "string", "maxLength": 20, "description": "a random delay up to this (e.g. '30s')"},
}


class JobFactory:
    """What `cron` and `schedule` share: building, checking and storing jobs for a caller."""

    def __init__(
        self,
        store: JobStore,
        *,
        check_call: CallCheck | None = None,
        agents: Callable[[], Sequence[str]] = lambda: ("main",),
        default_tz: str = "",
        default_jitter_s: float = 0.0,
        clock: Callable[[], float] = time.time,
        authority: JobAuthority | None = None,
    ) -> None:
        self.store = store
        self.authority = authority
        self.check_call = check_call
        self.agents = agents
        self.default_tz = default_tz
        self.default_jitter_s = default_jitter_s
        self.clock = clock
        self.control: JobControl | None = None

    # -- who ------------------------------------------------------------------------------------
    def owner_of(self, ctx: ToolContext) -> Owner:
        """The caller as the job's owner, with the tools it may use now (the job's ceiling)."""
        ceiling = self.authority.record(ctx) if self.authority is not None else ctx.tool_ceiling
        return Owner(ctx.identity, ctx.channel, ctx.chat_id, ctx.peer_kind, ctx.agent_id, ceiling)

    @staticmethod
    def may_manage(job: Job, ctx: ToolContext) -> bool:
        return ctx.channel in ADMIN_CHANNELS or job.owner.caller == ctx.identity

    def lookup(self, ref: str, ctx: ToolContext) -> Job:
        if not ref:
            raise ToolRefused("give the job's 'id' (cron list shows it)")
        job = self.store.find(ref)
        if job is None or not self.may_manage(job, ctx):
            # The same answer for another caller's job as for none: ids are not a way to probe.
            raise ToolError(f"no job {ref!r} of yours (cron list shows yours)")
        return job

    # -- building --------------------------------------------------------------------------------
    def schedule_of(self, args: Args, tz: str) -> Schedule:
        try:
            return parse_schedule(
                cron=args.get("cron"),
                every=args.get("every"),
                at=args.get("at"),
                on_edge=args.get("on_edge"),
                tz=tz,
                now=self.clock(),
            )
        except ScheduleError as e:
            raise ToolRefused(str(e)) from None

    async def build(self, args: Args, ctx: ToolContext, schedule: Schedule) -> Job:
        tool, prompt = args.get("tool"), args.get("prompt")
        if bool(tool) == bool(prompt):
            raise ToolRefused("give either 'tool' (with 'args') or 'prompt', not both and not neither")
        if prompt is None and "agent" in args:
            raise ToolRefused("'agent' goes with a 'prompt' (a tool job calls its tool directly)")
        if tool is None and "args" in args:
            raise ToolRefused("'args' goes with a 'tool'")
        try:
            targets = [str(t) for t in parse_targets(args.get("to"))]
        except TargetError as e:
            raise ToolRefused(str(e)) from None
        catch_up = args.get("catch_up") or ("skip" if schedule.recurring else "once")
        jitter = self._jitter(args)
        owner = self.owner_of(ctx)
        job = Job(
            id=new_job_id(),
            name=(args.get("name") or "").strip(),
            kind="tool" if tool else "prompt",
            schedule_kind=schedule.kind,
            schedule_spec=schedule.spec,
            tz=schedule.tz,
            anchor=schedule.anchor,
            owner=owner,
            catch_up=catch_up,
            targets=tuple(targets),
            tool=tool or "",
            args=dict(args.get("args") or {}),
            prompt=prompt or "",
            agent=(args.get("agent") or "main") if prompt else "main",
            jitter_s=jitter,
            next_run=schedule.first(self.clock()),
        )
        await self.check_what(job)
        return job

    def _jitter(self, args: Args) -> float:
        if "jitter" not in args:
            return self.default_jitter_s
        try:
            jitter = parse_duration(args["jitter"], "jitter") if args["jitter"] else 0.0
        except ScheduleError as e:
            raise ToolRefused(str(e)) from None
        if not 0 <= jitter <= MAX_JITTER_S:
            raise ToolRefused(f"jitter: expected 0 to {MAX_JITTER_S:g} s, got {jitter:g} s")
        return jitter

    async def check_what(self, job: Job) -> None:
        """Refuse a job its owner could not run right now (it is checked again at every run)."""
        await self.check_trigger(job)
        if job.kind == "prompt":
            if job.agent not in self.agents():
                known = ", ".join(self.agents()) or "none"
                raise ToolRefused(f"no agent named {job.agent!r} (known: {known})")
            return
        if self.check_call is not None:
            problem = await self.check_call(job.tool, job.args, owner_context(job, "check"))
            if problem is not None:
                raise ToolRefused(f"the job's call would be refused: {problem}")

    async def check_trigger(self, job: Job) -> None:
        """An edge trigger needs an input pin the owner could wait on right now (the `gpio` tool's
        own checks, as a dry run: the pin granted by the board profile, an input, gpio allowed)."""
        if job.schedule_kind != "edge" or self.check_call is None:
            return
        edge = Schedule("edge", job.schedule_spec).edge
        args = {"action": "wait", "pin": edge.pin, "edge": edge.edge, "timeout_ms": 1}
        problem = await self.check_call("gpio", args, owner_context(job, "check"))
        if problem is not None:
            raise ToolRefused(f"the job's edge trigger cannot be watched: {problem}")

    def add(self, job: Job) -> Job:
        if self.store.count() >= MAX_JOBS:
            raise ToolRefused(f"this device already has {MAX_JOBS} jobs; remove some first")
        job = self.store.add(job)
        if self.control is not None:
            self.control.changed(job.id)
        return job

    def describe(self, job: Job) -> str:
        return describe_job(job, self.control.job_state(job.id) if self.control else "")


def describe_job(job: Job, state: str = "") -> str:
    sched = Schedule(job.schedule_kind, job.schedule_spec, job.tz)  # type: ignore[arg-type]
    what = (
        f"{job.tool} {json.dumps(job.args, separators=(',', ':'))}"
        if job.kind == "tool"
        else (f"prompt for {job.agent}: {job.prompt[:60]!r}")
    )
    when = sched.describe()
    if not sched.timed:
        nxt = "at the next edge"
    else:
        nxt = (
            _local(job.next_run) if job.next_run is not None else ("done" if not sched.recurring else "none")
        )
    flags = [] if job.enabled else ["disabled"]
    if state:
        flags.append(state)
    if job.jitter_s:
        flags.append(f"jitter {format_duration(job.jitter_s)}")
    last = (
        f", last {job.last_outcome} at {_local(job.last_run)}"
        if job.last_run
        else (f", last {job.last_outcome}" if job.last_outcome else "")
    )
    return (
        f"{job.id} {job.name or '-'}: {what} {when} -> {', '.join(job.targets)}; next {nxt}{last}"
        + (f" [{', '.join(flags)}]" if flags else "")
        + f" (owner {job.owner.caller})"
    )


def _local(ts: float | None) -> str:
    if ts is None:
        return "-"
    return datetime.fromtimestamp(ts).astimezone().isoformat(timespec="seconds")


class CronTool(Tool):
    name = "cron"
    group = "automation"
    description = (
        "Scheduled jobs: add (a tool call or a prompt, on a cron expression, an interval, a one-shot "
        "time or an edge of an input pin, output to mqtt:TOPIC, console, memory or message), list, "
        "update, remove, run now, runs "
        "(recent runs with outcome and duration). Each run is checked against its owner's rights at "
        "the time it runs."
    )
    observing_actions = frozenset({"list", "runs"})
    timeout_s = 120.0  # `run` waits for the run (a tool call, or an agent's turn)
    parameters = {
        "type": "object",
        "properties": {
            "action": {"enum": ["add", "list", "remove", "run", "update", "runs"]},
            "id": {"type": "string", "maxLength": 100, "description": "the job (its id, or its name)"},
            "cron": {"type": "string", "maxLength": 120, "description": "five cron fields or @hourly etc."},
            "every": {"type": "string", "maxLength": 40, "description": "an interval: 90s, 5m, 1h30m"},
            "at": {
                "type": "string",
                "maxLength": 80,
                "description": "one-shot: ISO 8601, 'in 10 minutes', 'tomorrow 07:00'",
            },
            "on_edge": {
                "type": "object",
                "description": "instead of a time: run when an input pin changes",
                "properties": {
                    "pin": {"anyOf": [{"type": "integer", "minimum": 0}, {"type": "string", "minLength": 1}]},
                    "edge": {"enum": ["rising", "falling", "both", "active", "inactive"]},
                    "debounce_ms": {"type": "integer", "minimum": 0, "maximum": 10_000},
                },
                "required": ["pin"],
                "additionalProperties": False,
            },
            **WHAT_PROPERTIES,
            "enabled": {"type": "boolean", "description": "update: switch the job on or off"},
            "limit": {"type": "integer", "minimum": 1, "maximum": 50, "description": "runs: how many"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, jobs: JobFactory) -> None:
        self.jobs = jobs

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        if action == "add":
            return await self._add(args, ctx)
        if action == "list":
            return self._list(ctx)
        if action == "runs":
            return self._runs(args, ctx)
        job = self.jobs.lookup(args.get("id", ""), ctx)
        if action == "remove":
            self.jobs.store.remove(job.id)
            if self.jobs.control is not None:
                self.jobs.control.removed(job.id)
            return ToolResult(f"removed job {job.id} ({job.name or 'no name'})", data={"removed": job.id})
        if action == "run":
            if self.jobs.control is None:
                raise ToolError(
                    "running a job now needs the daemon (edgeclaw run): no scheduler in this process"
                )
            report = await self.jobs.control.run_now(job.id)
            text = f"job {job.id} run {report.get('run')}: {report.get('outcome')}"
            if report.get("detail"):
                text += f" ({report['detail']})"
            failed = report.get("outcome") not in ("ok", "running")
            return ToolResult(text, data=report, is_error=failed)
        return await self._update(job, args, ctx)

    async def _add(self, args: Args, ctx: ToolContext) -> ToolResult:
        schedule = self.jobs.schedule_of(args, args.get("tz", self.jobs.default_tz))
        job = self.jobs.add(await self.jobs.build(args, ctx, schedule))
        return ToolResult(f"added {self.jobs.describe(job)}", data={"job": job.public()})

    def _list(self, ctx: ToolContext) -> ToolResult:
        jobs = [j for j in self.jobs.store.all() if self.jobs.may_manage(j, ctx)]
        if not jobs:
            return ToolResult("no jobs", data={"jobs": []})
        return ToolResult(
            "\n".join(self.jobs.describe(j) for j in jobs), data={"jobs": [j.public() for j in jobs]}
        )

    def _runs(self, args: Args, ctx: ToolContext) -> ToolResult:
        limit = args.get("limit", RUNS_DEFAULT)
        if args.get("id"):
            job = self.jobs.lookup(args["id"], ctx)
            runs = self.jobs.store.runs(job.id, limit)
        else:
            mine = {j.id for j in self.jobs.store.all() if self.jobs.may_manage(j, ctx)}
            runs = [r for r in self.jobs.store.runs(None, limit * 4) if r.job_id in mine][:limit]
        if not runs:
            return ToolResult("no runs yet", data={"runs": []})
        lines = []
        for r in runs:
            took = f"{r.duration_ms:.0f} ms" if r.duration_ms is not None else "-"
            lines.append(
                f"{_local(r.started_at)} {r.job_id} run {r.id} ({r.trigger}): {r.outcome}, {took}"
                + (f" - {r.detail}" if r.detail else "")
            )
        return ToolResult("\n".join(lines), data={"runs": [r.public() for r in runs]})

    async def _update(self, job: Job, args: Args, ctx: ToolContext) -> ToolResult:
        changes: dict[str, Any] = {}
        if "name" in args:
            changes["name"] = args["name"].strip()
        if "enabled" in args:
            changes["enabled"] = bool(args["enabled"])
        if any(k in args for k in ("cron", "every", "at", "on_edge", "tz")):
            given = {k: args[k] for k in ("cron", "every", "at", "on_edge") if k in args}
            if not given:  # only the zone changes: the same expression read in the new zone
                given = {job.schedule_kind if job.schedule_kind != "every" else "every": job.schedule_spec}
                if job.schedule_kind == "at":
                    raise ToolRefused("a one-shot job's time is fixed: give a new 'at'")
                if job.schedule_kind == "edge":
                    raise ToolRefused("an edge-triggered job has no time zone: give a new 'on_edge'")
            sched = self.jobs.schedule_of(given, args.get("tz", job.tz))
            changes.update(
                schedule_kind=sched.kind,
                schedule_spec=sched.spec,
                tz=sched.tz,
                anchor=sched.anchor,
                next_run=sched.first(self.jobs.clock()),
            )
        if "catch_up" in args:
            changes["catch_up"] = args["catch_up"]
        if "jitter" in args:
            changes["jitter_s"] = self.jobs._jitter(args)
        redefined = [k for k in DEFINITION_FIELDS if k in args]
        if redefined:
            if "to" in args:
                try:
                    changes["targets"] = tuple(str(t) for t in parse_targets(args["to"]))
                except TargetError as e:
                    raise ToolRefused(str(e)) from None
            if job.kind == "tool" and ("prompt" in args or "agent" in args):
                raise ToolRefused("this is a tool job: a prompt job is added anew")
            if job.kind == "prompt" and ("tool" in args or "args" in args):
                raise ToolRefused("this is a prompt job: a tool job is added anew")
            for key in ("tool", "args", "prompt", "agent"):
                if key in args:
                    changes[key] = args[key]
            # Whoever changes what the job does is the one it acts for from now on.
            changes["owner"] = self.jobs.owner_of(ctx)
        if not changes:
            raise ToolRefused(
                "nothing to update: give the fields to change (cron/every/at, to, enabled, ...)"
            )
        if "enabled" in changes and changes["enabled"] and job.next_run is None and "next_run" not in changes:
            sched = Schedule(job.schedule_kind, job.schedule_spec, job.tz)  # type: ignore[arg-type]
            if sched.recurring:
                changes["next_run"] = sched.next_after(self.jobs.clock())
        updated = replace(job, **changes)
        if redefined:
            await self.jobs.check_what(updated)
        elif updated.schedule_spec != job.schedule_spec:
            await self.jobs.check_trigger(updated)
        updated = self.jobs.store.save(updated)
        if self.jobs.control is not None:
            self.jobs.control.changed(updated.id)
        return ToolResult(f"updated {self.jobs.describe(updated)}", data={"job": updated.public()})


class ScheduleTool(Tool):
    name = "schedule"
    group = "automation"
    description = (
        "Run something once, later: 'when' is ISO 8601, 'in 10 minutes', 'today 18:00' or 'tomorrow "
        "07:00'; 'task' is a prompt for the agent (or give 'tool' and 'args' for a direct call). The "
        "result goes to 'to' (default: memory, today's daily note). A one-shot cron job: cron list "
        "and cron remove manage it."
    )
    parameters = {
        "type": "object",
        "properties": {
            "when": {"type": "string", "maxLength": 80},
            "task": {
                "type": "string",
                "maxLength": MAX_PROMPT_CHARS,
                "description": "a prompt for the agent",
            },
            **{k: v for k, v in WHAT_PROPERTIES.items() if k != "prompt"},
        },
        "required": ["when"],
        "additionalProperties": False,
    }

    def __init__(self, jobs: JobFactory) -> None:
        self.jobs = jobs

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        spec = {k: v for k, v in args.items() if k not in ("when", "task")}
        if "task" in args:
            spec["prompt"] = args["task"]
        spec.setdefault("to", "memory")
        try:
            tz = args.get("tz", self.jobs.default_tz)
            zone(tz)
        except ScheduleError as e:
            raise ToolRefused(str(e)) from None
        schedule = self.jobs.schedule_of({"at": args["when"]}, tz)
        job = self.jobs.add(await self.jobs.build(spec, ctx, schedule))
        return ToolResult(f"scheduled {self.jobs.describe(job)}", data={"job": job.public()})
