"""Subagents, sessions_send and message through the real front ends: `edgeclaw chat --message`, the
serial console over a pty, `edgeclaw run` with a real mosquitto (killed and restarted)."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools, system_text, task_is

BME_TASK = "Read the BME280 chip id (register 0xD0 at 0x76 on bus 1)"
LS_TASK = "List the files in the workspace"
BME_READ = {"action": "read_block", "bus": 1, "address": "0x76", "register": "0xD0", "length": 1}


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def last_user(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "user"][-1]["content"]


def tool_result_text(body: dict[str, Any]) -> str:
    return [m for m in body["messages"] if m["role"] == "tool"][-1]["content"]


def quoting(body: dict[str, Any]) -> Scripted:
    """A model that quotes each subagent result of the notice it was sent."""
    found = re.findall(r"subagent \d+ \((\w+)\): completed\n  (.+)", last_user(body))
    return openai_text("; ".join(f"{label}: {result}" for label, result in found))


def echoing_child(body: dict[str, Any]) -> Scripted:
    """A child's last step: it answers with what its tool returned."""
    return openai_text(" | ".join(tool_result_text(body).strip().splitlines()[:3]))


# -- done when: edgeclaw chat --message --------------------------------------------------------------
def test_chat_message_spawns_two_children_and_the_final_answer_quotes_both(run_cli, state_env, llm):
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 10\n'
    )
    workspace = Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "greenhouse-log.csv").write_text("t,temp\n")
    llm.route(task_is(BME_TASK), openai_tools(("i2c", BME_READ)), echoing_child)
    llm.route(task_is(LS_TASK), openai_tools(("list_files", {})), echoing_child)
    llm.reply(
        openai_tools(
            ("sessions_spawn", {"task": BME_TASK, "label": "bme280"}),
            ("sessions_spawn", {"task": LS_TASK, "label": "files"}),
        ),
        openai_text("Asked two subagents; results follow."),
        quoting,
    )
    out = run_cli("chat", "--message", "read the BME280 and list the workspace", timeout=60)
    assert out.returncode == 0, out.stderr
    first, final = out.stdout.strip().splitlines()
    assert first == "Asked two subagents; results follow."
    # The children really read the sim board and the workspace, and the last answer quotes both (in the
    # order they finished, which two children running at once do not fix).
    quotes = sorted(final.split("; "))
    assert quotes[0] == "bme280: 0x76 register 0xd0 on bus 1, 1 bytes: 60"
    assert quotes[1].startswith("files: [.: 1 entries] | greenhouse-log.csv")
    children = [r for r in llm.requests if "## Subagent" in system_text(r)]
    assert len(children) == 4


# -- the console --------------------------------------------------------------------------------------
from tests.test_console import PIN, PROMPT, PtyPort, login, run, unwrapped  # noqa: E402


@pytest.fixture
def console(tmp_path: Path, request: pytest.FixtureRequest):
    from tests.test_console import ConsoleDaemon

    started: list[tuple[Any, list[PtyPort]]] = []

    def make(n: int = 1, **config: Any) -> tuple[Any, list[PtyPort]]:
        from tests.test_console import PIN_HASH

        llm: ScriptedLLM = request.getfixturevalue("llm")
        ports = [PtyPort(tmp_path / f"ttySUB{i}") for i in range(n)]
        cfg: dict[str, Any] = {
            "board": "sim",
            "device_id": "bench-01",
            "state_dir": str(tmp_path / "state"),
            "console": {
                "ports": [str(p.link) for p in ports],
                "login_hash": PIN_HASH,
                "login_delay_s": 0,
                "reconnect_min_s": 0.05,
                "reconnect_max_s": 0.2,
            },
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {
                "local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1", "timeout_s": 15}
            },
            **config,
        }
        daemon = ConsoleDaemon(cfg).start()
        started.append((daemon, ports))
        return daemon, ports

    yield make
    for daemon, ports in started:
        daemon.stop()
        for port in ports:
            port.vanish()


def test_a_childs_exec_approval_is_asked_and_answered_on_the_parents_console(console, llm, tmp_path):
    marker = tmp_path / "state" / "workspace" / "approved.txt"
    command = "touch approved.txt"
    llm.route(task_is("Mark the bench"), openai_tools(("exec", {"command": command})), echoing_child)
    llm.reply(
        openai_tools(("sessions_spawn", {"task": "Mark the bench", "mode": "run"})),
        lambda body: openai_text("child said: " + json.loads(tool_result_text(body))[0]["state"]),
    )
    _, (port,) = console()
    term = port.terminal()
    login(term)
    term.send("mark the bench\r")
    # The child's command (not on the allowlist) is put to the technician on this console.
    term.expect("Approval needed: exec wants to run:")
    term.expect_exact(command)
    term.expect(r"asked by subagent 1 of session console:")
    term.expect(r"\[o/w/d\]")
    term.send("o")
    term.expect("Allowed once.")
    term.expect("child said: completed")
    term.expect_exact(PROMPT)
    assert marker.exists()


