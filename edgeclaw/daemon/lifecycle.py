"""`edgeclaw run`: start the services, tell systemd, stop cleanly.

Start-up order: build the runtime from config → enter every service (each an
async context manager that owns its connections) → READY=1 → serve. On
SIGTERM or SIGINT: STOPPING=1 → in-flight tool calls get
`shutdown_grace_s`, then are cancelled → services are exited in reverse
order → exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import TYPE_CHECKING, Any

from edgeclaw import __version__
from edgeclaw.config.schema import Config
from edgeclaw.daemon.control import ControlServer, socket_path
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.daemon.sdnotify import LoopWatchdog, SystemdNotifier
from edgeclaw.daemon.state import state_service

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop

log = logging.getLogger("edgeclaw.daemon")

# A service is built from the runtime and entered for the daemon's lifetime.
ServiceFactory = Callable[[Runtime], AbstractAsyncContextManager[object]]


def configured_services(config: Config) -> list[ServiceFactory]:
    """The channels the config enables (MQTT, the serial console), each built only when asked for."""
    services: list[ServiceFactory] = []
    if config.mqtt.enabled:
        # Imported here: aiomqtt and paho load only when MQTT is configured.
        from edgeclaw.daemon.mqtt import mqtt_service

        services.append(mqtt_service)
        if config.mcp.server.mqtt:
            # MCP over MQTT, on a connection of its own whose Last Will clears its presence.
            from edgeclaw.daemon.mcp_server import mcp_over_mqtt

            services.append(mcp_over_mqtt)
    if config.mcp.server.listen:
        from edgeclaw.daemon.mcp_server import mcp_http_service  # streamable HTTP for MCP clients

        services.append(mcp_http_service)
    if config.console.ports:
        from edgeclaw.daemon.console import console_service

        services.append(console_service)
    if config.automation.enabled:
        # After the channels: jobs deliver through them, and stop before they do.
        from edgeclaw.daemon.scheduler import scheduler_service

        services.append(scheduler_service)
    return services


def agent_on_demand(runtime: Runtime, *, recover_at_start: bool) -> None:
    """For `edgeclaw run`: the agent loop is built by the first thing that needs it, not at start-up
    (its modules are a large part of a start); its subagent manager then recovers what a previous
    run left. With `recover_at_start` (a channel that can tell the parents is up: MQTT), that is done
    at start instead: children left running become `interrupted` and ended ones are announced, by
    building the loop then if (and only if) the state database holds such children."""

    def build() -> AgentLoop:
        from edgeclaw.daemon.agent import shared_agent

        return shared_agent(runtime)

    def recover_subagents() -> None:
        from edgeclaw.store.subagents import SubagentStore

        if runtime.agent.subagents is None and SubagentStore(lambda: runtime.db).left_by_last_run():
            build()  # its subagent manager's recovery runs as the next start-up step

    runtime.agent.factory = build
    if recover_at_start:
        runtime.lifecycle.on_ready(recover_subagents)


class Daemon:
    def __init__(
        self,
        config: Config,
        *,
        board: str | None = None,
        services: Sequence[ServiceFactory] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.config = config
        self.board = board
        self.services = list(services) if services is not None else configured_services(config)
        self.environ = environ
        self.runtime: Runtime | None = None
        self._stop = asyncio.Event()
        self.ready = asyncio.Event()
        self._entered: list[object] = []  # the services, once entered (for status)
        self._started = time.time()
        # Set by the gateway tool's restart: run() then returns EXIT_RESTART instead of 0.
        self.restart_reason: str | None = None
        # Once healthy (READY, every channel connected): a config or version on trial passed.
        self.on_ready: Callable[[], object] | None = None
        # With a deadline, not healthy by then calls on_unhealthy(why) and restarts the daemon.
        self.health_deadline_s: float | None = None
        self.health_window_s = 0.0  # healthy that long without a break before on_ready
        self.on_unhealthy: Callable[[str], object] | None = None

    def request_restart(self, reason: str) -> None:
        log.warning("restart requested: %s", reason)
        self.restart_reason = reason
        self.request_stop()

    def request_stop(self) -> None:
        self._stop.set()

    def health_problem(self) -> str | None:
        """None when healthy: READY, and every channel that keeps a connection has it."""
        if not self.ready.is_set():
            return "not ready"
        for service in self._entered:
            check = getattr(service, "health_problem", None)
            problem = check() if callable(check) else None
            if problem:
                return f"{getattr(service, 'name', type(service).__name__)}: {problem}"
        return None

    async def _confirm_health(self) -> None:
        """on_ready once healthy; past the deadline (when there is one), on_unhealthy and a restart."""
        deadline = None if self.health_deadline_s is None else time.monotonic() + self.health_deadline_s
        while (problem := self.health_problem()) is not None:
            if deadline is not None and time.monotonic() > deadline:
                self._unhealthy(f"not healthy within {self.health_deadline_s:g} s ({problem})")
                return
            await asyncio.sleep(0.2)
        held = time.monotonic() + self.health_window_s
        while time.monotonic() < held:
            await asyncio.sleep(0.2)
            if (problem := self.health_problem()) is not None:
                self._unhealthy(f"healthy, then not within the {self.health_window_s:g} s window ({problem})")
                return
        if self.on_ready is not None:
            self.on_ready()
        if self.runtime is not None:
            self.runtime.status_changed()  # a trial confirmed: the status's `update` goes `trying` -> `idle`

    def _unhealthy(self, why: str) -> None:
        log.error("%s", why)
        if self.on_unhealthy is not None:
            self.on_unhealthy(why)
        self.request_restart(why)

    def status(self) -> dict[str, Any]:
        """What `edgeclaw status` shows: the daemon, its tools, its state and each channel."""
        runtime = self.runtime
        state = "stopping" if self._stop.is_set() else ("serving" if self.ready.is_set() else "starting")
        out: dict[str, Any] = {
            "version": __version__,
            "pid": os.getpid(),
            "state": state,
            "started": round(self._started, 3),
            "uptime_s": round(time.time() - self._started, 1),
        }
        if runtime is None:
            return out
        out.update(
            device=runtime.device_id,
            board=runtime.board.name,
            simulated_board=runtime.board.simulated,
            workspace=str(runtime.workspace),
            state_dir=str(runtime.state_dir),
            tools={
                "registered": len(runtime.registry.names()),
                "in_flight": runtime.registry.in_flight,
                **runtime.registry.stats.totals(),
            },
        )
        health = getattr(runtime, "state_health", None)
        if health is not None:
            out["state_db"] = health.as_dict() if hasattr(health, "as_dict") else health
        mcp = getattr(runtime, "mcp", None)
        if mcp is not None:
            out["mcp"] = mcp.status()
        channels: dict[str, Any] = {}
        for service in self._entered:
            snapshot = getattr(service, "status_snapshot", None)
            name = str(getattr(service, "name", type(service).__name__))
            try:
                channels[name] = snapshot() if callable(snapshot) else {}
            except Exception as e:  # one channel's trouble must not hide the rest
                channels[name] = {"error": f"{type(e).__name__}: {e}"}
        out["channels"] = channels
        return out

    async def run(self) -> int:
        environ = os.environ if self.environ is None else self.environ
        notifier = SystemdNotifier.from_env(environ)
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                # Only the main thread may install signal handlers; tests run daemons elsewhere too.
                loop.add_signal_handler(sig, self.request_stop)
        try:
            notifier.status("starting")
            runtime = self.runtime = build_runtime(self.config, board=self.board, environ=environ)
            # MQTT's parents are told at start what a restart did to their subagents, as before the
            # loop was built on demand; without it the loop's first use does that.
            agent_on_demand(runtime, recover_at_start=self.config.mqtt.enabled)
            if runtime.automation is not None:
                from edgeclaw.daemon.gateway import attach_daemon

                attach_daemon(runtime, runtime.automation.gateway, self.status, self.request_restart)
            log.info(
                "edgeclaw %s starting: device %s, board %s, workspace %s, %d tools",
                __version__,
                runtime.device_id,
                runtime.board.name,
                runtime.workspace,
                len(runtime.registry.names()),
            )
            try:
                async with AsyncExitStack() as stack:
                    for factory in self.services:
                        self._entered.append(await stack.enter_async_context(factory(runtime)))
                    # After the channels: a recovered database is reported on their event streams.
                    await stack.enter_async_context(state_service(runtime))
                    from edgeclaw.daemon.control import control_calls

                    control = ControlServer(
                        socket_path(runtime.state_dir), self.status, call=control_calls(runtime)
                    )
                    await stack.enter_async_context(control)
                    if self.config.metrics.listen:
                        from edgeclaw.daemon.metrics import MetricsService

                        await stack.enter_async_context(MetricsService(runtime, self.status))
                    watchdog = LoopWatchdog.from_env(notifier, environ)
                    if watchdog is not None:
                        await stack.enter_async_context(watchdog)
                    await runtime.ready()  # every channel is up: what waited for them may speak now
                    notifier.ready(f"serving: board {runtime.board.name}, {len(self.services)} channel(s)")
                    self.ready.set()
                    log.info("ready")
                    health = asyncio.create_task(self._confirm_health(), name="health-confirm")
                    await self._stop.wait()
                    health.cancel()
                    notifier.stopping("stopping: finishing in-flight tool calls")
                    log.info(
                        "stopping: %d tool call(s) in flight, %.1f s grace",
                        runtime.registry.in_flight,
                        self.config.shutdown_grace_s,
                    )
                    # Tool calls and running subagents get the same grace.
                    await runtime.drain(self.config.shutdown_grace_s)
            finally:
                # After the channels have closed: nothing can call a tool any more.
                await runtime.aclose()
            log.info("stopped")
            if self.restart_reason is not None:
                from edgeclaw.admin.restart import EXIT_RESTART

                return EXIT_RESTART
            return 0
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
                    loop.remove_signal_handler(sig)
            notifier.close()


def run_daemon(
    config: Config,
    *,
    board: str | None = None,
    on_ready: Callable[[], object] | None = None,
    health_deadline_s: float | None = None,
    on_unhealthy: Callable[[str], object] | None = None,
    health_window_s: float = 0.0,
) -> int:
    """Run the daemon until a signal stops it; uvloop when it is installed."""
    daemon = Daemon(config, board=board)
    daemon.on_ready = on_ready
    daemon.health_deadline_s = health_deadline_s
    daemon.health_window_s = health_window_s if health_deadline_s is not None else 0.0
    daemon.on_unhealthy = on_unhealthy
    try:
        import uvloop

        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = uvloop.new_event_loop
    except ImportError:
        loop_factory = None
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        return runner.run(daemon.run())
