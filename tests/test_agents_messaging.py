"""Named agents and routes, /stop, /new and shutdown reaching subagents, sessions_send, and message to
notification services (local HTTP servers standing in for Pushover and ntfy)."""

from __future__ import annotations

import asyncio
import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

import pytest

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.loop import UnknownAgent
from edgeclaw.channels.mqtt.topics import DeviceTopics, reserved_topic
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import agent_by_name, build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import ConfigErrors
from edgeclaw.store.context_files import AGENT_SCOPE
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.outlets import DeliveryFailed, Outgoing
from edgeclaw.tools.sessions.subagents import SpawnRequest
from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools, system_text, task_is

SESSION = "cli:tech"


class Capture:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.delivered: list[tuple[str, str]] = []

    def has_session(self, session_key: str) -> bool:
        return session_key.startswith(self.prefix)

    async def to_session(self, session_key: str, text: str) -> str:
        self.delivered.append((session_key, text))
        return "captured"

    async def to_target(self, target: str, message: Outgoing) -> str:
        raise DeliveryFailed("no targets")


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
def bench_llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
async def make(tmp_path: Path, llm: ScriptedLLM):
    made = []

    def build(
        extra: dict[str, Any] | None = None, environ: dict[str, str] | None = None, state: str = "state"
    ):
        data: dict[str, Any] = {
            "board": "sim",
            "state_dir": str(tmp_path / state),
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
        }
        for key, value in (extra or {}).items():
            data[key] = {**data[key], **value} if isinstance(data.get(key), dict) else value
        runtime = build_runtime(config_from_dict(data, "test.toml"), environ=environ or {})
        agent = build_agent(runtime)
        made.append(runtime)
        return runtime, agent

    yield build
    for runtime in made:
        await runtime.aclose()


def msg(text: str, channel: str = "cli", chat: str = "tech") -> InboundMessage:
    return InboundMessage(channel, text, chat_id=chat, peer_kind="local", caller=f"{channel}:{chat}")


def hang(seconds: float = 30) -> Scripted:
    return Scripted(hang_s=seconds, body={})


# -- named agents ----------------------------------------------------------------------------------
async def test_routes_send_a_channel_to_a_named_agent_with_its_own_models_and_prompt(make, llm, bench_llm):
    runtime, agent = make(
        {
            "providers": {"bench": {"kind": "openai", "model": "b", "base_url": bench_llm.url + "/v1"}},
            "agents": {
                "bench": {
                    "description": "the bench technician's helper",
                    "type": "predefined",
                    "providers": ["bench"],
                    "system_prompt": "You help at the repair bench.",
                    "max_iterations": 3,
                }
            },
            "agent": {"routes": [{"channel": "console", "agent": "bench"}]},
        }
    )
    llm.reply(openai_text("main here"))
    bench_llm.reply(openai_text("bench here"), openai_text("bench again"))
    assert (await agent.handle(msg("hi"))).text == "main here"
    assert (await agent.handle(msg("hi", "console", "/dev/ttyGS0"))).text == "bench here"
    assert "You help at the repair bench." in system_text(bench_llm.requests[0])
    assert "repair bench" not in system_text(llm.requests[0])
    # A job (or anything else) can name the agent whatever the routes say.
    named = agent_by_name(runtime, "bench")
    assert (await named.handle(msg("again"))).text == "bench again"
    with pytest.raises(UnknownAgent, match="no agent named 'nope' \\(configured: bench, main\\)"):
        agent_by_name(runtime, "nope")
    # The agent's type drives where its context files live: predefined keeps SOUL.md the agent's own.
    assert runtime.memory is not None
    assert runtime.memory.contexts.placement("bench", "cli:tech", "SOUL.md").write == AGENT_SCOPE
    assert runtime.memory.contexts.placement("main", "cli:tech", "SOUL.md").write == "cli:tech"
    listed = await runtime.registry.execute(
        "agents_list", {}, ToolContext(channel="console", agent_id="bench")
    )
    agents = {a["name"]: a for a in json.loads(listed.for_llm)}
    assert agents["bench"]["current"] and agents["bench"]["type"] == "predefined"
    assert agents["bench"]["answers"] == ["channel console"] and agents["bench"]["providers"] == ["bench"]
    assert not agents["main"]["current"] and agents["main"]["providers"] == ["local"]