def test_a_childs_approval_after_its_parents_turn_ended_is_refused_with_the_reason(console, llm):
    # The child's command comes once the parent's turn has ended (its model holds the answer till then).
    parent_done = threading.Event()

    def late_exec(body: dict[str, Any]) -> Scripted:
        parent_done.wait(60)
        return Scripted(body=openai_tools(("exec", {"command": "touch later.txt"})).body)

    llm.route(task_is("Touch later"), late_exec, echoing_child)
    llm.reply(openai_tools(("spawn", {"task": "Touch later"})), openai_text("started"), openai_text("noted"))
    daemon, (port,) = console()
    term = port.terminal()
    login(term)
    assert "started" in run(term, "start it")  # the prompt is back: the parent's turn has ended
    parent_done.set()
    manager = daemon.runtime.subagents
    deadline = time.monotonic() + 30
    while manager.store.get(1).state != "completed":
        assert time.monotonic() < deadline
        time.sleep(0.05)
    child_exec = [r for r in llm.requests if "## Subagent" in system_text(r)][-1]
    assert "is not in a turn" in tool_result_text(child_exec)


def test_sessions_send_into_a_console_session_shows_on_its_pty(console, llm):
    daemon, (bench, desk) = console(2)
    bench_term, desk_term = bench.terminal(), desk.terminal()
    login(bench_term)
    login(desk_term)
    target = f"console:{bench.link}"
    llm.reply(
        openai_tools(("sessions_send", {"session": target, "text": "Desk: please check fan 2."})),
        openai_text("Sent."),
    )
    assert "Sent." in run(desk_term, "tell the bench to check fan 2")
    bench_term.expect("Desk: please check fan 2.")
    assert f"[message from agent main, session console:{desk.link}]" in unwrapped(bench_term.before)
    # And it is in the bench's conversation, for its next turn.
    history = daemon.runtime.sessions.load(target)
    assert "please check fan 2" in json.loads(history[-1][1])["content"]


def test_message_to_a_console_port(console, llm):
    from edgeclaw.tools.base import ToolContext

    daemon, (port,) = console()
    term = port.terminal()
    term.expect("PIN: ")
    # Nothing is shown to whoever stands at a port nobody logged in on.
    before = daemon.call(
        daemon.runtime.registry.execute(
            "message",
            {"channel": "console", "target": str(port.link), "text": "secret-ish"},
            ToolContext(channel="cli", session_key="cli:ops", caller="cli:ops"),
        )
    )
    assert not before.ok and f"nobody is logged in on console {port.link}" in before.error
    term.send(PIN + "\r")
    term.expect("Logged in.")
    term.expect_exact(PROMPT)
    outcome = daemon.call(
        daemon.runtime.registry.execute(
            "message",
            {"channel": "console", "target": str(port.link), "text": "Fan 2 stopped.", "title": "alarm"},
            ToolContext(channel="cli", session_key="cli:ops", caller="cli:ops"),
        )
    )
    assert outcome.ok, outcome.error
    term.expect("Fan 2 stopped.")
    assert "[message from agent main, session cli:ops] alarm" in unwrapped(term.before)


# -- edgeclaw run with MQTT: message topics, killed with a child running --------------------------------
from tests.mqtt_support import Mosquitto, needs_mosquitto  # noqa: E402


def _daemon_config(tmp_path: Path, broker: Mosquitto, llm: ScriptedLLM) -> Path:
    path = tmp_path / "edgeclaw.toml"
    path.write_text(
        f'board = "sim"\ndevice_id = "dev1"\nstate_dir = "{tmp_path / "state"}"\nshutdown_grace_s = 1\n'
        '[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 30\n'
        f"[mqtt]\nenabled = true\nport = {broker.port}\ntelemetry_interval_s = 0\ndiscovery = false\n"
        '[tools.channels.mqtt]\nprofile = "full"\n'
        "[tools.subagents]\nannounce_debounce_s = 0.1\n"
    )
    return path


def _start(config: Path, tmp_path: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EDGECLAW_", "NOTIFY_SOCKET"))}
    env["EDGECLAW_STATE_DIR"] = str(tmp_path / "state")
    return subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run", "--config", str(config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "daemon.log", "ab"),
    )


