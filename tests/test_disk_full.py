"""A full disk: a 2 MiB tmpfs holds the state directory and the workspace, then is filled to the brim.

Reads keep working; anything that must be stored fails saying "no space left on device" and what could
not be stored; the disk reserve keeps the daemon's own writes going when the workspace filled the disk,
and comes back once there is room; a start on a full disk explains itself. Needs root (mount).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeclaw.daemon import state as state_service_module
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto
from tests.test_mqtt import ANSWERS, BASE, daemon_config, running_daemon

RESERVE = 256 * 1024

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mount = tmp_path / "small-fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)], capture_output=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        if subprocess.run(["umount", str(mount)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], capture_output=True)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Mosquitto]:
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


def fill(directory: Path) -> Path:
    """Write until the file system says ENOSPC, down to the last block, as a runaway command would."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "fill.bin"
    with open(path, "ab", buffering=0) as f:
        for size in (64 * 1024, 4096, 512, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC
    assert os.statvfs(directory).f_bavail == 0
    return path


def _config(tmp_path: Path, mount: Path, port: int, reserve: int) -> dict:
    config = daemon_config(tmp_path, port, top={"state": {"reserve_bytes": reserve}})
    config["state_dir"] = str(mount / "state")
    return config


async def _tool(c: Caller, request_id: str, tool: str, **args: object) -> dict:
    await c.publish(
        f"{BASE}/tool/call", {"id": request_id, "tool": tool, "args": args}, response_topic=ANSWERS
    )
    return await c.wait_for(
        lambda: next((m.json for m in reversed(c.on(ANSWERS)) if m.json.get("id") == request_id), None),
        what=f"the answer to {request_id}",
    )


@needs_mosquitto
async def test_on_a_full_disk_reads_work_and_writes_say_what_was_not_stored(
    tmp_path: Path, small_fs: Path, broker: Mosquitto, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    async with (
        running_daemon(_config(tmp_path, small_fs, broker.port, reserve=0)) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        (d.runtime.workspace / "notes.txt").write_text("calibrated at 21.5 C\n")
        assert (await _tool(c, "before", "gpio", action="read", pin=17))["ok"]
        fill(d.runtime.workspace)

        for i in range(3):  # read-only calls: every one answered, none "internal"
            answer = await _tool(c, f"read-{i}", "gpio", action="read", pin=17)
            assert answer["ok"], answer
        text = await _tool(c, "file", "read_file", path="notes.txt")
        assert text["ok"] and "21.5 C" in text["for_llm"]
        probe = await _tool(c, "info", "hardware_info")
        assert probe["ok"], probe

        switch = await _tool(c, "switch", "gpio", action="write", pin=17, value=1)
        assert not switch["ok"] and switch["code"] == "no_space", switch
        assert "no space left on device" in switch["error"] and "request ledger entry" in switch["error"]
        assert "not run" in switch["error"]
        write = await _tool(c, "write", "write_file", path="x.txt", content="x")
        assert write["code"] == "no_space" and not (d.runtime.workspace / "x.txt").exists()
        codes = [m.json.get("code") for m in c.on(ANSWERS)]
        assert "internal" not in codes
    logged = caplog.text
    assert "no space left on device: could not store the request ledger entry" in logged
    assert "only reads, so it runs without a ledger entry" in logged


@needs_mosquitto
async def test_the_reserve_keeps_the_daemons_own_writes_going_and_comes_back(
    tmp_path: Path,
    small_fs: Path,
    broker: Mosquitto,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state_service_module, "UPKEEP_S", 0.2)
    caplog.set_level(logging.INFO)
    reserve = small_fs / "state" / "edgeclaw.db.reserve"
    async with (
        running_daemon(_config(tmp_path, small_fs, broker.port, reserve=RESERVE)) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        assert reserve.stat().st_size == RESERVE
        filled = fill(d.runtime.workspace)  # a command run wild in the workspace, same file system

        # The daemon's own state still gets written: the call runs and its ledger entry is stored,
        # so a repeat is answered from the ledger instead of switching the pin again.
        first = await _tool(c, "switch", "gpio", action="write", pin=17, value=1)
        assert first["ok"], first
        assert "released the 262144-byte reserve" in caplog.text and not reserve.exists()
        await c.publish(
            f"{BASE}/tool/call",
            {"id": "switch", "tool": "gpio", "args": {"action": "write", "pin": 17, "value": 1}},
            response_topic=ANSWERS,
        )
        replay = await c.wait_for(
            lambda: next((m.json for m in c.on(ANSWERS) if m.json.get("replay")), None), what="the replay"
        )
        assert replay["id"] == "switch" and replay["ok"]
        # ... but the workspace may not take the space back.
        write = await _tool(c, "w", "write_file", path="more.txt", content="x" * 100)
        assert not write["ok"] and "kept free for the daemon's own state" in write["error"]
        assert d.runtime.state_health["reserve"]["present"] is False

        filled.unlink()  # someone cleans up
        await c.wait_for(lambda: reserve.exists(), what="the reserve made again")
        assert reserve.stat().st_size == RESERVE
        assert "disk space is back" in caplog.text
        assert (await _tool(c, "w2", "write_file", path="more.txt", content="x"))["ok"]


def _env(tmp_path: Path, mount: Path, reserve: int) -> dict[str, str]:
    config = tmp_path / "edgeclaw.toml"
    config.write_text(f'board = "sim"\nstate_dir = "{mount / "state"}"\n[state]\nreserve_bytes = {reserve}\n')
    ours = ("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_")
    env = {k: v for k, v in os.environ.items() if not k.startswith(ours)}
    env["EDGECLAW_CONFIG"] = str(config)
    return env


def _start_and_stop(env: dict[str, str], log: Path, within: float = 30) -> tuple[bool, int]:
    """Run `edgeclaw run` until it is ready (then SIGTERM) or exits; (became ready, exit code)."""
    with open(log, "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "edgeclaw", "run"], env=env, stderr=err)
    ready = False
    try:
        deadline = time.monotonic() + within
        while proc.poll() is None and time.monotonic() < deadline:
            if "INFO edgeclaw.daemon: ready" in log.read_text():
                ready = True
                proc.send_signal(signal.SIGTERM)
                break
            time.sleep(0.05)
        return ready, proc.wait(20)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()


@pytest.mark.parametrize("reserve", [0, RESERVE])
def test_a_start_on_a_full_disk_explains_itself_or_uses_the_reserve(
    tmp_path: Path, small_fs: Path, reserve: int
) -> None:
    env = _env(tmp_path, small_fs, reserve)
    log = tmp_path / "daemon.log"
    assert _start_and_stop(env, log) == (True, 0), log.read_text()  # a database exists now
    fill(small_fs / "state" / "workspace")
    ready, code = _start_and_stop(env, log)
    text = log.read_text()
    if reserve:
        assert ready and code == 0, text
        assert "released the 262144-byte reserve" in text
    else:
        assert not ready and code == 1, text
        assert "no space left on device" in text and "free some space" in text
    # Nothing was taken for damage: a sound database on a full disk stays where it is.
    assert not [p for p in (small_fs / "state").iterdir() if ".damaged-" in p.name]
