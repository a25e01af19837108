"""The update lock (STATE/update.lock): an update arriving while it is held is checked, deferred,
shown in the status, and applied once it frees; `force` applies it at once; `update_defer_max_s`
gives it up. The holders are real: a `flock(1)` process, a custom tool's call through the registry,
a daemon on a real broker."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.admin.update import apply_update, update_state
from edgeclaw.admin.update_defer import UpdateDeferral
from edgeclaw.config.schema import GatewayConfig
from edgeclaw.store.update_lock import UpdateLock
from tests.mqtt_support import needs_mosquitto, poll
from tests.test_admin_security import make_wheel, runtime_for, upload

UNSIGNED = GatewayConfig(allow_unsigned_updates=True, update_defer_max_s=60)


def wheel(version: str = "9.9.9") -> bytes:
    return make_wheel({"edgeclaw/__init__.py": f"__version__ = {version!r}\n"}, version)


class Device:
    """apply_update as the daemon's gateway hook calls it: the real lock, the real deferral."""

    def __init__(self, tmp_path: Path, gateway: GatewayConfig = UNSIGNED) -> None:
        self.runtime = runtime_for(tmp_path, gateway)
        self.runtime.state_dir.mkdir(parents=True, exist_ok=True)
        self.lock = UpdateLock(self.runtime.state_dir)
        self.deferral = UpdateDeferral(
            self.lock, self.runtime.state_dir, self.runtime.audit, lambda: gateway.update_defer_max_s
        )
        self.deferral.poll_s = 0.1
        self.restarts: list[str] = []

    async def update(self, data: bytes, name: str = "w1", **more: Any) -> dict[str, Any]:
        args = {**upload(self.runtime, data, name), **more}
        return await apply_update(self.runtime, args, "mqtt:admin", self.restarts.append, self.deferral)

    def installed(self) -> list[str]:
        venvs = self.runtime.state_dir / "venvs"
        return [p.parent.name for p in venvs.glob("*/.installed") if not p.parent.is_symlink()]

    def kept_files(self) -> list[Path]:
        return sorted((self.runtime.state_dir / "venvs").glob("deferred-*"))

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [e for e in self.runtime.audit.events if e["kind"] == kind]


def free_to(path: Path, mode: str) -> bool:
    """Whether another process could take the lock now (`flock -n MODE`)."""
    return subprocess.run(["flock", "-n", mode, str(path), "true"]).returncode == 0