async def _collect(port: int, topics: list[str], out: list[tuple[str, dict[str, Any]]], ready: asyncio.Event):
    import aiomqtt

    async with aiomqtt.Client("127.0.0.1", port, identifier=f"watch-{os.getpid()}") as client:
        for topic in topics:
            await client.subscribe(topic, qos=1)
        ready.set()
        async for message in client.messages:
            out.append((message.topic.value, json.loads(message.payload)))


async def _publish(port: int, topic: str, payload: dict[str, Any]) -> None:
    import aiomqtt

    async with aiomqtt.Client("127.0.0.1", port) as client:
        await client.publish(topic, json.dumps(payload), qos=1)


def _online(seen: list[tuple[str, dict[str, Any]]]) -> bool:
    """Whether the daemon said it is online: it has subscribed to its commands by then (its control
    socket comes earlier, before the MQTT connection is up)."""
    return any(t == "edgeclaw/dev1/status" and p.get("state") == "online" for t, p in seen)


async def _until(predicate: Callable[[], bool], what: str, within_s: float = 20) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


@needs_mosquitto
async def test_message_to_an_mqtt_target_reaches_a_subscriber(tmp_path, llm):
    broker = Mosquitto(tmp_path / "broker").start()
    proc = _start(_daemon_config(tmp_path, broker, llm), tmp_path)
    seen: list[tuple[str, dict[str, Any]]] = []
    ready = asyncio.Event()
    watcher = asyncio.create_task(
        _collect(
            broker.port,
            ["edgeclaw/dev1/message/#", "edgeclaw/dev1/chat/out", "edgeclaw/dev1/status"],
            seen,
            ready,
        )
    )
    try:
        await asyncio.wait_for(ready.wait(), 10)
        llm.reply(
            openai_tools(
                (
                    "message",
                    {
                        "channel": "mqtt",
                        "target": "alerts/greenhouse",
                        "text": "Fan 2 stopped",
                        "priority": 1,
                    },
                )
            ),
            openai_text("Alert sent."),
        )
        await _until(lambda: _online(seen), "the daemon online", within_s=60)
        await _publish(
            broker.port, "edgeclaw/dev1/chat/in", {"id": "c1", "text": "raise the alarm", "session": "ops"}
        )
        await _until(lambda: any(t == "edgeclaw/dev1/chat/out" for t, _ in seen), "the chat answer")
        messages = [p for t, p in seen if t == "edgeclaw/dev1/message/alerts/greenhouse"]
        assert len(messages) == 1
        assert messages[0]["text"] == "Fan 2 stopped" and messages[0]["priority"] == 1
        assert messages[0]["from"] == "agent main, session mqtt:anonymous:ops"
    finally:
        watcher.cancel()
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        broker.stop()


@needs_mosquitto
async def test_killed_with_a_child_running_the_parent_is_told_interrupted_after_the_restart(tmp_path, llm):
    broker = Mosquitto(tmp_path / "broker").start()
    config = _daemon_config(tmp_path, broker, llm)
    llm.route(task_is("Calibrate"), Scripted(hang_s=60, body={}))
    llm.reply(
        openai_tools(("sessions_spawn", {"task": "Calibrate the ADC", "label": "adc"})),
        openai_text("Calibration started."),
        lambda body: openai_text("Told: " + last_user(body).splitlines()[1]),
    )
    seen: list[tuple[str, dict[str, Any]]] = []
    ready = asyncio.Event()
    watcher = asyncio.create_task(
        _collect(broker.port, ["edgeclaw/dev1/chat/out", "edgeclaw/dev1/status"], seen, ready)
    )
    proc = _start(config, tmp_path)
    try:
        await asyncio.wait_for(ready.wait(), 10)
        await _until(lambda: _online(seen), "the daemon online", within_s=60)
        await _publish(
            broker.port, "edgeclaw/dev1/chat/in", {"id": "c1", "text": "calibrate", "session": "ops"}
        )
        await _until(
            lambda: any(p.get("text") == "Calibration started." for _, p in seen), "the first answer"
        )
        await _until(
            lambda: any("## Subagent" in system_text(r) for r in llm.requests), "the child's request"
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc = _start(config, tmp_path)
        told_yet = lambda: any(p.get("text", "").startswith("Told:") for _, p in seen)  # noqa: E731
        await _until(told_yet, "the notice", within_s=30)
        told = next(p for _, p in seen if p.get("text", "").startswith("Told:"))
        assert (
            told["text"] == "Told: subagent 1 (adc): interrupted" and told["session"] == "mqtt:anonymous:ops"
        )
        notice = last_user(llm.requests[-1])
        assert "the daemon stopped while this subagent ran" in notice
    finally:
        watcher.cancel()
        proc.send_signal(signal.SIGTERM)
        proc.wait(15)
        broker.stop()
