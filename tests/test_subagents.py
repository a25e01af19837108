"""Subagents against the scripted LLM server: spawning, announcing, run, cancel, steer, limits, deny lists.

The parent's requests take the shared script; each child's requests are routed
by its task (the first user message of a request whose system prompt is a
subagent's), because children run at the same time.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.policy_rules import SUBAGENT_ALWAYS_DENY, SUBAGENT_LEAF_DENY
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.outlets import DeliveryFailed, Outgoing
from tests.llm_server import (
    Scripted,
    ScriptedLLM,
    first_user_text,
    openai_text,
    openai_tools,
    system_text,
    task_is,
)

SESSION = "cli:tech"
BME_TASK = "Read the BME280 chip id on bus 1"
LS_TASK = "List the workspace"


class CaptureOutlet:
    """The terminal's place: what is delivered to its sessions."""

    def __init__(self) -> None:
        self.delivered: list[tuple[str, str]] = []

    def has_session(self, session_key: str) -> bool:
        return session_key.startswith("cli:")

    async def to_session(self, session_key: str, text: str) -> str:
        self.delivered.append((session_key, text))
        return "printed"

    async def to_target(self, target: str, message: Outgoing) -> str:
        raise DeliveryFailed("no targets")


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
async def setup(tmp_path: Path, llm: ScriptedLLM):
    made = []

    def make(subagents: dict[str, Any] | None = None, **extra: Any):
        config = config_from_dict(
            {
                "board": "sim",
                "state_dir": str(tmp_path / "state"),
                "agent": {"providers": ["local"], "provider_attempts": 1},
                "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
                "tools": {"subagents": {"announce_debounce_s": 0.3, **(subagents or {})}},
                **extra,
            },
            "test.toml",
        )
        runtime = build_runtime(config, environ={})
        agent = build_agent(runtime)
        outlet = CaptureOutlet()
        runtime.outlets.register("cli", outlet)
        made.append(runtime)
        assert runtime.subagents is not None
        return runtime, agent, runtime.subagents, outlet

    yield make
    for runtime in made:
        await runtime.aclose()


def msg(text: str) -> InboundMessage:
    return InboundMessage("cli", text, chat_id="tech", peer_kind="local", caller="cli:tech")


def requests_for(llm: ScriptedLLM, task: str) -> list[dict[str, Any]]:
    return [
        r for r in llm.requests if "## Subagent" in system_text(r) and first_user_text(r).startswith(task)
    ]


def parents(llm: ScriptedLLM) -> list[dict[str, Any]]:
    """The requests of parents' turns (not a subagent's), in order."""
    return [r for r in llm.requests if "## Subagent" not in system_text(r)]


def tool_names(request: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in request.get("tools", ())}


def tool_results(request: dict[str, Any]) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "tool"]


def last_user(request: dict[str, Any]) -> str:
    return [m for m in request["messages"] if m["role"] == "user"][-1]["content"]


BME_READ = {"action": "read_block", "bus": 1, "address": "0x76", "register": "0xD0", "length": 1}


