"""Build the tool runtime from the configuration: shared by the daemon and the CLI.

`edgeclaw tool call` and `edgeclaw run` go through exactly the same registry,
policy, limits and scrubbing, because both are built here.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.board import BoardProfile
from edgeclaw.config.paths import device_id, state_dir
from edgeclaw.config.schema import Config
from edgeclaw.errors import ConfigError, ConfigErrors, EdgeclawError
from edgeclaw.store.db import Database
from edgeclaw.store.sessions import SessionStore
from edgeclaw.tools.approval import ApprovalBroker
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.outlets import Outlets
from edgeclaw.tools.registry import Registry

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop
    from edgeclaw.agent.subagents import SubagentManager
    from edgeclaw.backends.hub import BoardBackends
    from edgeclaw.channels.mcp.server import McpServer
    from edgeclaw.daemon.automation import Automation
    from edgeclaw.daemon.memory_build import MemoryRuntime
    from edgeclaw.store.state import StateStore
    from edgeclaw.tools.base import Tool
    from edgeclaw.tools.mcp.setup import McpBridge

log = logging.getLogger("edgeclaw.runtime")


@dataclass
class Runtime:
    """What one edgeclaw process has built from its config: registry, stores, board and services."""

    config: Config
    device_id: str
    state_dir: Path
    workspace: Path
    board: BoardProfile
    registry: Registry
    secrets: dict[str, str] = field(repr=False)  # never in a log line or a traceback's locals
    sessions: SessionStore
    approvals: ApprovalBroker = field(default_factory=ApprovalBroker)
    # Approval decisions, admin changes, logins: logged at info and published by the channels.
    audit: AuditTrail = field(default_factory=AuditTrail)
    _db: Database | None = None
    _state: StateStore | None = None
    _closers: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)
    # The daemon's one agent loop, built on first use by `daemon.agent.shared_agent` (which
    # imports this module, never the other way round).
    _agent: AgentLoop | None = None
    # The daemon's MCP server (HTTP and MQTT sessions), built on first use by
    # `daemon.mcp_server.shared_mcp_server`.
    _mcp_server: McpServer | None = None
    # Memory, context files and skills ([memory], [skills]), built on first use through
    # `memory_factory` (set by `daemon.memory_service` when memory.enabled is true).
    _memory: MemoryRuntime | None = None
    memory_factory: Callable[[], MemoryRuntime] | None = None
    # Scheduled jobs, the heartbeat and the gateway tool's hooks ([automation]).
    automation: Automation | None = None
    # Where text goes when nobody waits for it (channels and notification services register here).
    outlets: Outlets = field(default_factory=Outlets)
    # The subagents' manager, built with the agent loop (daemon.agent); None without one.
    subagents: SubagentManager | None = None
    # The MCP servers' tools ([mcp.servers.*]), connected when the runtime is ready; None without.
    mcp: McpBridge | None = None
    # The board's devices (opened on first use): what is attached, for the fleet's status.
    hardware: BoardBackends | None = None
    # `edgeclaw run` sets this (`daemon.agent_service`): what needs the agent loop (a chat, a spawn,
    # sessions_send's turn) builds it through here on first use. None elsewhere (`edgeclaw tool call`),
    # where those say the loop is absent.
    agent_factory: Callable[[], AgentLoop] | None = None
    _ready_hooks: list[Callable[[], Awaitable[None] | None]] = field(default_factory=list)
    _drain_hooks: list[Callable[[float], Awaitable[None]]] = field(default_factory=list)
    _is_ready: bool = False
    _late_steps: set[asyncio.Future[None]] = field(default_factory=set)

    @property
    def state(self) -> StateStore:
        """The state database's keeper: checks and recovery at open, backups, the disk reserve."""
        if self._state is None:
            from edgeclaw.store.state import StateStore

            self._state = StateStore(
                self.state_dir,
                reserve_bytes=self.config.state.reserve_bytes,
                backup_interval_s=self.config.state.backup_interval_s,
            )
        return self._state

    @property
    def memory(self) -> MemoryRuntime | None:
        """Memory, context files and skills, built now if they are not yet; None with memory off.
        A build that fails raises, and the next use tries again."""
        if self._memory is None and self.memory_factory is not None:
            self._memory = self.memory_factory()
        return self._memory

    @property
    def db(self) -> Database:
        """The state database, opened on first use (a `tool call` that needs none never opens it),
        checked before it is used, and recovered when it is damaged (see `store.state`)."""
        if self._db is None:
            self._db = self.state.open()
        return self._db

    @property
    def state_health(self) -> dict[str, Any]:
        """For `edgeclaw status`: what opening the state database found and did, its backup, the
        disk reserve and free space (see `StateStore.snapshot`); does not open the database."""
        return self.state.snapshot()

    def on_ready(self, hook: Callable[[], Awaitable[None] | None]) -> None:
        """Run once every channel is up (`edgeclaw run` before READY=1): e.g. tell parents about
        subagents a crash interrupted, now that their channels can show it. A hook added later
        (something built on first use, after start-up) runs at once."""
        self._ready_hooks.append(hook)
        if self._is_ready:
            while self._ready_hooks:
                step = self._ready_hooks.pop(0)
                pending = self._start_step(step)
                if pending is not None:
                    task = asyncio.ensure_future(self._finish_step(step, pending))
                    self._late_steps.add(task)  # kept until done: a task nobody holds may vanish
                    task.add_done_callback(self._late_steps.discard)

    async def ready(self) -> None:
        # Popped as they run: a step may add another (the agent loop built on demand adds its
        # subagents' recovery), which then runs in turn.
        while self._ready_hooks:
            step = self._ready_hooks.pop(0)
            pending = self._start_step(step)
            if pending is not None:
                await self._finish_step(step, pending)
        self._is_ready = True

    def _start_step(self, step: Callable[[], Awaitable[None] | None]) -> Awaitable[None] | None:
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

    def on_drain(self, hook: Callable[[float], Awaitable[None]]) -> None:
        """Work to finish within the shutdown grace beside the tool calls (subagents still running)."""
        self._drain_hooks.append(hook)

    async def drain(self, grace_s: float) -> None:
        """On a stop: in-flight tool calls and every drain hook get `grace_s`, all at once."""
        results = await asyncio.gather(
            self.registry.drain(grace_s),
            *(hook(grace_s) for hook in self._drain_hooks),
            return_exceptions=True,
        )
        for result in results:
            if isinstance(result, BaseException):
                log.error("draining failed", exc_info=result)

    def on_close(self, closer: Callable[[], Awaitable[None] | None]) -> None:
        """Register a release step (bus handles, child processes, the database); run in reverse on close."""
        self._closers.append(closer)

    async def aclose(self) -> None:
        """Run the release steps, newest first, then close the database.

        The database goes last whenever it was first opened: turns being cancelled by the
        agent's shutdown still write their history on the way out.
        """
        while self._closers:
            closer = self._closers.pop()
            try:
                result = closer()
                if inspect.isawaitable(result):
                    await result
            except Exception:
                log.exception("error while releasing %r", closer)
        if self._db is not None:
            # The daemon's clean stop backs it up first. Kept, closed: a late user gets an error
            # rather than a reopened file.
            self.state.close()


