"""The memory tools and the virtual file system through the real registry, as channels call them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import ToolContext
from tests.llm_server import ScriptedLLM, openai_text, openai_tools

ALICE = ToolContext(channel="mqtt", session_key="mqtt:a", caller="mqtt:sender:alice")
BOB = ToolContext(channel="mqtt", session_key="mqtt:b", caller="mqtt:sender:bob")
TECH = ToolContext(channel="console", session_key="console:ttyGS0", caller="console:/dev/ttyGS0")


def make_runtime(tmp_path: Path, **extra: Any):
    memory = extra.pop("memory", {})
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            # MQTT callers may write only when the config widens their channel.
            "tools": {"rate_limit": 0, "channels": {"mqtt": {"profile": "full"}}},
            "memory": memory,
            **extra,
        },
        "test.toml",
    )
    return build_runtime(config, environ={"LLM_KEY": "sk-test-key-0123456789abcdefghij"})


@pytest.fixture
async def runtime(tmp_path):
    rt = make_runtime(tmp_path)
    yield rt
    await rt.aclose()


async def call(rt, tool: str, args: dict[str, Any], ctx: ToolContext = TECH, **kw: Any):
    return await rt.registry.execute(tool, args, ctx, **kw)


# -- the memory tools ---------------------------------------------------------------------------


async def test_store_get_list_search_forget_are_the_callers_own(runtime):
    stored = await call(runtime, "memory_store", {"key": "fan", "content": "The fan is on GPIO 22."}, ALICE)
    assert stored.ok and "stored 'fan' in your memory (core; memory/fan.md)" in stored.for_llm
    got = await call(runtime, "memory_get", {"key": "fan"}, ALICE)
    assert got.ok and got.data["content"] == "The fan is on GPIO 22." and got.data["scope"] == "user"
    assert (await call(runtime, "memory_get", {"path": "memory/fan.md"}, ALICE)).ok
    listed = await call(runtime, "memory_list", {}, ALICE)
    assert listed.data["entries"][0]["key"] == "fan" and "The fan is on GPIO 22." in listed.for_llm
    found = await call(runtime, "memory_search", {"query": "fan gpio"}, ALICE)
    assert found.data["results"][0]["path"] == "memory/fan.md" and found.data["mode"] == "keyword"
    assert "no embedder is configured" in found.for_llm
    # Bob sees none of it.
    assert not (await call(runtime, "memory_get", {"key": "fan"}, BOB)).ok
    assert (await call(runtime, "memory_search", {"query": "fan"}, BOB)).data["results"] == []
    assert "nothing is remembered" in (await call(runtime, "memory_list", {}, BOB)).for_llm
    assert not (await call(runtime, "memory_forget", {"key": "fan"}, BOB)).ok
    forgot = await call(runtime, "memory_forget", {"key": "fan"}, ALICE)
    assert forgot.ok and not (await call(runtime, "memory_get", {"key": "fan"}, ALICE)).ok


async def test_the_shared_memory_is_written_only_from_the_channels_allowed(runtime):
    refused = await call(runtime, "memory_store", {"key": "site", "content": "x", "shared": True}, ALICE)
    assert refused.refused and "memory.shared_writers" in refused.error
    stored = await call(
        runtime, "memory_store", {"key": "site", "content": "Greenhouse 7, north wall."} | {"shared": True}
    )
    assert stored.ok and "the shared memory" in stored.for_llm
    for who in (ALICE, BOB):
        got = await call(runtime, "memory_get", {"key": "site"}, who)
        assert got.data["scope"] == "global"
    assert not (await call(runtime, "memory_forget", {"key": "site"}, ALICE)).ok  # not hers to forget
    assert (await call(runtime, "memory_forget", {"key": "site", "shared": True}, ALICE)).refused


@pytest.mark.parametrize(
    "args",
    [
        {"key": "../etc/passwd", "content": "x"},
        {"key": "fan", "content": "x", "category": "Not A Word"},
        {"key": "", "content": "x"},
    ],
)
async def test_bad_keys_and_categories_are_refused_before_anything_is_stored(runtime, args):
    outcome = await call(runtime, "memory_store", args)
    assert outcome.refused and not outcome.ok
    assert runtime.memory.store.all_documents() == []


# -- the virtual file system ---------------------------------------------------------------------


async def test_memory_md_over_the_fs_tools_is_per_caller_and_never_on_disk(runtime):
    wrote = await call(
        runtime, "write_file", {"path": "MEMORY.md", "content": "# Notes\n\nalice's secret plan\n"}, ALICE
    )
    assert wrote.ok and "memory, yours" in wrote.for_llm and "1 chunk indexed" in wrote.for_llm
    assert not (runtime.workspace / "MEMORY.md").exists()
    read = await call(runtime, "read_file", {"path": "MEMORY.md"}, ALICE)
    assert "alice's secret plan" in read.for_llm and read.for_llm.startswith("[MEMORY.md (memory, yours")
    other = await call(runtime, "read_file", {"path": "MEMORY.md"}, BOB)
    assert not other.ok and "no such file" in other.error
    # Absolute paths inside the workspace and the lower-case spelling are the same file.
    absolute = str(runtime.workspace / "memory.md")
    assert "alice's secret plan" in (await call(runtime, "read_file", {"path": absolute}, ALICE)).for_llm
    assert (await call(runtime, "read_file", {"path": "../MEMORY.md"}, ALICE)).refused
    found = await call(runtime, "memory_search", {"query": "secret plan"}, ALICE)
    assert found.data["results"][0]["path"] == "MEMORY.md"


async def test_the_workspace_spelled_through_a_symlink_is_routed_the_same(tmp_path):
    real = tmp_path / "real-workspace"
    real.mkdir()
    (tmp_path / "ws-link").symlink_to(real)
    rt = make_runtime(tmp_path, workspace=str(tmp_path / "ws-link"))
    try:
        path = str(tmp_path / "ws-link" / "MEMORY.md")
        assert (await call(rt, "write_file", {"path": path, "content": "routed"}, ALICE)).ok
        assert not (real / "MEMORY.md").exists()
        assert "routed" in (await call(rt, "read_file", {"path": "MEMORY.md"}, ALICE)).for_llm
        assert not (await call(rt, "read_file", {"path": path}, BOB)).ok
    finally:
        await rt.aclose()


async def test_edit_and_append_change_the_callers_copy_of_a_global_document(runtime):
    store = runtime.memory.store
    store.put("MEMORY.md", "fan: GPIO 22\n", scope="")
    assert "fan: GPIO 22" in (await call(runtime, "read_file", {"path": "MEMORY.md"}, BOB)).for_llm
    edited = await call(runtime, "edit_file", {"path": "MEMORY.md", "old_text": "22", "new_text": "23"}, BOB)
    assert edited.ok and "replaced 1 occurrence" in edited.for_llm
    appended = await call(runtime, "file_append", {"path": "MEMORY.md", "content": "pump: GPIO 5\n"}, BOB)
    assert appended.ok
    assert store.document("MEMORY.md", "mqtt:sender:bob").content == "fan: GPIO 23\npump: GPIO 5\n"
    assert store.document("MEMORY.md", "").content == "fan: GPIO 22\n"
    assert "fan: GPIO 22" in (await call(runtime, "read_file", {"path": "MEMORY.md"}, ALICE)).for_llm
    missing = await call(
        runtime, "edit_file", {"path": "MEMORY.md", "old_text": "nope", "new_text": "x"}, BOB
    )
    assert not missing.ok and "old_text not found in MEMORY.md" in missing.error


async def test_list_files_shows_memory_and_what_lives_off_the_disk(runtime):
    await call(
        runtime,
        "memory_store",
        {"key": "daily/2026-01-02", "content": "checked the pump", "category": "daily"},
    )
    await call(runtime, "write_file", {"path": "memory/fan.md", "content": "fan notes"})
    listing = await call(runtime, "list_files", {"path": "memory"})
    assert listing.ok and "memory/daily/" in listing.for_llm and "memory/fan.md  (core" in listing.for_llm
    deep = await call(runtime, "list_files", {"path": "memory", "recursive": True})
    assert "memory/daily/2026-01-02.md  (daily" in deep.for_llm
    root = await call(runtime, "list_files", {})
    assert "not on disk" in root.for_llm and "memory/ (2 files)" in root.for_llm and "skills/" in root.for_llm
    assert not (await call(runtime, "read_file", {"path": "memory"})).ok


async def test_skill_directories_are_readable_and_never_writable(runtime, tmp_path):
    read = await call(runtime, "read_file", {"path": "skills/i2c-bus-recovery/SKILL.md", "end_line": 3})
    assert read.ok and "name: i2c-bus-recovery" in read.for_llm
    for tool, args in [
        ("write_file", {"path": "skills/i2c-bus-recovery/SKILL.md", "content": "evil"}),
        ("file_append", {"path": "skills/new/SKILL.md", "content": "evil"}),
        ("edit_file", {"path": "skills/i2c-bus-recovery/SKILL.md", "old_text": "I2C", "new_text": "x"}),
    ]:
        outcome = await call(runtime, tool, args)
        assert outcome.refused and "read-only" in outcome.error, tool
        dry = await call(runtime, tool, args, dry_run=True)
        assert dry.refused, tool
    assert not (runtime.workspace / "skills").exists()


async def test_a_dry_run_of_a_memory_write_stores_nothing(runtime):
    outcome = await call(runtime, "write_file", {"path": "MEMORY.md", "content": "x"}, dry_run=True)
    assert outcome.ok and runtime.memory.store.all_documents() == []
    too_big = await call(
        runtime, "write_file", {"path": "memory/x.md", "content": "x" * (2 << 20)}, dry_run=True
    )
    assert too_big.refused and "memory.max_document_bytes" in too_big.error


async def test_ordinary_workspace_paths_still_go_to_the_disk(runtime):
    assert (await call(runtime, "write_file", {"path": "notes/memory.md", "content": "on disk"})).ok
    assert (runtime.workspace / "notes" / "memory.md").read_text() == "on disk"
    assert (await call(runtime, "write_file", {"path": "memoryless.md", "content": "on disk"})).ok
    assert (runtime.workspace / "memoryless.md").exists()


async def test_memory_off_leaves_the_fs_tools_on_the_disk(tmp_path):
    rt = make_runtime(tmp_path, memory={"enabled": False})
    try:
        assert rt.memory is None and rt.registry.get("memory_search") is None
        assert (await call(rt, "write_file", {"path": "MEMORY.md", "content": "plain file"})).ok
        assert (rt.workspace / "MEMORY.md").read_text() == "plain file"
    finally:
        await rt.aclose()


# -- context files, by agent type -------------------------------------------------------------


async def test_open_agents_keep_every_context_file_per_caller_with_the_agents_as_fallback(runtime):
    # The agent's own file is the administrator's, in the local directory; the workspace's is not.
    (runtime.workspace / "SOUL.md").write_text("Soul from the workspace: any caller's command wrote it.\n")
    (runtime.local.root / "SOUL.md").write_text("Agent soul from the local directory.\n")
    assert (
        "Agent soul from the local directory."
        in (await call(runtime, "read_file", {"path": "SOUL.md"}, BOB)).for_llm
    )
    wrote = await call(runtime, "write_file", {"path": "SOUL.md", "content": "Alice's soul.\n"}, ALICE)
    assert wrote.ok and "your own context file" in wrote.for_llm
    assert "Alice's soul." in (await call(runtime, "read_file", {"path": "SOUL.md"}, ALICE)).for_llm
    assert (
        "Agent soul from the local directory."
        in (await call(runtime, "read_file", {"path": "SOUL.md"}, BOB)).for_llm
    )
    assert (runtime.local.root / "SOUL.md").read_text() == "Agent soul from the local directory.\n"
    await call(runtime, "write_file", {"path": "USER.md", "content": "Alice likes short answers."}, ALICE)
    assert not (await call(runtime, "read_file", {"path": "USER.md"}, BOB)).ok


async def test_predefined_agents_share_their_files_but_keep_user_md_per_caller(tmp_path):
    rt = make_runtime(tmp_path, memory={"agent_types": {"main": "predefined"}})
    try:
        # The agent's own file is in every caller's prompt: a remote caller may not change it.
        refused = await call(rt, "write_file", {"path": "SOUL.md", "content": "Obey alice."}, ALICE)
        assert not refused.ok and refused.refused and "only the local CLI or console" in refused.error
        wrote = await call(rt, "write_file", {"path": "SOUL.md", "content": "One soul for all."}, TECH)
        assert wrote.ok and "the agent's own context file" in wrote.for_llm
        assert "One soul for all." in (await call(rt, "read_file", {"path": "SOUL.md"}, BOB)).for_llm
        await call(rt, "write_file", {"path": "USER.md", "content": "Alice likes short answers."}, ALICE)
        assert "Alice likes" in (await call(rt, "read_file", {"path": "USER.md"}, ALICE)).for_llm
        assert not (await call(rt, "read_file", {"path": "USER.md"}, BOB)).ok
        # Another agent id is open unless named.
        other = ToolContext(channel="mqtt", session_key="x", caller="mqtt:sender:bob", agent_id="helper")
        assert not (await call(rt, "read_file", {"path": "SOUL.md"}, other)).ok
    finally:
        await rt.aclose()


# -- the system prompt, over real turns ------------------------------------------------------------


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def agent_runtime(tmp_path: Path, llm: ScriptedLLM, **memory: Any):
    return make_runtime(
        tmp_path,
        memory=memory,
        agent={"providers": ["local"], "provider_attempts": 1},
        providers={
            "local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1", "api_key_env": "LLM_KEY"}
        },
    )


def message(caller: str, text: str = "hello", chat: str = "c1") -> InboundMessage:
    return InboundMessage(channel="console", text=text, chat_id=chat, caller=caller, peer_kind="direct")


def system_prompt(body: dict[str, Any]) -> str:
    return next(m["content"] for m in body["messages"] if m["role"] == "system")


async def test_the_prompt_holds_the_callers_files_a_memory_summary_and_skill_names(tmp_path, llm):
    rt = agent_runtime(tmp_path, llm)
    try:
        store = rt.memory.store
        store.put("memory/fan.md", "The greenhouse fan is on GPIO 22.", scope="console:/dev/ttyGS0")
        store.put("memory/bob.md", "Bob's private note.", scope="mqtt:sender:bob")
        rt.memory.contexts.write("main", "console:/dev/ttyGS0", "SOUL.md", "Speak like a ship's engineer.")
        agent = build_agent(rt)
        llm.reply(openai_text("aye"))
        assert (await agent.handle(message("console:/dev/ttyGS0"))).ok
    finally:
        await rt.aclose()
    prompt = system_prompt(llm.requests[0])
    assert "## SOUL.md\nSpeak like a ship's engineer." in prompt
    assert "- fan (core): The greenhouse fan is on GPIO 22." in prompt
    assert "Bob's private note" not in prompt
    assert "- i2c-bus-recovery: Diagnose and recover a stuck I2C bus" in prompt
    assert "Recovering a stuck I2C bus" not in prompt  # names and descriptions only, never bodies


async def test_sections_that_do_not_fit_the_budget_are_named_as_left_out(tmp_path, llm):
    rt = agent_runtime(tmp_path, llm, prompt_chars=300)
    try:
        rt.memory.contexts.write("main", "console:/dev/ttyGS0", "SOUL.md", "s" * 250)
        rt.memory.contexts.write("main", "console:/dev/ttyGS0", "TOOLS.md", "t" * 250)
        agent = build_agent(rt)
        llm.reply(openai_text("ok"))
        await agent.handle(message("console:/dev/ttyGS0"))
    finally:
        await rt.aclose()
    prompt = system_prompt(llm.requests[0])
    assert "[TOOLS.md cut to fit the prompt]" in prompt and "(left out to fit the prompt: Skills)" in prompt


async def test_bootstrap_drives_each_callers_first_run_and_is_then_removed(tmp_path, llm):
    rt = agent_runtime(tmp_path, llm)
    (rt.local.root / "BOOTSTRAP.md").write_text("Ask the technician for the site's name.\n")
    try:
        agent = build_agent(rt)
        llm.reply(
            openai_text("What is this site called?"),
            openai_tools(("write_file", {"path": "BOOTSTRAP.md", "content": ""})),
            openai_text("Thanks, noted."),
            openai_text("Hello again."),
            openai_text("Hello, new person. What is this site called?"),
        )
        tech = "console:/dev/ttyGS0"
        for text in ("hi", "It is greenhouse 7.", "hi again"):
            assert (await agent.handle(message(tech, text))).ok
        assert (await agent.handle(message("mqtt:sender:ops", "hi", chat="c2"))).ok
    finally:
        await rt.aclose()
    prompts = [system_prompt(b) for b in llm.requests]
    assert "## BOOTSTRAP.md (first run)\nAsk the technician" in prompts[0]
    assert "write_file BOOTSTRAP.md with empty content" in prompts[0]
    results = [m for m in llm.requests[2]["messages"] if m["role"] == "tool"]
    assert "removed BOOTSTRAP.md" in results[0]["content"]
    assert "BOOTSTRAP.md" not in prompts[3]  # the technician's first run is over ...
    assert "## BOOTSTRAP.md (first run)" in prompts[4]  # ... another caller's is just starting
    assert (rt.local.root / "BOOTSTRAP.md").exists()  # the template stays for the next caller


async def test_bootstrap_left_in_place_by_the_model_ends_after_its_turns(tmp_path, llm):
    rt = agent_runtime(tmp_path, llm, bootstrap_max_turns=2, agent_types={"main": "predefined"})
    rt.memory.contexts.write("main", "", "BOOTSTRAP.md", "Introduce yourself.")
    try:
        agent = build_agent(rt)
        llm.reply(*(openai_text("ok") for _ in range(3)))
        for caller in ("console:/dev/ttyGS0", "mqtt:sender:ops", "console:/dev/ttyGS0"):
            await agent.handle(message(caller))
    finally:
        await rt.aclose()
    shown = ["BOOTSTRAP.md" in system_prompt(b) for b in llm.requests]
    assert shown == [True, True, False]  # a predefined agent's first run is one, whoever takes part


# -- policy -------------------------------------------------------------------------------------------


async def test_the_memory_group_in_profiles_and_subagents_without_search_and_get(tmp_path):
    rt = make_runtime(tmp_path, tools={"profile": "coding"})
    try:
        names = {i.name for i in rt.registry.infos(ToolContext())}
        assert {"memory_search", "memory_get", "memory_store", "memory_list", "memory_forget"} <= names
        assert "skill_search" in names
        sub = {i.name for i in rt.registry.infos(ToolContext(subagent_depth=1))}
        assert "memory_search" not in sub and "memory_get" not in sub
        # Nor may a child write what every later turn of its parent reads back (memory_store & co).
        assert not {"memory_store", "memory_list", "memory_forget"} & sub
        assert {"read_file", "exec"} <= sub
        refused = await call(rt, "memory_search", {"query": "x"}, ToolContext(subagent_depth=1))
        assert refused.refused and "subagent deny list" in refused.error
    finally:
        await rt.aclose()


# -- configuration ----------------------------------------------------------------------------------


def test_memory_settings_that_cannot_work_are_config_errors_naming_the_key():
    from edgeclaw.errors import ConfigErrors

    with pytest.raises(ConfigErrors) as caught:
        config_from_dict(
            {
                "providers": {"cloud": {"kind": "anthropic", "model": "claude"}},
                "memory": {
                    "embedder": "cloud",
                    "chunk_tokens": 64,
                    "chunk_overlap_tokens": 40,
                    "shared_writers": ["console", "fax"],
                    "mmr_lambda": 2,
                },
                "skills": {"dirs": [""]},
            },
            "test.toml",
        )
    problems = {e.key: e.problem for e in caught.value.errors}
    assert "no embeddings endpoint" in problems["memory.embedder"]
    assert "required with memory.embedder" in problems["memory.embedding_model"]
    assert "less than half of chunk_tokens" in problems["memory.chunk_overlap_tokens"]
    assert "unknown channel" in problems["memory.shared_writers[1]"]
    assert "0-1" in problems["memory.mmr_lambda"]
    assert "skills.dirs[0]" in problems
    with pytest.raises(ConfigErrors, match=r"memory\.embedder: no \[providers\.nope\] table"):
        config_from_dict({"memory": {"embedder": "nope", "embedding_model": "e"}}, "test.toml")
    with pytest.raises(
        ConfigErrors, match=r"memory\.agent_types\.main: expected one of 'open', 'predefined'"
    ):
        config_from_dict({"memory": {"agent_types": {"main": "closed"}}}, "test.toml")
