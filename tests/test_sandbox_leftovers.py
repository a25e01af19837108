"""A daemon killed with SIGKILL leaves nothing running: its commands die with it, and what could not
(a detached grandchild, a system without a parent-death signal) is ended by the next start.

The daemon here is a real process built with the runtime, running a `sleep` through the `process`
tool under a real backend, as root and as the unprivileged service user (where firejail, being
setuid, loses the parent-death signal on exec). The test SIGKILLs it and looks at /proc and the
cgroup file system from outside.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from shell_helpers import (
    SERVICE_USER,
    as_service_user,
    ensure_service_user,
    make_runtime,
    marked_processes,
    service_user_problem,
    service_user_python,
)
from test_sandbox import BACKENDS

from edgeclaw.sandbox.cgroup import SandboxCgroups, end_leftovers, find_layout, leftover_tops

TESTS = Path(__file__).resolve().parent

# The daemon: a runtime, one background command, then nothing until it is killed. argv: state
# directory, the [sandbox] table as JSON, a file holding the command (so that the daemon's own
# command line does not show the test's marker), "no-pdeathsig" to act as a system without
# setpriv, and the tests directory.
DAEMON = r"""
import asyncio, json, sys
from pathlib import Path
sys.path.insert(0, sys.argv[5])
if sys.argv[4] == "no-pdeathsig":
    import edgeclaw.sandbox.manager as manager
    manager.parent_death_launcher = lambda: None
from shell_helpers import ctx, make_runtime

async def main():
    runtime = make_runtime(Path(sys.argv[1]), sandbox=json.loads(sys.argv[2]),
                           tools={"exec": {"security": "full"}})
    out = await runtime.registry.execute(
        "process", {"action": "start", "command": Path(sys.argv[3]).read_text()},
        ctx(channel="cli", session="cli:daemon"))
    print("started" if out.ok else "failed: " + str(out.error), flush=True)
    await asyncio.sleep(3600)

asyncio.run(main())
"""


def _cgroups_writable() -> bool:
    return SandboxCgroups.find("auto") is not None


@pytest.fixture
def own_top() -> Iterator[str]:
    """A `sandbox.pids_cgroup` of this test's own: other edgeclaw processes starting on this
    machine (with "auto") then do not end what the test's killed daemon left before the test looks."""
    layout = find_layout("auto")
    if layout is None:
        pytest.skip("no writable cgroup here: leftovers can only be found through one")
    setting = str(layout.pids_top.parent / f"edgeclaw-sandbox-test-{os.getpid()}")
    yield setting
    end_leftovers(setting)
    for top, _v2 in leftover_tops(setting):
        with contextlib.suppress(OSError):
            top.rmdir()


def _run_dirs_of(pid: int, setting: str = "auto") -> list[Path]:
    found = []
    for top, _v2 in leftover_tops(setting):
        if top.is_dir():
            found.extend(p for p in top.iterdir() if p.name.startswith(f"run-{pid}-"))
    return found


async def _gone(marker: str, within_s: float = 20.0) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = marked_processes(marker)
        if not left:
            return []
        await asyncio.sleep(0.05)
    return marked_processes(marker)


