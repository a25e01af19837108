"""Memory through the real daemon (`edgeclaw run`) over MQTT: it survives a restart, and stays per caller."""

from __future__ import annotations

import json
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.net.signing import envelope
from tests.llm_server import ScriptedLLM, openai_text, openai_tools
from tests.mqtt_support import Caller, Mosquitto, daemon_env, needs_mosquitto, run_daemon

pytestmark = needs_mosquitto

DEV = "dev-memory"
BASE = f"edgeclaw/{DEV}"


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def write_config(tmp_path: Path, port: int, llm: ScriptedLLM, callers: str = "") -> dict[str, str]:
    (tmp_path / "edgeclaw.toml").write_text(
        f'board = "sim"\ndevice_id = "{DEV}"\n'
        '[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\n'
        # Embeddings from the same server: memory_search is hybrid.
        '[memory]\nembedder = "local"\nembedding_model = "fake-embed"\n'
        # MQTT callers are read-only unless the config widens their channel (docs/configuration.md).
        '[tools]\nrate_limit = 0\n[tools.channels.mqtt]\nprofile = "full"\n'
        f"[mqtt]\nenabled = true\nport = {port}\ntelemetry_interval_s = 0\ndiscovery = false\n" + callers
    )
    return daemon_env(tmp_path / "state", tmp_path / "edgeclaw.toml", **KEYS)


# Two callers, each with its own key: two identities (a declared sender is only a label).
KEYS = {"EC_KEY_ALICE": "alice-key-4f1a9c", "EC_KEY_BOB": "bob-key-7d2e5b"}
CALLERS = "".join(
    f'[callers.{name}]\nsecret_env = "EC_KEY_{name.upper()}"\nroles = ["operate"]\n'
    for name in ("alice", "bob")
)


def start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return run_daemon(env, log)


async def online(c: Caller) -> None:
    status = f"{BASE}/status"
    await c.wait_for(lambda: c.on(status) and c.on(status)[-1].json["state"] == "online", 30, "online")


async def stop(proc: subprocess.Popen[bytes]) -> None:
    import asyncio

    proc.send_signal(signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 30) == 0


async def chat(c: Caller, text: str, session: str, sender: str, n: int) -> dict[str, Any]:
    await c.publish(f"{BASE}/chat/in", {"text": text, "session": session, "sender": sender})
    answers = await c.answers(f"{BASE}/chat/out", n, within=30)
    return answers[n - 1].json


def tool_results(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "tool"]


async def test_a_fact_stored_in_one_turn_is_found_by_a_new_session_after_a_restart(tmp_path, broker, llm):
    env = write_config(tmp_path, broker.port, llm)
    log = tmp_path / "daemon.log"
    fact = {"key": "greenhouse_fan", "content": "The greenhouse fan is on GPIO 22.", "category": "core"}
    llm.reply(openai_tools(("memory_store", fact)), openai_text("Noted: the fan is on GPIO 22."))
    topics = [f"{BASE}/status", f"{BASE}/chat/out"]
    proc = start(env, log)
    try:
        async with Caller(broker.port, topics) as c:
            await online(c)
            first = await chat(c, "Remember: the greenhouse fan is on GPIO 22.", "s1", "tech", 1)
            assert first["text"] == "Noted: the fan is on GPIO 22."
        stored = tool_results(llm.requests[1])
        assert "stored 'greenhouse_fan' in your memory" in stored[0]
        await stop(proc)

        llm.reply(
            openai_tools(("memory_search", {"query": "which pin is the ventilator on"})),
            openai_text("GPIO 22."),
        )
        proc = start(env, log)
        async with Caller(broker.port, topics) as c:
            await online(c)
            second = await chat(c, "Which pin is the ventilator on?", "s2", "tech", 1)
            assert second["text"] == "GPIO 22." and second["session"].endswith("s2")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    [found] = tool_results(llm.requests[3])
    # Found by meaning ("ventilator" is not a word of the fact) in the hybrid search, after the restart.
    assert "memory/greenhouse_fan.md" in found and "The greenhouse fan is on GPIO 22." in found
    assert "(hybrid search" in found
    # The new session is new: the first session's messages are not in its history.
    assert not any("Remember:" in str(m.get("content")) for m in llm.requests[2]["messages"])
    assert "Traceback" not in log.read_text(errors="replace")


async def test_memory_md_written_over_mqtt_by_one_caller_is_invisible_to_another(tmp_path, broker, llm):
    env = write_config(tmp_path, broker.port, llm, CALLERS)
    log = tmp_path / "daemon.log"
    answers = "test/answers"
    proc = start(env, log)

    async def call(c: Caller, n: int, sender: str, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        request = {"id": f"r{n}", "tool": tool, "args": args, "sender": sender}
        topic = f"{BASE}/tool/call"
        payload: Any = request
        if sender:  # signed with the caller's own key, naming it
            secret = KEYS[f"EC_KEY_{sender.upper()}"].encode()
            payload = envelope(secret, topic, request, response_topic=answers, key=sender)
        await c.publish(topic, payload, response_topic=answers)
        got = await c.answers(answers, n, within=30)
        return next(m.json for m in got if m.json["id"] == f"r{n}")

    try:
        async with Caller(broker.port, [f"{BASE}/status", answers]) as c:
            await online(c)
            wrote = await call(
                c, 1, "alice", "write_file", {"path": "MEMORY.md", "content": "alice: valve 3 sticks"}
            )
            assert wrote["ok"], wrote
            own = await call(c, 2, "alice", "read_file", {"path": "MEMORY.md"})
            assert own["ok"] and "alice: valve 3 sticks" in own["for_llm"]
            other = await call(c, 3, "bob", "read_file", {"path": "MEMORY.md"})
            assert not other["ok"] and "no such file" in other["error"]
            searched = await call(c, 4, "bob", "memory_search", {"query": "valve sticks"})
            assert searched["ok"] and "valve 3" not in searched["for_llm"]
            listed = await call(c, 5, "bob", "list_files", {"path": "."})
            assert "MEMORY.md" not in listed["for_llm"]
            # Where callers have keys, an unsigned one is nobody: refused.
            anonymous = await call(c, 6, "", "read_file", {"path": "MEMORY.md"})
            assert not anonymous["ok"] and anonymous["code"] == "bad_signature"
        await stop(proc)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert not (tmp_path / "state" / "workspace" / "MEMORY.md").exists()
    events = json.dumps(log.read_text(errors="replace"))
    assert "Traceback" not in events
