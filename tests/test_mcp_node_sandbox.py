"""Node MCP servers in the default sandbox: their memory bounded by a cgroup of their own, not by an
address-space limit (RLIMIT_AS), under which V8 dies at start ("Fatal process OOM ... CodeRange").

Real node under the real sandbox backend, through the daemon's MCP bridge."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.sandbox.cgroup import SandboxCgroups
from edgeclaw.tools.base import ToolContext

NODE = shutil.which("node")
SERVER = str(Path(__file__).resolve().parent / "mcp_servers" / "node_server.js")
CTX = ToolContext(channel="cli", session_key="cli:node-test")
MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed (scripts/bootstrap --system)")


def memory_cgroup_here() -> bool:
    probe = SandboxCgroups.find("auto", 256 * MIB)
    return probe is not None and probe.bounds_commands_memory


def runtime_with(tmp_path: Path, **server: Any) -> Runtime:
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "mcp": {
                "servers": {"node": {"command": NODE, "args": [SERVER], **server}},
                "reconnect_attempts": 0,
            },
        },
        "test.toml",
    )
    return build_runtime(config, require_secrets=False)


async def test_a_node_server_starts_and_answers_in_the_default_sandbox(tmp_path: Path) -> None:
    if not memory_cgroup_here():
        pytest.skip("no writable memory cgroup here (needs root or a delegated cgroup)")
    runtime = runtime_with(tmp_path)
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["node"]
        assert status["state"] == "connected", status
        assert "firejail" in status["where"] or "bubblewrap" in status["where"], status
        assert {"mcp_node_echo", "mcp_node_hold"} <= set(runtime.registry.names())
        out = await runtime.registry.execute("mcp_node_echo", {"text": "from V8"}, CTX)
        assert out.ok and "from V8" in out.for_llm, out.for_llm
        # Within its bound (512 MiB by default), memory is there to use.
        held = await runtime.registry.execute("mcp_node_hold", {"mb": 64}, CTX)
        assert held.ok and "held 64 MiB" in held.for_llm, held.for_llm
    finally:
        await runtime.aclose()


async def test_a_node_server_past_its_memory_bound_is_killed_and_the_call_says_so(tmp_path: Path) -> None:
    if not memory_cgroup_here():
        pytest.skip("no writable memory cgroup here (needs root or a delegated cgroup)")
    runtime = runtime_with(tmp_path, max_memory_mb=96)
    try:
        await runtime.mcp.start()
        assert runtime.mcp.status()["node"]["state"] == "connected", runtime.mcp.status()
        small = await runtime.registry.execute("mcp_node_hold", {"mb": 16}, CTX)
        assert small.ok, small.for_llm
        big = await runtime.registry.execute("mcp_node_hold", {"mb": 200}, CTX)
        # The sandbox says what ended it: the program's own bound, not the sandbox-wide one.
        assert not big.ok and "ended" in big.for_llm, big.for_llm
        assert "out of memory: this program may use 96 MiB" in big.for_llm, big.for_llm
    finally:
        await runtime.aclose()


async def test_without_a_memory_cgroup_the_address_space_limit_stays_and_the_failure_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Where no memory cgroup is to be had (an unprivileged daemon without a delegated one), the
    server is not let out unbounded: RLIMIT_AS stays, V8 cannot start under it, and the log and
    the server's status say so, with the program's last words."""
    if memory_cgroup_here():
        pytest.skip("a memory cgroup is writable here (the service user's run of this file covers this)")
    runtime = runtime_with(tmp_path)
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["node"]
        assert status["state"] != "connected", status
        assert "CodeRange" in str(status) or "Fatal process OOM" in str(status), status
        warned = [r.getMessage() for r in caplog.records if "no memory cgroup for" in r.getMessage()]
        assert warned and "RLIMIT_AS" in warned[0], warned
    finally:
        await runtime.aclose()


def test_the_same_as_the_unprivileged_service_user() -> None:
    """This file again as the service user the daemon runs as in production: there, without a
    delegated memory cgroup, the fallback is what runs."""
    import re

    from shell_helpers import SERVICE_USER, pytest_as_service_user

    status, output = pytest_as_service_user(["-rs", "tests/test_mcp_node_sandbox.py"], "edgeclaw-svc-node-")
    assert status == 0, f"as {SERVICE_USER}:\n{output}"
    summary = output.strip().splitlines()[-1]
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", summary)) else 0
    assert passed >= 2, summary
    assert "covers this" not in output, output  # the fallback's test ran there, not skipped


def test_the_servers_memory_bound_is_checked() -> None:
    from edgeclaw.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as e:
        config_from_dict(
            {"board": "sim", "mcp": {"servers": {"node": {"command": "node", "max_memory_mb": 4}}}}, "t.toml"
        )
    assert "mcp.servers.node.max_memory_mb" in str(e.value) and ">= 16" in str(e.value)