def _program(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


async def _appears(marker: str, within_s: float = 30.0, program: str = "") -> bool:
    """Whether a process with `marker` in its command line (running `program`, if given) shows up."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if any(not program or _program(pid) == program for pid in marked_processes(marker)):
            return True
        await asyncio.sleep(0.05)
    return False


def _kill_marked(marker: str) -> None:
    for pid in marked_processes(marker):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


class Daemon:
    """The daemon process: started, waited for until its command runs, then SIGKILLed."""

    def __init__(self, argv: list[str], env: dict[str, str] | None, cwd: Path) -> None:
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
        )

    def wait_started(self) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if line.strip() != "started":
            self.proc.kill()
            _, err = self.proc.communicate(timeout=10)
            raise AssertionError(f"the daemon did not start its command: {line!r} {err[-2000:]}")

    def sigkill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        if self.proc.stdout:
            self.proc.stdout.close()
        if self.proc.stderr:
            self.proc.stderr.close()


@pytest.fixture
def service_user_run(tmp_path: Path) -> Iterator[tuple[str, dict[str, str], Path]]:
    problem = service_user_problem()
    if problem is not None:
        pytest.skip(problem)
    if os.environ.get("EDGECLAW_TESTS_AS_SERVICE_USER"):
        pytest.skip("already acting as the service user")
    user = ensure_service_user()
    scratch = Path(tempfile.mkdtemp(prefix="edgeclaw-svc-"))
    scratch.chmod(0o755)
    try:
        how = service_user_python(scratch)
        if isinstance(how, str):
            pytest.skip(how)
        state = scratch / "daemon"
        state.mkdir()
        os.chown(state, user.pw_uid, user.pw_gid)
        yield how[0], how[1], state
    finally:
        subprocess.run(["rm", "-rf", str(scratch)], check=False)


def _start(python: str, env: dict[str, str] | None, state: Path, backend: str, command: str, *, user: bool,
           pdeathsig: bool = True, cgroup: str = "auto") -> Daemon:  # fmt: skip
    (state / "command").write_text(command)
    (state / "command").chmod(0o644)
    how = "pdeathsig" if pdeathsig else "no-pdeathsig"
    sandbox = json.dumps({"backend": backend, "pids_cgroup": cgroup})
    argv = [python, "-c", DAEMON, str(state), sandbox, str(state / "command"), how]
    argv.append(str(TESTS))
    return Daemon(as_service_user(argv) if user else argv, env, state)


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_commands_die_with_a_killed_daemon(tmp_path: Path, backend: str) -> None:
    marker = f"431.{os.getpid() % 1000}{len(backend)}1"
    daemon = _start(sys.executable, None, tmp_path, backend, f"sleep {marker}", user=False)
    try:
        daemon.wait_started()
        assert await _appears(marker), "the command never ran"
        daemon.sigkill()
        left = await _gone(marker)
    finally:
        _kill_marked(marker)
    assert left == [], "the command outlived the daemon"


@pytest.mark.parametrize("backend", BACKENDS)
async def test_commands_die_with_a_killed_unprivileged_daemon(
    service_user_run: tuple[str, dict[str, str], Path], backend: str
) -> None:
    # Unprivileged, firejail's setuid exec clears the parent-death signal; the guard shell keeps it.
    python, env, state = service_user_run
    marker = f"432.{os.getpid() % 1000}{len(backend)}1"
    daemon = _start(python, env, state, backend, f"sleep {marker}", user=True)
    try:
        daemon.wait_started()
        assert await _appears(marker), "the command never ran"
        daemon.sigkill()
        left = await _gone(marker)
    finally:
        _kill_marked(marker)
    assert left == [], f"the command outlived the {SERVICE_USER} daemon"


@pytest.mark.parametrize(
    ("backend", "pdeathsig"),
    [
        # On the host a detached grandchild does not get the signal: only its cgroup finds it.
        pytest.param("none", True, id="host-detached-grandchild"),
        # A system without setpriv: nothing dies with the daemon; the next start ends it all.
        # (bubblewrap needs no setpriv: --die-with-parent ties it to the daemon by itself.)
        pytest.param("firejail", False, id="firejail-no-pdeathsig", marks=BACKENDS[0].marks),
    ],
)
async def test_the_next_start_ends_what_a_killed_daemon_left(
    tmp_path: Path, own_top: str, backend: str, pdeathsig: bool
) -> None:
    marker = f"433.{os.getpid() % 1000}{len(backend)}{int(pdeathsig)}"
    # A grandchild that left the process group (setsid), and one that did not.
    command = f"setsid sleep {marker}7 >/dev/null 2>&1 < /dev/null & sleep {marker}8"
    daemon = _start(
        sys.executable, None, tmp_path, backend, command, user=False, pdeathsig=pdeathsig, cgroup=own_top
    )
    try:
        daemon.wait_started()
        assert await _appears(f"{marker}7", program="sleep"), "the command never ran"
        assert await _appears(f"{marker}8", program="sleep"), "the command never ran"
        daemon.sigkill()
        await asyncio.sleep(0.3)
        # The control: something did survive the daemon, and its cgroup is still there.
        assert marked_processes(marker), "nothing survived the daemon: this test would prove nothing"
        assert _run_dirs_of(daemon.proc.pid, own_top), "the killed daemon's cgroups are gone already"

        restarted = make_runtime(tmp_path / "restart", sandbox={"pids_cgroup": own_top})  # the next start
        try:
            left = await _gone(marker)
        finally:
            await restarted.aclose()
    finally:
        _kill_marked(marker)
    assert left == [], "the next start left the killed daemon's commands running"
    assert _run_dirs_of(daemon.proc.pid, own_top) == [], "stale cgroup directories were left"


async def test_a_live_processs_commands_are_left_alone(tmp_path: Path, own_top: str) -> None:
    # Another edgeclaw process (a `tool call`, a second daemon) starting must not end our commands.
    marker = f"434.{os.getpid() % 1000}1"
    daemon = _start(sys.executable, None, tmp_path, "none", f"sleep {marker}", user=False, cgroup=own_top)
    try:
        daemon.wait_started()
        assert await _appears(marker), "the command never ran"
        other = make_runtime(tmp_path / "other", sandbox={"pids_cgroup": own_top})
        await other.aclose()
        await asyncio.sleep(0.3)
        assert marked_processes(marker), "a start ended a live daemon's command"
        assert _run_dirs_of(daemon.proc.pid, own_top)
    finally:
        daemon.sigkill()
        _kill_marked(marker)


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_a_daemon_killed_while_its_command_starts_leaves_nothing(
    service_user_run: tuple[str, dict[str, str], Path], backend: str
) -> None:
    # Killed the moment the command is spawned, before the parent-death signal can be set: the
    # signal would then never come, so the command's first shell checks who its parent is.
    python, env, state = service_user_run
    markers = []
    try:
        for attempt in range(5):
            marker = f"435.{os.getpid() % 1000}{len(backend)}{attempt}"
            markers.append(marker)
            where = state / str(attempt)
            where.mkdir()
            os.chown(where, *state.stat()[4:6])
            daemon = _start(python, env, where, backend, f"sleep {marker}", user=True)
            daemon.wait_started()
            daemon.sigkill()
        await asyncio.sleep(2.0)  # long enough for a surviving sandbox to start its command
        left = [m for m in markers if marked_processes(m)]
    finally:
        for m in markers:
            _kill_marked(m)
    assert left == [], "a command started after its daemon was killed"


def test_an_empty_sandbox_cgroup_removed_by_another_process_is_made_again(own_top: str) -> None:
    # Every edgeclaw process removes an empty edgeclaw-sandbox when it ends (so that it does not stand
    # in the way of whoever removes the cgroup it sits in); one still running must then remake it.
    first = SandboxCgroups.find(own_top, 64 * 1024 * 1024)
    assert first is not None
    first.close()
    for top, _v2 in leftover_tops(own_top):
        top.rmdir()  # what another process's exit does
    again = SandboxCgroups.find(own_top, 64 * 1024 * 1024)
    assert again is not None and Path(own_top).is_dir()
    command = again.create(8)
    assert command.pids_dir.is_dir()
    command.remove()
    again.close()
