"""A power cut at each step of an update, with real processes.

The daemon runs under the supervisor of tests/test_fleet_admin.py, in a process group of its own; a
power cut is SIGKILL of that whole group (the daemon and pip, its child), caught at the moment a step
shows in the state directory: while the wheel downloads, while pip installs it, once it is installed
and switched to but before the old process has exited, while the new version starts on trial, and
once it is kept. The supervisor starts the daemon again, as systemd does when the power is back. The
device must then end on one version: the old one with the update not applied or rolled back, or the
new one kept; `current` never names a slot without `.installed`; no trial left `pending` or `trying`
once it is healthy; nothing half-made left behind; and the next update goes through.

Two moments cannot be caught from outside, and tests/test_update_trial.py covers them on the state
machine: between `update.json` written `pending` and `current` switched (two file operations in a
row), and the wheel's checks (in memory, between the download and the install: the state directory
is then what a cut mid-download leaves).
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import signal
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.mqtt_support import Caller
from tests.test_fleet_admin import (
    ANSWERS,
    BASE,
    Admin,
    SupervisedDaemon,
    _patched_copy,
    broker,
    sha256_of,
    supervised,
    update_device_config,
    wait_online,
    wheels,
)

__all__ = ["broker", "supervised", "wheels"]  # the fixtures, shared with tests/test_fleet_admin.py

STEPS = ["downloading", "installing", "switched", "trying", "kept"]
ENDS_ON_NEW = {"switched", "kept"}  # past the switch the new version is the one on trial
STALL = "/stall/"


@pytest.fixture(scope="session")
def next_wheel(tmp_path_factory) -> Path:
    """A good wheel of a later release than this checkout: the update after the power comes back."""
    main = (Path(__file__).resolve().parent.parent / "edgeclaw" / "__main__.py").read_text()
    root = tmp_path_factory.mktemp("next-release")
    return _patched_copy(root, "next", "edgeclaw/__main__.py", main, "# a later release\n" + main)


class WheelServer:
    """HTTP on loopback serving a directory; a file asked for under /stall/ stops halfway through its
    body until `release` is set (a slow download, caught in the middle)."""

    def __init__(self, served: Path) -> None:
        self.served = served
        self.midway = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *args, **kwargs) -> None:
                super().__init__(*args, directory=str(served), **kwargs)

            def do_GET(self) -> None:
                if not self.path.startswith(STALL):
                    return super().do_GET()
                data = (served / self.path[len(STALL) :]).read_bytes()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                with contextlib.suppress(OSError):  # the client may be gone: that is the point
                    self.wfile.write(data[: len(data) // 2])
                    self.wfile.flush()
                    server.midway.set()
                    server.release.wait(120)
                    self.wfile.write(data[len(data) // 2 :])

            def log_message(self, *args) -> None:
                pass

        class Quiet(http.server.ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address) -> None:
                pass

        self.http = Quiet(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"

    def serve(self, *files: Path) -> None:
        for wheel in files:
            (self.served / wheel.name).write_bytes(wheel.read_bytes())


@pytest.fixture
def wheel_server(tmp_path: Path) -> Iterator[WheelServer]:
    served = tmp_path / "served"
    served.mkdir()
    server = WheelServer(served)
    thread = threading.Thread(target=server.http.serve_forever, daemon=True)
    thread.start()
    yield server
    server.release.set()
    server.http.shutdown()


def slot_of(wheel: Path) -> str:
    """The slot a wheel installs into: VERSION-SHA12, the version from its METADATA."""
    with zipfile.ZipFile(wheel) as z:
        [metadata] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        version = next(
            line.split(":", 1)[1].strip()
            for line in z.read(metadata).decode().splitlines()
            if line.startswith("Version:")
        )
    return f"{version}-{sha256_of(wheel)[:12]}"


# -- what the state directory and the process table show -------------------------------------------
def trial_state(venvs: Path) -> str | None:
    try:
        return json.loads((venvs / "update.json").read_text()).get("state")
    except (OSError, ValueError):
        return None


def current(venvs: Path) -> str:
    try:
        return os.readlink(venvs / "current")
    except OSError:
        return "base"


def _alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it is not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def group(pgid: int) -> dict[int, str]:
    """The live processes of a process group, with their command lines."""
    out = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if os.getpgid(pid) != pgid or not _alive(pid):
                continue
            out[pid] = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
    return out


def pip_of(pgid: int) -> dict[int, str]:
    """pip installing a wheel (its command line, and that of the pip it runs in the slot's python)."""
    return {pid: cmd for pid, cmd in group(pgid).items() if "--require-hashes" in cmd}


def assert_consistent(venvs: Path) -> str:
    """`current` names the base installation or a whole slot; returns which."""
    slot = current(venvs)
    if slot != "base":
        assert (venvs / slot / ".installed").is_file(), f"current names {slot}, which has no .installed"
        assert (venvs / slot / "bin" / "python").exists(), f"current names {slot}, which has no python"
    return slot


def half_made(venvs: Path) -> list[str]:
    """What an install cut short left under venvs/: slots without .installed, work directories."""
    if not venvs.is_dir():
        return []
    return sorted(
        p.name
        for p in venvs.iterdir()
        if p.is_dir() and not p.is_symlink() and not (p / ".installed").exists()
    )


# -- the moments --------------------------------------------------------------------------------------
def moment(
    step: str, d: SupervisedDaemon, server: WheelServer, slot: str, old_pid: int
) -> Callable[[], bool]:
    """Whether the update is at `step` now, from the state directory and the process table."""
    venvs = d.state / "venvs"

    def at() -> bool:
        if step == "downloading":
            return server.midway.is_set()
        if step == "installing":
            return bool(pip_of(d.proc.pid)) and not (venvs / slot / ".installed").exists()
        if step == "switched":  # the old process has not exited yet
            return trial_state(venvs) == "pending" and current(venvs) == slot and d.proc.pid == old_pid
        if step == "trying":
            return trial_state(venvs) == "trying"
        assert step == "kept"
        return trial_state(venvs) is None and current(venvs) == slot and "in force (healthy)" in d.text()

    return at


# What the state directory holds after a cut at each step: (update.json's state, current, the slot's
# directory there, its .installed there).
LEFT = {
    "downloading": (None, "base", False, False),
    "installing": (None, "base", True, False),
    "switched": ("pending", "SLOT", True, True),
    "trying": ("trying", "SLOT", True, True),
    "kept": (None, "SLOT", True, True),
}


def left(venvs: Path, slot: str) -> tuple[str | None, str, bool, bool]:
    now = current(venvs)
    return (
        trial_state(venvs),
        "SLOT" if now == slot else now,
        (venvs / slot).is_dir(),
        (venvs / slot / ".installed").exists(),
    )


async def cut_power_at(
    c: Caller, d: SupervisedDaemon, at: Callable[[], bool], step: str, slot: str
) -> tuple[dict[int, str], tuple[str | None, str, bool, bool]]:
    """SIGKILL of the daemon's whole process group as soon as `at()`: the group as it was, and what
    the state directory held once every process of it was dead (before the supervisor, 0.3 s later,
    starts the daemon again)."""
    venvs = d.state / "venvs"
    cut: dict[int, str] = {}
    found: list[tuple[str | None, str, bool, bool]] = []

    def check() -> bool:
        proc = d.proc
        if proc is None or proc.poll() is not None or not at():
            return False
        cut.update(group(proc.pid))
        os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while any(_alive(pid) for pid in cut) and time.monotonic() < deadline:
            time.sleep(0.001)
        assert not any(_alive(pid) for pid in cut), f"still running after the cut: {cut}"
        found.append(left(venvs, slot))
        assert_consistent(venvs)
        return True

    await c.wait_for(check, 180, f"the update {step}")
    return cut, found[0]


@pytest.mark.parametrize("step", STEPS)
async def test_a_power_cut_at_each_step_of_an_update_leaves_one_consistent_version(
    tmp_path, broker, supervised, wheels, next_wheel, wheel_server, step
):
    good = wheels["good"]
    wheel_server.serve(good, next_wheel)
    slot = slot_of(good)
    d = supervised(tmp_path, update_device_config(broker.port, more="allow_unsigned_updates = true\n"))
    venvs = d.state / "venvs"
    marker = venvs / "update.json"
    async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
        admin = Admin(c)
        await wait_online(c, 0)
        old_pid = d.proc.pid
        at = moment(step, d, wheel_server, slot, old_pid)
        path = STALL if step == "downloading" else "/"
        # This checkout's own version again: not newer than the running one, so allowed explicitly.
        await admin.send(
            "update", url=f"{wheel_server.url}{path}{good.name}", sha256=sha256_of(good), allow_downgrade=True
        )
        cut, found = await cut_power_at(c, d, at, step, slot)
        cut_at = time.time()
        wheel_server.release.set()
        # What the next start finds is what the cut left: the step it was aimed at, consistent.
        assert found == LEFT[step], f"the cut at {step} left {found}: {cut}"
        if step == "installing":
            assert [cmd for cmd in cut.values() if "--require-hashes" in cmd], cut
        if step == "switched":
            assert old_pid in cut  # the old process was still there

        # Power back: the supervisor starts it again; it comes online and settles the trial.
        await wait_online(c, cut_at, within=120)
        await c.wait_for(lambda: not marker.exists(), 90, "the trial settled (update.json removed)")
        expected = slot if step in ENDS_ON_NEW else "base"
        assert assert_consistent(venvs) == expected
        version = await admin.call("version")
        assert version["data"]["slot"] == expected and version["data"]["current"] == expected, version
        if step == "trying":
            assert "did not come up healthy" in d.text(), d.text()[-3000:]
        if step in ("downloading", "installing"):
            # Never on trial, so nothing to roll back: not applied, and not offered as a slot.
            assert slot not in version["data"]["slots"] and "rolled back" not in d.text()
        if step in ENDS_ON_NEW:
            assert f"the update to {slot} is in force (healthy)" in d.text()

        # The next update (a later release) goes through and is kept.
        t0 = time.time()
        done = await admin.call(
            "update", url=f"{wheel_server.url}/{next_wheel.name}", sha256=sha256_of(next_wheel), within=300
        )
        assert done["ok"] is True, done
        later = done["data"]["slot"]
        assert done["data"]["previous"] == expected
        await wait_online(c, t0, within=120)
        await c.wait_for(lambda: not marker.exists() and current(venvs) == later, 90, "the next update kept")
        version = await admin.call("version")
        assert version["data"]["slot"] == later == assert_consistent(venvs), version
        assert half_made(venvs) == [], "an install cut short left its files behind"
    assert "in force (healthy)" in d.text()