async def test_a_named_agents_soul_is_its_stored_one_never_the_local_directorys(make, llm):
    runtime, agent = make({"agents": {"bench": {"type": "predefined"}}})
    (runtime.local.root / "SOUL.md").write_text("I am the greenhouse keeper.")
    llm.reply(openai_text("1"), openai_text("2"), openai_text("3"))
    await agent.handle(msg("hi"))
    await agent.handle(InboundMessage("cli", "hi", session="cli:b", agent="bench"))
    assert "greenhouse keeper" in system_text(llm.requests[0])
    assert "greenhouse keeper" not in system_text(llm.requests[1])
    runtime.memory.contexts.write("bench", "cli:x", "SOUL.md", "I am the bench helper.")
    await agent.handle(InboundMessage("cli", "hi", session="cli:b", agent="bench"))
    assert "bench helper" in system_text(llm.requests[2])
    # The fs tools read the same: the bench's SOUL.md is its stored one.
    read = await runtime.registry.execute(
        "read_file", {"path": "SOUL.md"}, ToolContext(channel="cli", agent_id="bench", caller="cli:x")
    )
    assert "bench helper" in read.for_llm


async def test_a_child_under_a_predefined_agent_cannot_rewrite_its_soul(make, llm):
    runtime, _ = make({"agents": {"bench": {"type": "predefined"}}})
    runtime.memory.contexts.write("bench", "cli:x", "SOUL.md", "I am the bench helper.")
    child = ToolContext(
        channel="cli", agent_id="bench", session_key="subagent:1", subagent_depth=1, parent_session=SESSION
    )
    call = runtime.registry.execute
    written = await call("write_file", {"path": "SOUL.md", "content": "I obey the web page."}, child)
    assert written.refused and "a subagent may read context files, not change them" in written.error
    assert "bench helper" in (await call("read_file", {"path": "SOUL.md"}, child)).for_llm


async def test_a_session_glob_route_and_the_first_match_wins(make, llm):
    _, agent = make(
        {
            "agents": {"ops": {"system_prompt": "OPS"}, "lab": {"system_prompt": "LAB"}},
            "agent": {
                "routes": [{"session": "mqtt:ops-*", "agent": "ops"}, {"channel": "mqtt", "agent": "lab"}]
            },
        }
    )
    llm.reply(openai_text("1"), openai_text("2"))
    await agent.handle(InboundMessage("mqtt", "x", session="mqtt:ops-7"))
    await agent.handle(InboundMessage("mqtt", "x", session="mqtt:other"))
    assert "OPS" in system_text(llm.requests[0]) and "LAB" in system_text(llm.requests[1])


@pytest.mark.parametrize(
    ("data", "key", "problem"),
    [
        (
            {"agent": {"routes": [{"agent": "ghost", "channel": "cli"}]}},
            "agent.routes[0].agent",
            "no agent 'ghost'",
        ),
        ({"agent": {"routes": [{"agent": "main"}]}}, "agent.routes[0]", "set channel or session"),
        ({"agents": {"x": {"providers": ["nope"]}}}, "agents.x.providers[0]", "no [providers.nope] table"),
        ({"agents": {"bad name": {}}}, "agents.bad name", "1-32 letters"),
        (
            {"agents": {"b": {"type": "open"}}, "memory": {"agent_types": {"b": "predefined"}}},
            "memory.agent_types.b",
            "agents.NAME.type is the place",
        ),
        (
            {"notify": {"pushover": {"token_env": "T"}}},
            "notify.pushover",
            "user_env or user_file is required",
        ),
        ({"notify": {"ntfy": {}}}, "notify.ntfy.topics", "at least one topic"),
        ({"tools": {"subagents": {"max_children": 0}}}, "tools.subagents.max_children", ">= 1"),
    ],
)
def test_agent_and_notify_config_errors_name_the_key(data, key, problem):
    from edgeclaw.config.checks import check_config

    with pytest.raises(ConfigErrors) as info:
        check_config(config_from_dict(data, "t.toml"))
    assert any(e.key == key and problem in e.problem for e in info.value.errors), info.value


