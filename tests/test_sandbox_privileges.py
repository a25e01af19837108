"""What the daemon holds and a command must not: hardware device nodes and the hardware groups, checked
from inside real commands, as root and as the unprivileged service user the daemon is in production.

Also runs the whole sandbox suite as that user (with i2c, spi, gpio and dialout), because every
other test here runs as whoever runs pytest, which in CI is root.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from shell_helpers import (
    HARDWARE_GROUPS,
    SERVICE_USER,
    as_service_user,
    hardware_gids,
    pytest_as_service_user,
    service_user_python,
    service_user_scratch,
)
from test_sandbox import BACKENDS, Layout, make_runner, run

TESTS = Path(__file__).resolve().parent

# Device nodes the hardware tools use, group-owned by the hardware groups on a board.
HARDWARE_NODES = (
    "/dev/ttyS0",
    "/dev/ttyAMA0",
    "/dev/ttyUSB0",
    "/dev/i2c-1",
    "/dev/gpiochip0",
    "/dev/spidev0.0",
)


def _hardware_node() -> str | None:
    return next((n for n in HARDWARE_NODES if os.path.exists(n)), None)


def _probe(node: str) -> str:
    """What a command reports about a device node and its own groups."""
    return (
        f"test -e {node} && echo 'node visible'; test -w {node} && echo 'node writable'; "
        "grep '^Groups:' /proc/self/status; true"
    )


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_hardware_device_nodes_are_not_in_the_sandbox(layout: Layout, backend: str) -> None:
    node = _hardware_node()
    if node is None:
        pytest.skip("this machine has none of the usual hardware device nodes")
    result = await run(make_runner(layout, backend), _probe(node))
    if backend == "none":
        # The control: on the host the node is there, so the test can see it.
        assert "node visible" in result.output, result.output
        return
    assert "node visible" not in result.output and "node writable" not in result.output, result.output


# The daemon as the service user: one exec call through the runtime, then what it saw, as JSON.
DRIVER = r"""
import asyncio, json, os, sys
from pathlib import Path
sys.path.insert(0, sys.argv[4])
from shell_helpers import ctx, make_runtime

async def main():
    runtime = make_runtime(Path(sys.argv[1]), sandbox={"backend": sys.argv[2]},
                           tools={"exec": {"security": "full"}})
    try:
        me = ctx(channel="cli", session="cli:t")
        out = await runtime.registry.execute("exec", {"command": sys.argv[3]}, me)
    finally:
        await runtime.aclose()
    print(json.dumps({"groups": os.getgroups(), "ok": out.ok, "output": out.for_llm, "error": out.error}))

asyncio.run(main())
"""


@pytest.fixture
def service_user_run() -> Iterator[tuple[str, dict[str, str], Path]]:
    user, scratch = service_user_scratch("edgeclaw-svc-")
    try:
        how = service_user_python(scratch)
        if isinstance(how, str):
            pytest.skip(how)
        state = scratch / "daemon"
        state.mkdir()
        os.chown(state, user.pw_uid, user.pw_gid)
        yield how[0], how[1], state
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _as_daemon(how: tuple[str, dict[str, str], Path], backend: str, command: str) -> dict:
    python, env, state = how
    done = subprocess.run(
        as_service_user([python, "-c", DRIVER, str(state), backend, command, str(TESTS)]),
        env=env,
        cwd=state,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_daemons_hardware_groups_do_not_reach_the_command(
    service_user_run: tuple[str, dict[str, str], Path], backend: str
) -> None:
    node = _hardware_node() or "/dev/null-no-hardware-node"
    seen = _as_daemon(service_user_run, backend, _probe(node))
    # The control: the daemon itself holds every hardware group, as under systemd.
    assert hardware_gids() <= set(seen["groups"]), seen
    assert seen["ok"], seen
    assert "node visible" not in seen["output"] and "node writable" not in seen["output"], seen["output"]
    groups_line = re.search(r"^Groups:(.*)$", seen["output"], re.M)
    assert groups_line is not None, seen["output"]
    inside = {int(g) for g in groups_line.group(1).split()}
    if backend == "bubblewrap":
        # An unprivileged user namespace cannot drop groups (setgroups is denied in it): they are
        # still held, shown as the overflow gid. What they would open is out of reach: /dev is
        # private and the rest of the file system read-only (docs/sandbox.md).
        assert inside.isdisjoint(hardware_gids()) and 65534 in inside, inside
        return
    assert inside.isdisjoint(hardware_gids()), f"the command holds {sorted(inside & hardware_gids())}"


def test_the_sandbox_suite_passes_as_the_service_user() -> None:
    suite = [
        "tests/test_sandbox.py",
        "tests/test_sandbox_limits.py",
        "tests/test_sandbox_leftovers.py",
        "tests/test_sandbox_privileges.py",
    ]
    status, output = pytest_as_service_user(suite, "edgeclaw-svc-suite-", own_home=True)
    summary = output.strip().splitlines()[-1] if output.strip() else ""
    assert status == 0, f"as {SERVICE_USER} ({', '.join(HARDWARE_GROUPS)}):\n{output}"
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", summary)) else 0
    # Most of it must really run, not skip, as the service user.
    assert passed >= 40, summary
