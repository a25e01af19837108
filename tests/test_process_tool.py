"""The process tool: background commands in the sandbox, per-session isolation and limits, and cleanup
on kill, timeout, session end and shutdown (no orphans)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from shell_helpers import ctx, make_runtime

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/bin/firejail") or os.path.exists("/usr/bin/bwrap")),
    reason="no sandbox installed (firejail or bubblewrap)",
)


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if marker.encode() in cmdline and b"sh\x00-c" not in cmdline:
                found.append(int(entry))
    return found


async def _gone(marker: str) -> bool:
    for _ in range(60):
        if not _marked(marker):
            return True
        await asyncio.sleep(0.05)
    return False


async def _poll_until(registry, proc_id: str, needle: str, context, tries: int = 200) -> str:
    seen = ""
    for _ in range(tries):
        out = await registry.execute("process", {"action": "poll", "id": proc_id}, context)
        assert out.ok, out.error
        seen += out.for_user if out.for_user != "(no new output)" else ""
        if needle in seen:
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"{needle!r} never appeared; saw {seen!r}")


async def test_start_poll_write_kill(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    marker = f"654.{os.getpid() % 1000}1"
    me = ctx(session="mqtt:one")
    try:
        script = f"echo ready; read line; echo got:$line; sleep {marker}"
        out = await reg.execute("process", {"action": "start", "command": script}, me)
        assert out.ok and "started p" in out.for_llm and "sandbox firejail" in out.for_llm
        pid = out.for_user.split()[-1]
        await _poll_until(reg, pid, "ready", me)
        wrote = await reg.execute("process", {"action": "write", "id": pid, "input": "hello\n"}, me)
        assert wrote.ok and "wrote 6 bytes" in wrote.for_llm
        await _poll_until(reg, pid, "got:hello", me)
        listed = await reg.execute("process", {"action": "list"}, me)
        assert pid in listed.for_llm and "running" in listed.for_llm

        # Another session neither sees nor touches it.
        other = ctx(session="mqtt:two")
        assert "no background processes" in (await reg.execute("process", {"action": "list"}, other)).for_llm
        stolen = await reg.execute("process", {"action": "kill", "id": pid}, other)
        assert not stolen.ok and "no background process" in stolen.error

        killed = await reg.execute("process", {"action": "kill", "id": pid}, me)
        assert killed.ok and "killed" in killed.for_llm
        assert await _gone(marker)
    finally:
        await runtime.aclose()


async def test_checks_limits_and_dry_run(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full", "max_processes_per_session": 2}})
    reg = runtime.registry
    marker = f"655.{os.getpid() % 1000}2"
    me = ctx(session="mqtt:limits")
    try:
        refused = await reg.execute("process", {"action": "start", "command": "rm -rf /"}, me)
        assert refused.refused and "destructive-ops" in refused.error
        dry = await reg.execute(
            "process", {"action": "start", "command": f"sleep {marker}"}, me, dry_run=True
        )
        assert dry.ok and not _marked(marker)
        for _ in range(2):
            assert (await reg.execute("process", {"action": "start", "command": f"sleep {marker}"}, me)).ok
        third = await reg.execute("process", {"action": "start", "command": f"sleep {marker}"}, me)
        assert third.refused and "already runs 2" in third.error
        missing = await reg.execute("process", {"action": "poll"}, me)
        assert missing.refused and "needs an 'id'" in missing.error
        # The agent loop ends the session: everything of it is killed and forgotten.
        assert await runtime.registry.get("process").manager.end_session(me.session_key) == 2
        assert await _gone(marker)
    finally:
        await runtime.aclose()


async def test_timeout_and_shutdown_kill_everything(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    marker = f"656.{os.getpid() % 1000}3"
    me = ctx(session="mqtt:cleanup")
    short = await reg.execute(
        "process", {"action": "start", "command": f"sleep {marker}1", "timeout_s": 0.5}, me
    )
    assert short.ok
    short_id = short.for_user.split()[-1]
    for _ in range(60):
        status = await reg.execute("process", {"action": "poll", "id": short_id}, me)
        if "outlived its timeout" in status.for_llm:
            break
        await asyncio.sleep(0.05)
    assert "outlived its timeout" in status.for_llm
    # A background grandchild, so shutdown has a whole tree to take down.
    long = await reg.execute(
        "process", {"action": "start", "command": f"sleep {marker}2 & sleep {marker}3"}, me
    )
    assert long.ok
    for _ in range(40):
        if len(_marked(marker)) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(_marked(marker)) >= 2
    await runtime.aclose()  # what the daemon does on SIGTERM
    assert await _gone(marker)
