"""What stays apart between callers, in a real daemon (`edgeclaw run`) behind a real mosquitto, with
a scripted model on loopback: each test replays an attack a caller holding only its own key tried.

- A job runs with its owner's tools, whatever agent it names: a caller whose own agent denies `exec`
  does not get `exec` by scheduling a prompt for an agent that allows it. The admin topics' jobs
  keep the administrator's full authority.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.automation import caller_profiles
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import ToolRefused
from edgeclaw.net.signing import envelope
from edgeclaw.store.jobs import Job, Owner, new_job_id
from edgeclaw.tools.automation.authority import JobAuthority
from edgeclaw.tools.base import ToolContext
from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools
from tests.mqtt_support import Caller, needs_mosquitto, poll
from tests.test_automation_daemon import BASE, broker, daemons, mqtt_config

__all__ = ["broker", "daemons"]  # the fixtures, shared with tests/test_automation_daemon.py

ANSWERS = "test/isolation-answers"
SECRETS = {"alice": "alice-key-0a1b2c3d", "boss": "boss-key-2a3b4c5d"}
ENV = {f"EC_KEY_{name.upper()}": secret for name, secret in SECRETS.items()}
MARK = "PWNED-7f3a"


def config(port: int, llm: ScriptedLLM, extra: str = "") -> str:
    """alice operates, boss administers; the main agent denies exec, the ops agent allows it."""
    return mqtt_config(port) + (
        '[callers.alice]\nsecret_env = "EC_KEY_ALICE"\nroles = ["operate"]\n'
        '[callers.boss]\nsecret_env = "EC_KEY_BOSS"\nroles = ["admin"]\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\n'
        '[agent]\nproviders = ["local"]\n'
        '[agents.ops]\nsystem_prompt = "You run operations."\n'
        "[tools]\nrate_limit = 0\n"
        '[tools.channels.mqtt]\nprofile = "full"\n'
        '[tools.agents.main]\ndeny = ["exec"]\n' + extra
    )


def signed(name: str, topic: str, body: dict[str, Any]) -> bytes:
    return envelope(SECRETS[name].encode(), topic, body, response_topic=ANSWERS, key=name)


async def ask(c: Caller, topic: str, payload: bytes, request_id: str) -> dict[str, Any]:
    await c.publish(topic, payload, response_topic=ANSWERS)
    [got] = await c.wait_for(lambda: [m.json for m in c.on(ANSWERS) if m.json.get("id") == request_id], 30)
    return got


def exec_then_report(body: dict[str, Any]) -> Scripted:
    """A model that asks for `exec` once, then reports what the tool answered."""
    last = body["messages"][-1]
    if last.get("role") == "tool":
        return openai_text(f"tool said: {last.get('content')}")
    return openai_tools(("exec", {"command": f"echo {MARK}"}))


def tool_results(llm: ScriptedLLM) -> list[str]:
    return [str(m.get("content")) for r in llm.requests for m in r["messages"] if m.get("role") == "tool"]


def offered(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools", ())}


@needs_mosquitto
async def test_a_prompt_job_naming_a_wider_agent_runs_with_its_owners_tools(tmp_path: Path, broker, daemons):
    with ScriptedLLM() as llm:
        llm.reply(*[exec_then_report] * 40)
        daemons(tmp_path, config(broker.port, llm), ENV).start()
        async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
            await c.wait_for(lambda: any(m.json.get("state") == "online" for m in c.on(f"{BASE}/status")), 40)
            # alice's own agent (main) may not exec: neither directly nor as a tool job.
            call = f"{BASE}/tool/call"
            direct = {"id": "d1", "tool": "exec", "args": {"command": f"echo {MARK}"}}
            assert (await ask(c, call, signed("alice", call, direct), "d1"))["code"] == "policy"
            add = {"action": "add", "every": "2s", "prompt": "Check the disks.", "agent": "ops", "to": "none"}
            made = await ask(c, call, signed("alice", call, {"id": "a1", "tool": "cron", "args": add}), "a1")
            assert made["ok"] is True, made
            await poll(lambda: len(tool_results(llm)) >= 2, 40, "two runs of the job")
            # The ops agent's turn ran for alice, within alice's tools: exec was not offered, and the
            # model's call of it was refused; the command never ran.
            job_turns = [r for r in llm.requests if "Check the disks." in json.dumps(r["messages"])]
            assert job_turns and not any("exec" in offered(r) for r in job_turns)
            assert all(MARK not in text.replace(f"echo {MARK}", "") for text in tool_results(llm))
            assert all("not allowed" in text for text in tool_results(llm)), tool_results(llm)
            gone = {"action": "remove", "id": made["data"]["job"]["id"]}
            removed = await ask(
                c, call, signed("alice", call, {"id": "a2", "tool": "cron", "args": gone}), "a2"
            )
            assert removed["ok"] is True
            # The administrator's job, over admin/cron, keeps the named agent's full authority.
            seen = len(tool_results(llm))
            admin = f"{BASE}/admin/cron"
            boss = await ask(c, admin, signed("boss", admin, {"id": "b1", **add}), "b1")
            assert boss["ok"] is True, boss
            await poll(lambda: any(MARK in t for t in tool_results(llm)[seen:]), 40, "the admin job's exec")


async def test_a_job_is_evaluated_again_at_each_run_against_its_owners_standing_now(tmp_path: Path):
    """Recorded at the making, narrowed at the run: a caller whose profile or roles were narrowed
    since gets the narrower set, or no run at all; a job never goes beyond what its owner had."""
    cfg = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "tools": {"channels": {"mqtt": {"profile": "full"}}},
            "callers": {"alice": {"secret_env": "EC_KEY_ALICE", "roles": ["operate"]}},
        },
        "test.toml",
    )
    rt = build_runtime(cfg, require_secrets=False)
    # What a caller could use when it made the job is kept with it (here: a session allowed only
    # cron and i2c, as a subagent or a message from another session is), and bounds every run.
    narrow = ToolContext(channel="mqtt", caller="mqtt:alice", tool_ceiling=frozenset({"cron", "i2c"}))
    add = {"action": "add", "every": "1m", "prompt": "x", "agent": "main", "to": "none"}
    made = await rt.registry.execute("cron", add, narrow)
    assert made.ok, made.error
    kept = rt.automation.store.get(made.data["job"]["id"])
    assert kept.owner.ceiling == {"cron", "i2c"}
    assert rt.automation.jobs.authority.run_context(kept, "0").tool_ceiling == {"cron", "i2c"}
    owner = Owner("mqtt:alice", "mqtt", "t", "device", "main", frozenset({"exec", "i2c", "read_file"}))
    job = Job(new_job_id(), "", "prompt", "every", "60.0", owner, "skip", prompt="x", agent="ops")
    authority = JobAuthority(rt.registry.policy, caller_profiles(lambda: cfg))
    assert authority.run_context(job, "1").tool_ceiling == {"exec", "i2c", "read_file"}
    cfg.callers["alice"].profile = "remote"  # narrowed since: no shell
    assert authority.run_context(job, "2").tool_ceiling == {"i2c", "read_file"}
    cfg.callers["alice"].roles = ["observe"]  # no longer operates: nothing runs for it
    with pytest.raises(ToolRefused, match="mqtt:alice may no longer operate"):
        authority.run_context(job, "3")
    del cfg.callers["alice"]
    with pytest.raises(ToolRefused):
        authority.run_context(job, "4")
    # An administrator's job has no ceiling, and a local one neither.
    for channel in ("mqtt-admin", "cli"):
        admin = Job(
            new_job_id(), "", "prompt", "every", "60.0", Owner("mqtt:boss", channel), "skip", prompt="x"
        )
        assert authority.run_context(admin, "5").tool_ceiling is None
