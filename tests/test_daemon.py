"""`edgeclaw run`: readiness and stopping as systemd sees them, and the in-flight deadline."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.lifecycle import Daemon
from edgeclaw.tools.base import Tool, ToolContext


def _bind_notify(path: Path) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(path))
    sock.settimeout(0.2)
    return sock


def _collect_until(sock: socket.socket, needle: str, timeout: float) -> list[str]:
    messages: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
        if any(needle in m for m in messages):
            break
    return messages


def test_run_notifies_ready_watchdog_and_stopping(tmp_path, state_env):
    notify = _bind_notify(tmp_path / "notify.sock")
    env = {**state_env, "NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "400000"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run", "--board", "sim"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        startup = _collect_until(notify, "READY=1", 20)
        assert any("READY=1" in m for m in startup), startup
        assert any(m.startswith("STATUS=starting") for m in startup)
        pings = _collect_until(notify, "WATCHDOG=1", 5)
        assert any("WATCHDOG=1" in m for m in pings)
        proc.send_signal(signal.SIGTERM)
        stopping = _collect_until(notify, "STOPPING=1", 10)
        assert any("STOPPING=1" in m for m in stopping)
        assert proc.wait(10) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        notify.close()
    _, err = proc.communicate()
    assert "ready" in err and "stopped" in err


def test_run_refuses_a_bad_channel_config_by_key(run_cli, state_env):
    config = 'board = "sim"\n[mqtt]\nenabled = true\ninbound_queue = 0\n'
    Path(state_env["EDGECLAW_CONFIG"]).write_text(config)
    out = run_cli("run")
    assert out.returncode == 2 and "mqtt.inbound_queue" in out.stderr


class Stubborn(Tool):
    """A tool that runs until it is cancelled."""

    name = "stubborn"
    group = "runtime"
    description = "Never finishes by itself."
    timeout_s = 60

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.cancelled = False

    async def execute(self, args, ctx):
        self.started.set()
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled = True
            raise
        return "finished"


@pytest.mark.parametrize("grace", [0.2])
async def test_stop_gives_in_flight_calls_a_deadline_then_cancels(tmp_path, grace):
    config = config_from_dict(
        {"board": "sim", "state_dir": str(tmp_path / "state"), "shutdown_grace_s": grace}, "test.toml"
    )
    tool = Stubborn()
    outcomes = []

    @contextlib.asynccontextmanager
    async def service(runtime):
        runtime.registry.register(tool)
        task = asyncio.create_task(runtime.registry.execute("stubborn", {}, ToolContext()))
        task.add_done_callback(lambda t: outcomes.append(t.result()))
        yield
        await task

    daemon = Daemon(config, services=[service], environ={})
    run = asyncio.create_task(daemon.run())
    await asyncio.wait_for(daemon.ready.wait(), 10)
    await asyncio.wait_for(tool.started.wait(), 5)
    started = time.monotonic()
    daemon.request_stop()
    assert await asyncio.wait_for(run, 30) == 0
    elapsed = time.monotonic() - started
    assert tool.cancelled
    assert outcomes and outcomes[0].stage == "cancelled" and "shutting down" in outcomes[0].error
    assert grace * 0.8 <= elapsed < 20  # the grace, then the cancel: not the call's hour
