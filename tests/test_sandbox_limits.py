"""Limits of the sandbox as a whole, really applied: the memory of all commands together, and the disk
space they must leave for the daemon.

Each test runs real commands under the real backends and looks from the outside (the cgroup's own
counters, the file system's free space, the next tool call) at what a user would notice: the command
is killed and says why, the daemon and the board carry on.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from shell_helpers import ctx, make_runtime
from test_sandbox import BACKENDS, Layout, make_runner, run

from edgeclaw.errors import ConfigErrors
from edgeclaw.sandbox import Sandbox, SandboxSettings
from edgeclaw.sandbox.cgroup import SandboxCgroups

MIB = 1024 * 1024

# Six children that each take and touch 64 MiB, then hold it for 2 s: 384 MiB at once, far less per
# process than RLIMIT_AS (512 MiB), so only a bound on their total can stop them.
HOG = r"""
import os, sys, time
kids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        block = bytearray(64 * 1024 * 1024)
        for j in range(0, len(block), 4096):
            block[j] = 1
        print("held", i, flush=True)
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
lost = sum(os.waitpid(pid, 0)[1] != 0 for pid in kids)
print("children lost:", lost, flush=True)
"""


def _memory_cgroup_here() -> bool:
    probe = SandboxCgroups.find("auto", 256 * MIB)
    return probe is not None and probe.bounds_memory


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_memory_of_all_children_together_is_bounded(layout: Layout, backend: str) -> None:
    if not _memory_cgroup_here():
        pytest.skip("no writable memory cgroup here (needs root or a delegated cgroup)")
    (layout.workspace / "hog.py").write_text(HOG)
    runner = make_runner(layout, backend)
    sandbox = Sandbox(SandboxSettings(backend=backend, max_total_memory_bytes=160 * MIB))
    runner.sandbox = sandbox

    result = await run(runner, "python3 hog.py; echo shell-went-on", timeout_s=30)

    # The OOM killer in the sandbox's cgroup ended the command, and the result says why.
    assert "children lost: 0" not in result.output, result.output
    assert "shell-went-on" not in result.output, result.output
    assert result.limit_hit is not None and "sandbox.max_total_memory_mb" in result.limit_hit
    assert "[killed: out of memory: all sandboxed commands together may use 160 MiB" in result.output
    cgroups = sandbox.cgroups()
    assert cgroups is not None
    peak = cgroups.memory_peak()
    if peak is not None:  # memory.peak needs Linux 5.19 on cgroup v2
        assert peak <= 160 * MIB, peak / MIB
    # The daemon (this process) and the sandbox carry on.
    after = await run(runner, "echo still-here")
    assert after.exit_code == 0 and "still-here" in after.output and after.limit_hit is None


@pytest.mark.parametrize("backend", BACKENDS)
async def test_without_the_bound_the_same_children_all_get_their_memory(layout: Layout, backend: str) -> None:
    # The control for the test above: per-process limits alone let all six hold 64 MiB at once.
    (layout.workspace / "hog.py").write_text(HOG)
    runner = make_runner(layout, backend)
    runner.sandbox = Sandbox(SandboxSettings(backend=backend, max_total_memory_bytes=0))
    result = await run(runner, "python3 hog.py", timeout_s=30)
    assert result.output.count("held") == 6 and "children lost: 0" in result.output, result.output
    assert result.limit_hit is None


def test_the_memory_bound_is_reported_for_doctor() -> None:
    bounded = Sandbox(SandboxSettings(backend="none", max_total_memory_bytes=200 * MIB))
    text = bounded.memory_bound()
    if _memory_cgroup_here():
        assert text.startswith("all sandboxed commands together: 200 MiB, no swap"), text
    else:
        assert text.startswith("no memory cgroup (") and "RLIMIT_AS" in text, text
    off = Sandbox(SandboxSettings(backend="none", max_total_memory_bytes=0)).memory_bound()
    assert "sandbox.max_total_memory_mb = 0" in off and "per process only" in off
    none = Sandbox(SandboxSettings(backend="none", pids_cgroup="")).memory_bound()
    assert none.startswith("no memory cgroup (sandbox.pids_cgroup is empty)") and "not in total" in none


async def test_doctor_says_what_bounds_the_sandbox(tmp_path: Path) -> None:
    from edgeclaw.cli.doctor import sandbox_limits_finding

    without = make_runtime(tmp_path / "a", sandbox={"pids_cgroup": "", "disk_reserve_mb": 16})
    try:
        finding = sandbox_limits_finding(without)
        assert finding is not None and finding.level == "warn", finding
        assert "no memory cgroup (sandbox.pids_cgroup is empty)" in finding.detail
        assert "per process only (RLIMIT_AS, sandbox.max_memory_mb = 512)" in finding.detail
        assert "disk: 16 MiB kept free on the workspace's file system" in finding.detail
    finally:
        await without.aclose()
    if not _memory_cgroup_here():
        return
    bounded = make_runtime(tmp_path / "b", sandbox={"max_total_memory_mb": 300})
    try:
        finding = sandbox_limits_finding(bounded)
        assert finding is not None and finding.level == "ok", finding
        assert "all sandboxed commands together: 300 MiB, no swap" in finding.detail
    finally:
        await bounded.aclose()


def test_bad_figures_are_config_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigErrors) as err:
        make_runtime(tmp_path, sandbox={"max_total_memory_mb": 8, "disk_reserve_mb": -1})
    text = str(err.value)
    assert "sandbox.max_total_memory_mb" in text and "0 (no bound) or an integer >= 32" in text
    assert "sandbox.disk_reserve_mb" in text


# -- the disk reserve -------------------------------------------------------------------------

# Writes 32 MiB files until the file system is full, at up to 500 MiB/s: faster than the SD cards and
# eMMC of the boards, slower than the memory the test's tmpfs lives in.
FILL = r"""
import itertools, time
chunk = b"x" * (1 << 20)
written = 0
try:
    for n in itertools.count():
        with open(f"fill-{n}", "wb") as f:
            for _ in range(32):
                f.write(chunk)
                written += 1
                time.sleep(0.002)
