"""Scheduled jobs in a real daemon process: a real mosquitto, the real CLI, restarts and rollbacks.

Jobs here run every 2 s (the done-when `--every 1m` works the same, only slower),
with `automation.clock_sync = "off"`: this test machine's kernel reports its
clock unsynchronised, which would make jobs wait (tests/test_automation.py
covers that wait on a clock the test controls).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.daemon.control import ControlError, ask_status, socket_path
from edgeclaw.net.signing import envelope
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto

DEV = "dev-auto"
BASE = f"edgeclaw/{DEV}"
READ_TMP102 = '{"action":"read_word","bus":1,"address":72,"register":0}'


class DaemonProcess:
    """`python -m edgeclaw run` with the test's config and state directory."""

    def __init__(self, tmp_path: Path, config: str, env: dict[str, str] | None = None) -> None:
        self.tmp = tmp_path
        self.config_path = tmp_path / "edgeclaw.toml"
        self.config_path.write_text(config)
        self.state = tmp_path / "state"
        self.env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("EDGECLAW_", "NOTIFY_SOCKET", "INVOCATION_ID"))
        }
        self.env.update(
            EDGECLAW_STATE_DIR=str(self.state), EDGECLAW_CONFIG=str(self.config_path), **(env or {})
        )
        self.proc: subprocess.Popen[str] | None = None
        self.log = tmp_path / "daemon.log"

    def start(self) -> DaemonProcess:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgeclaw", "run"],
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("a"),
            text=True,
        )
        self.wait_ready()
        return self

    def status(self) -> dict[str, Any] | None:
        try:
            status = ask_status(socket_path(self.state), timeout_s=2)
        except ControlError:
            return None
        return status if status.get("state") == "serving" else None

    def wait_ready(self, within: float = 30) -> dict[str, Any]:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()
            status = self.status()
            if status is not None:
                return status
            time.sleep(0.1)
        raise AssertionError(f"the daemon did not become ready:\n{self.log.read_text()}")

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self.proc = None
        return code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def cli(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "edgeclaw", *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def cron_json(self, *args: str) -> dict[str, Any]:
        done = self.cli("cron", *args, "--json")
        return json.loads(done.stdout)


@pytest.fixture
def daemons():
    made: list[DaemonProcess] = []

    def make(tmp_path: Path, config: str, env: dict[str, str] | None = None) -> DaemonProcess:
        d = DaemonProcess(tmp_path, config, env)
        made.append(d)
        return d

    yield make
    for d in made:
        d.kill()


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


def mqtt_config(port: int, extra: str = "", mqtt: str = "") -> str:
    return (
        f'board = "sim"\ndevice_id = "{DEV}"\n'
        f"[mqtt]\nenabled = true\nport = {port}\ntelemetry_interval_s = 0\ndiscovery = false\n{mqtt}"
        '[automation]\nclock_sync = "off"\nlate_limit_s = 1\n' + extra
    )


@needs_mosquitto
async def test_a_tool_job_publishes_on_schedule_survives_a_restart_and_shows_its_runs(
    tmp_path, broker, daemons
):
    d = daemons(tmp_path, mqtt_config(broker.port)).start()
    async with Caller(broker.port, [f"{BASE}/sensors/air", f"{BASE}/events"]) as sub:
        added = d.cli(
            "cron", "add", "--every", "2s", "--tool", "i2c", "--args", READ_TMP102,
            "--to", "mqtt:sensors/air", "--name", "air",
        )  # fmt: skip
        assert added.returncode == 0, added.stderr
        assert "added" in added.stdout and "owner cli:" in added.stdout
        readings = await sub.answers(f"{BASE}/sensors/air", 2, within=15)
        first = readings[0].json
        assert first["ok"] is True and first["tool"] == "i2c" and first["name"] == "air"
        # The sim TMP102 answers with its temperature register: the reading is in the structured data.
        assert isinstance(first["data"], dict) and first["data"]
        # Not a burst: the schedule itself (one slot every 2 s) is checked on the job's runs below,
        # where a busy machine's late delivery does not move it.
        assert readings[1].at - readings[0].at >= 1.0
        # Each run went through the registry: its tool call is on `events` as the job's owner.
        events = [e.json for e in sub.on(f"{BASE}/events") if e.json.get("tool") == "i2c"]
        assert events and events[0]["caller"].startswith("cli:") and events[0]["session"].startswith("job:")
        assert d.stop() == 0
        stopped_with = len(sub.on(f"{BASE}/sensors/air"))
        await asyncio.sleep(
            3
        )  # an outage longer than late_limit_s: a slot is missed while the daemon is down
        d.start()
        more = await sub.answers(f"{BASE}/sensors/air", stopped_with + 2, within=15)
        assert len(more) >= stopped_with + 2
    runs = d.cron_json("runs", "air", "--limit", "50")["data"]["runs"]
    outcomes = [r["outcome"] for r in runs]
    assert outcomes.count("ok") >= 4 and all(r["duration_ms"] is not None for r in runs)
    # On schedule: the first two runs were due 2 s apart, and neither started before it was due.
    first_two = sorted((r for r in runs if r["outcome"] == "ok"), key=lambda r: r["run"])[:2]
    assert abs(first_two[1]["scheduled_at"] - first_two[0]["scheduled_at"] - 2.0) < 0.05, first_two
    assert all(r["started_at"] >= r["scheduled_at"] - 0.05 for r in first_two), first_two
    # The outage: its slots are one "missed" record (catch_up = skip), never a burst of runs.
    missed = [r for r in runs if r["outcome"] == "missed"]
    assert len(missed) == 1 and "catch_up = skip" in missed[0]["detail"]
    listed = d.cli("cron", "list")
    assert "air" in listed.stdout and "last ok" in listed.stdout
    shown = d.cli("status")
    assert "scheduler:" in shown.stdout and "jobs 1" in shown.stdout


@needs_mosquitto
async def test_signed_mqtt_admin_manages_jobs_as_the_key_and_unsigned_is_refused(tmp_path, broker, daemons):
    key = "admin-key-9f8e7d6c"
    daemons(
        # The admin topics take the admin key only (never the command key).
        tmp_path,
        mqtt_config(broker.port, mqtt='admin_secret_env = "EC_ADMIN"\n'),
        {"EC_ADMIN": key},
    ).start()
    topic = f"{BASE}/admin/cron"
    answers = "test/admin-answers"
    async with Caller(broker.port, [answers, f"{BASE}/sensors/#", f"{BASE}/status"]) as c:
        # The control socket answers before the MQTT connection is up: commands wait for `online`.
        await c.wait_for(lambda: any(m.json.get("state") == "online" for m in c.on(f"{BASE}/status")), 40)
        add = {"id": "a1", "action": "add", "every": "2s", "tool": "i2c", "args": json.loads(READ_TMP102),
               "to": "mqtt:sensors/mq"}  # fmt: skip
        await c.publish(topic, json.dumps(add), response_topic=answers)
        await c.publish(topic, envelope(key.encode(), topic, {**add, "id": "a2"}, response_topic=answers),
                        response_topic=answers)  # fmt: skip
        got = await c.answers(answers, 2)
        by_id = {a.json["id"]: a.json for a in got}
        assert by_id["a1"]["ok"] is False and by_id["a1"]["code"] == "bad_signature"
        assert by_id["a2"]["ok"] is True and by_id["a2"]["action"] == "add"
        job = by_id["a2"]["data"]["job"]
        assert job["owner"] == "mqtt:admin" and job["owner_channel"] == "mqtt-admin"
        [reading] = (await c.answers(f"{BASE}/sensors/mq", 1, within=10))[:1]
        assert reading.json["ok"] is True
        listed = {"id": "a3", "action": "list"}
        await c.publish(
            topic, envelope(key.encode(), topic, listed, response_topic=answers), response_topic=answers
        )
        got = await c.wait_for(lambda: [a for a in c.on(answers) if a.json.get("id") == "a3"])
        assert [j["id"] for j in got[0].json["data"]["jobs"]] == [job["id"]]
        runs = {"id": "a4", "action": "runs", "job": job["id"]}
        await c.publish(
            topic, envelope(key.encode(), topic, runs, response_topic=answers), response_topic=answers
        )
        got = await c.wait_for(lambda: [a for a in c.on(answers) if a.json.get("id") == "a4"])
        assert got[0].json["ok"] and got[0].json["data"]["runs"][0]["job"] == job["id"]
        # The gateway over its own admin topic: status of this very daemon.
        gw = f"{BASE}/admin/gateway"
        status = envelope(key.encode(), gw, {"id": "g1", "action": "status"}, response_topic=answers)
        await c.publish(gw, status, response_topic=answers)
        got = await c.wait_for(lambda: [a for a in c.on(answers) if a.json.get("id") == "g1"])
        assert got[0].json["ok"] and got[0].json["data"]["device"] == DEV
    # A plain tool call of gateway over MQTT is refused: the remote profile leaves it out. (Unsigned:
    # the admin key signs admin topics only, and without a command key callers are anonymous.)
    async with Caller(broker.port, ["test/plain"]) as c:
        call = {"id": "p1", "tool": "gateway", "args": {"action": "status"}, "ts": time.time()}
        await c.publish(f"{BASE}/tool/call", call, response_topic="test/plain")
        [answer] = await c.answers("test/plain", 1)
        assert answer.json["ok"] is False and answer.json["code"] == "policy"


def test_a_job_whose_owner_lost_a_right_is_refused_at_its_next_run(tmp_path, daemons):
    base = 'board = "sim"\n[automation]\nclock_sync = "off"\n'
    d = daemons(tmp_path, base).start()
    added = d.cli("cron", "add", "--every", "1s", "--tool", "i2c", "--args", READ_TMP102, "--name", "probe")
    assert added.returncode == 0, added.stderr

    def poll_runs(outcome: str) -> list[dict[str, Any]]:
        runs = d.cron_json("runs", "probe", "--limit", "50")["data"]["runs"]
        return [r for r in runs if r["outcome"] == outcome]

    deadline = time.monotonic() + 15
    while not poll_runs("ok"):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    # The local CLI (the job's owner) may now only manage jobs and the daemon: no hardware.
    narrowed = base + '[tools.channels.cli]\nallow = ["cron", "schedule", "gateway"]\n'
    args = json.dumps({"action": "config_apply", "content": narrowed})
    applied = d.cli("tool", "call", "gateway", args)
    assert applied.returncode == 0, applied.stderr
    assert "reloaded in place" in applied.stdout
    deadline = time.monotonic() + 15
    while not poll_runs("refused"):
        assert time.monotonic() < deadline
        time.sleep(0.3)
    refused = poll_runs("refused")[0]
    assert "not allowed" in refused["detail"] and "tools.channels.cli" in refused["detail"]
    # And the job cannot be made again with the right it no longer has.
    again = d.cli("cron", "add", "--every", "1s", "--tool", "i2c", "--args", READ_TMP102)
    assert again.returncode == 2 and "would be refused" in again.stderr


def test_config_apply_with_a_broken_file_rolls_back(tmp_path, daemons):
    base = 'board = "sim"\n[automation]\nclock_sync = "off"\n'
    d = daemons(tmp_path, base).start()
    pid = d.proc.pid

    def gateway(**args: Any) -> subprocess.CompletedProcess[str]:
        return d.cli("tool", "call", "gateway", json.dumps(args), "--json")

    # Not TOML, or a key the schema does not have: refused, nothing written.
    for broken in ('board = "sim\n', base + "[automation]\nlate_limit_s = -1\n", base + "bogus_key = 1\n"):
        done = gateway(action="config_apply", content=broken)
        assert done.returncode == 1, done.stdout
        assert "refused; nothing was written" in json.loads(done.stdout)["for_llm"]
        assert d.config_path.read_text() == base
    checked = gateway(action="config_validate", content='board = "sim\n')
    assert json.loads(checked.stdout)["ok"] is False
    # A file that passes every check but cannot start: a TLS CA file that is not there.
    port = 1
    starts_not = (
        base + f'[mqtt]\nenabled = true\nport = {port}\n[mqtt.tls]\nca_file = "{tmp_path}/no-such-ca.pem"\n'
    )
    done = gateway(action="config_apply", content=starts_not)
    assert done.returncode == 0, done.stdout
    assert "restored if the daemon does not come back healthy" in json.loads(done.stdout)["for_llm"]
    # The daemon restarts on the new file, fails, restores the old one and starts again on it.
    deadline = time.monotonic() + 60
    while True:
        marker = d.config_path.with_name("edgeclaw.toml.apply")
        if d.config_path.read_text() == base and not marker.exists() and d.status() is not None:
            break
        assert time.monotonic() < deadline, d.log.read_text()
        time.sleep(0.2)
    assert d.proc.pid == pid and d.proc.poll() is None  # restarted in place, not left dead
    assert d.config_path.with_name("edgeclaw.toml.previous").read_text() == base
    log = d.log.read_text()
    assert "cannot use the TLS files" in log and "rolled back" in log
    assert d.stop() == 0


def test_config_apply_of_a_good_file_restarts_onto_it(tmp_path, daemons):
    base = 'board = "sim"\n[automation]\nclock_sync = "off"\n'
    d = daemons(tmp_path, base).start()
    new = base.replace('board = "sim"', 'board = "sim"\ndevice_id = "renamed-07"')
    done = d.cli("tool", "call", "gateway", json.dumps({"action": "config_apply", "content": new}))
    assert done.returncode == 0 and "restarting" in done.stdout, done.stderr
    deadline = time.monotonic() + 60
    while True:
        status = d.status()
        if status is not None and status.get("device") == "renamed-07":
            break
        assert time.monotonic() < deadline, d.log.read_text()
        time.sleep(0.2)
    # Kept once healthy for gateway.health_window_s (10 s) after coming up: then the trial marker goes.
    marker = d.config_path.with_name("edgeclaw.toml.apply")
    deadline = time.monotonic() + 60
    while marker.exists():
        assert time.monotonic() < deadline, d.log.read_text()
        time.sleep(0.2)
    assert "in force" in d.log.read_text()
    logs = d.cli("tool", "call", "gateway", '{"action":"logs","lines":20}')
    assert logs.returncode == 0 and "ready" in logs.stdout
    with contextlib.suppress(Exception):
        d.stop()
