"""Build the tool runtime from the configuration: shared by the daemon and the CLI.

`edgeclaw tool call` and `edgeclaw run` go through exactly the same registry,
policy, limits and scrubbing, because both are built here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from edgeclaw.board import BoardProfile
from edgeclaw.config.paths import device_id, state_dir
from edgeclaw.config.schema import Config
from edgeclaw.daemon.agent_service import AgentService
from edgeclaw.daemon.hooks import CloseStep, DrainStep, Lifecycle, ReadyStep
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.records import dataclass
from edgeclaw.store.db import Database
from edgeclaw.store.sessions import SessionStore
from edgeclaw.store.update_lock import UpdateLock
from edgeclaw.tools.approval import ApprovalBroker
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.outlets import Outlets
from edgeclaw.tools.registry import Registry

if TYPE_CHECKING:
    from edgeclaw.agent.subagents import SubagentManager
    from edgeclaw.backends.hub import BoardBackends
    from edgeclaw.channels.mcp.server import McpServer
    from edgeclaw.daemon.automation import Automation
    from edgeclaw.daemon.memory_build import MemoryRuntime
    from edgeclaw.daemon.memory_service import MemoryService
    from edgeclaw.store.state import StateStore
    from edgeclaw.tools.base import Tool
    from edgeclaw.tools.fs.workspace import Workspace
    from edgeclaw.tools.mcp.setup import McpBridge

T = TypeVar("T")

log = logging.getLogger("edgeclaw.runtime")


class StateDatabase:
    """The state database and its keeper, both opened on first use (a `tool call` that needs none
    never opens it); checked before use and recovered when damaged (see `store.state`)."""

    def __init__(self, state_dir: Path, config: Config) -> None:
        self._state_dir = state_dir
        self._config = config
        self._state: StateStore | None = None
        self._db: Database | None = None

    @property
    def state(self) -> StateStore:
        if self._state is None:
            from edgeclaw.store.state import StateStore

            self._state = StateStore(
                self._state_dir,
                reserve_bytes=self._config.state.reserve_bytes,
                backup_interval_s=self._config.state.backup_interval_s,
            )
        return self._state

    def get(self) -> Database:
        if self._db is None:
            self._db = self.state.open()
        return self._db

    def close(self) -> None:
        """Closed when it was opened (the daemon's clean stop backs it up first). Kept, closed: a late
        user gets an error rather than a reopened file."""
        if self._db is not None:
            self.state.close()


@dataclass(frozen=True, eq=False)  # one per process: compared and hashed by identity
class Runtime:
    """What one edgeclaw process has built from its config: registry, stores, board and services,
    and the lifecycle that starts and releases them. Built once by `build_runtime`; what is built on
    first use (the agent loop, memory, the MCP server) sits in the holders `agent`, `memory_service`
    and `mcp_server`."""

    config: Config
    device_id: str
    state_dir: Path
    workspace: Path
    board: BoardProfile
    registry: Registry
    secrets: dict[str, str] = field(repr=False)  # never in a log line or a traceback's locals
    sessions: SessionStore
    approvals: ApprovalBroker
    # Approval decisions, admin changes, logins: logged at info and published by the channels.
    audit: AuditTrail
    # Where text goes when nobody waits for it (channels and notification services register here).
    outlets: Outlets
    lifecycle: Lifecycle
    database: StateDatabase
    # The board's devices (opened on first use): what is attached, for the fleet's status.
    hardware: BoardBackends
    # Scheduled jobs, the heartbeat and the gateway tool's hooks ([automation]).
    automation: Automation | None
    # The MCP servers' tools ([mcp.servers.*]), connected when the runtime is ready; None without.
    mcp: McpBridge | None
    # The agent loop and its subagents (`daemon.agent`), built on first use through `edgeclaw run`.
    agent: AgentService
    # Memory, context files and skills ([memory], [skills]), built on first use (`daemon.memory_service`).
    memory_service: MemoryService
    # The daemon's MCP server (HTTP and MQTT sessions), built on first use (`daemon.mcp_server`).
    mcp_server: Slot[McpServer]
    # STATE/update.lock: held by jobs and the tools that defer updates; an update waits for it.
    update_lock: UpdateLock
    # STATE/local: the context files, memory and skills only the administrator writes
    # (`daemon.local_dir`); None when callers' tools could write there.
    local: Workspace | None = None
    # Told when what the retained status shows may have changed (an update deferred or given up, a
    # trial confirmed): the channels that publish a status register their refresh (`on_status_change`).
    status_listeners: list[Callable[[], None]] = field(default_factory=list)

    @property
    def state(self) -> StateStore:
        """The state database's keeper: checks and recovery at open, backups, the disk reserve."""
        return self.database.state

    @property
    def db(self) -> Database:
        """The state database, opened on first use."""
        return self.database.get()

    @property
    def state_health(self) -> dict[str, Any]:
        """For `edgeclaw status`: what opening the state database found and did, its backup, the
        disk reserve and free space (see `StateStore.snapshot`); does not open the database."""
        return self.state.snapshot()

    @property
    def memory(self) -> MemoryRuntime | None:
        """Memory, context files and skills, built now if they are not yet; None with memory off.
        A build that fails raises, and the next use tries again."""
        return self.memory_service.get()

    @property
    def subagents(self) -> SubagentManager | None:
        """The subagents' manager, built with the agent loop; None until then."""
        return self.agent.subagents

    def on_ready(self, hook: ReadyStep) -> None:
        self.lifecycle.on_ready(hook)

    async def ready(self) -> None:
        await self.lifecycle.ready()

    def on_drain(self, hook: DrainStep) -> None:
        self.lifecycle.on_drain(hook)

    async def drain(self, grace_s: float) -> None:
        """On a stop: in-flight tool calls and every drain hook get `grace_s`, all at once."""
        await self.lifecycle.drain(grace_s)

    def on_close(self, closer: CloseStep) -> None:
        self.lifecycle.on_close(closer)

    def on_status_change(self, listener: Callable[[], None]) -> None:
        self.status_listeners.append(listener)

    def status_changed(self) -> None:
        """The facts of the retained status changed: each channel republishes it if it differs."""
        for listener in list(self.status_listeners):
            try:
                listener()
            except Exception:  # the status is told late; what changed it goes on
                log.exception("telling a channel the status changed failed")

    async def aclose(self) -> None:
        """Run the release steps, newest first; the state database is closed last."""
        await self.lifecycle.aclose()


class Slot(Generic[T]):
    """Where one thing built on first use is kept once built (a frozen runtime's mutable corner)."""

    def __init__(self) -> None:
        self.built: T | None = None


def build_runtime(
    config: Config,
    *,
    board: str | None = None,
    environ: Mapping[str, str] | None = None,
    require_secrets: bool = True,
) -> Runtime:
    """Wire the registry and its tools. Raises ConfigErrors for anything that cannot be honoured."""
    from edgeclaw import board as boards
    from edgeclaw.backends.hub import BoardBackends
    from edgeclaw.config.checks import policy_rules
    from edgeclaw.config.secrets import resolve_secrets
    from edgeclaw.tool_groups import (
        HARDWARE_TOOLS,
        INTEGRATION_TOOLS,
        MEDIA_TOOLS,
        UI_TOOLS,
        VCS_TOOLS,
        web_tool_groups,
    )
    from edgeclaw.tools.fs.files import fs_tools
    from edgeclaw.tools.fs.workspace import Workspace
    from edgeclaw.tools.policy import PolicyEngine
    from edgeclaw.tools.ratelimit import RateLimiter
    from edgeclaw.tools.scrub import Scrubber
    from edgeclaw.tools.sessions.listing import SessionsHistoryTool, SessionsListTool
    from edgeclaw.tools.sessions.status import SessionStatusTool

    source = config._source
    profile = boards.resolve(board or config.board, "--board" if board else source)

    secrets, problems = resolve_secrets(config, environ)
    if problems and require_secrets:
        raise ConfigErrors(problems)
    scrubber = Scrubber()
    for value in secrets.values():
        scrubber.add_secret(value)
    from edgeclaw.tools.scrub_logs import install_log_scrubbing

    install_log_scrubbing(scrubber)  # every log record, whoever logs it, scrubbed like tool output

    state = state_dir(config.state_dir, environ)
    workspace = Path(config.workspace) if config.workspace else state / "workspace"
    try:
        workspace.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigErrors(
            [ConfigError(source, "workspace", f"cannot create {workspace}: {e.strerror}")]
        ) from None

    t = config.tools
    policy = PolicyEngine(policy_rules(config))
    limiter = RateLimiter(t.rate_limit, t.rate_per_minute, t.channel_rate_limit, t.channel_rate_per_minute)
    registry = Registry(
        policy, scrubber, limiter, default_timeout_s=t.timeout_s, max_output_bytes=t.max_output_bytes
    )
    # STATE/update.lock, held while the tools named in gateway.defer_updates_during run (and jobs).
    update_lock = UpdateLock(state)
    if config.gateway.defer_updates_during:
        registry.call_guard = update_lock.guard_for(config.gateway.defer_updates_during)
    lifecycle = Lifecycle()
    lifecycle.on_drain(registry.drain)  # in-flight tool calls get the shutdown grace
    database = StateDatabase(state, config)
    lifecycle.on_close(database.close)  # registered first, so closed last
    sessions = SessionStore(database.get)
    audit = AuditTrail(scrubber.scrub)
    # Every channel's approval questions and decisions go to the same trail.
    approvals = ApprovalBroker(audit=audit)
    outlets = Outlets(scrubber.scrub)
    from edgeclaw.store.reserve import same_file_system

    # On the state database's file system, the write tools leave its reserve free (store.reserve).
    keep_free = config.state.reserve_bytes if same_file_system(workspace, state) else 0
    ws = Workspace(
        workspace, tuple(Path(p) for p in t.allowed_paths), t.max_file_bytes, keep_free_bytes=keep_free
    )
    registry.register_all(fs_tools(ws))
    from edgeclaw.daemon.local_dir import local_root

    local = local_root(state, ws)
    from edgeclaw.tools.runtime.shell_setup import install_shell_tools  # exec, process and custom tools

    shell = install_shell_tools(registry, config, ws, state, secrets, scrubber, environ)
    shell.attach(approvals=approvals, database=database.get, on_close=lifecycle.on_close)
    # Commands a killed edgeclaw process left running in the sandbox's cgroups end at this start,
    # not at the first command (see edgeclaw.sandbox.cgroup).
    from edgeclaw.sandbox.cgroup import end_leftovers

    end_leftovers(config.sandbox.pids_cgroup)
    registry.register(SessionStatusTool(registry.stats, limiter, sessions))
    registry.register_all([SessionsListTool(sessions), SessionsHistoryTool(sessions)])
    from edgeclaw.daemon.agent_tools import install_agent_tools, install_notifiers

    agent = AgentService()
    install_agent_tools(config, registry, sessions, outlets, agent)  # subagents, sessions_send, message
    install_notifiers(config, secrets, outlets, lifecycle.on_close)  # pushover, ntfy
    hardware = BoardBackends(profile, config.hardware, state)  # opens devices on first use only

    def hardware_family() -> list[Tool]:
        from edgeclaw.tools.hardware import hardware_tools

        return hardware_tools(profile, config.hardware, hardware, ws, config.console.ports)

    registry.register_deferred(HARDWARE_TOOLS, hardware_family)

    browsers: list[Tool] = []

    def ui_family() -> list[Tool]:
        from edgeclaw.tools.ui import ui_tools  # canvas and screenshot, on the profile's [[displays]]

        tools = ui_tools(profile, hardware, ws, config)
        browsers.extend(t for t in tools if t.name == "browser")
        return tools

    async def close_browsers() -> None:
        for tool in browsers:
            await tool.aclose()  # type: ignore[attr-defined]

    registry.register_deferred(UI_TOOLS, ui_family)
    lifecycle.on_close(close_browsers)
    lifecycle.on_close(hardware.aclose)
    from edgeclaw.tools.nodes.tool import nodes_tool  # peers on the broker; the MQTT channel attaches it

    registry.register(nodes_tool(config.tools.nodes))
    from edgeclaw.daemon.memory_service import MemoryService, install_memory_service

    def build_memory() -> MemoryRuntime:
        from edgeclaw.daemon.memory_build import build_memory

        return build_memory(
            config,
            ws,
            local,
            database=database.get,
            secrets=secrets,
            scrub=scrubber.scrub,
            on_close=lifecycle.on_close,
        )

    memory = MemoryService(build_memory if config.memory.enabled else None)
    install_memory_service(config, registry, memory)  # memory, skills, the VFS
    from edgeclaw.daemon.automation import install_automation  # cron, schedule and gateway

    automation = install_automation(config, registry, database.get, state)
    from edgeclaw.tools.web.setup import web_settings  # web_fetch, web_search, http_request

    web = web_settings(config, secrets, environ=environ)  # now: a bad per-agent entry fails at start-up

    def web_family() -> list[Tool]:
        from edgeclaw.tools.web.setup import web_tools

        return web_tools(web, max_output_bytes=registry.max_output_bytes)

    registry.register_deferred(web_tool_groups(config), web_family)

    def vcs_family() -> list[Tool]:
        from edgeclaw.tools.vcs.git import GitTool  # git, in the shell tools' sandbox, under the web rules

        allow_http = config.tools.git.allow_http_hosts
        return [
            GitTool(
                shell.runner, web, allow_http_hosts=allow_http, max_processes=config.sandbox.max_processes
            )
        ]

    registry.register_deferred(VCS_TOOLS, vcs_family)

    def integrations_family() -> list[Tool]:
        from edgeclaw.tools.integrations.composio import (
            ComposioTool,  # the Composio platform, under the web rules
        )

        return [ComposioTool(config.tools.composio, web)]

    registry.register_deferred(INTEGRATION_TOOLS, integrations_family)

    def media_family() -> list[Tool]:
        from edgeclaw.daemon.media import media_tools  # tts, image, camera, read_bytes

        return media_tools(runtime, ws)

    registry.register_deferred(MEDIA_TOOLS, media_family)
    from edgeclaw.tools.mcp.setup import install_mcp  # [mcp.servers.*]: tools of MCP servers

    mcp = install_mcp(
        config,
        registry,
        state_dir=state,
        secrets=secrets,
        on_ready=lifecycle.on_ready,
        on_close=lifecycle.on_close,
    )

    # Tool names can only be checked once the tools exist.
    problems = [ConfigError(source, key, problem) for key, problem in policy.validate()]
    if problems:
        raise ConfigErrors(problems)
    runtime = Runtime(
        config=config,
        device_id=device_id(config.device_id),
        state_dir=state,
        workspace=workspace,
        board=profile,
        registry=registry,
        secrets=secrets,
        sessions=sessions,
        approvals=approvals,
        audit=audit,
        outlets=outlets,
        lifecycle=lifecycle,
        database=database,
        hardware=hardware,
        automation=automation,
        mcp=mcp,
        agent=agent,
        memory_service=memory,
        mcp_server=Slot(),
        update_lock=update_lock,
        local=local,
    )
    return runtime