except OSError as e:
    print("stopped by", e.strerror, "after", written, "MiB", flush=True)
"""


@pytest.fixture
def small_fs() -> Iterator[Path]:
    """A 160 MiB file system holding the state directory and its workspace, as in the default layout."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small file system needs root")
    where = Path(tempfile.mkdtemp(prefix="edgeclaw-smallfs-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=160m,mode=0755", "edgeclaw-test", str(where)],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)
        shutil.rmtree(where, ignore_errors=True)


def _free(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_command_filling_the_workspace_leaves_the_reserve(small_fs: Path, backend: str) -> None:
    runtime = make_runtime(
        small_fs,
        sandbox={"backend": backend, "disk_reserve_mb": 48},
        tools={"exec": {"security": "full"}},
    )
    me = ctx(channel="cli", session="cli:test")
    try:
        (runtime.workspace / "fill.py").write_text(FILL)
        filled = await runtime.registry.execute("exec", {"command": "python3 fill.py"}, me)
        # Killed before the file system was full, and it says why.
        assert not filled.ok
        assert "stopped by" not in filled.for_llm, filled.for_llm
        assert "[killed: the workspace's file system fell under 48 MiB free" in filled.for_llm
        assert "sandbox.disk_reserve_mb" in filled.for_llm
        # Most of the reserve is still there for the daemon's own state...
        assert _free(runtime.workspace) > 40 * MIB, _free(runtime.workspace) / MIB
        runtime.db.execute("CREATE TABLE IF NOT EXISTS t (x BLOB)")
        runtime.db.execute("INSERT INTO t VALUES (?)", (b"s" * (4 * MIB),))
        # ... no further command starts while the space is short (refused: nothing ran) ...
        refused = await runtime.registry.execute("exec", {"command": "echo never"}, me)
        assert not refused.ok and refused.refused, refused
        assert "MiB free, under the 48 MiB kept for the daemon's own state" in (refused.error or "")
        # ... and reading tools answer as before.
        read = await runtime.registry.execute("read_file", {"path": "fill.py"}, me)
        assert read.ok and "itertools" in read.for_llm
        # Once space is freed, commands run again.
        for p in runtime.workspace.glob("fill-*"):
            p.unlink()
        again = await runtime.registry.execute("exec", {"command": "echo back"}, me)
        assert again.ok and again.for_llm.startswith("back"), again
    finally:
        await runtime.aclose()


async def test_without_a_reserve_the_command_fills_the_disk(small_fs: Path) -> None:
    # The control for the test above: with the reserve off the same command runs into ENOSPC.
    runtime = make_runtime(small_fs, sandbox={"disk_reserve_mb": 0}, tools={"exec": {"security": "full"}})
    me = ctx(channel="cli", session="cli:test")
    try:
        (runtime.workspace / "fill.py").write_text(FILL)
        filled = await runtime.registry.execute("exec", {"command": "python3 fill.py"}, me)
        assert "stopped by No space left on device" in filled.for_llm, filled.for_llm
        assert _free(runtime.workspace) < 2 * MIB
    finally:
        await runtime.aclose()