# -- spawning and announcing ------------------------------------------------------------------------
async def test_two_children_on_the_sim_board_are_announced_in_one_batch(setup, llm):
    runtime, agent, manager, outlet = setup()
    (runtime.workspace / "notes.txt").write_text("calibration due in May\n")
    llm.route(task_is(BME_TASK), openai_tools(("i2c", BME_READ)), openai_text("BME280 chip id: 0x60"))
    llm.route(task_is(LS_TASK), openai_tools(("list_files", {})), openai_text("workspace: notes.txt"))
    llm.reply(
        openai_tools(
            ("sessions_spawn", {"task": BME_TASK, "label": "bme280"}),
            ("spawn", {"task": LS_TASK, "label": "ls"}),
        ),
        openai_text("Two subagents are on it."),
        openai_text("The BME280 answers 0x60, and the workspace holds notes.txt."),
    )
    reply = await agent.handle(msg("check the sensor and the files"))
    assert reply.ok and reply.text == "Two subagents are on it."
    spawned = [json.loads(r) for r in tool_results(parents(llm)[1])]
    assert [s["state"] for s in spawned] == ["spawning", "spawning"]
    await asyncio.wait_for(manager.settled(SESSION), 20)

    # Each child used the sim board (or the workspace) through its own tools.
    assert any("60" in t for t in tool_results(requests_for(llm, BME_TASK)[-1]))
    assert any("notes.txt" in t for t in tool_results(requests_for(llm, LS_TASK)[-1]))
    # Both results reached the parent in one notice, and one turn answered it.
    notices = [r for r in llm.requests if last_user(r).startswith("[Subagent")]
    assert len(notices) == 1 and manager.announcer.batches == 1
    notice = last_user(notices[0])
    assert "2 of them" in notice and "0x60" in notice and "notes.txt" in notice
    assert "subagent 1 (bme280): completed" in notice and "subagent 2 (ls): completed" in notice
    assert outlet.delivered == [(SESSION, "The BME280 answers 0x60, and the workspace holds notes.txt.")]
    # The notice is in the parent's history: its next turn sees it.
    history = [json.loads(b)["content"] for _, b in runtime.sessions.load(SESSION)]
    assert any(h.startswith("[Subagent results") for h in history)
    rows = manager.store.children(SESSION)
    assert [(r.state, r.announced) for r in rows] == [("completed", True), ("completed", True)]


async def test_a_childs_calls_carry_its_depth_parent_and_the_parents_channel(setup, llm):
    runtime, agent, manager, _ = setup()
    llm.route(task_is("status"), openai_tools(("read_file", {"path": "nope.txt"})), openai_text("done"))
    llm.reply(openai_tools(("sessions_spawn", {"task": "status please", "mode": "run"})), openai_text("ok"))
    seen: list[Any] = []
    runtime.registry.add_audit_sink(seen.append)
    await agent.handle(msg("go"))
    child_call = next(r for r in seen if r.tool == "read_file")
    assert (
        child_call.session == "subagent:1" and child_call.channel == "cli" and child_call.caller == "cli:tech"
    )
    row = manager.store.get(1)
    assert row is not None and row.parent_session == SESSION and row.depth == 1


async def test_run_waits_and_returns_the_childs_answer(setup, llm):
    _, agent, manager, outlet = setup()
    llm.route(task_is("Count"), openai_text("there are 3 sensors"))
    llm.reply(
        openai_tools(("sessions_spawn", {"task": "Count the sensors", "mode": "run"})), openai_text("Three.")
    )
    reply = await agent.handle(msg("how many sensors?"))
    assert reply.text == "Three."
    result = json.loads(tool_results(parents(llm)[-1])[0])
    assert result[0]["state"] == "completed" and result[0]["result"] == "there are 3 sensors"
    await asyncio.sleep(0.5)  # past the debounce: nothing is announced, the parent has the answer
    assert manager.announcer.batches == 0 and outlet.delivered == []


async def test_wait_gives_the_result_and_takes_it_out_of_the_announcements(setup, llm):
    _, agent, manager, outlet = setup()
    llm.route(task_is("Read"), openai_text("21.5 C"))
    llm.reply(
        openai_tools(("spawn", {"task": "Read the TMP102"})),
        openai_tools(("subagents", {"action": "wait", "id": "1"})),
        openai_text("It is 21.5 C."),
    )
    reply = await agent.handle(msg("temperature?"))
    assert reply.text == "It is 21.5 C."
    waited = json.loads(tool_results(parents(llm)[-1])[-1])
    assert waited[0]["result"] == "21.5 C"
    await asyncio.sleep(0.6)
    assert manager.announcer.batches == 0 and outlet.delivered == []


# -- cancel and steer ---------------------------------------------------------------------------------
def hang(seconds: float = 30) -> Scripted:
    return Scripted(hang_s=seconds, body={})


async def spawn(manager, task: str, ctx: ToolContext | None = None, **kw: Any):
    from edgeclaw.tools.sessions.subagents import SpawnRequest

    return manager.spawn(
        SpawnRequest(task=task, **kw), ctx or ToolContext(channel="cli", session_key=SESSION)
    )


