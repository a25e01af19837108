"""The MQTT channel against a real mosquitto: requests and answers, outages, restarts, reporting.

Most tests run the daemon in-process (`Daemon` with the real MQTT service and
a few test tools registered beside the built-in ones); the status / Last Will
and outbox-after-SIGKILL tests run the real `edgeclaw run` as a subprocess.
Every wait polls for a condition with a generous deadline.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiomqtt
import pytest

from edgeclaw.agent.channel import Reply
from edgeclaw.channels.mqtt import MqttChannel
from edgeclaw.channels.mqtt.outbox import Kind
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.lifecycle import Daemon
from edgeclaw.daemon.mqtt import mqtt_service
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.signing import envelope, mac
from edgeclaw.tools.approval import ApprovalBroker, action_digest
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from tests.llm_server import ScriptedLLM, openai_text, openai_tools, without_note
from tests.mqtt_support import OPENSSL, Caller, Mosquitto, make_certificates, needs_mosquitto, poll

pytestmark = needs_mosquitto

DEV = "dev-test"
BASE = f"edgeclaw/{DEV}"
ANSWERS = "test/answers"


# -- test tools -------------------------------------------------------------------
class Work(Tool):
    """Counts how often each `n` really ran; can sleep, fail, or print a secret."""

    name = "work"
    group = "automation"
    description = "Test tool."
    parameters = {
        "type": "object",
        "properties": {
            "n": {"type": "string"},
            "sleep_s": {"type": "number", "minimum": 0},
            "fail": {"type": "boolean"},
            "explode": {"type": "boolean"},
            "say": {"type": "string"},
        },
        "required": ["n"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self.executions: Counter[str] = Counter()
        self.started: Counter[str] = Counter()
        self.contexts: list[ToolContext] = []

    async def execute(self, args, ctx):
        self.started[args["n"]] += 1
        self.contexts.append(ctx)
        if args.get("sleep_s"):
            await asyncio.sleep(args["sleep_s"])
        self.executions[args["n"]] += 1
        if args.get("explode"):
            raise RuntimeError("exploded on purpose")
        if args.get("fail"):
            return ToolResult.error(f"failed on purpose: {args.get('say', '')}")
        return ToolResult(
            for_llm=f"done {args['n']} {args.get('say', '')}".strip(), for_user=f"done {args['n']}"
        )


class Guarded(Tool):
    """Asks for approval through the broker before it runs."""

    name = "guarded"
    group = "automation"
    description = "Needs a person's approval."

    def __init__(self, approvals: ApprovalBroker) -> None:
        self.approvals = approvals
        self.ran = 0

    async def execute(self, args, ctx):
        decision, why = await self.approvals.request(self.name, "switch the pump on", ctx)
        if not decision.allows:
            return ToolResult.error(f"not approved: {why}")
        self.ran += 1
        return f"approved ({decision.value})"


# -- an in-process daemon ---------------------------------------------------------
class Running:
    def __init__(self) -> None:
        self.channel: MqttChannel | None = None
        self.work = Work()
        self.guarded: Guarded | None = None
        self.runtime: Any = None

    @property
    def ch(self) -> MqttChannel:
        assert self.channel is not None
        return self.channel


def daemon_config(tmp_path: Path, port: int, **mqtt: Any) -> dict[str, Any]:
    extra_tools = mqtt.pop("tools", {})
    top = mqtt.pop("top", {})
    return {
        "board": "sim",
        "device_id": DEV,
        "state_dir": str(tmp_path / "state"),
        # The test tools are not in the remote profile MQTT callers get by default: widen it.
        "tools": {"rate_limit": 0, "channels": {"mqtt": {"profile": "full"}}, **extra_tools},
        "mqtt": {"enabled": True, "port": port, "telemetry_interval_s": 0, **mqtt},
        **top,
    }


@contextlib.asynccontextmanager
async def running_daemon(
    config: dict[str, Any], environ: dict[str, str] | None = None, *, connect: bool = True
) -> AsyncIterator[Running]:
    running = Running()

    @contextlib.asynccontextmanager
    async def test_tools(runtime):
        running.runtime = runtime
        runtime.registry.register(running.work)
        running.guarded = Guarded(runtime.approvals)
        runtime.registry.register(running.guarded)
        yield

    def mqtt(runtime):
        running.channel = mqtt_service(runtime)
        return running.channel

    daemon = Daemon(config_from_dict(config, "test.toml"), services=[test_tools, mqtt], environ=environ or {})
    task = asyncio.create_task(daemon.run())
    ready = asyncio.create_task(daemon.ready.wait())
    await asyncio.wait((task, ready), timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()  # raises what went wrong
    assert daemon.ready.is_set(), "daemon did not become ready"
    if connect:
        assert await running.ch.connection.wait_connected(20), "daemon did not connect to the broker"
    try:
        yield running
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, 30) == 0


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


def call(n: str, **args: Any) -> dict[str, Any]:
    return {"id": n, "tool": "work", "args": {"n": n, **args}}


def by_id(messages) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        body = m.json
        out.setdefault(str(body.get("id")), []).append(body)
    return out


# -- tool calls -------------------------------------------------------------------
async def test_tool_call_answers_on_response_topic_with_correlation_else_on_tool_result(tmp_path, broker):
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/tool/result", f"{BASE}/events"]) as c,
    ):
        await c.publish(f"{BASE}/tool/call", call("a"), response_topic=ANSWERS, correlation=b"\x00corr-a")
        [answer] = await c.answers(ANSWERS, 1)
        assert answer.correlation == b"\x00corr-a"
        body = answer.json
        assert body["id"] == "a" and body["ok"] is True and body["tool"] == "work"
        # One text is sent once: `for_user` only when it says something else than `for_llm`.
        assert body["for_llm"] == "done a" and "for_user" not in body
        assert isinstance(body["duration_ms"], float) and "error" not in body

        # No Response Topic: the fixed fallback topic (and the Correlation Data still echoed).
        await c.publish(f"{BASE}/tool/call", call("b"), correlation=b"corr-b")
        [fallback] = await c.answers(f"{BASE}/tool/result", 1)
        assert fallback.json["id"] == "b" and fallback.json["ok"] and fallback.correlation == b"corr-b"

        # Tool calls over MQTT run with channel "mqtt", so [tools.channels.mqtt] applies.
        assert {ctx.channel for ctx in d.work.contexts} == {"mqtt"}
        # One event per call, scrubbed, naming the caller's channel.
        events = await c.answers(f"{BASE}/events", 2)
        assert {e.json["tool"] for e in events} == {"work"}
        assert all(e.json["channel"] == "mqtt" and e.json["ok"] for e in events)
        assert set(events[0].json) >= {
            "tool",
            "session",
            "channel",
            "ok",
            "duration_ms",
            "args_digest",
            "device",
        }
        await asyncio.sleep(0.3)
        assert len(c.on(ANSWERS)) == 1 and len(c.on(f"{BASE}/tool/result")) == 1


async def test_every_bad_request_gets_one_error_answer_naming_the_problem(tmp_path, broker):
    config = daemon_config(
        tmp_path,
        broker.port,
        max_payload_bytes=1024,
        tools={"channels": {"mqtt": {"allow": ["group:automation", "session_status"]}}},
    )
    cases: list[tuple[str, bytes, str, str]] = [
        ("json", b"{not json", "bad_json", "malformed JSON"),
        ("array", b"[1, 2]", "bad_json", "expected a JSON object"),
        ("utf8", b'{"id": "utf8", "tool": "work\xff"}', "bad_json", "not UTF-8"),
        ("noid", json.dumps({"tool": "work", "args": {"n": "x"}}).encode(), "missing_field", "'id'"),
        ("idtype", json.dumps({"id": ["x"], "tool": "work"}).encode(), "bad_field", "'id' must be a string"),
        ("idfloat", json.dumps({"id": 1.5, "tool": "work"}).encode(), "bad_field", "'id' must be a string"),
        ("notool", json.dumps({"id": "notool", "args": {}}).encode(), "missing_field", "'tool'"),
        (
            "argslist",
            json.dumps({"id": "argslist", "tool": "work", "args": [1]}).encode(),
            "bad_field",
            "args",
        ),
        (
            "unknown",
            json.dumps({"id": "unknown", "tool": "no_such_tool"}).encode(),
            "unknown_tool",
            "unknown tool",
        ),
        (
            "schema",
            json.dumps({"id": "schema", "tool": "work", "args": {"n": 5}}).encode(),
            "arguments",
            "'n'",
        ),
        (
            "policy",
            json.dumps({"id": "policy", "tool": "read_file", "args": {"path": "x"}}).encode(),
            "policy",
            "not allowed",
        ),
        (
            "big",
            json.dumps({"id": "big", "tool": "work", "args": {"n": "x" * 2000}}).encode(),
            "too_large",
            "limit is 1024",
        ),
        (
            "failed",
            json.dumps(call("failed", fail=True, say="boom")).encode(),
            "tool_error",
            "failed on purpose",
        ),
        # An exception inside the tool is the tool's error answer, not a silent drop.
        ("exploded", json.dumps(call("exploded", explode=True)).encode(), "exception", "exploded on purpose"),
    ]
    async with (
        running_daemon(config) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/tool/result"]) as c,
    ):
        for name, payload, _, _ in cases:
            await c.publish(f"{BASE}/tool/call", payload, response_topic=ANSWERS, correlation=name.encode())
        # A retained command is refused (it would run again on every reconnect), and an answer is never
        # sent to another device's command topic.
        await c.publish(f"{BASE}/tool/call", call("retained"), correlation=b"retained", retain=True)
        await c.publish(
            f"{BASE}/tool/call", call("evil"), response_topic="edgeclaw/other/tool/call", correlation=b"evil"
        )
        answers = await c.answers(ANSWERS, len(cases))
        by_corr = {a.correlation: a.json for a in answers}
        for name, _, code, words in cases:
            body = by_corr[name.encode()]
            assert body["ok"] is False and body["code"] == code, (name, body)
            assert words in body["error"], (name, body)
        assert by_corr[b"unknown"]["id"] == "unknown" and by_corr[b"big"]["id"] == "big"
        fallback = await c.answers(f"{BASE}/tool/result", 2)
        codes = {a.correlation: a.json["code"] for a in fallback}
        assert codes == {b"retained": "retained", b"evil": "bad_response_topic"}
        await asyncio.sleep(0.3)
        assert len(c.on(ANSWERS)) == len(cases)  # exactly one answer each
        assert d.work.executions == Counter({"failed": 1, "exploded": 1})
        assert d.ch.counters["answered"] == d.ch.counters["requests"] == len(cases) + 2


async def test_repeated_id_is_answered_from_the_stored_result_not_run_again(tmp_path, broker):
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        await c.publish(f"{BASE}/tool/call", call("r1"), response_topic=ANSWERS)
        await c.answers(ANSWERS, 1)
        await c.publish(f"{BASE}/tool/call", call("r1"), response_topic=ANSWERS)
        first, second = await c.answers(ANSWERS, 2)
        assert second.json["replay"] is True
        assert {k: v for k, v in second.json.items() if k != "replay"} == first.json
        # A copy arriving while the original still runs is answered when it finishes, once.
        await c.publish(
            f"{BASE}/tool/call", call("slow", sleep_s=0.5), response_topic=ANSWERS, correlation=b"1"
        )
        await c.publish(
            f"{BASE}/tool/call", call("slow", sleep_s=0.5), response_topic=ANSWERS, correlation=b"2"
        )
        answers = await c.answers(ANSWERS, 4)
        assert {a.correlation for a in answers[2:]} == {b"1", b"2"}
        # The same id asking for something else is a different request.
        await c.publish(
            f"{BASE}/tool/call",
            {"id": "r1", "tool": "work", "args": {"n": "r1", "say": "hi"}},
            response_topic=ANSWERS,
        )
        answers = await c.answers(ANSWERS, 5)
        assert answers[4].json["for_llm"] == "done r1 hi" and "replay" not in answers[4].json
        assert d.work.executions == Counter({"r1": 2, "slow": 1})


async def test_a_flood_beyond_the_inbound_bound_is_answered_busy(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, inbound_queue=3, max_concurrent=1)
    async with (
        running_daemon(config) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        total = 30
        for i in range(total):
            await c.publish(f"{BASE}/tool/call", call(f"f{i}", sleep_s=0.3), response_topic=ANSWERS)
        answers = await c.answers(ANSWERS, total, within=30)
        await asyncio.sleep(0.5)
        answers = c.on(ANSWERS)
        grouped = by_id(answers)
        assert len(answers) == total and len(grouped) == total  # exactly one answer per request
        busy = [a[0] for a in grouped.values() if a[0].get("code") == "busy"]
        done = [a[0] for a in grouped.values() if a[0]["ok"]]
        assert busy and len(busy) + len(done) == total
        assert "busy" in busy[0]["error"]
        assert all(b["tool"] == "work" and b["id"].startswith("f") for b in busy)  # named, though refused
        assert sum(d.work.executions.values()) == len(done)
        assert d.ch.counters["busy"] == len(busy)


class Hanging:
    """An agent whose turns never finish by themselves (a model that does not answer)."""

    def __init__(self) -> None:
        self.started: list[str] = []

    async def handle(self, message):
        self.started.append(message.text)
        await asyncio.Event().wait()


class Exploding:
    async def handle(self, message):
        raise RuntimeError("the agent fell over")


async def test_a_fault_inside_the_channel_still_gets_one_answer(tmp_path, broker, monkeypatch):
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        # The state database failing on the receive path (before any task exists) ...
        def broken_begin(*args, **kwargs):
            raise sqlite3.OperationalError("disk I/O error")

        monkeypatch.setattr(d.ch.ledger, "begin", broken_begin)
        await c.publish(f"{BASE}/tool/call", call("db"), response_topic=ANSWERS, correlation=b"db")
        [answer] = await c.answers(ANSWERS, 1)
        assert answer.json["code"] == "internal" and "disk I/O error" in answer.json["error"]
        assert answer.json["id"] == "db" and answer.correlation == b"db"
        monkeypatch.undo()
        # ... and the agent raising inside a chat turn.
        d.ch.agent = Exploding()  # type: ignore[assignment]
        await c.publish(f"{BASE}/chat/in", {"text": "hi", "id": "m"}, response_topic=ANSWERS)
        [_, chat] = await c.answers(ANSWERS, 2)
        assert chat.json["ok"] is False and chat.json["code"] == "internal"
        assert "the agent fell over" in chat.json["error"] and chat.json["in_reply_to"] == "m"
        # The request that met the broken database never ran, so it can be sent again.
        await c.publish(f"{BASE}/tool/call", call("db"), response_topic=ANSWERS)
        assert (await c.answers(ANSWERS, 3))[2].json["ok"]
        await asyncio.sleep(0.3)
        assert len(c.on(ANSWERS)) == 3 and d.work.executions == Counter({"db": 1})
        assert d.ch.counters["answered"] == d.ch.counters["requests"] == 3


async def test_requests_cut_short_by_a_stop_are_answered_once_and_not_run_again(
    tmp_path, broker, monkeypatch
):
    monkeypatch.setattr("edgeclaw.channels.mqtt.channel.STOP_GRACE_S", 0.3)
    config = daemon_config(tmp_path, broker.port, max_concurrent=1)
    chat = {"text": "think hard", "sender": "bob", "id": "c1"}
    async with Caller(broker.port, [ANSWERS]) as c:
        async with running_daemon(config) as d:
            hanging = Hanging()
            d.ch.agent = hanging  # type: ignore[assignment]
            await c.publish(f"{BASE}/chat/in", chat, response_topic=ANSWERS, correlation=b"chat")
            await poll(lambda: hanging.started, what="the turn to start")
            # Waits for the only slot, which the turn holds until the daemon stops.
            await c.publish(f"{BASE}/tool/call", call("queued"), response_topic=ANSWERS, correlation=b"tool")
            await poll(lambda: d.ch.counters["requests"] == 2, what="the call to arrive")
        answers = {a.correlation: a.json for a in await c.answers(ANSWERS, 2)}
        # Running when the daemon stopped: it may have had effects, so it is not run again.
        assert answers[b"chat"]["code"] == "interrupted" and answers[b"chat"]["in_reply_to"] == "c1"
        # The session is never the declared sender (anyone may claim it): the conversation's topic.
        assert answers[b"chat"]["session"] == f"mqtt:{ANSWERS}"
        # Never started: "stopping", naming the call; it may be sent again.
        assert answers[b"tool"]["code"] == "stopping" and answers[b"tool"]["tool"] == "work"
        assert answers[b"tool"]["id"] == "queued" and d.work.executions["queued"] == 0

        async with running_daemon(config) as d2:
            d2.ch.agent = hanging  # type: ignore[assignment]
            await c.publish(f"{BASE}/chat/in", chat, response_topic=ANSWERS, correlation=b"chat-again")
            await c.publish(
                f"{BASE}/tool/call", call("queued"), response_topic=ANSWERS, correlation=b"tool-again"
            )
            answers = {a.correlation: a.json for a in await c.answers(ANSWERS, 4)}
            assert (
                answers[b"chat-again"]["code"] == "interrupted" and answers[b"chat-again"]["replay"] is True
            )
            assert answers[b"tool-again"]["ok"] and d2.work.executions["queued"] == 1
            assert hanging.started == ["think hard"]  # the turn was not started again
        await asyncio.sleep(0.3)
        assert len(c.on(ANSWERS)) == 4


# -- chat -------------------------------------------------------------------------
@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


async def test_chat_round_trip_with_response_topic_and_on_chat_out(tmp_path, broker, llm):
    config = daemon_config(
        tmp_path,
        broker.port,
        top={
            "agent": {"providers": ["local"]},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
        },
    )
    llm.reply(
        openai_text("Hello from the board."),
        openai_tools(("work", {"n": "from-chat"})),
        openai_text("The work is done."),
        openai_text("Plain text answered."),
    )
    async with (
        running_daemon(config) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/chat/out", f"{BASE}/events"]) as c,
    ):
        await c.publish(
            f"{BASE}/chat/in",
            {"text": "hi", "session": "s1", "sender": "alice", "id": "m1"},
            response_topic=ANSWERS,
            correlation=b"chat-1",
        )
        [first] = await c.answers(ANSWERS, 1, within=30)
        assert first.correlation == b"chat-1"
        assert first.json == {
            "text": "Hello from the board.",
            "session": "mqtt:s1",
            "ok": True,
            "in_reply_to": "m1",
        }

        # A turn that calls a tool: the tool runs with channel "mqtt", and its event is published.
        await c.publish(f"{BASE}/chat/in", {"text": "do the work", "session": "s1"}, response_topic=ANSWERS)
        answers = await c.answers(ANSWERS, 2, within=30)
        assert answers[1].json["text"] == "The work is done."
        assert d.work.executions["from-chat"] == 1 and d.work.contexts[-1].channel == "mqtt"
        # The caller's session: its identity and the name it gave (another caller's "s1" is another).
        assert d.work.contexts[-1].session_key == "mqtt:anonymous:s1"
        await c.answers(f"{BASE}/events", 1)

        # Plain UTF-8 text with no Response Topic: answered on chat/out, session from the topic.
        await c.publish(f"{BASE}/chat/in", b"just text")
        [out] = await c.answers(f"{BASE}/chat/out", 1, within=30)
        assert out.json["text"] == "Plain text answered." and out.json["session"] == f"mqtt:{BASE}/chat/in"
        assert without_note(llm.requests[-1]["messages"][-1]["content"]) == "just text"

        # A malformed chat gets an error answer too, and slash commands work without the model.
        await c.publish(f"{BASE}/chat/in", {"session": "s1"}, response_topic=ANSWERS)
        await c.publish(f"{BASE}/chat/in", {"text": "/status", "session": "s1"}, response_topic=ANSWERS)
        answers = await c.answers(ANSWERS, 4, within=30)
        bodies = [a.json for a in answers[2:]]
        missing = next(b for b in bodies if not b["ok"])
        assert missing["code"] == "missing_field" and "'text'" in missing["error"]
        status = next(b for b in bodies if b["ok"])
        assert "mqtt:anonymous:s1" in status["text"]


# -- approvals --------------------------------------------------------------------
APPROVER = "approver-key-0f1e2d3c"


async def test_approvals_are_asked_over_mqtt(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, approver_secret_env="EC_APPROVER")
    respond = f"{BASE}/approval/response"
    async with (
        running_daemon(config, {"EC_APPROVER": APPROVER}) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/approval/request"]) as c,
    ):
        assert d.guarded is not None

        async def decide(q: dict[str, Any], decision: str, corr: bytes | None = None) -> None:
            body = {"id": q["id"], "decision": decision, "action_digest": q["action_digest"]}
            signed = envelope(APPROVER.encode(), respond, body, response_topic=ANSWERS, correlation=corr)
            await c.publish(respond, signed, response_topic=ANSWERS, correlation=corr)

        await c.publish(f"{BASE}/tool/call", {"id": "g1", "tool": "guarded"}, response_topic=ANSWERS)
        [question] = await c.answers(f"{BASE}/approval/request", 1)
        q = question.json
        assert q["tool"] == "guarded" and q["summary"] == "switch the pump on"
        assert q["session"] == "mqtt:anonymous:tools" and q["expires_at"] > time.time() + 60
        # The question names the action by its digest: the tool and the arguments approved.
        assert q["action_digest"] == action_digest("guarded", {})
        await decide(q, "allow-once", b"ack")
        answers = await c.answers(ANSWERS, 2)
        ack = next(a for a in answers if a.correlation == b"ack")
        assert ack.json == {"id": q["id"], "ok": True}
        result = next(a for a in answers if a.correlation != b"ack").json
        assert result["ok"] and result["for_llm"] == "approved (allow-once)"

        await c.publish(f"{BASE}/tool/call", {"id": "g2", "tool": "guarded"}, response_topic=ANSWERS)
        questions = await c.answers(f"{BASE}/approval/request", 2)
        await decide(questions[1].json, "deny")
        answers = await c.answers(ANSWERS, 4)
        denied = next(a.json for a in answers if a.json.get("id") == "g2")
        assert denied["ok"] is False and "denied by mqtt:approver" in denied["error"]

        # Nobody answers: the broker's deadline denies.
        d.runtime.approvals.timeout_s = 0.5
        await c.publish(f"{BASE}/tool/call", {"id": "g3", "tool": "guarded"}, response_topic=ANSWERS)
        answers = await c.answers(ANSWERS, 5)
        timed_out = next(a.json for a in answers if a.json.get("id") == "g3")
        assert timed_out["ok"] is False and "timed out" in timed_out["error"]
        assert d.guarded.ran == 1 and d.ch.approver.pending == []
        # Approval responses are not requests: the acks do not skew the one-answer-per-request count.
        assert d.ch.counters["answered"] == d.ch.counters["requests"] == 3


# -- signed commands --------------------------------------------------------------
async def test_hmac_signed_calls_are_accepted_and_unsigned_or_forged_ones_refused(tmp_path, broker):
    secret = "fleet-shared-secret-0123"
    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC")
    topic = f"{BASE}/tool/call"
    async with (
        running_daemon(config, {"EC_HMAC": secret}) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):

        async def with_hmac_property(n: str, corr: bytes, key: bytes, signed_topic: str = topic) -> None:
            body = json.dumps({**call(n), "ts": time.time()}).encode()
            mac_ = mac(key, signed_topic, body, ANSWERS, corr)
            await c.publish(topic, body, response_topic=ANSWERS, correlation=corr, user=[("hmac", mac_)])

        await with_hmac_property("signed-prop", b"1", secret.encode())
        await c.publish(
            topic,
            envelope(secret.encode(), topic, call("signed-env"), response_topic=ANSWERS, correlation=b"2"),
            response_topic=ANSWERS,
            correlation=b"2",
        )
        await c.publish(topic, call("unsigned"), response_topic=ANSWERS, correlation=b"3")
        await with_hmac_property("forged", b"4", b"wrong")
        # A signature for another device's topic does not transfer.
        await with_hmac_property("replayed", b"5", secret.encode(), "edgeclaw/other/tool/call")
        answers = {a.correlation: a.json for a in await c.answers(ANSWERS, 5)}
        assert answers[b"1"]["ok"] and answers[b"2"]["ok"]
        for corr, rid in ((b"3", "unsigned"), (b"4", "forged"), (b"5", "replayed")):
            assert answers[corr]["code"] == "bad_signature" and answers[corr]["id"] == rid
        assert d.work.executions == Counter({"signed-prop": 1, "signed-env": 1})
        # The secret is registered with the scrubber: a tool cannot print it.
        await c.publish(
            topic,
            envelope(secret.encode(), topic, call("leak", say=secret), response_topic=ANSWERS),
            response_topic=ANSWERS,
        )
        leak = (await c.answers(ANSWERS, 6))[5].json
        assert secret not in json.dumps(leak) and "[REDACTED]" in leak["for_llm"]


async def test_hmac_max_age_refuses_stale_signed_commands(tmp_path, broker):
    secret = "another-secret-98765"
    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC", hmac_max_age_s=60)
    topic = f"{BASE}/tool/call"
    async with (
        running_daemon(config, {"EC_HMAC": secret}) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        fresh = {**call("fresh"), "ts": time.time()}
        stale = {**call("stale"), "ts": time.time() - 3600}
        key = secret.encode()
        await c.publish(
            topic,
            envelope(key, topic, fresh, response_topic=ANSWERS, correlation=b"f"),
            response_topic=ANSWERS,
            correlation=b"f",
        )
        await c.publish(
            topic,
            envelope(key, topic, stale, response_topic=ANSWERS, correlation=b"s"),
            response_topic=ANSWERS,
            correlation=b"s",
        )
        # Signed plain-text chat cannot carry a `ts`: refused as stale, not as malformed JSON.
        chat_topic = f"{BASE}/chat/in"
        await c.publish(
            chat_topic,
            envelope(secret.encode(), chat_topic, "hello", response_topic=ANSWERS, correlation=b"t"),
            response_topic=ANSWERS,
            correlation=b"t",
        )
        answers = {a.correlation: a.json for a in await c.answers(ANSWERS, 3)}
        assert answers[b"f"]["ok"] and answers[b"s"]["code"] == "stale"
        assert answers[b"t"]["code"] == "stale" and "'ts'" in answers[b"t"]["error"]
        assert d.work.executions == Counter({"fresh": 1})


async def test_mqtt_311_uses_the_fallback_topics_and_signed_envelopes(tmp_path, broker):
    secret = "v311-secret-abcdef"
    config = daemon_config(tmp_path, broker.port, protocol="3.1.1", hmac_secret_env="EC_HMAC")
    topic = f"{BASE}/tool/call"
    async with (
        running_daemon(config, {"EC_HMAC": secret}),
        Caller(broker.port, [f"{BASE}/tool/result"], v5=False) as c,
    ):
        await c.publish(topic, envelope(secret.encode(), topic, call("old")))
        [answer] = await c.answers(f"{BASE}/tool/result", 1)
        assert answer.json["id"] == "old" and answer.json["ok"]


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
async def test_tls_with_a_ca_and_a_client_certificate(tmp_path):
    certs = make_certificates(tmp_path / "certs")
    tls_conf = (
        f"cafile {certs['ca.crt']}\ncertfile {certs['server.crt']}\nkeyfile {certs['server.key']}\n"
        "require_certificate true\n"
    )
    broker = Mosquitto(tmp_path / "broker", extra_conf=tls_conf).start()
    try:
        tls = {
            "ca_file": str(certs["ca.crt"]),
            "cert_file": str(certs["client.crt"]),
            "key_file": str(certs["client.key"]),
        }
        caller_tls = aiomqtt.TLSParameters(
            ca_certs=str(certs["ca.crt"]), certfile=str(certs["client.crt"]), keyfile=str(certs["client.key"])
        )
        async with (
            running_daemon(daemon_config(tmp_path, broker.port, tls=tls)) as d,
            Caller(broker.port, [ANSWERS], tls=caller_tls) as c,
        ):
            await c.publish(f"{BASE}/tool/call", call("over-tls"), response_topic=ANSWERS)
            [answer] = await c.answers(ANSWERS, 1)
            assert answer.json["ok"] and d.work.executions["over-tls"] == 1

        # Without a client certificate the broker refuses us; the daemon keeps trying and says why.
        no_cert = daemon_config(
            tmp_path, broker.port, tls={"ca_file": str(certs["ca.crt"])}, connect_timeout_s=1
        )
        async with running_daemon(no_cert, connect=False) as d:
            await poll(lambda: d.ch.connection.last_error, 20, "the refusal")
            assert not d.ch.connection.connected

        # A certificate file that cannot be read fails at start-up, naming the key.
        bad = daemon_config(tmp_path, broker.port, tls={"ca_file": str(tmp_path / "missing.crt")})
        with pytest.raises(ConfigErrors, match=r"mqtt\.tls"):
            async with running_daemon(bad):
                pass
    finally:
        broker.kill()


# -- custom tools over admin/tools -------------------------------------------------
SAY = {
    "name": "say",
    "description": "print a message",
    "command": "printf '%s\\n' {{.msg}}",
    "parameters": {"type": "object", "properties": {"msg": {"type": "string"}}, "required": ["msg"]},
    "env": {"SAY_TOKEN": "custom-env-secret-value"},
}
HAS_SANDBOX = Path("/usr/bin/firejail").exists() or Path("/usr/bin/bwrap").exists()


async def test_admin_tools_is_refused_unless_signed_or_explicitly_enabled(tmp_path, broker):
    admin = f"{BASE}/admin/tools"
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [f"{BASE}/admin/result"]) as c,
    ):
        await c.publish(admin, {"id": "a1", "action": "define", "tool": SAY})
        [answer] = await c.answers(f"{BASE}/admin/result", 1)
        assert answer.json["ok"] is False and answer.json["code"] == "admin_disabled"
        assert answer.json["id"] == "a1" and "say" not in d.runtime.registry.names()

    config = daemon_config(tmp_path, broker.port, admin_unsigned=True)
    async with (
        running_daemon(config, {"PATH": "/usr/local/bin:/usr/bin:/bin"}) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        await c.publish(admin, {"id": "a2", "action": "list"}, response_topic=ANSWERS)
        [listing] = await c.answers(ANSWERS, 1)
        assert listing.json == {"id": "a2", "ok": True, "action": "list", "tools": []}


@pytest.mark.skipif(not HAS_SANDBOX, reason="no sandbox installed (firejail or bubblewrap)")
async def test_signed_admin_commands_define_replace_and_remove_custom_tools(tmp_path, broker):
    secret, admin_secret = "command-signing-secret-42", "admin-signing-secret-42"
    admin, calls = f"{BASE}/admin/tools", f"{BASE}/tool/call"
    # The admin topics take the admin key only (never the command key).
    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC", admin_secret_env="EC_ADMIN")
    env = {"EC_HMAC": secret, "EC_ADMIN": admin_secret, "PATH": "/usr/local/bin:/usr/bin:/bin"}
    async with running_daemon(config, env) as d, Caller(broker.port, [ANSWERS, f"{BASE}/events"]) as c:

        async def ask(topic: str, body: dict[str, Any], n: int) -> dict[str, Any]:
            key = (admin_secret if topic == admin else secret).encode()
            await c.publish(topic, envelope(key, topic, body, response_topic=ANSWERS), response_topic=ANSWERS)
            return (await c.answers(ANSWERS, n, within=30))[n - 1].json

        defined = await ask(admin, {"id": "d1", "action": "define", "tool": SAY}, 1)
        assert defined["ok"] and defined["tool"]["name"] == "say"
        assert defined["tool"]["env"] == ["SAY_TOKEN"] and "custom-env-secret-value" not in json.dumps(
            defined
        )
        ran = await ask(calls, {"id": "c1", "tool": "say", "args": {"msg": "hello; id"}}, 2)
        assert ran["ok"] and ran["for_user"] == "hello; id\n", ran

        replaced = await ask(
            admin, {"id": "d2", "action": "replace", "tool": {**SAY, "command": "printf 'v2 %s' {{.msg}}"}}, 3
        )
        assert replaced["ok"]
        ran = await ask(calls, {"id": "c2", "tool": "say", "args": {"msg": "x"}}, 4)
        assert ran["for_user"] == "v2 x"

        bad = await ask(admin, {"id": "d3", "action": "define", "tool": {**SAY, "name": "exec"}}, 5)
        assert bad["code"] == "invalid_definition" and "built-in" in bad["error"]
        listing = await ask(admin, {"id": "l1", "action": "list"}, 6)
        assert [t["name"] for t in listing["tools"]] == ["say"]

        # Unsigned admin commands are refused like unsigned calls.
        await c.publish(admin, {"id": "u1", "action": "remove", "name": "say"}, response_topic=ANSWERS)
        unsigned = (await c.answers(ANSWERS, 7))[6].json
        assert unsigned["code"] == "bad_signature" and "say" in d.runtime.registry.names()

        removed = await ask(admin, {"id": "r1", "action": "remove", "name": "say"}, 8)
        assert removed == {"id": "r1", "ok": True, "action": "remove", "name": "say"}
        again = await ask(admin, {"id": "r2", "action": "remove", "name": "say"}, 9)
        assert again["code"] == "not_found"
        gone = await ask(calls, {"id": "c3", "tool": "say", "args": {"msg": "x"}}, 10)
        assert gone["code"] == "unknown_tool"

        # Every change is on the audit trail: who made it, what, which tool; never the definition.
        def admin_events() -> list[dict[str, Any]] | None:
            found = [e.json for e in c.on(f"{BASE}/events") if e.json.get("kind") == "admin"]
            return found if len(found) >= 4 else None

        changes = await c.wait_for(admin_events, what="four admin events")
        summary = [(e["request_id"], e["action"], e["tool"], e["outcome"]) for e in changes]
        assert summary == [
            ("d1", "define", "say", "ok"),
            ("d2", "define", "say", "ok"),
            ("d3", "define", None, "refused"),
            ("r1", "remove", "say", "ok"),
        ]
        assert {e["by"] for e in changes} == {f"mqtt:{d.runtime.config.mqtt.admin_key_name}"}
        assert "custom-env-secret-value" not in json.dumps(changes) and "printf" not in json.dumps(changes)


# -- reporting --------------------------------------------------------------------
async def test_home_assistant_discovery_shape_and_resend_on_ha_birth(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, telemetry_interval_s=0.2)
    async with (
        running_daemon(config) as d,
        Caller(broker.port, ["homeassistant/device/+/config", f"{BASE}/telemetry", f"{BASE}/status"]) as c,
    ):
        [disc] = await c.answers(f"homeassistant/device/{DEV}/config", 1)
        # Retained: Home Assistant finds it whenever it starts.
        async with Caller(broker.port, [f"homeassistant/device/{DEV}/config"]) as late:
            [held] = await late.answers(f"homeassistant/device/{DEV}/config", 1)
            assert held.retain and held.payload == disc.payload
        p = disc.json
        assert p["dev"]["ids"] == [f"edgeclaw_{DEV}"] and p["dev"]["name"] == DEV and p["dev"]["mdl"] == "sim"
        assert p["o"]["name"] == "edgeclaw"
        assert p["availability"][0]["topic"] == f"{BASE}/status"
        assert p["availability"][0]["payload_not_available"] == "offline"
        # The telemetry's sensors (the board's own entities: tests/test_homeassistant.py).
        cmps = {uid: c for uid, c in p["cmps"].items() if c.get("state_topic") == f"{BASE}/telemetry"}
        assert len(cmps) >= 9
        assert all(comp["p"] == "sensor" and comp["unique_id"] == uid for uid, comp in cmps.items())
        temp = cmps[f"edgeclaw_{DEV}_cpu_temp_c"]
        assert (
            temp["device_class"] == "temperature" and temp["value_template"] == "{{ value_json.cpu_temp_c }}"
        )

        # Every sensor's template names a key the telemetry really carries.
        [tele] = (await c.answers(f"{BASE}/telemetry", 1))[:1]
        t = tele.json
        for comp in cmps.values():
            key = comp["value_template"].removeprefix("{{ value_json.").removesuffix(" }}")
            assert key in t, key
        for key in (
            "load_1m",
            "mem_used_pct",
            "disk_used_pct",
            "uptime_s",
            "tool_calls",
            "tool_errors",
            "outbox_depth",
            "outbox_dropped",
            "board",
            "ts",
        ):
            assert key in t
        assert t["board"] == "sim"
        # The outbox drains: a report may be taken while another message (health, a state) waits
        # for its PUBACK, but not every one of several in a row.
        depths = [m.json["outbox_depth"] for m in await c.answers(f"{BASE}/telemetry", 5)]
        assert min(depths) == 0, depths

        # Home Assistant restarts and announces itself: discovery is sent again.
        await c.publish("homeassistant/status", b"online")
        await c.answers(f"homeassistant/device/{DEV}/config", 2)
        await c.publish("homeassistant/status", b"offline")
        await asyncio.sleep(0.3)
        assert len(c.on(f"homeassistant/device/{DEV}/config")) == 2
        [status] = c.on(f"{BASE}/status")[:1]
        assert status.json["state"] == "online" and status.json["board"] == "sim"
        assert d.ch.topics.discovery == f"homeassistant/device/{DEV}/config"


# -- outages ----------------------------------------------------------------------
async def test_broker_killed_and_restarted_under_200_calls_each_answered_and_none_run_twice(tmp_path, broker):
    total = 200
    config = daemon_config(tmp_path, broker.port, inbound_queue=400, max_concurrent=8)
    async with (
        running_daemon(config) as d,
        Caller(broker.port, [ANSWERS], client_id="fleet-backend") as c,
    ):
        ids = [f"c{i:03d}" for i in range(total)]
        sends: Counter[str] = Counter()

        async def send(i: str) -> None:
            sends[i] += 1
            with contextlib.suppress(Exception):  # a publish racing the kill; the retry below covers it
                await c.publish(
                    f"{BASE}/tool/call", call(i, sleep_s=0.02), response_topic=ANSWERS, correlation=i.encode()
                )

        in_flight: list[asyncio.Task[None]] = []

        async def send_all() -> None:
            # Paced, so the broker dies with calls on every leg: unsent, in the broker, running, answered.
            for i in ids:
                in_flight.append(asyncio.create_task(send(i)))
                await asyncio.sleep(0.005)

        senders = [asyncio.create_task(send_all())]
        await c.wait_for(lambda: len(c.on(ANSWERS)) >= 30, what="the first answers")
        broker.kill()
        assert not d.ch.connection.connected or await poll(lambda: not d.ch.connection.connected, 10)
        await asyncio.sleep(1.0)
        broker.start()
        await asyncio.wait(senders, timeout=60)
        assert await d.ch.connection.wait_connected(30)
        await c.wait_for(lambda: c.connected.is_set(), what="the caller to reconnect")

        # A caller that got no answer asks again with the same id; the device must not run it twice.
        deadline = time.monotonic() + 60
        while True:
            answered = {m.correlation.decode() for m in c.on(ANSWERS)}
            missing = [i for i in ids if i not in answered]
            if not missing or time.monotonic() > deadline:
                break
            await asyncio.sleep(2.0)
            answered = {m.correlation.decode() for m in c.on(ANSWERS)}
            for i in [i for i in ids if i not in answered]:
                await send(i)
        assert missing == [], f"{len(missing)} call(s) never answered"
        await poll(lambda: d.ch.sender.pending == 0, 20, "the outbox to drain")

        answers = by_id(c.on(ANSWERS))
        assert set(answers) == set(ids)
        for i, got in answers.items():
            # Answered from a run once; any other answer says it is a replay, or is a copy of that one
            # (the answers of the last moments are published again after the broker came back).
            originals = {json.dumps(a, sort_keys=True) for a in got if not a.get("replay")}
            assert len(originals) <= 1, (i, got)
            assert all(a["ok"] and a["for_llm"] == f"done {i}" for a in got)
        assert d.work.executions == Counter(dict.fromkeys(ids, 1)), "a call ran twice (or never)"
        assert d.work.started == d.work.executions
        # On the device's side: every request that reached it got exactly one answer.
        assert d.ch.counters["answered"] == d.ch.counters["requests"]
        assert d.ch.connection.connects >= 2


async def test_answers_made_while_the_broker_is_down_survive_a_daemon_restart(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port)
    async with Caller(broker.port, [ANSWERS, f"{BASE}/events"], client_id="patient-backend") as c:
        async with running_daemon(config) as d:
            await c.publish(
                f"{BASE}/tool/call", call("slow", sleep_s=1.0), response_topic=ANSWERS, correlation=b"s"
            )
            await poll(lambda: d.work.started["slow"] == 1, what="the call to start")
            broker.kill()
            await poll(lambda: d.work.executions["slow"] == 1, what="the call to finish")
            await poll(lambda: d.ch.outbox.depth >= 2, what="the answer and its event in the outbox")
        # The daemon stopped with the broker still gone: the outbox is on disk.
        db = sqlite3.connect(tmp_path / "state" / "edgeclaw.db")
        topics = [r[0] for r in db.execute("SELECT topic FROM mqtt_outbox ORDER BY ord")]
        db.close()
        assert ANSWERS in topics and f"{BASE}/events" in topics
        broker.start()
        await c.wait_for(lambda: c.connected.is_set(), what="the caller to reconnect")
        assert c.on(ANSWERS) == []
        async with running_daemon(config) as d2:
            [answer] = await c.answers(ANSWERS, 1)
            assert answer.correlation == b"s" and answer.json["id"] == "slow" and answer.json["ok"]
            await c.answers(f"{BASE}/events", 1)
            await poll(lambda: d2.ch.outbox.depth == 0, what="the outbox to drain")
            assert d2.work.executions["slow"] == 0  # delivered, not run again


async def test_commands_sent_while_the_daemon_is_away_reach_it_after_restart(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, session_expiry_s=600)
    async with Caller(broker.port, [ANSWERS]) as c:
        async with running_daemon(config):
            pass  # the broker now holds our persistent session
        await c.publish(f"{BASE}/tool/call", call("queued"), response_topic=ANSWERS, correlation=b"q")
        async with running_daemon(config) as d:
            [answer] = await c.answers(ANSWERS, 1)
            assert answer.correlation == b"q" and answer.json["ok"]
            assert d.work.executions["queued"] == 1


async def test_outbox_bound_drops_oldest_telemetry_first_and_counts_it(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, outbox_max=10, telemetry_interval_s=0.1)
    out = f"{BASE}/chat/out"
    async with (
        Caller(broker.port, [out, f"{BASE}/telemetry"]) as c,
        running_daemon(config) as d,
    ):
        await c.answers(f"{BASE}/telemetry", 1)
        broker.kill()
        await poll(lambda: not d.ch.connection.connected, what="the disconnect")
        for i in range(3):
            await d.ch.send(Reply(f"r{i}", "s", True, None))
        await poll(lambda: d.ch.outbox.dropped >= 5, what="telemetry to overflow the outbox")
        kinds = sorted(m.message.kind for m in d.ch.outbox.peek(100))
        assert len(kinds) == 10 and kinds.count(Kind.ANSWER) == 3  # the three answers stay
        broker.start()
        answers = await c.answers(out, 3, within=30)
        assert [a.json["text"] for a in answers] == ["r0", "r1", "r2"]  # in order
        tele = await c.wait_for(
            lambda: [m for m in c.on(f"{BASE}/telemetry") if m.json["outbox_dropped"] >= 5],
            what="telemetry reporting the drops",
        )
        assert tele[0].json["outbox_dropped"] >= 5


# -- the real daemon --------------------------------------------------------------
def _write_config(tmp_path: Path, port: int, **mqtt: Any) -> dict[str, str]:
    import os

    lines = ['board = "sim"', f'device_id = "{DEV}"', "[mqtt]", "enabled = true", f"port = {port}"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in mqtt.items()]
    (tmp_path / "edgeclaw.toml").write_text("\n".join(lines) + "\n")
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("EDGECLAW_", "NOTIFY_SOCKET", "WATCHDOG_"))
    }
    env["EDGECLAW_STATE_DIR"] = str(tmp_path / "state")
    env["EDGECLAW_CONFIG"] = str(tmp_path / "edgeclaw.toml")
    return env


def _start(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run", "--board", "sim"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )


async def test_edgeclaw_run_status_retained_offline_on_stop_and_as_last_will_after_sigkill(tmp_path, broker):
    env = _write_config(tmp_path, broker.port)
    log = tmp_path / "daemon.log"
    status = f"{BASE}/status"
    proc = _start(env, log)
    try:
        async with Caller(broker.port, [status]) as c:
            await c.wait_for(lambda: any(m.json["state"] == "online" for m in c.on(status)), 30, "online")
            online = [m for m in c.on(status) if m.json["state"] == "online"][-1].json
            assert online["board"] == "sim" and online["version"] and online["ts"] > 0

            # The Done-when check: mosquitto_rr with MQTT 5 gets the scan answer.
            rr = await asyncio.to_thread(
                subprocess.run,
                [
                    "mosquitto_rr",
                    "-V",
                    "5",
                    "-p",
                    str(broker.port),
                    "-t",
                    f"{BASE}/tool/call",
                    "-e",
                    "reply/x",
                    "-W",
                    "20",
                    "-m",
                    json.dumps({"id": "1", "tool": "i2c", "args": {"action": "scan", "bus": 1}}),
                ],
                capture_output=True,
                text=True,
                timeout=30,
            )
            answer = json.loads(rr.stdout)
            assert answer["id"] == "1" and answer["tool"] == "i2c"
            assert answer["ok"], answer
            assert "0x48" in answer["for_llm"] and "0x76" in answer["for_llm"]

            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, 20) == 0
            await c.wait_for(lambda: c.on(status)[-1].json["state"] == "offline", 10, "offline after SIGTERM")

        proc = _start(env, log)
        async with Caller(broker.port, [status]) as c:
            await c.wait_for(
                lambda: c.on(status) and c.on(status)[-1].json["state"] == "online", 30, "online again"
            )
            proc.send_signal(signal.SIGKILL)
            await asyncio.to_thread(proc.wait, 10)
            await c.wait_for(lambda: c.on(status)[-1].json["state"] == "offline", 20, "the Last Will")
        # Retained: a dashboard connecting now still reads offline.
        async with Caller(broker.port, [status]) as late:
            [held] = await late.answers(status, 1)
            assert held.retain and held.json["state"] == "offline"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
    assert "Traceback" not in log.read_text(errors="replace")


async def test_the_last_will_is_set_afresh_for_each_connection(tmp_path, broker):
    status = f"{BASE}/status"
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [status]) as c,
    ):
        [first] = await c.answers(status, 1)
        broker.kill()
        await poll(lambda: not d.ch.connection.connected, what="the disconnect")
        broker.start()
        await poll(lambda: d.ch.connection.connects >= 2, 30, "the reconnect")
        await c.wait_for(lambda: c.connected.is_set(), what="the caller to reconnect")
        await c.wait_for(lambda: len(c.on(status)) >= 2, what="online again")
        # Another client taking over the device's client id makes the broker publish its Will.
        async with aiomqtt.Client(
            "127.0.0.1", broker.port, identifier=DEV, protocol=aiomqtt.ProtocolVersion.V5
        ):
            will = await c.wait_for(
                lambda: [m for m in c.on(status) if m.json["state"] == "offline"], what="the Last Will"
            )
        body = will[0].json
        assert set(body) == {"state", "version", "board", "device_key", "ts"} and body["board"] == "sim"
        assert body["device_key"] == first.json["device_key"]  # the key a page pins, in the Will too
        assert body["ts"] > first.json["ts"]  # the Will of the second connection, not the first
        # The device takes its session back and says so.
        await c.wait_for(lambda: c.on(status)[-1].json["state"] == "online", 30, "online after the takeover")


async def test_a_daemon_killed_while_offline_delivers_its_outbox_after_restart(tmp_path, broker):
    env = _write_config(tmp_path, broker.port, telemetry_interval_s=0.2)
    log = tmp_path / "daemon.log"
    db_path = tmp_path / "state" / "edgeclaw.db"

    def stored() -> list[float]:
        if not db_path.exists():
            return []
        with contextlib.closing(sqlite3.connect(db_path, timeout=5)) as db:
            try:
                rows = db.execute(
                    "SELECT payload FROM mqtt_outbox WHERE topic = ?", (f"{BASE}/telemetry",)
                ).fetchall()
            except sqlite3.OperationalError:
                return []
        return [json.loads(r[0])["ts"] for r in rows]

    proc = _start(env, log)
    try:
        async with Caller(broker.port, [f"{BASE}/telemetry"]) as c:
            await c.answers(f"{BASE}/telemetry", 1, within=30)
        broker.kill()
        offline = await poll(
            lambda: stored() if len(stored()) >= 3 else None, 30, "telemetry kept in the outbox"
        )
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, 10)
        broker.start()
        async with Caller(broker.port, [f"{BASE}/telemetry"]) as c:
            proc = _start(env, log)
            await c.wait_for(
                lambda: (
                    {round(m.json["ts"], 3) for m in c.on(f"{BASE}/telemetry")}
                    >= {round(t, 3) for t in offline}
                ),
                30,
                "the telemetry made while offline",
            )
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
