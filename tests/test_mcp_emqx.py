"""MCP over MQTT against a client we did not write: EMQX's Python SDK (`mcp.client.mqtt`, from
github.com/emqx/mcp-python-sdk; its dist name is `mcp`, so it lives in a venv of its own, made by
`scripts/emqx-mcp-sdk SOURCE_DIR`). The SDK discovers the board through its retained presence,
initializes, lists the tools and calls one; then the daemon is SIGKILLed and the SDK must see the
presence emptied (the MCP link's Last Will).

Skipped, saying how to set it up, when no such venv is found (EDGECLAW_EMQX_MCP_PYTHON, else
~/.cache/edgeclaw/emqx-mcp-sdk-*/venv)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.mqtt_support import Mosquitto, daemon_env, needs_mosquitto, run_daemon, stop_daemon

pytestmark = needs_mosquitto

DRIVER = Path(__file__).with_name("emqx_mcp_driver.py")
TMP102_READ = {"action": "read_word", "bus": 1, "address": 0x48, "register": 0}


def sdk_python() -> str:
    configured = os.environ.get("EDGECLAW_EMQX_MCP_PYTHON")
    if configured:
        return configured
    found = sorted((Path.home() / ".cache" / "edgeclaw").glob("emqx-mcp-sdk-*/venv/bin/python"))
    if not found:
        pytest.skip(
            "EMQX's MCP-over-MQTT SDK is not set up: run scripts/emqx-mcp-sdk with a checkout of "
            "github.com/emqx/mcp-python-sdk (or set EDGECLAW_EMQX_MCP_PYTHON)"
        )
    return str(found[-1])


class Driver:
    """The SDK's client as a subprocess; its JSON lines read (by a thread) as events."""

    def __init__(self, python: str, port: int, log: Path) -> None:
        self.log = log
        self.proc = subprocess.Popen(
            [python, str(DRIVER), str(port), "edgeclaw/#", "i2c", json.dumps(TMP102_READ)],
            stdout=subprocess.PIPE,
            stderr=log.open("wb"),
            text=True,
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:  # type: ignore[union-attr]
            self.events.put(json.loads(line))

    def next_event(self, kind: str, within: float) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while (left := deadline - time.monotonic()) > 0:
            try:
                event = self.events.get(timeout=left)
            except queue.Empty:
                break
            assert event["event"] != "error", event
            if event["event"] == kind:
                return event
        raise AssertionError(
            f"no {kind!r} event from EMQX's client; its log:\n{self.log.read_text()[-3000:]}"
        )

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def test_emqx_sdk_discovers_calls_and_sees_a_killed_board_go(tmp_path: Path) -> None:
    python = sdk_python()
    broker = Mosquitto(tmp_path / "broker").start()
    config = tmp_path / "edgeclaw.toml"
    config.write_text(
        'board = "sim"\ndevice_id = "greenhouse-07"\n'
        f"[mqtt]\nenabled = true\nport = {broker.port}\ntelemetry_interval_s = 0\n"
        "[mcp.server]\nmqtt = true\n"
    )
    log = tmp_path / "daemon.log"
    daemon = run_daemon(daemon_env(tmp_path / "state", config), log)
    driver = Driver(python, broker.port, tmp_path / "emqx-client.log")
    try:
        assert driver.next_event("discovered", 30)["server"] == "edgeclaw/greenhouse-07"
        tools = driver.next_event("tools", 30)
        assert {"i2c", "gpio", "sensor"} <= set(tools["names"])
        assert "exec" not in tools["names"]  # the mcp channel's default profile: no shell
        call = driver.next_event("call", 30)
        assert call["is_error"] is False, call
        high, low = (int(b, 16) for b in call["structured"]["bytes"].split())
        from edgeclaw.backends.sim.tmp102 import decode_temperature

        assert decode_temperature((high << 8) | low) == pytest.approx(21.5)

        daemon.kill()
        daemon.wait(10)
        gone = driver.next_event("offline", 10)
        assert gone == {
            "event": "offline",
            "server_id": "greenhouse-07-mcp",
            "server": "edgeclaw/greenhouse-07",
        }
    finally:
        driver.stop()
        stop_daemon(daemon)
        broker.stop()
    assert "Traceback" not in log.read_text(errors="replace")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-v"]))