def release(proc: subprocess.Popen[bytes]) -> None:
    """The holder and its command gone (the command holds the lock too: it inherited it)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()


def outside_holder(path: Path, *mode: str) -> subprocess.Popen[bytes]:
    """`flock [MODE] PATH sleep 60`, once it holds the lock."""
    proc = subprocess.Popen(["flock", *mode, str(path), "sleep", "60"], start_new_session=True)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not free_to(path, "-x"):
            return proc
        time.sleep(0.05)
    proc.kill()
    raise AssertionError("flock never took the lock")


@pytest.fixture
def holders():
    started: list[subprocess.Popen[bytes]] = []

    def start(path: Path, *mode: str) -> subprocess.Popen[bytes]:
        proc = outside_holder(path, *mode)
        started.append(proc)
        return proc

    yield start
    for proc in started:
        release(proc)


async def test_an_update_waits_for_an_outside_flock_and_is_applied_when_it_exits(tmp_path, holders):
    d = Device(tmp_path)
    flock = holders(d.lock.path)
    answer = await d.update(wheel())
    assert answer["ok"] is True and answer["deferred"] is True, answer
    assert f"pid {flock.pid}" in answer["text"] and "sleep 60" in answer["text"], answer
    assert "update_defer_max_s" in answer["text"]
    assert d.installed() == [] and d.restarts == []
    state = update_state(d.runtime.state_dir)
    assert state["state"] == "deferred" and state["version"] == "9.9.9", state
    assert f"pid {flock.pid}" in state["reason"]
    [event] = d.events("update_deferred")
    assert event["version"] == "9.9.9"
    from edgeclaw.admin.update import versions

    assert versions(d.runtime.state_dir)["deferred"]["held_by"] == event["held_by"]  # the `version` action

    await asyncio.sleep(0.5)
    assert d.installed() == [], "applied while the lock was still held"
    release(flock)
    await poll(lambda: d.installed(), 60, "the deferred update installed")
    await poll(lambda: d.restarts, 10, "the restart onto it")
    state = update_state(d.runtime.state_dir)
    assert state["state"] == "pending" and state["version"] == "9.9.9", state
    # Until the process ends the update holds the lock: a script taking it waits for the restart.
    assert not free_to(d.lock.path, "-s")


async def test_a_shared_outside_holder_defers_too_and_force_applies_at_once(tmp_path, holders):
    d = Device(tmp_path)
    flock = holders(d.lock.path, "-s")
    assert (await d.update(wheel(), "w1"))["deferred"] is True
    assert d.kept_files()
    forced = await d.update(wheel(), "w2", force=True)
    assert forced["ok"] is True and not forced.get("deferred"), forced
    assert d.kept_files() == []  # the update waiting is superseded, not applied after a restart
    assert "forced" in forced["text"] and f"pid {flock.pid}" in forced["text"]
    assert d.installed()
    await poll(lambda: d.restarts, 10, "the restart onto it")
    [event] = d.events("update")
    assert event["forced_past"] and f"pid {flock.pid}" in event["forced_past"][0]
    assert update_state(d.runtime.state_dir)["state"] == "pending"
    # Until the restart onto it, no other update starts (it would be lost with the restart).
    from edgeclaw.errors import ToolError

    with pytest.raises(ToolError, match="being installed"):
        await d.update(wheel("9.9.10"), "w3")


async def test_a_second_update_replaces_the_deferred_one(tmp_path, holders):
    d = Device(tmp_path)
    flock = holders(d.lock.path)
    await d.update(wheel("9.9.9"), "w1")
    second = await d.update(wheel("9.9.10"), "w2")
    assert second["deferred"] is True and second["replaced"] == "9.9.9"
    [kept] = d.kept_files()  # only the update waiting is kept for a restart
    assert kept.read_bytes() == wheel("9.9.10")
    assert "replaces the update to 9.9.9" in second["text"]
    assert update_state(d.runtime.state_dir)["version"] == "9.9.10"
    release(flock)
    await poll(lambda: d.installed(), 60, "the deferred update installed")
    await asyncio.sleep(0.5)
    assert [s.split("-")[0] for s in d.installed()] == ["9.9.10"]
    assert len(d.restarts) == 1


async def test_an_update_deferred_past_update_defer_max_s_is_given_up(tmp_path, holders):
    d = Device(tmp_path, GatewayConfig(allow_unsigned_updates=True, update_defer_max_s=1))
    holders(d.lock.path)
    assert (await d.update(wheel()))["deferred"] is True
    await poll(
        lambda: update_state(d.runtime.state_dir)["state"] == "deferred_expired", 10, "the deferral given up"
    )
    state = update_state(d.runtime.state_dir)
    assert "update_defer_max_s" in state["reason"] and state["version"] == "9.9.9"
    await asyncio.sleep(0.5)
    assert d.installed() == [] and d.restarts == []
    assert d.events("update_deferred_expired")
    assert d.kept_files() == []


async def test_a_deferred_update_whose_install_fails_says_so_in_the_status(tmp_path, holders, monkeypatch):
    from edgeclaw.errors import ToolError

    def broken_install(slots: Any, wheel: Any) -> Path:
        raise ToolError("update: installing the wheel and its dependencies failed (exit 1): no space left")

    monkeypatch.setattr("edgeclaw.admin.update.install", broken_install)
    d = Device(tmp_path)
    flock = holders(d.lock.path)
    assert (await d.update(wheel()))["deferred"] is True
    release(flock)
    await poll(
        lambda: update_state(d.runtime.state_dir)["state"] == "deferred_failed", 10, "the failure reported"
    )
    assert "no space left" in update_state(d.runtime.state_dir)["reason"]
    assert d.restarts == [] and d.events("update_deferred_failed")
    # The lock is not kept by the failed attempt.
    assert free_to(d.lock.path, "-x")


async def test_a_bad_update_is_refused_before_it_is_deferred(tmp_path, holders):
    d = Device(tmp_path)
    holders(d.lock.path)
    data = wheel()
    args = {**upload(d.runtime, data), "sha256": "0" * 64}
    from edgeclaw.errors import ToolError

    with pytest.raises(ToolError, match="SHA-256 mismatch"):
        await apply_update(d.runtime, args, "mqtt:admin", d.restarts.append, d.deferral)
    assert update_state(d.runtime.state_dir)["state"] == "idle"


def test_a_deferral_left_by_a_process_gone_is_not_shown(tmp_path):
    state = tmp_path / "state"
    (state / "venvs").mkdir(parents=True)
    (state / "venvs" / "deferred.json").write_text(
        json.dumps({"state": "deferred", "version": "9.9.9", "pid": 1, "reason": "x"})
    )
    assert update_state(state)["state"] == "idle"


# -- a tool that defers updates --------------------------------------------------------------------
async def test_a_call_to_a_tool_named_in_defer_updates_during_defers_an_update(tmp_path):
    from tests.shell_helpers import ctx, make_runtime

    slow = {"name": "long_flash", "command": "sleep 3", "description": "flash the target"}
    quick = {"name": "quick_look", "command": "sleep 3", "description": "look"}
    runtime = make_runtime(
        tmp_path,
        tools={"custom": [slow, quick]},
        gateway={"defer_updates_during": ["long_flash"], "allow_unsigned_updates": True},
    )
    lock = runtime.update_lock
    deferral = UpdateDeferral(lock, runtime.state_dir, runtime.audit, lambda: 60.0)
    restarts: list[str] = []
    try:
        # A tool not named: it runs without holding the lock.
        quick_call = asyncio.create_task(runtime.registry.execute("quick_look", {}, ctx(caller="mqtt:op")))
        await asyncio.sleep(1.0)
        assert lock.holders() == []
        assert (await quick_call).ok
        call = asyncio.create_task(runtime.registry.execute("long_flash", {}, ctx(caller="mqtt:op")))
        await poll(lambda: lock.holders(), 10, "the flagged call holding the lock")
        args = {**upload(runtime, wheel()), "allow_downgrade": True}
        answer = await apply_update(runtime, args, "mqtt:admin", restarts.append, deferral)
        assert answer["deferred"] is True and "tool call long_flash" in answer["text"], answer
        assert update_state(runtime.state_dir)["state"] == "deferred"
        outcome = await call
        assert outcome.ok, outcome
        await poll(lambda: restarts, 60, "the update applied once the call ended")
    finally:
        await deferral.aclose()
        await runtime.aclose()


async def test_a_running_job_defers_an_update_until_its_run_ends(tmp_path):
    from edgeclaw.daemon.scheduler import scheduler_service
    from edgeclaw.tools.base import ToolContext
    from tests.shell_helpers import make_runtime

    slow = {"name": "nightly_calibration", "command": "sleep 3", "description": "calibrate"}
    runtime = make_runtime(
        tmp_path,
        tools={"custom": [slow]},
        automation={"clock_sync": "off"},
        gateway={"allow_unsigned_updates": True},
    )
    root = ToolContext(channel="cli", caller="cli:root", session_key="cli:root")
    deferral = UpdateDeferral(runtime.update_lock, runtime.state_dir, runtime.audit, lambda: 60.0)
    restarts: list[str] = []
    try:
        made = await runtime.registry.execute(
            "cron",
            {"action": "add", "every": "1h", "tool": "nightly_calibration", "args": {}, "to": "none"},
            root,
        )
        assert made.ok, made.error
        job = made.data["job"]
        async with scheduler_service(runtime):
            run = asyncio.create_task(
                runtime.registry.execute("cron", {"action": "run", "id": job["id"]}, root)
            )
            await poll(lambda: runtime.update_lock.holders(), 10, "the job's run holding the lock")
            args = {**upload(runtime, wheel()), "allow_downgrade": True}
            answer = await apply_update(runtime, args, "mqtt:admin", restarts.append, deferral)
            assert answer["deferred"] is True and f"job {job['name']}" in answer["text"], answer
            done = await run
            assert done.ok and done.data["outcome"] == "ok", done.data
            await poll(lambda: restarts, 60, "the update applied once the run ended")
    finally:
        await deferral.aclose()
        await runtime.aclose()


def test_defer_updates_during_names_known_tools_only(tmp_path):
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.errors import ConfigErrors

    data = {"board": "sim", "gateway": {"defer_updates_during": ["stm32_flsh"], "update_defer_max_s": 0}}
    with pytest.raises(ConfigErrors) as refused:
        config_from_dict(data, str(tmp_path / "edgeclaw.toml"))
    text = str(refused.value)
    assert "gateway.defer_updates_during[0]" in text and "stm32_flsh" in text
    assert "gateway.update_defer_max_s" in text


# -- end to end: a daemon on a real broker ---------------------------------------------------------
@needs_mosquitto
async def test_a_daemon_defers_an_update_while_flock_holds_the_lock_and_shows_it_in_its_status(
    tmp_path, holders
):
    import base64
    import hashlib

    from tests.mqtt_support import Caller, Mosquitto
    from tests.test_fleet_admin import (
        ANSWERS,
        BASE,
        Admin,
        SupervisedDaemon,
        update_device_config,
        wait_online,
    )

    broker = Mosquitto(tmp_path / "broker").start()
    config = update_device_config(broker.port, more="allow_unsigned_updates = true\n")
    d = SupervisedDaemon(tmp_path, config.replace("telemetry_interval_s = 0", "telemetry_interval_s = 1"))
    d.state.mkdir(parents=True)
    flock = holders(d.state / "update.lock")
    d.start()
    try:
        async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
            admin = Admin(c)
            await wait_online(c, 0)
            data = wheel()
            part = await admin.call("update_chunk", upload="w1", index=0, total=1,
                                    data=base64.b64encode(data).decode())  # fmt: skip
            assert part["ok"] is True, part
            sha = hashlib.sha256(data).hexdigest()
            answer = await admin.call("update", upload="w1", sha256=sha, within=120)
            assert answer["ok"] is True and answer["data"]["deferred"] is True, answer
            assert f"pid {flock.pid}" in answer["data"]["text"], answer

            def deferred_status() -> list[dict[str, Any]]:
                return [
                    r.json["update"]
                    for r in c.on(f"{BASE}/status")
                    if r.json.get("state") == "online" and r.json.get("update", {}).get("state") == "deferred"
                ]

            [shown, *_] = await c.wait_for(deferred_status, 30, "the status showing the deferral")
            assert shown["version"] == "9.9.9" and f"pid {flock.pid}" in shown["reason"], shown
            assert not (d.state / "venvs" / f"9.9.9-{sha[:12]}").exists()
            starts = d.starts
            release(flock)
            installed = d.state / "venvs" / f"9.9.9-{sha[:12]}" / ".installed"
            await c.wait_for(lambda: installed.exists(), 120, "the deferred update installed")
            await c.wait_for(lambda: d.starts > starts, 60, "the daemon restarted onto it")
        assert "the deferred update to 9.9.9 is applied" in d.text()
    finally:
        d.stop()
        broker.kill()


# -- kept across a restart ---------------------------------------------------------------------------
async def test_a_kept_update_whose_signature_no_longer_checks_out_after_a_restart_is_dropped(
    tmp_path, holders
):
    """The stored signature is checked again at the start: a key changed meanwhile drops it."""
    from edgeclaw.admin.update import resume_update
    from tests.test_admin_security import signer

    key, public = signer()
    signed = GatewayConfig(update_public_key=public, update_defer_max_s=60)
    d = Device(tmp_path, signed)
    holders(d.lock.path)
    data = wheel()
    assert (await d.update(data, signature=key.sign(data).hex()))["deferred"] is True
    await d.deferral.aclose()  # the daemon stops; the update stays kept
    assert d.kept_files()
    _, other = signer()
    again = Device(tmp_path, GatewayConfig(update_public_key=other, update_defer_max_s=60))
    kept = again.deferral.kept_at_start()
    assert kept is not None and kept["kept"]["signature"] == key.sign(data).hex()
    resume_update(again.runtime, kept, again.restarts.append, again.deferral)
    state = update_state(d.runtime.state_dir)
    assert state["state"] == "deferred_failed" and "signature does not match" in state["reason"], state
    assert again.kept_files() == [] and again.installed() == []


async def test_an_update_arriving_before_a_kept_one_is_resumed_replaces_it(tmp_path, holders):
    d = Device(tmp_path)
    holders(d.lock.path)
    assert (await d.update(wheel("9.9.9"), "w1"))["deferred"] is True
    await d.deferral.aclose()
    again = Device(tmp_path)  # the next start, before its channels are up
    assert again.deferral.kept_at_start() is not None
    answer = await again.update(wheel("9.9.10"), "w2")
    assert answer["deferred"] is True and answer["replaced"] == "9.9.9", answer
    assert again.deferral.left_to_resume() is None  # nothing left to resume once the channels are up
    [kept] = again.kept_files()
    assert kept.read_bytes() == wheel("9.9.10")
    assert update_state(again.runtime.state_dir)["version"] == "9.9.10"
    await again.deferral.aclose()


async def test_a_kept_update_the_daemon_already_runs_is_forgotten_not_failed(tmp_path, holders, monkeypatch):
    """Stopped while installing it (the install finished, the answer never came): the next start
    runs it already, and must neither apply it again nor report it failed."""
    import hashlib

    from edgeclaw.admin.update import resume_update

    d = Device(tmp_path)
    holders(d.lock.path)
    data = wheel()
    assert (await d.update(data))["deferred"] is True
    await d.deferral.aclose()
    again = Device(tmp_path)
    kept = again.deferral.kept_at_start()
    monkeypatch.setenv("EDGECLAW_SLOT", f"9.9.9-{hashlib.sha256(data).hexdigest()[:12]}")
    resume_update(again.runtime, kept, again.restarts.append, again.deferral)
    assert update_state(again.runtime.state_dir)["state"] == "idle" and again.kept_files() == []


async def test_a_kept_bundle_brings_its_dependencies_across_a_restart(tmp_path, holders):
    """A bundle is kept as received: checked again as a whole, its dependency wheels installed with it."""
    from edgeclaw.admin.update import resume_update
    from tests.test_fleet_admin import _bundle, _tiny_wheel

    made = tmp_path / "made"
    made.mkdir()
    (made / "edgeclaw-9.9.9-py3-none-any.whl").write_bytes(wheel())
    bundle = _bundle(made, [made / "edgeclaw-9.9.9-py3-none-any.whl", _tiny_wheel(tmp_path / "deps")])
    d = Device(tmp_path)
    flock = holders(d.lock.path)
    assert (await d.update(bundle.read_bytes()))["deferred"] is True
    await d.deferral.aclose()
    again = Device(tmp_path)
    try:
        resume_update(again.runtime, again.deferral.kept_at_start(), again.restarts.append, again.deferral)
        assert update_state(again.runtime.state_dir)["state"] == "deferred"
        release(flock)
        [slot] = await poll(again.installed, 60, "the kept bundle installed")
        assert list(
            (again.runtime.state_dir / "venvs" / slot).glob("lib/*/site-packages/tinydep/__init__.py")
        )
        await poll(lambda: again.restarts, 10, "the restart onto it")
    finally:
        await again.deferral.aclose()


def update_shown(c: Any, state: str, after: float) -> list[dict[str, Any]]:
    """The `update` of `online` statuses published after `after` that show it in `state`."""
    from tests.test_fleet_admin import BASE

    return [
        r.json["update"]
        for r in c.on(f"{BASE}/status")
        if r.json.get("state") == "online"
        and r.json.get("ts", 0) > after
        and r.json.get("update", {}).get("state") == state
    ]


class DeferringDevice:
    """A supervised daemon on a real broker, with telemetry off (its status changes only when the
    daemon says so) and STATE/update.lock held by `flock` from before it starts."""

    def __init__(self, tmp_path: Path, holders: Any, max_s: float) -> None:
        from tests.mqtt_support import Mosquitto
        from tests.test_fleet_admin import SupervisedDaemon, update_device_config

        self.tmp_path = tmp_path
        self.broker = Mosquitto(tmp_path / "broker").start()
        more = f"allow_unsigned_updates = true\nupdate_defer_max_s = {max_s}\n"
        self.config = update_device_config(self.broker.port, more=more)
        assert "telemetry_interval_s = 0" in self.config
        self.daemon = SupervisedDaemon(tmp_path, self.config)
        self.state = self.daemon.state
        self.state.mkdir(parents=True)
        self.flock = holders(self.state / "update.lock")
        self.daemon.start()

    async def defer(self, c: Any, data: bytes) -> dict[str, Any]:
        """Once it is online: `data` sent in one chunk and updated to, which is deferred."""
        import base64
        import hashlib

        from tests.test_fleet_admin import Admin, wait_online

        await wait_online(c, 0)
        admin = Admin(c)
        chunk = base64.b64encode(data).decode()
        assert (await admin.call("update_chunk", upload="w1", index=0, total=1, data=chunk))["ok"] is True
        answer = await admin.call("update", upload="w1", sha256=hashlib.sha256(data).hexdigest(), within=120)
        assert answer["ok"] is True and answer["data"]["deferred"] is True, answer
        return answer["data"]

    def start_again(self) -> float:
        """After a clean stop (a supervisor leaves it down), started as systemd would start it; when."""
        from tests.test_fleet_admin import SupervisedDaemon

        started = time.time()
        self.daemon = SupervisedDaemon(self.tmp_path, self.config).start()
        return started

    def marker(self) -> dict[str, Any]:
        return json.loads((self.state / "venvs" / "deferred.json").read_text())

    def kept(self) -> list[Path]:
        return sorted((self.state / "venvs").glob("deferred-*"))

    def slots(self) -> list[str]:
        return [p.parent.name for p in (self.state / "venvs").glob("*/.installed")]

    def close(self) -> None:
        self.daemon.stop()
        self.broker.kill()


@pytest.fixture
def deferring(tmp_path, holders):
    made: list[DeferringDevice] = []

    def make(max_s: float = 60) -> DeferringDevice:
        made.append(DeferringDevice(tmp_path, holders, max_s))
        return made[-1]

    yield make
    for device in made:
        device.close()


def caller_on(d: DeferringDevice) -> Any:
    from tests.mqtt_support import Caller
    from tests.test_fleet_admin import ANSWERS, BASE

    return Caller(d.broker.port, [ANSWERS, f"{BASE}/status"])


@needs_mosquitto
@pytest.mark.parametrize("stop", ["SIGTERM", "SIGKILL"])
async def test_a_deferred_update_survives_a_restart_and_is_applied_once_the_lock_frees(deferring, stop):
    d = deferring()
    async with caller_on(d) as c:
        data = wheel()
        sent = time.time()
        await d.defer(c, data)
        # telemetry_interval_s = 0: the status shows it because the daemon republishes it at once.
        [shown, *_] = await c.wait_for(lambda: update_shown(c, "deferred", sent), 3, "the deferral shown")
        [kept] = d.kept()
        assert kept.read_bytes() == data and d.marker()["kept"]["force"] is False
        assert d.marker()["until"] == shown["until"] and d.marker()["by"] == "mqtt:admin"

        stopped = time.time()
        if stop == "SIGTERM":
            d.daemon.stop()
            d.start_again()
        else:  # a power cut, as far as the daemon can tell: the supervisor starts it again
            assert d.daemon.proc is not None
            d.daemon.proc.kill()
        [again, *_] = await c.wait_for(
            lambda: update_shown(c, "deferred", stopped), 60, "the restarted daemon showing the deferral"
        )
        assert again["until"] == shown["until"], "a restart must not extend the deadline"
        await asyncio.sleep(1.5)
        assert d.slots() == [], "applied while the lock was still held"
        starts = d.daemon.starts
        release(d.flock)
        await c.wait_for(d.slots, 120, "the kept update installed")
        await c.wait_for(lambda: d.daemon.starts > starts, 60, "the daemon restarted onto it")
        assert d.kept() == []
    log = d.daemon.text()
    assert "waits for the update lock again" in log and "the deferred update to 9.9.9 is applied" in log


@needs_mosquitto
async def test_a_deferred_update_whose_deadline_passed_while_the_daemon_was_down_is_given_up(deferring):
    d = deferring(max_s=10)
    async with caller_on(d) as c:
        await d.defer(c, wheel())
        d.daemon.stop()
        until = d.marker()["until"]
        assert time.time() < until, "given up before the daemon stopped: make update_defer_max_s longer"
        await asyncio.sleep(until - time.time() + 0.5)
        started = d.start_again()
        [shown, *_] = await c.wait_for(
            lambda: update_shown(c, "deferred_expired", started), 60, "the deferral given up"
        )
        assert "passed before the daemon started again" in shown["reason"], shown
        assert d.kept() == []
        release(d.flock)
        await asyncio.sleep(2)
        assert d.slots() == []
    assert "the deferred update to 9.9.9 was given up" in d.daemon.text()


@needs_mosquitto
async def test_a_kept_update_changed_on_disk_while_the_daemon_was_down_is_not_installed(deferring):
    d = deferring()
    async with caller_on(d) as c:
        await d.defer(c, wheel())
        d.daemon.stop()
        # Another wheel of the same version, sound in itself: only the kept SHA-256 tells them apart.
        [kept] = d.kept()
        kept.write_bytes(
            make_wheel({"edgeclaw/__init__.py": "__version__ = '9.9.9'\nimport os  # not it\n"}, "9.9.9")
        )
        started = d.start_again()
        [shown, *_] = await c.wait_for(
            lambda: update_shown(c, "deferred_failed", started), 60, "the kept update dropped"
        )
        assert "SHA-256 mismatch" in shown["reason"], shown
        release(d.flock)
        await asyncio.sleep(2)
        assert d.slots() == [] and d.kept() == []
    log = d.daemon.text()
    assert "kept across the restart is dropped, not installed" in log and "SHA-256 mismatch" in log


@needs_mosquitto
async def test_a_confirmed_trial_shows_in_the_status_at_once(tmp_path):
    """The fleet page waits for `trying` to become `idle`: with telemetry off, only the daemon's own
    republish at its health verdict gets it there."""
    from tests.mqtt_support import Caller, Mosquitto
    from tests.test_fleet_admin import ANSWERS, BASE, SupervisedDaemon, update_device_config, wait_online

    broker = Mosquitto(tmp_path / "broker").start()
    config = update_device_config(broker.port, more="health_window_s = 1\n")
    slot = "9.9.9-0123456789ab"  # the slot this start runs on trial (launched already: no execv)
    state = tmp_path / "state"
    (state / "venvs").mkdir(parents=True)
    (state / "venvs" / "update.json").write_text(
        json.dumps({"state": "trying", "slot": slot, "previous": "base", "version": "9.9.9"})
    )
    d = SupervisedDaemon(tmp_path, config, {"EDGECLAW_SLOT": slot}).start()
    try:
        async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
            first = await wait_online(c, 0)
            assert first["update"]["state"] == "trying", first
            [idle, *_] = await c.wait_for(lambda: update_shown(c, "idle", 0), 30, "the trial shown confirmed")
            assert idle["slot"] == slot
        assert not (state / "venvs" / "update.json").exists()
    finally:
        d.stop()
        broker.kill()
