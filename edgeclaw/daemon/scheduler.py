"""The scheduler as a daemon service: jobs, their outlets and the heartbeat, on the shared agent.

Entered after the channels (`daemon.lifecycle.configured_services`), so the
outlets the jobs deliver to are registered before the first run, and left
before them. Prompt jobs and the heartbeat run under a named agent
(`daemon.agent`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import tzinfo as TzInfo
from typing import TYPE_CHECKING, Any

from edgeclaw.daemon.automation import HEARTBEAT_FILE, Automation
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.automation.targets import Delivery, DeliveryError
from edgeclaw.tools.automation.when import zone
from edgeclaw.tools.base import ToolContext

if TYPE_CHECKING:
    from edgeclaw.agent.heartbeat import Heartbeat
    from edgeclaw.daemon.runtime import Runtime
    from edgeclaw.store.update_lock import UpdateLock

log = logging.getLogger("edgeclaw.automation")


def _agent(runtime: Runtime, name: str) -> Any:
    """The agent that runs a prompt job: "main" or an [agents.NAME], on the shared loop; None (the run
    says so) for a name the config no longer has."""
    from edgeclaw.agent.loop import UnknownAgent
    from edgeclaw.daemon.agent import agent_by_name

    try:
        return agent_by_name(runtime, name)
    except UnknownAgent as e:
        log.warning("a job's agent: %s", e)
        return None


def _read_heartbeat(runtime: Runtime) -> str | None:
    """HEARTBEAT.md: the stored one, else the local directory's (the administrator's), never the
    workspace's: the heartbeat's turn runs with the device's own authority."""
    ws = runtime.local

    def disk(name: str) -> str | None:
        if ws is None:
            return None
        try:
            content = ws.read_file(ws.resolve(name), limit=64 * 1024, cut=True, shown=name)
        except (OSError, ToolError, ToolRefused):
            return None
        return content.data.decode("utf-8", errors="replace")

    memory = runtime.memory
    if memory is None:
        return disk(HEARTBEAT_FILE)
    found = memory.contexts.read("main", "", HEARTBEAT_FILE, disk)
    return found.content if found is not None else None


def _daily_notes(runtime: Runtime, tz: TzInfo) -> Callable[[str, Delivery], Awaitable[None]]:
    """The `memory` outlet: a line in today's daily note. The memory store is built at the first
    delivery, not when the scheduler starts (`daemon.memory_service`)."""
    notes: Any = None

    async def deliver(rest: str, delivery: Delivery) -> None:
        nonlocal notes
        if notes is None:
            from edgeclaw.tools.automation.daily_note import DailyNotes

            memory = runtime.memory
            if memory is None:
                raise DeliveryError("memory is off (memory.enabled = false)")
            notes = DailyNotes(memory.store, runtime.config.memory.shared_writers, tz)
        await notes(rest, delivery)

    return deliver


class SchedulerService:
    """What `edgeclaw status` shows for the scheduler (a service like the channels)."""

    name = "scheduler"

    def __init__(self, automation: Automation) -> None:
        self.automation = automation

    def status_snapshot(self) -> dict[str, Any]:
        sched = self.automation.scheduler
        out = sched.status() if sched is not None else {}
        beat = self.automation.heartbeat
        if beat is not None and beat.last is not None:
            out["heartbeat"] = beat.last[1]
        return out


class HoldingUpdates:
    """Each job's run holds STATE/update.lock (shared): an update arriving meanwhile waits for it."""

    def __init__(self, runner: Any, lock: UpdateLock) -> None:
        self.runner = runner
        self.lock = lock

    async def run(
        self, job: Any, run_id: int, trigger: str, slot: float | None, **kw: Any
    ) -> tuple[str, str]:
        with self.lock.hold(f"job {job.name} ({job.id})"):
            return await self.runner.run(job, run_id, trigger, slot, **kw)