# -- /stop, /new and shutdown reach children -------------------------------------------------------
async def test_stop_cancels_the_turns_children_but_not_detached_ones(make, llm):
    runtime, agent = make()
    manager = runtime.subagents
    llm.route(task_is("Attached"), hang())
    llm.route(task_is("Detached"), Scripted(hang_s=1.0, body=openai_text("detached done").body))
    llm.reply(
        openai_tools(
            ("spawn", {"task": "Attached work"}), ("spawn", {"task": "Detached work", "detached": True})
        ),
        hang(),  # the parent's turn goes on and is stopped here
    )
    turn = asyncio.create_task(agent.handle(msg("start")))
    while manager.running < 2 or len(llm.requests) < 4:  # noqa: ASYNC110 - state in another thread
        await asyncio.sleep(0.02)
    assert (await agent.handle(msg("/stop"))).text == "Stopping the model's turn."
    assert (await turn).text == "Stopped."
    deadline = asyncio.get_running_loop().time() + 20
    while (rows := {r.task: r for r in manager.store.children(SESSION)})["Attached work"].state == "running":
        assert asyncio.get_running_loop().time() < deadline, "the attached child is still running"
        await asyncio.sleep(0.02)
    assert rows["Attached work"].state == "cancelled"
    assert "the turn that started it was stopped" in rows["Attached work"].result
    done = await asyncio.wait_for(
        manager.wait(rows["Detached work"].id, ToolContext(session_key=SESSION)), 10
    )
    assert done.state == "completed" and done.result == "detached done"


async def test_new_cancels_the_conversations_children_unless_detached(make, llm):
    runtime, agent = make()
    manager = runtime.subagents
    llm.route(task_is("One"), hang())
    llm.route(task_is("Two"), hang())
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    one = manager.spawn(SpawnRequest("One"), ctx)
    two = manager.spawn(SpawnRequest("Two", detached=True), ctx)
    await asyncio.sleep(0.1)
    reply = await agent.handle(msg("/new"))
    assert reply.ok
    assert manager.store.get(one.id).state == "cancelled" and manager.store.get(two.id).state == "running"
    await manager.cancel(ctx, "all")


async def test_shutdown_gives_children_the_grace_then_interrupts_and_the_next_start_tells(make, llm):
    runtime, _ = make()
    outlet = Capture("cli:")
    manager = runtime.subagents
    llm.route(task_is("Quick"), Scripted(hang_s=0.3, body=openai_text("quick done").body))
    llm.route(task_is("Slow"), hang(30))
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    quick = manager.spawn(SpawnRequest("Quick"), ctx)
    slow = manager.spawn(SpawnRequest("Slow", label="slow"), ctx)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    while len(llm.requests) < 2:  # both children are with the model
        assert loop.time() < deadline, "the children did not ask the model"
        await asyncio.sleep(0.02)
    # A grace ten times what the quick child still needs, so a busy machine does not make it late.
    started = loop.time()
    await runtime.drain(3.0)
    assert 2.9 <= loop.time() - started < 15
    assert manager.store.get(quick.id).state == "completed"
    assert manager.store.get(slow.id).state == "interrupted"
    refused = await runtime.registry.execute("spawn", {"task": "late"}, ctx)
    assert not refused.ok  # shutting down: no new children
    await runtime.aclose()
    # The next start: both results (the one ended during the grace, and the interrupted one) are told.
    runtime2, _ = make()
    runtime2.outlets.register("cli", outlet)
    llm.reply(lambda body: openai_text("told: " + body["messages"][-1]["content"].split("\n", 1)[1]))
    await runtime2.ready()
    await asyncio.wait_for(runtime2.subagents.settled(SESSION), 10)
    ((session, text),) = outlet.delivered
    assert session == SESSION
    assert "subagent 1: completed" in text and "subagent 2 (slow): interrupted" in text


# -- sessions_send ---------------------------------------------------------------------------------
async def test_sessions_send_stays_on_the_callers_channel_by_default(make, llm):
    runtime, _ = make()
    runtime.sessions.append(
        "console:/dev/ttyGS0", "console", json.dumps({"role": "user", "content": "hi"}), 1
    )
    runtime.sessions.append("cli:other", "cli", json.dumps({"role": "user", "content": "hi"}), 1)
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    call = runtime.registry.execute
    refused = await call("sessions_send", {"session": "console:/dev/ttyGS0", "text": "x"}, ctx)
    assert refused.refused and "only sessions of the caller's own channel" in refused.error
    own = await call("sessions_send", {"session": SESSION, "text": "x"}, ctx)
    assert own.refused and "that is this session" in own.error
    missing = await call("sessions_send", {"session": "cli:ghost", "text": "x"}, ctx)
    assert missing.refused and "no session 'cli:ghost'" in missing.error
    child = await call("sessions_send", {"session": "subagent:1", "text": "x"}, ctx)
    assert child.refused
    sent = await call("sessions_send", {"session": "cli:other", "text": "fan 2 is loud"}, ctx)
    assert sent.ok and "not shown now" in sent.for_llm  # no terminal is open for it: filed only
    stored = json.loads(runtime.sessions.load("cli:other")[-1][1])
    assert stored == {"role": "user", "content": "[message from agent main, session cli:tech]\nfan 2 is loud"}


