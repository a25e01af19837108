"""The process tool: background commands in the sandbox, per-session isolation and limits, and cleanup
on kill, timeout, session end and shutdown (no orphans)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
from shell_helpers import ctx, make_runtime, marked_processes

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/bin/firejail") or os.path.exists("/usr/bin/bwrap")),
    reason="no sandbox installed (firejail or bubblewrap)",
)


async def _gone(marker: str) -> bool:
    for _ in range(60):
        if not marked_processes(marker):
            return True
        await asyncio.sleep(0.05)
    return False


async def _wait_for_status(registry, proc_id: str, needle: str, context, tries: int = 100) -> str:
    """Poll until the status line says `needle`; returns the last answer either way."""
    text = ""
    for _ in range(tries):
        text = (await registry.execute("process", {"action": "poll", "id": proc_id}, context)).for_llm
        if needle in text:
            break
        await asyncio.sleep(0.05)
    return text


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
        assert dry.ok and not marked_processes(marker)
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
    assert "outlived its timeout" in await _wait_for_status(reg, short_id, "outlived its timeout", me)
    # A background grandchild, so shutdown has a whole tree to take down.
    long = await reg.execute(
        "process", {"action": "start", "command": f"sleep {marker}2 & sleep {marker}3"}, me
    )
    assert long.ok
    for _ in range(40):
        if len(marked_processes(marker)) >= 2:
            break
        await asyncio.sleep(0.05)
    assert len(marked_processes(marker)) >= 2
    await runtime.aclose()  # what the daemon does on SIGTERM
    assert await _gone(marker)


async def test_a_flooding_background_command_does_not_keep_the_daemon_busy(tmp_path: Path) -> None:
    # `yes` left running: its output is read at a bounded rate (the pipe then blocks it), so the
    # daemon's event loop is not spent copying bytes nobody reads, and memory stays bounded.
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full", "process_buffer_bytes": 4096}})
    reg = runtime.registry
    me = ctx(session="mqtt:flood")
    try:
        out = await reg.execute("process", {"action": "start", "command": "yes edgeclaw-flood"}, me)
        assert out.ok, out.error
        proc_id = out.for_user.split()[-1]
        await asyncio.sleep(0.3)
        cpu = time.process_time()
        await asyncio.sleep(2.0)
        assert time.process_time() - cpu < 0.6
        polled = await reg.execute("process", {"action": "poll", "id": proc_id}, me)
        assert "bytes of earlier output were dropped" in polled.for_llm
        assert len(polled.for_user.encode()) <= 4096 + 100  # the buffer, and the note on what was dropped
        assert (await reg.execute("process", {"action": "kill", "id": proc_id}, me)).ok
    finally:
        await runtime.aclose()


async def test_a_finished_command_leaves_nothing_behind(tmp_path: Path) -> None:
    # The command daemonises a grandchild and exits: it is reported as exited at once, and the
    # grandchild went with it (firejail kept the whole sandbox alive for it before).
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    marker = f"657.{os.getpid() % 1000}4"
    me = ctx(session="mqtt:orphans")
    try:
        command = f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo spawned; exit 5"
        out = await reg.execute("process", {"action": "start", "command": command}, me)
        proc_id = out.for_user.split()[-1]
        status = await _wait_for_status(reg, proc_id, "exited with status", me)
        assert "exited with status 5" in status, status
        assert await _gone(marker)
    finally:
        await runtime.aclose()