def _step_failed(step: Callable[[], object], e: Exception) -> None:
    if isinstance(e, EdgeclawError):  # meant for people (the database cannot be opened, ...)
        log.error("start-up step %s failed: %s", getattr(step, "__qualname__", step), e)
    else:
        log.error("start-up step %r failed", step, exc_info=e)


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
    from edgeclaw.config.loader import policy_rules
    from edgeclaw.config.secrets import resolve_secrets
    from edgeclaw.daemon.tool_families import HARDWARE_TOOLS, MEDIA_TOOLS, web_tool_groups
    from edgeclaw.tools.fs import fs_tools
    from edgeclaw.tools.policy import PolicyEngine
    from edgeclaw.tools.ratelimit import RateLimiter
    from edgeclaw.tools.scrub import Scrubber
    from edgeclaw.tools.session_status import SessionStatusTool
    from edgeclaw.tools.sessions import SessionsHistoryTool, SessionsListTool
    from edgeclaw.tools.workspace import Workspace

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
    # The closure reads `runtime` when a session is first touched, after it exists.
    sessions = SessionStore(lambda: runtime.db)
    audit = AuditTrail(scrubber.scrub)
    runtime = Runtime(
        config=config,
        device_id=device_id(config.device_id),
        state_dir=state,
        workspace=workspace,
        board=profile,
        registry=registry,
        secrets=secrets,
        sessions=sessions,
        audit=audit,
        # Every channel's approval questions and decisions go to the same trail.
        approvals=ApprovalBroker(audit=audit),
        outlets=Outlets(scrubber.scrub),
    )
    from edgeclaw.store.reserve import same_file_system

    # On the state database's file system, the write tools leave its reserve free (store.reserve).
    keep_free = config.state.reserve_bytes if same_file_system(workspace, state) else 0
    ws = Workspace(
        workspace, tuple(Path(p) for p in t.allowed_paths), t.max_file_bytes, keep_free_bytes=keep_free
    )
    registry.register_all(fs_tools(ws))
    from edgeclaw.tools.shell_setup import install_shell_tools  # exec, process and custom tools

    install_shell_tools(registry, config, ws, state, secrets, scrubber, environ).attach(
        approvals=runtime.approvals, database=lambda: runtime.db, on_close=runtime.on_close
    )
    # Commands a killed edgeclaw process left running in the sandbox's cgroups end at this start,
    # not at the first command (see edgeclaw.sandbox.cgroup).
    from edgeclaw.sandbox.cgroup import end_leftovers

    end_leftovers(config.sandbox.pids_cgroup)
    registry.register(SessionStatusTool(registry.stats, limiter, sessions))
    registry.register_all([SessionsListTool(sessions), SessionsHistoryTool(sessions)])
    from edgeclaw.daemon.agent_tools import install_agent_tools  # subagents, sessions_send, message

    install_agent_tools(runtime)
    hardware = BoardBackends(profile, config.hardware, state)  # opens devices on first use only

    def hardware_family() -> list[Tool]:
        from edgeclaw.tools.hardware import hardware_tools

        return hardware_tools(profile, config.hardware, hardware, ws, config.console.ports)

    registry.register_deferred(HARDWARE_TOOLS, hardware_family)
    runtime.on_close(hardware.aclose)
    runtime.hardware = hardware
    from edgeclaw.tools.nodes import nodes_tool  # peers on the broker; the MQTT channel attaches it

    registry.register(nodes_tool(config.tools.nodes))
    from edgeclaw.daemon.memory_service import install_memory_on_demand  # memory, skills, the VFS

    install_memory_on_demand(runtime, ws)
    from edgeclaw.daemon.automation import install_automation  # cron, schedule and gateway

    runtime.automation = install_automation(runtime)
    from edgeclaw.tools.web.setup import web_settings  # web_fetch, web_search, http_request

    web = web_settings(config, secrets, environ=environ)  # now: a bad per-agent entry fails at start-up

    def web_family() -> list[Tool]:
        from edgeclaw.tools.web.setup import web_tools

        return web_tools(web, max_output_bytes=registry.max_output_bytes)

    registry.register_deferred(web_tool_groups(config), web_family)

    def media_family() -> list[Tool]:
        from edgeclaw.daemon.media import media_tools  # tts, image, camera, read_bytes

        return media_tools(runtime, ws)

    registry.register_deferred(MEDIA_TOOLS, media_family)
    from edgeclaw.tools.mcp.setup import install_mcp  # [mcp.servers.*]: tools of MCP servers

    runtime.mcp = install_mcp(
        config,
        registry,
        state_dir=state,
        secrets=secrets,
        on_ready=runtime.on_ready,
        on_close=runtime.on_close,
    )

    # Tool names can only be checked once the tools exist.
    problems = [ConfigError(source, key, problem) for key, problem in policy.validate()]
    if problems:
        raise ConfigErrors(problems)
    return runtime