async def test_cancel_by_id_last_and_all(setup, llm):
    runtime, _, manager, outlet = setup()
    for task in ("A", "B", "C", "D"):
        llm.route(task_is(task), hang())
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    rows = [await spawn(manager, t, ctx) for t in ("A", "B", "C", "D")]
    await asyncio.sleep(0.2)
    call = runtime.registry.execute
    one = await call("subagents", {"action": "cancel", "id": str(rows[1].id)}, ctx)
    assert one.ok, one.error
    assert [r["state"] for r in json.loads(one.for_llm)] == ["cancelled"]
    last = await call("subagents", {"action": "cancel", "id": "last"}, ctx)
    assert [r["id"] for r in json.loads(last.for_llm)] == [rows[3].id]
    again = await call("subagents", {"action": "cancel", "id": str(rows[1].id)}, ctx)
    assert not again.ok and "is not running (it cancelled)" in again.error
    every = await call("subagents", {"action": "cancel", "id": "all"}, ctx)
    assert sorted(r["id"] for r in json.loads(every.for_llm)) == [rows[0].id, rows[2].id]
    assert manager.running == 0
    states = {r.id: r.state for r in manager.store.children(SESSION)}
    assert set(states.values()) == {"cancelled"}
    # Another session cannot see or touch them.
    other = ToolContext(channel="cli", session_key="cli:other")
    listed = await call("subagents", {"action": "list"}, other)
    assert json.loads(listed.for_llm) == []
    refused = await call("subagents", {"action": "cancel", "id": str(rows[0].id)}, other)
    assert refused.refused and "no subagent" in refused.error
    await asyncio.sleep(0.5)
    assert outlet.delivered == []  # what the parent cancelled is not announced back to it


async def test_steer_cancels_settles_and_respawns_with_the_new_instructions(setup, llm):
    runtime, _, manager, _ = setup()
    llm.route(task_is("Scan bus 1"), hang())
    llm.route(task_is("Scan bus 2 instead"), openai_text("bus 2: nothing there"))
    ctx = ToolContext(channel="cli", session_key=SESSION)
    first = await spawn(manager, "Scan bus 1", ctx, label="scan")
    await asyncio.sleep(0.2)
    started = asyncio.get_running_loop().time()
    steered = await runtime.registry.execute(
        "subagents", {"action": "steer", "id": "last", "message": "Scan bus 2 instead"}, ctx
    )
    assert steered.ok, steered.error
    assert asyncio.get_running_loop().time() - started >= 0.5  # it settled before the respawn
    new = json.loads(steered.for_llm)[0]
    assert new["id"] != first.id and new["label"] == "scan"
    assert manager.store.get(first.id).state == "cancelled"
    done = await manager.wait(new["id"], ctx)
    assert done.result == "bus 2: nothing there"
    assert "its task was: Scan bus 1" in done.task


# -- limits ---------------------------------------------------------------------------------------------
async def test_the_limits_refuse_with_their_reason(setup, llm):
    runtime, _, manager, _ = setup({"max_concurrent": 3, "max_children": 2})
    for task in ("A", "B", "C", "D"):
        llm.route(task_is(task), hang())
    call = runtime.registry.execute
    mine = ToolContext(channel="cli", session_key=SESSION)
    theirs = ToolContext(channel="cli", session_key="cli:other")
    assert (await call("spawn", {"task": "A"}, mine)).ok
    assert (await call("spawn", {"task": "B"}, mine)).ok
    third = await call("spawn", {"task": "C"}, mine)
    assert third.refused and "tools.subagents.max_children" in third.error
    assert (await call("spawn", {"task": "C"}, theirs)).ok
    fourth = await call("spawn", {"task": "D"}, theirs)
    assert fourth.refused and "3 subagents are running" in fourth.error and "max_concurrent" in fourth.error
    deep = await call(
        "spawn", {"task": "D"}, ToolContext(channel="cli", session_key="subagent:9", subagent_depth=1)
    )
    assert deep.refused  # the leaf deny list already takes spawn away at the maximum depth
    # Past the depth limit even where the policy would allow it (max_depth 0: no subagents at all).
    with pytest.raises(Exception, match="spawn depth limit"):
        manager.limits = type(manager.limits)(max_depth=0)
        await spawn(manager, "A", mine)
    assert manager.store.count_active() == 3  # nothing refused was started


