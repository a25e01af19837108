"""The MQTT channel as an attacker and an operator see it, against a real mosquitto: who may
approve, who is calling, replays of signed commands, where answers may go, field types, cancel."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import Counter
from typing import Any

import pytest

from edgeclaw.backends.sim.board import I2C_BUS1_PARTS
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.signing import envelope, mac
from tests.mqtt_support import Caller, needs_mosquitto, poll
from tests.test_mqtt import ANSWERS, BASE, broker, call, daemon_config, running_daemon

pytestmark = needs_mosquitto
__all__ = ["broker"]  # the fixture, shared with tests/test_mqtt.py

COMMAND_KEY = "command-key-5a6b7c8d"
APPROVER_KEY = "approver-key-1f2e3d4c"
KEYS = {"EC_HMAC": COMMAND_KEY, "EC_APPROVER": APPROVER_KEY}
CALL = f"{BASE}/tool/call"
CANCEL = f"{BASE}/tool/cancel"
RESPOND = f"{BASE}/approval/response"
EVENTS = f"{BASE}/events"


def signed(topic: str, body: dict[str, Any], key: str = COMMAND_KEY, corr: bytes | None = None) -> bytes:
    return envelope(key.encode(), topic, body, response_topic=ANSWERS, correlation=corr)


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage() for r in bad]


def at_least(n: int, items: list[Any]) -> list[Any] | None:
    return items if len(items) >= n else None


def approval_events(c: Caller) -> list[dict[str, Any]]:
    return [e.json for e in c.on(EVENTS) if e.json.get("kind") == "approval"]


# -- approvals -----------------------------------------------------------------------
async def test_the_requester_cannot_approve_its_own_call_only_the_approver_key_can(tmp_path, broker):
    config = daemon_config(
        tmp_path, broker.port, hmac_secret_env="EC_HMAC", approver_secret_env="EC_APPROVER"
    )
    async with (
        running_daemon(config, KEYS) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/approval/request", EVENTS]) as c,
    ):
        assert d.guarded is not None
        request = {"id": "g1", "tool": "guarded", "sender": "backend-1"}
        await c.publish(CALL, signed(CALL, request), response_topic=ANSWERS)
        [question] = await c.answers(f"{BASE}/approval/request", 1)
        q = question.json
        # The question names the request it is about, so a backend can match it.
        assert q["request_id"] == "g1" and q["sender"] == "backend-1" and q["channel"] == "mqtt"
        assert q["caller"] == "mqtt:command" and q["tool"] == "guarded"

        async def respond(body: bytes | dict[str, Any], corr: bytes, **kw: Any) -> dict[str, Any]:
            await c.publish(RESPOND, body, response_topic=ANSWERS, correlation=corr, **kw)
            return (await c.wait_for(lambda: [a for a in c.on(ANSWERS) if a.correlation == corr]))[0].json

        digest = q["action_digest"]
        allow = {"id": q["id"], "decision": "allow-once", "action_digest": digest, "ts": time.time()}
        # Unsigned, signed with the command key (what the requester holds), or with the approver
        # key over another Response Topic: none of them decides.
        unsigned = await respond(allow, b"unsigned")
        assert unsigned["code"] == "bad_signature" and "approver key" in unsigned["error"]
        own = await respond(signed(RESPOND, allow, COMMAND_KEY, b"own"), b"own")
        assert own["code"] == "bad_signature" and "command key" in own["error"]
        body = json.dumps(allow).encode()
        prop = [("hmac", mac(COMMAND_KEY.encode(), RESPOND, body, ANSWERS, b"prop"))]
        own_prop = await respond(body, b"prop", user=prop)
        assert own_prop["code"] == "bad_signature" and "command key" in own_prop["error"]
        elsewhere = envelope(APPROVER_KEY.encode(), RESPOND, allow, response_topic="reply/other")
        moved = await respond(elsewhere, b"moved")
        assert moved["code"] == "bad_signature"
        await asyncio.sleep(0.3)
        assert d.guarded.ran == 0 and not [a for a in c.on(ANSWERS) if a.json.get("id") == "g1"]

        ok = await respond(signed(RESPOND, allow, APPROVER_KEY, b"ok"), b"ok")
        assert ok == {"id": q["id"], "ok": True}
        result = (await c.wait_for(lambda: [a for a in c.on(ANSWERS) if a.json.get("id") == "g1"]))[0].json
        assert result["ok"] and d.guarded.ran == 1

        # Each decision is on `events`: asked, then allowed once by the approver key.
        events = await c.wait_for(lambda: at_least(2, approval_events(c)))
        assert [e["decision"] for e in events] == ["asked", "allow-once"]
        for e in events:
            assert e["approval"] == q["id"] and e["request_id"] == "g1" and e["tool"] == "guarded"
            assert e["caller"] == "mqtt:command" and e["channel"] == "mqtt" and e["device"]
        assert events[1]["by"] == "mqtt:approver"
        # Events never quote what was to run (an argument value).
        assert "pump" not in json.dumps([e.json for e in c.on(EVENTS)])

        # A deny and a timeout are on record too, saying by whom and why.
        await c.publish(CALL, signed(CALL, {"id": "g2", "tool": "guarded"}), response_topic=ANSWERS)
        questions = await c.answers(f"{BASE}/approval/request", 2)
        deny = {"id": questions[1].json["id"], "decision": "deny", "action_digest": q["action_digest"]}
        await c.publish(RESPOND, signed(RESPOND, deny, APPROVER_KEY), response_topic=ANSWERS)
        d.runtime.approvals.timeout_s = 0.3
        await c.publish(CALL, signed(CALL, {"id": "g3", "tool": "guarded"}), response_topic=ANSWERS)
        events = await c.wait_for(lambda: at_least(6, approval_events(c)))
        decided = {e["request_id"]: e for e in events if e["decision"] != "asked"}
        assert decided["g2"]["decision"] == "deny" and decided["g2"]["by"] == "mqtt:approver"
        assert decided["g3"]["decision"] == "timeout" and "timed out" in decided["g3"]["reason"]
        assert d.guarded.ran == 1


async def test_without_an_approver_key_mqtt_approvals_are_off(tmp_path, broker, caplog):
    caplog.set_level(logging.INFO)
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/approval/request", EVENTS]) as c,
    ):
        assert d.guarded is not None
        await c.publish(CALL, {"id": "g1", "tool": "guarded"}, response_topic=ANSWERS)
        [answer] = await c.answers(ANSWERS, 1)
        assert answer.json["ok"] is False and "approvals over MQTT are off" in answer.json["error"]
        assert "approver_secret_env" in answer.json["error"]
        # Nobody was asked, so nobody can answer: the question is not even published.
        await c.publish(RESPOND, {"id": "x", "decision": "allow-always"}, response_topic=ANSWERS)
        refused = (await c.answers(ANSWERS, 2))[1].json
        assert refused["code"] == "unavailable"
        [event] = await c.wait_for(lambda: approval_events(c))
        assert event["decision"] == "unavailable" and event["request_id"] == "g1"
        assert "off" in event["reason"] and not c.on(f"{BASE}/approval/request")
        assert d.guarded.ran == 0
    # The decision is one info line in the log as well.
    assert any(r.name == "edgeclaw.audit" and "unavailable" in r.getMessage() for r in caplog.records)


async def test_an_approver_key_equal_to_the_command_key_refuses_to_start(tmp_path, broker):
    config = daemon_config(
        tmp_path, broker.port, hmac_secret_env="EC_HMAC", approver_secret_env="EC_APPROVER"
    )
    with pytest.raises(ConfigErrors, match=r"mqtt\.approver_secret_env.*differ"):
        async with running_daemon(config, {"EC_HMAC": COMMAND_KEY, "EC_APPROVER": COMMAND_KEY}):
            pass


# -- identity --------------------------------------------------------------------------
async def test_every_call_carries_the_callers_identity_and_request_id(tmp_path, broker):
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):
        await c.publish(CALL, call("anon"), response_topic=ANSWERS)
        await c.publish(CALL, {**call("bob"), "sender": "bob"}, response_topic=ANSWERS)
        # A slash command in a chat message runs with the chat's caller too.
        chat = {"text": '/call work {"n": "chat"}', "sender": "alice", "session": "s"}
        await c.publish(f"{BASE}/chat/in", chat, response_topic=ANSWERS)
        await c.answers(ANSWERS, 3)
        seen = {ctx.request_id or "(chat)": ctx.caller for ctx in d.work.contexts}
        # Unsigned, every caller is the one anonymous identity, whatever sender it declares.
        assert seen == {"anon": "mqtt:anonymous", "bob": "mqtt:anonymous", "(chat)": "mqtt:anonymous"}

    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC", hmac_key_name="ops-backend")
    async with running_daemon(config, KEYS) as d, Caller(broker.port, [ANSWERS]) as c:
        # Signed: the key is the identity; a declared sender is only a label beside it.
        await c.publish(CALL, signed(CALL, {**call("k"), "sender": "mallory"}), response_topic=ANSWERS)
        await c.answers(ANSWERS, 1)
        [ctx] = d.work.contexts
        assert (ctx.caller, ctx.request_id, ctx.sender) == ("mqtt:ops-backend", "k", "mallory")


# -- replays ---------------------------------------------------------------------------
async def test_a_signed_command_never_runs_twice_not_even_after_the_dedup_window(tmp_path, broker):
    config = daemon_config(
        tmp_path, broker.port, hmac_secret_env="EC_HMAC", hmac_max_age_s=2, dedup_window_s=4
    )
    async with running_daemon(config, KEYS) as d, Caller(broker.port, [ANSWERS]) as c:
        signed_at = time.time()
        captured = signed(CALL, call("once"))
        # Stamped up to the max age ahead of the device's clock: acceptable for 2 x max age.
        ahead = signed(CALL, {**call("ahead"), "ts": signed_at + 1.8})
        for payload in (captured, ahead, captured):
            await c.publish(CALL, payload, response_topic=ANSWERS)
        first = await c.answers(ANSWERS, 3)
        assert [a.json.get("replay", False) for a in first] == [False, False, True]
        # Longer than the max age after it came, "ahead" is still fresh by its stamp (until 3.8 s
        # after signing); the ledger still knows it. Timed from the signing, not from the answers.
        await asyncio.sleep(max(0.0, signed_at + 3.0 - time.time()))
        await c.publish(CALL, ahead, response_topic=ANSWERS)
        assert (await c.answers(ANSWERS, 4))[3].json["replay"] is True
        # Past the window: the ledger may have forgotten "once".
        await asyncio.sleep(max(0.0, signed_at + 4.5 - time.time()))
        await c.publish(CALL, captured, response_topic=ANSWERS)
        late = (await c.answers(ANSWERS, 5))[4].json
        assert late["ok"] is False and late["code"] == "stale" and late["id"] == "once"
        assert d.work.executions == Counter({"once": 1, "ahead": 1})


async def test_an_id_repeated_after_the_window_but_before_the_purge_is_not_run_again(tmp_path, broker):
    """Without signing too: while the ledger still holds the request, however old, it is known."""
    config = daemon_config(tmp_path, broker.port, dedup_window_s=1)
    async with running_daemon(config) as d, Caller(broker.port, [ANSWERS]) as c:
        for task in d.ch._background:  # no housekeeping: the purge does not run during this test
            if task.get_name() == "mqtt-housekeeping":
                task.cancel()
        await c.publish(CALL, call("w"), response_topic=ANSWERS)
        await c.answers(ANSWERS, 1)
        await asyncio.sleep(1.5)  # past the window
        await c.publish(CALL, call("w"), response_topic=ANSWERS)
        again = (await c.answers(ANSWERS, 2))[1].json
        assert again["ok"] and again.get("replay") is True
        assert d.work.executions == Counter({"w": 1})


async def test_a_replayed_signed_command_cannot_redirect_its_answer(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC")
    async with (
        running_daemon(config, KEYS) as d,
        Caller(broker.port, [ANSWERS, "reply/thief"]) as c,
    ):
        captured = signed(CALL, call("r"), corr=b"1")
        await c.publish(CALL, captured, response_topic=ANSWERS, correlation=b"1")
        await c.publish(CALL, captured, response_topic="reply/thief", correlation=b"1")
        await c.publish(CALL, captured, response_topic=ANSWERS, correlation=b"2")
        await c.publish(CALL, captured, correlation=b"1")  # no Response Topic at all
        [thief] = await c.answers("reply/thief", 1)
        assert thief.json["code"] == "bad_signature" and "for_llm" not in thief.json
        answers = await c.answers(ANSWERS, 2)
        assert answers[0].json["ok"] and answers[1].json["code"] == "bad_signature"
        assert d.work.executions == Counter({"r": 1})


async def test_a_mac_that_is_empty_cut_or_not_ascii_is_a_bad_signature(tmp_path, broker, caplog):
    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC")
    async with running_daemon(config, KEYS) as d, Caller(broker.port, [ANSWERS]) as c:
        body = json.dumps({**call("m"), "ts": time.time()})
        right = mac(COMMAND_KEY.encode(), CALL, body.encode(), ANSWERS, b"x")
        digests = ["", right[:8], "é" * 64, right[:-1] + "é", "\u0660" * 64]
        for i, digest in enumerate(digests):
            corr = f"p{i}".encode()
            await c.publish(CALL, body, response_topic=ANSWERS, correlation=corr, user=[("hmac", digest)])
            outer = json.dumps({"signed": body, "hmac": digest})
            await c.publish(CALL, outer, response_topic=ANSWERS, correlation=f"e{i}".encode())
        answers = await c.answers(ANSWERS, 2 * len(digests))
        for a in answers:
            assert a.json["code"] == "bad_signature" and a.json["id"] == "m", a.json
        assert not d.work.executions
    no_tracebacks(caplog)


# -- where answers go ------------------------------------------------------------------
async def test_response_topics_under_any_devices_topics_are_refused(tmp_path, broker):
    targets = [
        f"{BASE}/status",
        f"{BASE}/events",
        "edgeclaw/other-device/status",
        "edgeclaw/other-device/telemetry",
        "edgeclaw/other-device/tool/result",
        "edgeclaw/other-device/approval/request",
        "edgeclaw/_all/tool/call",
        "homeassistant/device/other-device/config",
    ]
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)) as d,
        Caller(broker.port, [f"{BASE}/tool/result", *targets]) as c,
    ):
        for i, target in enumerate(targets):
            await c.publish(CALL, call(f"t{i}"), response_topic=target, correlation=f"{i}".encode())
        answers = await c.answers(f"{BASE}/tool/result", len(targets))
        for a in answers:
            i = int(a.correlation or b"-1")
            assert a.json["code"] == "bad_response_topic" and targets[i] in a.json["error"]
        await asyncio.sleep(0.3)
        # Nothing reached the targets (this device's own status is retained from the connect).
        leaked = [
            r for r in c.received if r.topic in targets and not r.retain and r.topic != f"{BASE}/status"
        ]
        assert not leaked and not d.work.executions


# -- field types and answer shapes -----------------------------------------------------
async def test_field_types_are_checked_and_answers_are_compact_and_complete(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, admin_unsigned=True)
    async with (
        running_daemon(config, {"PATH": "/usr/bin:/bin"}) as d,
        Caller(broker.port, [ANSWERS]) as c,
    ):

        async def ask(topic: str, payload: Any) -> Any:
            corr = str(len(c.on(ANSWERS)) + 1000 * time.time()).encode()
            await c.publish(topic, payload, response_topic=ANSWERS, correlation=corr)
            return (await c.wait_for(lambda: [a for a in c.on(ANSWERS) if a.correlation == corr]))[0]

        assert (await ask(CALL, call("1"))).json["ok"]
        numeric = (await ask(CALL, {"id": 1, "tool": "work", "args": {"n": "1"}})).json
        assert numeric["code"] == "bad_field" and "'id' must be a string" in numeric["error"]
        assert numeric["id"] is None and "replay" not in numeric
        for body, key in (
            ({"id": "t", "tool": 5}, "tool"),
            ({"id": "s", "tool": "work", "args": {"n": "s"}, "session": 7}, "session"),
        ):
            answer = (await ask(CALL, body)).json
            assert answer["code"] == "bad_field" and key in answer["error"] and answer["id"] == body["id"]
        assert d.work.executions == Counter({"1": 1})

        # Chat refused before it was understood: "session": null, as documented.
        for body in ({"text": 5}, {"text": "hi", "session": 7}):
            answer = (await ask(f"{BASE}/chat/in", body)).json
            assert answer["code"] == "bad_field" and answer["session"] is None
        # An empty message gets the whole help text.
        empty = (await ask(f"{BASE}/chat/in", {"text": "  ", "session": "s"})).json
        assert empty["ok"] is False and all(f"/{name}" in empty["text"] for name in ("status", "call", "new"))

        listing = await ask(f"{BASE}/admin/tools", {"id": "a1", "action": "list"})
        assert listing.json == {"id": "a1", "ok": True, "action": "list", "tools": []}
        assert listing.payload == b'{"id":"a1","ok":true,"action":"list","tools":[]}'


async def test_hardware_results_arrive_as_data_and_one_text(tmp_path, broker):
    async with (
        running_daemon(daemon_config(tmp_path, broker.port)),
        Caller(broker.port, [ANSWERS]) as c,
    ):
        scan = {"id": "s1", "tool": "i2c", "args": {"action": "scan", "bus": 1}}
        await c.publish(CALL, scan, response_topic=ANSWERS)
        [answer] = await c.answers(ANSWERS, 1)
        body = answer.json
        assert body["ok"] and body["data"]["addresses"] == [f"0x{a:02x}" for a in sorted(I2C_BUS1_PARTS)]
        assert "0x48" in body["for_llm"] and "for_user" not in body


# -- cancel ----------------------------------------------------------------------------
async def test_a_running_call_is_cancelled_by_id_and_each_gets_one_answer(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, max_concurrent=1)
    async with (
        running_daemon(config) as d,
        Caller(broker.port, [ANSWERS, f"{BASE}/tool/result"]) as c,
    ):
        await c.publish(CALL, {**call("slow", sleep_s=30), "sender": "ops"}, response_topic=ANSWERS)
        await c.publish(CALL, {**call("queued"), "sender": "ops"}, response_topic=ANSWERS)
        await poll(lambda: d.work.started["slow"], what="the slow call to start")

        async def cancel(body: dict[str, Any], corr: bytes) -> dict[str, Any]:
            await c.publish(CANCEL, body, response_topic=ANSWERS, correlation=corr)
            return (await c.wait_for(lambda: [a for a in c.on(ANSWERS) if a.correlation == corr]))[0].json

        # An unknown id is not found. (Only the caller that sent a call may cancel it: unsigned, every
        # caller is mqtt:anonymous whatever it declares, so that is tests/test_identity.py's, with keys.)
        other = await cancel({"id": "x1", "cancel": "never-sent", "sender": "mallory"}, b"x1")
        assert other["ok"] is False and other["code"] == "not_found"
        unknown = await cancel({"id": "x2", "cancel": "nope", "sender": "ops"}, b"x2")
        assert unknown["code"] == "not_found" and unknown["cancel"] == "nope"

        waiting = await cancel({"id": "c2", "cancel": "queued", "sender": "ops"}, b"c2")
        assert waiting == {"id": "c2", "ok": True, "cancel": "queued", "state": "waiting"}
        running = await cancel({"id": "c1", "cancel": "slow", "sender": "ops"}, b"c1")
        assert running == {"id": "c1", "ok": True, "cancel": "slow", "state": "running"}
        calls = await c.wait_for(
            lambda: at_least(2, [m.json for m in c.on(ANSWERS) if m.correlation is None])
        )
        by_id = {a["id"]: a for a in calls}
        assert by_id["slow"]["code"] == "cancelled" and "while it ran" in by_id["slow"]["error"]
        assert by_id["queued"]["code"] == "cancelled" and "did not run" in by_id["queued"]["error"]
        assert d.work.executions == Counter() and d.work.started == Counter({"slow": 1})

        # The one that never ran may be sent again and runs; the cancelled one is not run again.
        await c.publish(CALL, {**call("queued"), "sender": "ops"}, response_topic=ANSWERS)
        await c.publish(CALL, {**call("slow", sleep_s=30), "sender": "ops"}, response_topic=ANSWERS)
        again = await c.wait_for(
            lambda: at_least(4, [m.json for m in c.on(ANSWERS) if m.correlation is None])
        )
        assert {a["id"]: a["ok"] for a in again[2:]} == {"queued": True, "slow": False}
        assert d.work.executions == Counter({"queued": 1}) and d.work.started["slow"] == 1
        await asyncio.sleep(0.3)
        assert len(c.on(ANSWERS)) == 8  # exactly one answer per request, cancels included
        assert d.ch.counters["answered"] == d.ch.counters["requests"] == 8
