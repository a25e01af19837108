"""The tool families the daemon builds on first use name, from the start, exactly the tools and
groups they build: policies checked at start-up and `tools list` agree with what then runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import ToolContext

CONFIGS = {
    "sim board": {"board": "sim"},
    "generic Linux board": {"board": "generic-linux"},
    "web search with a fallback": {
        "board": "sim",
        "tools": {
            "web": {
                "search": {
                    "provider": "searxng",
                    "fallback_providers": ["jina"],
                    "searxng": {"url": "http://127.0.0.1:8888"},
                    "jina": {"api_key_env": "JINA_KEY"},
                }
            }
        },
    },
    "memory without skills": {"board": "sim", "skills": {"enabled": False}},
}


@pytest.mark.parametrize("name", CONFIGS)
def test_every_deferred_family_builds_the_tools_it_named(tmp_path: Path, name: str) -> None:
    data = {"state_dir": str(tmp_path / "state"), **CONFIGS[name]}
    runtime = build_runtime(config_from_dict(data, "test.toml"), environ={"JINA_KEY": "k" * 24})
    registry = runtime.registry
    named = registry.names()
    deferred = set(registry._deferred)
    assert {"i2c", "tts", "web_fetch", "spawn", "message", "memory_store"} <= deferred  # deferred
    assert ("web_search" in named) == ("search" in CONFIGS[name].get("tools", {}).get("web", {}))
    assert ("skill_search" in named) == ("skills" not in CONFIGS[name])
    groups = dict(registry.policy._tool_groups)
    built = registry.infos()  # builds every family; RuntimeError if one built other tools
    assert [i.name for i in built] == named
    assert {i.name: i.group for i in built} == groups
    assert not registry._deferred


async def test_the_daemon_builds_its_agent_loop_on_demand_and_recovers_subagents_at_start(tmp_path: Path):
    """`edgeclaw run` leaves the agent loop unbuilt until something needs it, unless the last run
    left subagents to recover: then it is built at start, and their recovery runs then."""
    from edgeclaw.daemon.lifecycle import agent_on_demand
    from edgeclaw.store.subagents import SubagentStore

    def runtime_with(left_running: bool, recover_at_start: bool = True):
        data = {"state_dir": str(tmp_path / f"state-{left_running}-{recover_at_start}"), "board": "sim"}
        runtime = build_runtime(config_from_dict(data, "test.toml"), environ={})
        if left_running:
            store = SubagentStore(lambda: runtime.db)
            child = store.create(
                parent_session="mqtt:ops", task="calibrate", label="adc", agent_id="main", depth=1,
                detached=False, announce=True, channel="mqtt", chat_id="ops", peer_kind="direct",
                caller="mqtt", sender="", parent_agent="main", session_prefix="subagent:",
            )  # fmt: skip
            store.set_state(child.id, "running")
        agent_on_demand(runtime, recover_at_start=recover_at_start)
        return runtime

    quiet = runtime_with(left_running=False)
    await quiet.ready()
    assert quiet.agent.loop is None and quiet.subagents is None  # nothing needed it yet
    spawn = quiet.registry.get("sessions_spawn")
    assert spawn is not None and spawn._source() is not None  # a spawn builds it
    assert quiet.agent.loop is not None and quiet.subagents is not None
    await quiet.aclose()

    left = runtime_with(left_running=True)
    await left.ready()
    assert left.subagents is not None  # built at start, for the child the last run left
    [row] = left.subagents.store.unannounced()
    assert row.state == "interrupted"
    await left.aclose()

    # Without a channel to tell the parents at start, the loop's first use recovers them instead.
    later = runtime_with(left_running=True, recover_at_start=False)
    await later.ready()
    assert later.subagents is None
    spawn = later.registry.get("sessions_spawn")
    assert spawn is not None and spawn._source() is not None
    assert [r.state for r in later.subagents.store.unannounced()] == ["interrupted"]
    await later.aclose()


async def test_start_up_steps_added_after_ready_run_at_once_and_their_failures_are_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
):
    import asyncio
    import logging

    runtime = build_runtime(config_from_dict({"state_dir": str(tmp_path / "s")}, "test.toml"), environ={})
    ran: list[str] = []
    runtime.on_ready(lambda: ran.append("before"))
    assert ran == []  # before ready: waits for it
    await runtime.ready()
    assert ran == ["before"]

    async def late_failing() -> None:
        ran.append("late")
        raise RuntimeError("the late step broke")

    with caplog.at_level(logging.ERROR, "edgeclaw.runtime"):
        runtime.on_ready(lambda: ran.append("sync"))
        runtime.on_ready(late_failing)
        assert ran[:2] == ["before", "sync"]  # at once
        for _ in range(20):
            await asyncio.sleep(0)
    assert ran == ["before", "sync", "late"]
    assert "late_failing" in caplog.text and "the late step broke" in caplog.text  # with its traceback
    await runtime.aclose()


async def test_memory_is_built_by_its_first_use_and_the_fs_tools_route_through_it(tmp_path: Path):
    """With memory on, nothing of it is built at start-up; the first fs call on MEMORY.md builds it
    and lands in the memory store, not on the disk, as when it was built at start."""
    data = {"state_dir": str(tmp_path / "state"), "board": "sim"}
    runtime = build_runtime(config_from_dict(data, "test.toml"), environ={})
    ctx = ToolContext(channel="cli", caller="cli:tech")
    assert runtime.memory_service.built is None and "memory_search" in runtime.registry._deferred
    note = {"path": "MEMORY.md", "content": "fan: GPIO 22\n"}
    wrote = await runtime.registry.execute("write_file", note, ctx)
    assert wrote.ok, wrote.error
    assert runtime.memory_service.built is not None
    assert not (runtime.workspace / "MEMORY.md").exists()  # routed to the database
    assert runtime.memory is runtime.memory_service.built  # one for every caller
    found = await runtime.registry.execute("memory_get", {"path": "MEMORY.md"}, ctx)
    assert found.ok and "GPIO 22" in found.for_llm  # the tools built later share that store
    await runtime.aclose()

    off = build_runtime(config_from_dict({**data, "memory": {"enabled": False}}, "test.toml"), environ={})
    assert off.memory is None and "memory_search" not in off.registry.names()
    wrote = await off.registry.execute("write_file", {"path": "MEMORY.md", "content": "on disk\n"}, ctx)
    assert wrote.ok and (off.workspace / "MEMORY.md").read_text() == "on disk\n"
    await off.aclose()


async def test_a_memory_build_that_fails_refuses_the_call_and_the_next_use_tries_again(tmp_path: Path):
    data = {"state_dir": str(tmp_path / "state"), "board": "sim"}
    runtime = build_runtime(config_from_dict(data, "test.toml"), environ={})
    build, attempts = runtime.memory_service.factory, []

    def failing_once():
        attempts.append(1)
        if len(attempts) == 1:
            raise OSError("skills directory unreadable")
        return build()

    runtime.memory_service.factory = failing_once
    ctx = ToolContext(channel="cli", caller="cli:tech")
    failed = await runtime.registry.execute("read_file", {"path": "MEMORY.md"}, ctx)
    assert not failed.ok and "skills directory unreadable" in failed.error
    assert runtime.memory_service.built is None
    stored = await runtime.registry.execute("memory_store", {"key": "pump", "content": "relay 3"}, ctx)
    assert stored.ok, stored.error
    assert len(attempts) == 2 and runtime.memory_service.built is not None
    await runtime.aclose()
