"""What `edgeclaw --version` and the daemon's start load: only what every start needs.

A module that only some tools, transports or channels use is imported when one of them is first
used, so a small board does not pay for it in start-up time and memory. Each check runs the real
entry point in a fresh interpreter and reads its `sys.modules`: `--version` when it has printed,
the daemon once it has told systemd READY=1 (on $NOTIFY_SOCKET, as `edgeclaw run` under systemd).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from tests.mqtt_support import Caller, Mosquitto, daemon_env, needs_mosquitto

# Modules `--version` must not load: it prints a constant, so no parser, no config, no event loop.
NOT_FOR_VERSION = ("argparse", "asyncio", "json", "logging", "edgeclaw.cli", "edgeclaw.config")

# Modules the daemon on the sim board must not load before its first request: each serves only
# some tools, transports or channels, and is imported when one of them runs.
NOT_AT_START = (
    "httpx",  # LLM providers, web tools, notifications, MCP over HTTP: on their first request
    "edgeclaw.backends.mcp",  # the MCP client: only with [mcp.servers.*] (none configured here)
    "edgeclaw.tools.mcp.bridge",
    "click",  # httpx's command line, dragged in by a top-level `import httpx`
    "edgeclaw.backends.web.extract",  # web_fetch's body readers: on the first fetch
    "edgeclaw.backends.web.body",
    "edgeclaw.backends.web.html_tree",
    # The tool families built on first use (edgeclaw.tool_groups), and what only they import:
    "edgeclaw.tools.hardware",
    "edgeclaw.tools.media",
    "edgeclaw.backends.media",
    "edgeclaw.tools.ui",  # canvas and screenshot, and the display drivers and Pillow they draw with
    "edgeclaw.backends.display",
    "PIL",
    "edgeclaw.tools.web.fetch",
    "edgeclaw.tools.web.search",
    "edgeclaw.tools.web.http_request",
    "edgeclaw.tools.messaging",
    "edgeclaw.tools.sessions.send",
    "edgeclaw.tools.vcs",  # git: on its first call
    "edgeclaw.tools.integrations",  # composio: on its first call
    "edgeclaw.daemon.metrics",  # Prometheus metrics: only with [metrics] listen
    "edgeclaw.net.prometheus_text",
    # Memory, context files and skills (daemon.memory_service): on the first fs or memory call.
    "edgeclaw.daemon.memory_build",
    "edgeclaw.store.memory",
    "edgeclaw.tools.memory",
    "edgeclaw.tools.skills",
    # Receiving, checking and installing an update: on the first update (a start reads only the slot
    # to launch and the trial, edgeclaw.admin.update_slots).
    "edgeclaw.admin.update",
    # The console's PIN hashes: only with a login hash configured.
    "edgeclaw.config.pin_hash",
    # The C library is the interpreter's own (clock steps, clock sync): no ldconfig run to find it.
    "ctypes.util",
)
# With MQTT off, nothing of it either; nor zipfile (reading an update's wheel), which MQTT's Home
# Assistant entities bring at start through gpiozero (importlib.metadata) when they read the pins.
MQTT_MODULES = ("aiomqtt", "paho", "edgeclaw.channels.mqtt", "zipfile")
# Nor what the MQTT client brings (paho imports them at start) and edgeclaw otherwise needs only on
# first use: ids of approvals, jobs, processes and temporary files (secrets), digests (hashlib), the
# sandbox's first probe (tempfile).
MQTT_CLIENT_STDLIB = ("hashlib", "secrets", "random", "tempfile")
# The agent loop and its subagents: built by the first chat, spawn or sessions_send turn (or at
# start when a previous run left subagents to recover), even with MQTT on.
AGENT_LOOP_MODULES = ("edgeclaw.agent.loop", "edgeclaw.agent.subagents", "edgeclaw.tools.sessions.subagents")
# With no channel up (MQTT off), neither the messages a channel and the agent exchange (the scheduler
# and the heartbeat import them when they hand a prompt to the agent) nor `platform` (the gateway
# tool's `version` action; MQTT's status and its client use it at start).
CHANNEL_MODULES = ("edgeclaw.agent.channel", "platform")

# Runs the real entry point and, once systemd would hear READY=1, writes sys.modules and stops
# the daemon the way systemd does (SIGTERM).
DAEMON_PROBE = r"""
import json, os, signal, socket, sys, threading
out, notify = sys.argv[1], sys.argv[2]
go = sys.argv[3] if len(sys.argv) > 3 else None  # a file: wait for it after READY=1, then write
sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
sock.bind(notify)
os.environ["NOTIFY_SOCKET"] = notify

