"""Wire scheduled jobs, the heartbeat and the gateway tool from the config.

`install_automation` (from `build_runtime`, so `edgeclaw tool call cron` and
`tools list` see the same tools as the daemon) registers `cron`, `schedule`
and `gateway` and checks `[automation]` and the heartbeat keys.
`scheduler_service` is the daemon service that runs the jobs: entered after
the channels, so the outlets the jobs deliver to are registered, and left
before them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.config.schema import Config
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.records import dataclass
from edgeclaw.store.jobs import JobStore
from edgeclaw.tools.automation.authority import JobAuthority
from edgeclaw.tools.automation.cron import CronTool, JobFactory, ScheduleTool
from edgeclaw.tools.automation.gateway import GatewayHooks, GatewayTool
from edgeclaw.tools.automation.targets import JobOutlets, TargetError, parse_targets
from edgeclaw.tools.automation.when import ScheduleError, parse_duration, zone
from edgeclaw.tools.base import ToolContext

if TYPE_CHECKING:
    from edgeclaw.agent.heartbeat import Heartbeat
    from edgeclaw.agent.scheduler import Scheduler
    from edgeclaw.store.db import Database
    from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.automation")

HEARTBEAT_FILE = "HEARTBEAT.md"
MIN_HEARTBEAT_S = 60.0


@dataclass
class Automation:
    """The runtime's jobs, their outlets, the gateway's hooks and, once running, the scheduler."""

    store: JobStore
    jobs: JobFactory
    outlets: JobOutlets
    gateway: GatewayHooks
    heartbeat_s: float = 0.0
    scheduler: Scheduler | None = None
    heartbeat: Heartbeat | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def automation_problems(config: Config) -> list[tuple[str, str]]:
    a, agent = config.automation, config.agent
    problems: list[tuple[str, str]] = []
    try:
        zone(a.timezone)
    except ScheduleError as e:
        problems.append(("automation.timezone", str(e)))
    for key, low in (("late_limit_s", 1.0), ("clock_sync_max_wait_s", 0.0), ("jitter_s", 0.0)):
        value = getattr(a, key)
        if value < low:
            problems.append((f"automation.{key}", f"expected a number >= {low:g}, got {value}"))
    if a.max_running < 1:
        problems.append(("automation.max_running", f"expected an integer >= 1, got {a.max_running}"))
    if agent.heartbeat_interval:
        try:
            seconds = parse_duration(agent.heartbeat_interval, "heartbeat interval")
            if seconds < MIN_HEARTBEAT_S:
                problems.append(("agent.heartbeat_interval", f"expected at least 1m, got {seconds:g} s"))
        except ScheduleError as e:
            problems.append(("agent.heartbeat_interval", str(e)))
    from edgeclaw.agent.heartbeat import QuietHours

    try:
        QuietHours.parse(agent.heartbeat_quiet_hours)
    except ValueError as e:
        problems.append(("agent.heartbeat_quiet_hours", str(e)))
    if agent.heartbeat_to:
        try:
            parse_targets(agent.heartbeat_to)
        except TargetError as e:
            problems.append(("agent.heartbeat_to", str(e)))
    return problems


def agent_names(config: Config) -> list[str]:
    return ["main", *(n for n in config.agents if n != "main")]


def caller_profiles(config: Callable[[], Config]) -> Callable[[str], str | None]:
    """A job owner's standing now, from the config in force (JobAuthority): an MQTT caller's tools
    profile ("" = the channel's), or None when it is no longer a caller that may operate (its
    [callers.NAME] is gone or lost the operate role; anonymous, once commands must be signed).
    Callers of other channels have their channel's rules."""
    from edgeclaw.config.callers import legacy_callers

    def profile_of(identity: str) -> str | None:
        scheme, _, name = identity.partition(":")
        if scheme != "mqtt":
            return ""
        c = config()
        operators = {n for n, t in c.callers.items() if "operate" in t.roles}
        legacy = {k.name for k in legacy_callers(c.mqtt) if k.role == "operate"}
        if name == "anonymous":
            observers = {n for n, t in c.callers.items() if {"observe", "operate"} & set(t.roles)}
            return None if observers or legacy else ""
        if name in c.callers:
            return c.callers[name].profile if name in operators else None
        return "" if name in legacy else None

    return profile_of


def install_automation(
    config: Config, registry: Registry, database: Callable[[], Database], state_dir: Path
) -> Automation:
    """cron, schedule and gateway in the registry; the jobs kept in the state database."""
    problems = automation_problems(config)
    if problems:
        raise ConfigErrors([ConfigError(config._source, k, p) for k, p in problems])
    a = config.automation

    async def check_call(name: str, args: dict[str, Any], ctx: ToolContext) -> str | None:
        outcome = await registry.execute(name, args, ctx, dry_run=True)
        return None if outcome.ok else outcome.error

    store = JobStore(database)
    authority = JobAuthority(registry.policy, caller_profiles(lambda: config))
    jobs = JobFactory(
        store,
        check_call=check_call,
        agents=lambda: agent_names(config),
        default_tz=a.timezone,
        default_jitter_s=a.jitter_s,
        authority=authority,
    )
    from edgeclaw.daemon.gateway import offline_hooks

    hooks = offline_hooks(config, state_dir)
    registry.register_all([CronTool(jobs), ScheduleTool(jobs), GatewayTool(hooks)])
    interval = config.agent.heartbeat_interval
    return Automation(store, jobs, JobOutlets(), hooks, parse_duration(interval) if interval else 0.0)