async def test_a_sent_turn_runs_with_no_more_tools_than_its_sender(make, llm):
    runtime, _ = make(
        {
            "tools": {
                "sessions": {"send_scope": "all"},
                "channels": {"cli": {"allow": ["group:sessions", "read_file"]}},
            }
        }
    )
    console = Capture("console:")
    runtime.outlets.register("console", console)
    runtime.sessions.append(
        "console:/dev/ttyGS0", "console", json.dumps({"role": "user", "content": "hi"}), 1
    )
    llm.reply(openai_text("On it."))
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    sent = await runtime.registry.execute(
        "sessions_send",
        {"session": "console:/dev/ttyGS0", "text": "/new please check fan 2", "mode": "turn"},
        ctx,
    )
    assert sent.ok, sent.error
    while not console.delivered:  # noqa: ASYNC110
        await asyncio.sleep(0.02)
    assert console.delivered == [("console:/dev/ttyGS0", "On it.")]
    offered = {t["function"]["name"] for t in llm.requests[0]["tools"]}
    assert "read_file" in offered and "exec" not in offered and "i2c" not in offered  # the console has them
    # Sent text is a message, never a command ("/new" did not end the conversation).
    history = [json.loads(b)["content"] for _, b in runtime.sessions.load("console:/dev/ttyGS0")]
    assert history[0] == "hi" and history[1].endswith("/new please check fan 2")


async def test_text_the_daemon_puts_into_a_session_is_never_a_slash_command(make, llm):
    runtime, agent = make()
    runtime.sessions.append(SESSION, "cli", json.dumps({"role": "user", "content": "earlier"}), 1)
    llm.reply(openai_text("that is not a command"))
    reply = await agent.handle(InboundMessage("cli", "/new", session=SESSION, origin="job 3"))
    assert reply.text == "that is not a command"
    history = [json.loads(b)["content"] for _, b in runtime.sessions.load(SESSION)]
    assert history[:2] == ["earlier", "/new"]  # not archived: the conversation goes on


async def test_a_parent_on_a_remote_channel_reads_its_childs_history_and_nobody_else_does(make, llm):
    runtime, _ = make({"tools": {"channels": {"mqtt": {"profile": "full"}}}})
    llm.route(task_is("Look"), openai_text("looked"))
    parent = ToolContext(channel="mqtt", session_key="mqtt:ops", caller="mqtt:sender:ops")
    row = runtime.subagents.spawn(SpawnRequest("Look around"), parent)
    await runtime.subagents.wait(row.id, parent)
    mine = await runtime.registry.execute("sessions_history", {"session": row.session_key}, parent)
    assert mine.ok and "looked" in mine.for_llm
    other = ToolContext(channel="mqtt", session_key="mqtt:else", caller="mqtt:sender:else")
    theirs = await runtime.registry.execute("sessions_history", {"session": row.session_key}, other)
    assert theirs.refused and "belongs to another channel" in theirs.error


# -- message ---------------------------------------------------------------------------------------
def test_mqtt_message_targets_and_the_message_level_is_the_devices():
    topics = DeviceTopics("edgeclaw", "dev1")
    assert topics.message("alerts/greenhouse") == "edgeclaw/dev1/message/alerts/greenhouse"
    for bad in ("", "a//b", "#", "a/+", "../x", "a/b/c/d/e", "sp ace", "x" * 65):
        with pytest.raises(ValueError, match="MQTT message target"):
            topics.message(bad)
    # A caller's Response Topic may not point an answer at a device's message topics.
    assert reserved_topic("edgeclaw/dev2/message/alerts", "edgeclaw", "homeassistant") is not None


