"""What the daemon tells a fleet about itself: the runtime's part of the retained MQTT `status`, and
the `daemon_start` event that says why it (re)started.

The channel asks for the status facts at every connect and with every telemetry (and republishes the
status when they changed), so each is read from what the daemon already knows -- never a probe, a
request or a device opened just to say what it is: providers as the last request found them, the
sandbox once the first command chose it, the ESP32's firmware once it shook hands.

Why the daemon started is read from a small marker in the state directory, written at start
("running") and at a clean stop ("stopped", with a restart's reason when one was asked for): a
marker still saying "running" at the next start means the last process never stopped cleanly
(killed, crashed, or the power went).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from edgeclaw.config.schema import Config
from edgeclaw.daemon.runtime import Runtime

log = logging.getLogger("edgeclaw.daemon.fleet")

MARKER = "run-state.json"


def config_hash(config: Config) -> str:
    """A digest of the effective configuration (every key, defaults included; where it was read from
    left out): the same file gives the same hash at every start and on every device, so a fleet can
    tell which devices run which configuration. Secrets are never in it (the config names them)."""
    values = {k: v for k, v in dataclasses.asdict(config).items() if not k.startswith("_")}
    blob = json.dumps(values, sort_keys=True, separators=(",", ":"), default=str, ensure_ascii=False)
    return "sha256:" + hashlib.sha256(blob.encode("utf-8", "surrogatepass")).hexdigest()[:16]


def _sandbox(runtime: Runtime) -> dict[str, Any]:
    configured = runtime.config.sandbox.backend
    exec_tool = runtime.registry.get("exec")
    runner = getattr(getattr(exec_tool, "shell", None), "runner", None)
    sandbox = getattr(runner, "sandbox", None)
    in_force = getattr(sandbox, "in_force", None)
    return {"configured": configured, "in_force": in_force if isinstance(in_force, str) else None}


def _providers(runtime: Runtime) -> dict[str, Any]:
    """Each configured provider: reachable as the last request found it (null before the first)."""
    health: dict[str, Any] = {}
    agent = runtime.agent.loop  # built on the first turn; not built here just to read it
    chain = getattr(agent, "chain", None)
    if chain is not None:
        health = getattr(chain, "health", {}) or {}
    out: dict[str, Any] = {}
    for name in runtime.config.providers:
        h = health.get(name)
        out[name] = {
            "reachable": None if h is None else h.ok,
            "last_ok": round(h.last_ok, 3) if h is not None and h.last_ok else None,
        }
    return out


def _mcp(runtime: Runtime) -> dict[str, Any] | None:
    if runtime.mcp is None:
        return None
    return {
        name: {"state": st.get("state"), "tools": st.get("tools")}
        for name, st in runtime.mcp.status().items()
    }


def status_facts(runtime: Runtime) -> Callable[[], dict[str, Any]]:
    """The runtime's part of the retained `status` (see docs/mqtt.md)."""
    digest: dict[int, str] = {}

    def facts() -> dict[str, Any]:
        config = runtime.config  # a reload may replace it: hashed again then, once
        key = id(config)
        if key not in digest:
            digest.clear()
            digest[key] = config_hash(config)
        out: dict[str, Any] = {
            "config_hash": digest[key],
            "firmware": runtime.hardware.firmware() if runtime.hardware is not None else None,
            "sandbox": _sandbox(runtime),
            "providers": _providers(runtime),
        }
        mcp = _mcp(runtime)
        if mcp is not None:
            out["mcp"] = mcp
        from edgeclaw.admin.update_slots import update_state

        out["update"] = update_state(runtime.state_dir)
        return out

    return facts


# -- why the daemon started ----------------------------------------------------------------------
def _read_marker(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _write_marker(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(value))
        os.replace(tmp, path)
    except OSError as e:
        log.warning("cannot record the daemon's run state in %s: %s", path, e)


def start_reason(previous: dict[str, Any] | None) -> dict[str, Any]:
    """The `daemon_start` event's fields from what the last process left behind."""
    if previous is None:
        return {"previous": "none", "reason": "first start (no earlier run recorded)"}
    if previous.get("state") == "running":
        return {
            "previous": "unclean",
            "reason": "the last run did not stop cleanly (killed, crashed or power lost)",
            "last_started": previous.get("started"),
        }
    restart = previous.get("restart")
    if isinstance(restart, str) and restart:
        return {
            "previous": "restart",
            "reason": f"restart requested: {restart}",
            "stopped": previous.get("stopped"),
        }
    return {"previous": "stopped", "reason": "started after a clean stop", "stopped": previous.get("stopped")}


class RunRecord:
    """The marker's keeper for one daemon run: reads why it started, says "running" now, remembers a
    requested restart (the gateway's `restart`, a config applied that needs one) and says "stopped"
    at a clean close."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.path = runtime.state_dir / MARKER
        self.previous = _read_marker(self.path)
        self.started = round(time.time(), 3)
        self.restart: str | None = None
        runtime.state_dir.mkdir(parents=True, exist_ok=True)
        _write_marker(self.path, {"state": "running", "started": self.started, "pid": os.getpid()})
        runtime.audit.add_sink(self._watch)
        hooks = runtime.automation.gateway if runtime.automation is not None else None
        if hooks is not None and hooks.restart is not None:
            asked = hooks.restart

            def restart(reason: str) -> None:
                self.restart = reason
                asked(reason)

            hooks.restart = restart
        runtime.on_ready(self.announce)
        runtime.on_close(self.close)

    def _watch(self, event: dict[str, Any]) -> None:
        # A config applied that needs a restart says so on the trail just before it restarts.
        if event.get("kind") == "config_apply" and event.get("how") == "restart":
            self.restart = f"config applied by {event.get('by')}"

    def announce(self) -> None:
        """Once the channels are up, so the event reaches `events`."""
        self.runtime.audit.emit("daemon_start", pid=os.getpid(), **start_reason(self.previous))

    def close(self) -> None:
        self.runtime.audit.remove_sink(self._watch)
        value: dict[str, Any] = {
            "state": "stopped",
            "started": self.started,
            "stopped": round(time.time(), 3),
        }
        if self.restart:
            value["restart"] = self.restart
        _write_marker(self.path, value)


def report_mcp_servers(runtime: Runtime) -> None:
    """An `mcp_server` event each time an MCP server comes up (its tools registered) or goes down (its
    tools gone: the connection lost, or it stopped answering pings), through the manager's own hooks."""
    if runtime.mcp is None:
        return
    manager = runtime.mcp.manager
    on_tools, on_gone = manager.on_tools, manager.on_gone

    def up(name: str, tools: list[dict[str, Any]]) -> dict[str, str]:
        broken = on_tools(name, tools)
        runtime.audit.emit(
            "mcp_server", server=name, state="connected", tools=len(tools) - len(broken), broken=len(broken)
        )
        return broken

    def gone(name: str) -> None:
        on_gone(name)
        st = manager.status.get(name)
        runtime.audit.emit(
            "mcp_server", level=logging.WARNING, server=name, state="down",
            error=st.error if st is not None and st.error else None,
        )  # fmt: skip

    manager.on_tools, manager.on_gone = up, gone


def install_fleet(runtime: Runtime) -> Callable[[], dict[str, Any]]:
    """Start recording this run (the `daemon_start` event), report MCP servers going up and down, and
    give the status facts."""
    RunRecord(runtime)
    report_mcp_servers(runtime)
    return status_facts(runtime)
