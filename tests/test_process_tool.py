"""The process tool: background commands in the sandbox, owned by the caller that started them, with
per-caller and device-wide caps, bounded records, and cleanup on kill, timeout, session end and
shutdown (no orphans)."""

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


async def _gone(marker: str, within_s: float = 20.0) -> bool:
    deadline = time.monotonic() + within_s
    while marked_processes(marker):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


async def _running(marker: str, count: int, within_s: float = 30.0) -> bool:
    """Whether `count` processes with `marker` are up (a sandbox takes a moment to start its command)."""
    deadline = time.monotonic() + within_s
    while len(marked_processes(marker)) < count:
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


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


OPS = "mqtt:key:ops"
INTRUDER = "mqtt:key:intruder"


def _id(outcome) -> str:
    assert outcome.ok, outcome.error
    return outcome.for_user.split()[-1]


async def test_start_poll_write_kill(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    marker = f"654.{os.getpid() % 1000}1"
    me = ctx(session="mqtt:one", caller=OPS)
    try:
        script = f"echo ready; read line; echo got:$line; sleep {marker}"
        out = await reg.execute("process", {"action": "start", "command": script}, me)
        assert out.ok and "started p" in out.for_llm and "sandbox firejail" in out.for_llm
        pid = _id(out)
        await _poll_until(reg, pid, "ready", me)
        wrote = await reg.execute("process", {"action": "write", "id": pid, "input": "hello\n"}, me)
        assert wrote.ok and "wrote 6 bytes" in wrote.for_llm
        await _poll_until(reg, pid, "got:hello", me)
        listed = await reg.execute("process", {"action": "list"}, me)
        assert pid in listed.for_llm and "running" in listed.for_llm
        # The same caller under another session name still owns it.
        again = ctx(session="mqtt:elsewhere", caller=OPS)
        assert pid in (await reg.execute("process", {"action": "list"}, again)).for_llm
        killed = await reg.execute("process", {"action": "kill", "id": pid}, me)
        assert killed.ok and "killed" in killed.for_llm
        assert await _gone(marker)
    finally:
        await runtime.aclose()


async def test_another_caller_cannot_reach_a_process_even_by_its_session_name(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    marker = f"658.{os.getpid() % 1000}5"
    owner = ctx(session="mqtt:shared", caller=OPS)
    try:
        pid = _id(
            await reg.execute("process", {"action": "start", "command": f"sleep {marker} & cat"}, owner)
        )
        for other in (ctx(session="mqtt:shared", caller=INTRUDER), ctx(session="mqtt:shared")):
            listed = await reg.execute("process", {"action": "list"}, other)
            assert listed.ok and pid not in listed.for_llm and "no background processes" in listed.for_llm
            answers = [
                await reg.execute("process", {"action": "poll", "id": pid}, other),
                await reg.execute("process", {"action": "write", "id": pid, "input": "x\n"}, other),
                await reg.execute("process", {"action": "kill", "id": pid}, other),
            ]
            absent = await reg.execute("process", {"action": "kill", "id": "p00000000"}, other)
            for answer in answers:
                assert not answer.ok and "visible only to the caller that started it" in answer.error
                # Word for word what an id that does not exist gets: nothing says the id is taken.
                assert answer.error.replace(pid, "ID") == absent.error.replace("p00000000", "ID")
            # `/new` of the same session name by someone else ends nothing of the owner's.
            assert await reg.get("process").manager.end_session("mqtt:shared", other.identity) == 0
        assert await _running(marker, 1)
        polled = await reg.execute("process", {"action": "poll", "id": pid}, owner)
        assert polled.ok and "running" in polled.for_llm
    finally:
        await runtime.aclose()
    assert await _gone(marker)


async def test_caps_per_caller_and_for_the_device_do_not_multiply_with_session_names(tmp_path: Path) -> None:
    runtime = make_runtime(
        tmp_path,
        tools={"exec": {"security": "full", "max_processes_per_caller": 2, "max_processes_total": 3}},
    )
    reg = runtime.registry
    marker = f"655.{os.getpid() % 1000}2"
    start = {"action": "start", "command": f"sleep {marker}"}
    try:
        refused = await reg.execute("process", {"action": "start", "command": "rm -rf /"}, ctx(caller=OPS))
        assert refused.refused and "destructive-ops" in refused.error
        dry = await reg.execute("process", start, ctx(caller=OPS), dry_run=True)
        assert dry.ok and not marked_processes(marker)
        for i in range(2):
            assert (await reg.execute("process", start, ctx(session=f"mqtt:s{i}", caller=OPS))).ok
        # A fresh session name is no way round the caller's cap.
        third = await reg.execute("process", start, ctx(session="mqtt:fresh-name", caller=OPS))
        assert third.refused and "you already run 2" in third.error
        assert "max_processes_per_caller" in third.error
        # Another caller has its own share, until the device is full.
        assert (await reg.execute("process", start, ctx(session="mqtt:s0", caller=INTRUDER))).ok
        full = await reg.execute("process", start, ctx(session="mqtt:s9", caller="mqtt:key:third"))
        assert full.refused and "the device already runs 3" in full.error
        missing = await reg.execute("process", {"action": "poll"}, ctx(caller=OPS))
        assert missing.refused and "needs an 'id'" in missing.error
        # Ending a session ends what its caller started there, nothing else.
        manager = reg.get("process").manager
        assert await _running(marker, 3)
        assert await manager.end_session("mqtt:s0", OPS) == 1
        deadline = time.monotonic() + 20
        while len(marked_processes(marker)) != 2:
            assert time.monotonic() < deadline, marked_processes(marker)
            await asyncio.sleep(0.05)
        assert await manager.end_session("mqtt:s1", OPS) == 1
        assert await manager.end_session("mqtt:s0", INTRUDER) == 1
        assert await _gone(marker)
    finally:
        await runtime.aclose()


async def test_concurrent_starts_cannot_overshoot_the_cap(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full", "max_processes_per_caller": 2}})
    reg = runtime.registry
    marker = f"659.{os.getpid() % 1000}6"
    try:
        outs = await asyncio.gather(
            *(
                reg.execute("process", {"action": "start", "command": f"sleep {marker}"}, ctx(caller=OPS))
                for _ in range(6)
            )
        )
        assert sum(o.ok for o in outs) == 2
        assert all("you already run 2" in o.error for o in outs if not o.ok)
        assert await _running(marker, 2)
        await asyncio.sleep(0.3)
        assert len(marked_processes(marker)) == 2
    finally:
        await runtime.aclose()
    assert await _gone(marker)


async def test_new_ends_the_callers_processes_through_the_agent_loop(tmp_path: Path) -> None:
    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.daemon.agent import build_agent

    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    agent = build_agent(runtime)
    reg = runtime.registry
    marker = f"660.{os.getpid() % 1000}7"
    try:
        mine = _id(
            await reg.execute(
                "process",
                {"action": "start", "command": f"sleep {marker}1"},
                ctx(session="mqtt:desk", caller=OPS),
            )
        )
        theirs = _id(
            await reg.execute(
                "process",
                {"action": "start", "command": f"sleep {marker}2"},
                ctx(session="mqtt:desk", caller=INTRUDER),
            )
        )
        assert await _running(marker, 2)
        new = InboundMessage(channel="mqtt", text="/new", session="mqtt:desk", caller=INTRUDER)
        assert (await agent.handle(new)).ok
        assert await _gone(f"{marker}2") and marked_processes(f"{marker}1")
        assert (
            "running"
            in (await reg.execute("process", {"action": "poll", "id": mine}, ctx(caller=OPS))).for_llm
        )
        gone = await reg.execute("process", {"action": "poll", "id": theirs}, ctx(caller=INTRUDER))
        assert not gone.ok
        await agent.handle(InboundMessage(channel="mqtt", text="/new", session="mqtt:desk", caller=OPS))
        assert await _gone(marker)
    finally:
        await runtime.aclose()


async def test_timeout_and_shutdown_kill_everything(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    marker = f"656.{os.getpid() % 1000}3"
    me = ctx(session="mqtt:cleanup", caller=OPS)
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
    assert await _running(marker, 2)
    await runtime.aclose()  # what the daemon does on SIGTERM
    assert await _gone(marker)


async def test_a_flooding_background_command_does_not_keep_the_daemon_busy(tmp_path: Path) -> None:
    # `yes` left running: its output is read at a bounded rate (the pipe then blocks it), so the
    # daemon's event loop is not spent copying bytes nobody reads, and memory stays bounded.
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full", "process_buffer_bytes": 4096}})
    reg = runtime.registry
    me = ctx(session="mqtt:flood", caller=OPS)
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
    me = ctx(session="mqtt:orphans", caller=OPS)
    try:
        command = f"setsid sleep {marker} >/dev/null 2>&1 < /dev/null & echo spawned; exit 5"
        out = await reg.execute("process", {"action": "start", "command": command}, me)
        proc_id = out.for_user.split()[-1]
        status = await _wait_for_status(reg, proc_id, "exited with status", me)
        assert "exited with status 5" in status, status
        assert await _gone(marker)
    finally:
        await runtime.aclose()


async def test_finished_processes_are_forgotten_so_the_table_stays_bounded(tmp_path: Path) -> None:
    from edgeclaw.tools.runtime.process import MAX_FINISHED_PER_CALLER, MAX_FINISHED_TOTAL

    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}, "rate_limit": 0})
    reg = runtime.registry
    manager = reg.get("process").manager
    try:
        # One caller, many session names: at most a few finished records are kept for it.
        first = ""
        for i in range(MAX_FINISHED_PER_CALLER + 4):
            proc_id = _id(await reg.execute("process", {"action": "start", "command": "true"},
                                            ctx(session=f"mqtt:n{i}", caller=OPS)))  # fmt: skip
            first = first or proc_id
            assert "exited" in await _wait_for_status(reg, proc_id, "exited", ctx(caller=OPS))
        assert len(manager.list(OPS)) == MAX_FINISHED_PER_CALLER
        gone = await reg.execute("process", {"action": "poll", "id": first}, ctx(caller=OPS))
        assert not gone.ok and "you have no background process" in gone.error
        # Many callers: the device keeps a bounded number in all.
        for i in range(MAX_FINISHED_TOTAL + 4):
            caller = f"mqtt:sender:invented-{i}"
            proc_id = _id(
                await reg.execute("process", {"action": "start", "command": "true"}, ctx(caller=caller))
            )
            await _wait_for_status(reg, proc_id, "exited", ctx(caller=caller))
        manager.prune()
        assert len(manager) == MAX_FINISHED_TOTAL
        # And a finished record expires.
        manager.finished_keep_s = 0.2
        await asyncio.sleep(0.3)
        assert manager.list(OPS) == [] and len(manager) == 0
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(
    ("command", "why"),
    [
        ("sh", "sh without a script reads commands"),
        ("bash -i", "interactive shell"),
        ("dash -s", "sh without a script"),
        ("python3", "python3 without a script"),
        ("python3 -i tool.py", "python3 -i is interactive"),
        ("python3 -", "reads a program from its input"),
        ("perl", "perl without a script"),
        ("env sh", "sh without a script"),
        ("exec bash", "bash without a script"),
        ("timeout 600 sh", "sh without a script"),
        ("nice -n 5 env FOO=1 bash", "bash without a script"),
        ("busybox sh", "sh without a script"),
        ("sleep 1; sh", "sh without a script"),
        ("xargs rm", "xargs runs a program"),
        ("sed e", "its e command"),
        ("sed -u 's/^/x/e'", "its e command"),
        ("awk '{cmd = $0; system(cmd)}'", "system() or a pipe"),
        ("echo 'unclosed", "cannot parse"),
    ],
)
async def test_a_program_that_would_run_its_stdin_is_refused(tmp_path: Path, command: str, why: str) -> None:
    # Lines written to a process pass no command check: `sh` started here, then `write` with
    # "rm -rf ~", would run what the deny groups never saw.
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    try:
        for dry_run in (True, False):
            out = await runtime.registry.execute(
                "process", {"action": "start", "command": command}, ctx(caller=OPS), dry_run=dry_run
            )
            assert out.refused and why in out.error and "run each command with exec" in out.error, out.error
        assert runtime.registry.get("process").manager.list(OPS) == []
    finally:
        await runtime.aclose()


async def test_programs_that_only_read_their_stdin_as_data_still_start(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    reg = runtime.registry
    (runtime.workspace / "tool.py").write_text(
        "import sys\nfor line in sys.stdin:\n    print('py:' + line, end='')\n"
    )
    (runtime.workspace / "loop.sh").write_text('while read l; do echo "sh:$l"; done\n')
    me = ctx(caller=OPS)
    try:
        for command, echo in (
            ("cat", "rm -rf ~"),
            ("python3 tool.py", "py:rm -rf ~"),
            ("sh loop.sh", "sh:rm -rf ~"),
            ("sed -u 's/^/sed:/'", "sed:rm -rf ~"),
            ("sed --sandbox -u e", "e/r/w commands disabled"),
        ):
            proc_id = _id(await reg.execute("process", {"action": "start", "command": command}, me))
            wrote = await reg.execute(
                "process", {"action": "write", "id": proc_id, "input": "rm -rf ~\n", "eof": True}, me
            )
            assert wrote.ok, wrote.error
            await _poll_until(reg, proc_id, echo, me)
        assert sorted(p.name for p in runtime.workspace.iterdir()) == ["loop.sh", "tool.py"]
    finally:
        await runtime.aclose()