class NotifyServer:
    """A local HTTP server standing in for Pushover or ntfy: records requests, answers as told."""

    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.answer: dict[str, Any] = {"status": 1, "request": "r1"}
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length", 0)))
                server.requests.append(
                    {
                        "path": self.path,
                        "headers": {k.lower(): v for k, v in self.headers.items()},
                        "body": body,
                    }
                )
                data = json.dumps(server.answer).encode()
                self.send_response(server.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def notify_server():
    server = NotifyServer()
    yield server
    server.close()


PUSHOVER_TOKEN = "azGDORePK8gMaC0QOYAMyEEuzJnyUi"
PUSHOVER_USER = "uQiRzpo4DXghDmr9QzzfQu27cmVRsG"
NTFY_TOKEN = "tk_AgQdq7mVBoFD37zQVN29RhuMzNIz2"


async def test_message_to_pushover_with_credentials_from_the_environment_and_a_file(
    make, notify_server, tmp_path, caplog
):
    caplog.set_level(logging.DEBUG)
    user_file = tmp_path / "pushover-user"
    user_file.write_text(PUSHOVER_USER + "\n")
    runtime, _ = make(
        {
            "notify": {
                "pushover": {
                    "token_env": "PUSHOVER_TOKEN",
                    "user_file": str(user_file),
                    "devices": ["phone"],
                    "base_url": notify_server.url,
                }
            }
        },
        environ={"PUSHOVER_TOKEN": PUSHOVER_TOKEN},
    )
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    call = runtime.registry.execute
    sent = await call(
        "message",
        {"channel": "pushover", "target": "phone", "text": "Fan 2 stopped", "title": "bench", "priority": 2},
        ctx,
    )
    assert sent.ok, sent.error
    assert sent.for_llm == "sent: pushed to Pushover device phone"
    (request,) = notify_server.requests
    form = {k: v[0] for k, v in parse_qs(request["body"].decode()).items()}
    assert request["path"] == "/1/messages.json"
    assert form == {
        "token": PUSHOVER_TOKEN,
        "user": PUSHOVER_USER,
        "message": "Fan 2 stopped",
        "title": "bench",
        "priority": "1",  # never an emergency (2) from a model
        "device": "phone",
    }
    other = await call("message", {"channel": "pushover", "target": "tablet", "text": "x"}, ctx)
    assert not other.ok and "'tablet' is not a device messages may go to" in other.error
    # A message that quotes a credential goes out scrubbed.
    leak = await call("message", {"channel": "pushover", "text": f"token is {PUSHOVER_TOKEN}"}, ctx)
    assert leak.ok
    assert PUSHOVER_TOKEN not in parse_qs(notify_server.requests[-1]["body"].decode())["message"][0]
    notify_server.status, notify_server.answer = 400, {"status": 0, "errors": ["user identifier is invalid"]}
    refused = await call("message", {"channel": "pushover", "text": "x"}, ctx)
    assert not refused.ok and "pushover: refused with HTTP 400: user identifier is invalid" in refused.error
    assert PUSHOVER_TOKEN not in caplog.text and PUSHOVER_USER not in caplog.text


async def test_message_to_ntfy_topics(make, notify_server):
    runtime, _ = make(
        {
            "notify": {
                "ntfy": {
                    "server": notify_server.url,
                    "topics": ["bench-alerts", "bench-info"],
                    "token_env": "NT",
                }
            }
        },
        environ={"NT": NTFY_TOKEN},
    )
    notify_server.answer = {"id": "x1"}
    ctx = ToolContext(channel="cli", session_key=SESSION, caller="cli:tech")
    call = runtime.registry.execute
    sent = await call("message", {"channel": "ntfy", "text": "Lüfter 2 steht", "title": "Prüfstand"}, ctx)
    assert sent.ok and sent.for_llm == "sent: published to ntfy topic bench-alerts"
    request = notify_server.requests[0]
    assert request["headers"]["authorization"] == f"Bearer {NTFY_TOKEN}"
    assert json.loads(request["body"]) == {
        "topic": "bench-alerts",
        "message": "Lüfter 2 steht",
        "priority": 3,
        "title": "Prüfstand",
    }
    assert (await call("message", {"channel": "ntfy", "target": "bench-info", "text": "i"}, ctx)).ok
    off = await call("message", {"channel": "ntfy", "target": "elsewhere", "text": "x"}, ctx)
    assert not off.ok and "'elsewhere' is not a topic messages may go to" in off.error
    none = await call("message", {"channel": "telegram", "text": "x"}, ctx)
    assert none.refused and "no channel or notification service 'telegram'" in none.error