async def test_a_child_runs_out_of_iterations_and_of_time(setup, llm):
    # A time limit the looping child's two quick steps stay far inside on a busy machine too.
    _, _, manager, _ = setup({"max_iterations": 2, "timeout_s": 4})
    llm.route(task_is("Loop"), *[openai_tools(("list_files", {}))] * 3)
    llm.route(task_is("Slow"), hang(30))
    ctx = ToolContext(channel="cli", session_key=SESSION)
    looping = await spawn(manager, "Loop for ever", ctx)
    slow = await spawn(manager, "Slow thing", ctx)
    done = await asyncio.wait_for(manager.wait(looping.id, ctx), 20)
    assert done.state == "failed" and "Stopped after 2 model steps" in done.result
    assert len(requests_for(llm, "Loop")) == 2
    late = await asyncio.wait_for(manager.wait(slow.id, ctx), 20)
    assert late.state == "failed" and "after 4 s" in late.result


# -- deny lists -------------------------------------------------------------------------------------------
async def test_deny_lists_at_depth_zero_and_at_the_maximum_depth(setup, llm):
    runtime, agent, _, _ = setup({"max_depth": 2})
    llm.route(
        task_is("Depth one"), openai_tools(("spawn", {"task": "Depth two", "mode": "run"})), openai_text("1")
    )
    llm.route(task_is("Depth two"), openai_text("2"))
    llm.reply(openai_tools(("sessions_spawn", {"task": "Depth one", "mode": "run"})), openai_text("done"))
    assert (await agent.handle(msg("nest"))).text == "done"
    parent = tool_names(parents(llm)[0])
    one = tool_names(requests_for(llm, "Depth one")[0])
    two = tool_names(requests_for(llm, "Depth two")[0])
    registered = set(runtime.registry.names())
    always = set(SUBAGENT_ALWAYS_DENY) & registered
    leaf = set(SUBAGENT_LEAF_DENY) & registered
    assert always and leaf
    assert always | leaf <= parent  # the parent (depth 0) has them all
    assert not always & one and leaf <= one  # depth 1 of 2: not a leaf yet, may spawn
    assert not always & two and not leaf & two  # depth 2 = max: a leaf
    assert {"read_file", "i2c", "exec"} <= two
    # The policy says which step took a tool away.
    sub = ToolContext(channel="cli", session_key="subagent:1", subagent_depth=2)
    refused = await runtime.registry.execute("sessions_send", {"session": "cli:x", "text": "hi"}, sub)
    assert refused.refused and "subagent deny list" in refused.error
    leafed = await runtime.registry.execute("spawn", {"task": "x"}, sub)
    assert leafed.refused and "leaf deny list" in leafed.error


async def test_a_child_only_narrows_its_parents_tools(setup, llm):
    _, agent, _, _ = setup(
        tools={"channels": {"cli": {"allow": ["group:fs", "group:sessions", "group:runtime", "i2c"]}}}
    )
    llm.route(task_is("Narrow"), openai_tools(("exec", {"command": "id"})), openai_text("no shell"))
    llm.reply(
        openai_tools(("sessions_spawn", {"task": "Narrow it", "tools": ["read_file", "i2c"], "mode": "run"})),
        openai_tools(("sessions_spawn", {"task": "Wider", "tools": ["gpio"]})),
        openai_text("ok"),
    )
    await agent.handle(msg("go"))
    assert "exec" in tool_names(parents(llm)[0])  # the parent has a shell
    offered = tool_names(requests_for(llm, "Narrow")[0])
    assert offered == {"read_file", "i2c"}
    child_exec = tool_results(requests_for(llm, "Narrow")[1])[0]
    assert "not among the tools of the session that spawned this subagent" in child_exec
    wider = tool_results(parents(llm)[-1])[-1]
    assert "only have tools this session may use; not: gpio" in wider