@contextlib.asynccontextmanager
async def scheduler_service(runtime: Runtime) -> AsyncIterator[SchedulerService]:
    from edgeclaw.agent.job_runner import JobRunner
    from edgeclaw.agent.scheduler import Scheduler, SchedulerSettings
    from edgeclaw.agent.scheduler_clock import LoopClock
    from edgeclaw.backends.clock import ClockSync

    auto = runtime.automation
    assert auto is not None
    a = runtime.config.automation
    outlets = auto.outlets
    tz = zone(a.timezone)
    if runtime.config.memory.enabled:
        outlets.register("memory", _daily_notes(runtime, tz))
    console = _console_outlet(runtime)
    if console is not None:
        outlets.register("console", console)
    runner = JobRunner(
        runtime.registry, outlets, lambda name: _agent(runtime, name), authority=auto.jobs.authority
    )
    sched = Scheduler(
        auto.store,
        HoldingUpdates(runner, runtime.update_lock),
        clock=LoopClock(),
        sync=ClockSync(a.clock_sync),
        settings=SchedulerSettings(
            late_limit_s=a.late_limit_s,
            sync_max_wait_s=a.clock_sync_max_wait_s,
            max_running=a.max_running,
            device_id=runtime.device_id,
        ),
        audit=runtime.audit,
        edges=_edge_source(runtime),
    )
    if auto.heartbeat_s:
        auto.heartbeat = _heartbeat(runtime, runner)
        sched.add_periodic("heartbeat", auto.heartbeat_s, auto.heartbeat.beat)
    auto.scheduler = sched
    auto.jobs.control = sched
    try:
        async with sched:
            yield SchedulerService(auto)
    finally:
        auto.jobs.control = None
        auto.scheduler = None
        outlets.unregister("memory")
        outlets.unregister("console", console)


class GpioEdges:
    """The board's input pins as the scheduler's edge source: pins by number or profile name."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def watch(
        self, pin: int | str, edge: str, debounce_s: float, callback: Callable[[float, str], None]
    ) -> Any:
        board, hardware = self.runtime.board, self.runtime.hardware
        grant = board.gpio_pin(pin)
        if grant is None or hardware is None:
            raise ToolRefused(f"GPIO {pin!r} is not granted by the {board.name} profile")
        if grant.direction != "in":
            raise ToolRefused(f"GPIO {grant.pin} ({grant.name}) is not an input in the {board.name} profile")
        label = f"GPIO {grant.pin} ({grant.name})"
        return await hardware.gpio().watch(
            grant.pin,
            edge,
            debounce_s,
            lambda e: callback(e.at, f"{label}: {e.describe()}"),  # type: ignore[arg-type]
        )


def _edge_source(runtime: Runtime) -> GpioEdges | None:
    """None on a board whose profile grants no GPIO (edge jobs then say so in the log)."""
    spec = runtime.board.spec
    if runtime.hardware is None or spec is None or not spec.gpio:
        return None
    return GpioEdges(runtime)


def _heartbeat(runtime: Runtime, runner: Any) -> Heartbeat:
    from edgeclaw.agent.channel import Reply
    from edgeclaw.agent.heartbeat import CALLER, CHANNEL, Heartbeat, QuietHours

    config = runtime.config.agent
    targets = list(config.heartbeat_to)
    ctx = ToolContext(channel=CHANNEL, session_key="heartbeat:main", caller=CALLER, peer_kind="local")

    async def deliver(reply: Reply) -> list[str]:
        if not targets:
            return []
        delivery = Delivery("heartbeat", "heartbeat", reply.ok, reply.text, None if reply.ok else reply.text)
        delivery = Delivery(**{**delivery.__dict__, "owner": CALLER, "owner_channel": CHANNEL})
        return await runner.deliver_to(targets, delivery, ctx)

    return Heartbeat(
        lambda: _read_heartbeat(runtime),
        lambda: _agent(runtime, "main"),
        deliver,
        quiet=QuietHours.parse(config.heartbeat_quiet_hours),
        tz=zone(runtime.config.automation.timezone),
    )


def _console_outlet(runtime: Runtime) -> Any:
    """`console` / `console:PORT` through the console channel's own outlet (logged-in ports only)."""
    ports = list(runtime.config.console.ports)
    channel_outlets = getattr(runtime, "outlets", None)
    if not ports or channel_outlets is None:
        return None

    async def deliver(rest: str, delivery: Delivery) -> None:
        from edgeclaw.tools.outlets import DeliveryFailed, Outgoing

        problems, shown = [], 0
        origin = f"job {delivery.job_name or delivery.job_id}"
        for port in [rest] if rest else ports:
            try:
                await channel_outlets.to_target("console", port, Outgoing(delivery.line(), origin=origin))
                shown += 1
            except DeliveryFailed as e:
                problems.append(str(e))
        if not shown:
            raise DeliveryError("; ".join(problems))

    return deliver