def watch():
    while b"READY=1" not in sock.recv(4096).split(b"\n"):
        pass
    while go and not os.path.exists(go):
        threading.Event().wait(0.05)
    deny = sys.modules.get("edgeclaw.tools.runtime.denylist")
    compiled = [g.name for g in deny.DENY_GROUPS if "patterns" in vars(g)] if deny else []
    with open(out, "w") as f:
        json.dump({"modules": sorted(sys.modules), "deny_groups_compiled": compiled}, f)
    os.kill(os.getpid(), signal.SIGTERM)

threading.Thread(target=watch, daemon=True).start()
sys.argv = ["edgeclaw", "run", "--board", "sim"]
from edgeclaw.__main__ import main
raise SystemExit(main())
"""

VERSION_PROBE = r"""
import sys
sys.argv = ["edgeclaw", "--version"]
from edgeclaw.__main__ import main
status = main()
print(" ".join(sorted(sys.modules)))
raise SystemExit(status)
"""


def loaded(modules: list[str], names: tuple[str, ...]) -> list[str]:
    """The modules of `modules` that are one of `names` or inside one of those packages."""
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def daemon_at_ready(tmp_path: Path, config: str) -> dict[str, list[str]]:
    """The daemon's `modules` and the deny groups whose patterns it had compiled, at READY=1."""
    (tmp_path / "edgeclaw.toml").write_text('board = "sim"\ndevice_id = "startup"\n' + config)
    env = daemon_env(tmp_path / "state", tmp_path / "edgeclaw.toml")
    out = tmp_path / "modules.json"
    proc = subprocess.run(
        [sys.executable, "-c", DAEMON_PROBE, str(out), str(tmp_path / "notify.sock")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.exists(), f"the daemon never said READY=1 (exit {proc.returncode}):\n{proc.stderr}"
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def test_version_prints_without_the_parser_config_or_event_loop(state_env: dict[str, str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-c", VERSION_PROBE], env=state_env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    from edgeclaw import __version__

    version_line, modules_line = proc.stdout.splitlines()
    assert version_line == f"edgeclaw {__version__}"
    assert loaded(modules_line.split(), NOT_FOR_VERSION) == []


def test_version_and_help_still_answer_through_the_console_script(run_cli) -> None:
    from edgeclaw import __version__

    assert run_cli("--version").stdout == f"edgeclaw {__version__}\n"
    shown = run_cli("--help")
    assert shown.returncode == 0 and "--version" in shown.stdout
    # Anything else goes to the parser, which answers as before (an abbreviation, a wrong option).
    assert run_cli("--vers").stdout == f"edgeclaw {__version__}\n"
    assert run_cli("--bogus").returncode == 2


def test_daemon_without_mqtt_starts_without_per_tool_or_mqtt_modules(tmp_path: Path) -> None:
    seen = daemon_at_ready(tmp_path, "[mqtt]\nenabled = false\n")
    assert "edgeclaw.daemon.lifecycle" in seen["modules"]  # the probe did watch the daemon
    absent = NOT_AT_START + MQTT_MODULES + MQTT_CLIENT_STDLIB + AGENT_LOOP_MODULES + CHANNEL_MODULES
    assert loaded(seen["modules"], absent) == []


def test_exec_deny_patterns_are_compiled_on_the_first_check_not_at_start(tmp_path: Path) -> None:
    seen = daemon_at_ready(tmp_path, "")
    assert "edgeclaw.tools.runtime.denylist" in seen["modules"]  # exec is registered...
    assert seen["deny_groups_compiled"] == []  # ...but has checked no command yet
    from edgeclaw.tools.runtime.denylist import DenyList

    # The first check compiles them, and still refuses what it refused before.
    hits = DenyList().check("rm -rf /")
    assert [h.group.name for h in hits] == ["destructive-ops"]


@needs_mosquitto
def test_daemon_with_mqtt_starts_without_per_tool_modules(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        modules = daemon_at_ready(
            tmp_path, f'[mqtt]\nenabled = true\nhost = "127.0.0.1"\nport = {broker.port}\n'
        )["modules"]
    finally:
        broker.stop()
    assert "edgeclaw.channels.mqtt.channel" in modules
    assert loaded(modules, NOT_AT_START + AGENT_LOOP_MODULES) == []


def modules_after(
    tmp_path: Path, device: str, then: Callable[[int], Awaitable[Any]]
) -> tuple[list[str], Any]:
    """The daemon's modules once `then(broker_port)` is done (after READY=1, on a broker of its
    own), and what `then` returned."""
    broker = Mosquitto(tmp_path / "broker").start()
    (tmp_path / "edgeclaw.toml").write_text(
        f'board = "sim"\ndevice_id = "{device}"\n'
        f'[mqtt]\nenabled = true\nhost = "127.0.0.1"\nport = {broker.port}\n'
    )
    env = daemon_env(tmp_path / "state", tmp_path / "edgeclaw.toml")
    out, go = tmp_path / "modules.json", tmp_path / "go"
    command = [sys.executable, "-c", DAEMON_PROBE, str(out), str(tmp_path / "notify.sock"), str(go)]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    try:
        result = asyncio.run(then(broker.port))
        go.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        broker.stop()
    assert out.exists(), err
    return json.loads(out.read_text())["modules"], result


@needs_mosquitto
def test_home_assistant_entities_published_load_no_update_installer(tmp_path: Path) -> None:
    """Home Assistant's entities, the firmware one included, are published from what a start has:
    showing the installed version (and an offer, when an admin made one) needs no wheel checking."""

    async def entities_published(port: int) -> None:
        async with Caller(port, ["edgeclaw/idle/ha/+/state"]) as watcher:
            await watcher.answers("edgeclaw/idle/ha/update/state", 1, within=60)

    modules, _ = modules_after(tmp_path, "idle", entities_published)
    assert "edgeclaw.channels.mqtt.homeassistant" in modules
    assert loaded(modules, ("edgeclaw.admin.update",)) == []


@needs_mosquitto
def test_a_chat_on_a_device_without_a_model_builds_the_loop_but_not_the_memory(tmp_path: Path) -> None:
    """The loop answers (no model: the commands it takes); memory is built by the first prompt that
    needs it, and this chat never builds one."""

    async def chat(port: int) -> str:
        async with Caller(port, ["reply/chat", "edgeclaw/chat/status"]) as caller:
            await caller.wait_for(
                lambda: any(m.json.get("state") == "online" for m in caller.on("edgeclaw/chat/status")),
                60,
                "the device online",
            )
            await caller.publish(
                "edgeclaw/chat/chat/in", "hello", response_topic="reply/chat", correlation=b"1"
            )
            return json.loads((await caller.answers("reply/chat", 1, within=60))[0].payload)["text"]

    modules, text = modules_after(tmp_path, "chat", chat)
    assert "No language model is configured" in text
    assert "edgeclaw.agent.loop" in modules
    memory = ("edgeclaw.daemon.memory_build", "edgeclaw.store.memory", "edgeclaw.tools.skills")
    assert loaded(modules, memory) == []
