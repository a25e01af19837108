"""Who is calling over MQTT, against a real broker: a caller is who it can prove it is (its own key),
never what it declares, and may do only what its roles allow (docs/security.md).

Each test is an attack a participant on a shared broker could try with what it holds: its own key,
or no key at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import pytest

from edgeclaw.channels.mqtt.inbound import Incoming
from edgeclaw.channels.mqtt.keys import Keys
from edgeclaw.config.loader import config_from_dict
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.signing import envelope, mac
from edgeclaw.net.wire import WireError
from tests.fleet_support import SignedDevice
from tests.mqtt_support import Caller, needs_mosquitto, poll
from tests.test_mqtt import ANSWERS, BASE, broker, call, daemon_config, running_daemon

pytestmark = needs_mosquitto
__all__ = ["broker"]  # the fixture, shared with tests/test_mqtt.py

CALL = f"{BASE}/tool/call"
CANCEL = f"{BASE}/tool/cancel"
CHAT = f"{BASE}/chat/in"
GATEWAY = f"{BASE}/admin/gateway"
SECRETS = {
    "alice": "alice-key-0a1b2c3d",
    "bob": "bob-key-4e5f6a7b",
    "watcher": "watcher-key-8c9d0e1f",
    "boss": "boss-key-2a3b4c5d",
}
ENV = {f"EC_KEY_{name.upper()}": secret for name, secret in SECRETS.items()}


def callers(**roles: list[str]) -> dict[str, Any]:
    """[callers.NAME] tables, each with its own key from ENV."""
    return {"callers": {n: {"secret_env": f"EC_KEY_{n.upper()}", "roles": r} for n, r in roles.items()}}


def signed(name: str, topic: str, body: dict[str, Any], *, secret: str | None = None) -> bytes:
    """`body` signed by caller `name` (with another secret when given: a forgery), naming its key."""
    key = (secret or SECRETS[name]).encode()
    return envelope(key, topic, body, response_topic=ANSWERS, key=name)


async def ask(c: Caller, topic: str, payload: bytes | dict[str, Any], request_id: str) -> dict[str, Any]:
    await c.publish(topic, payload, response_topic=ANSWERS)

    def answered(m: Any) -> bool:  # chat answers name the request as "in_reply_to"
        return request_id in (m.json.get("id"), m.json.get("in_reply_to"))

    [got] = await c.wait_for(lambda: [m.json for m in c.on(ANSWERS) if answered(m)])
    return got


# -- identities ------------------------------------------------------------------------
async def test_two_callers_with_their_own_keys_are_two_identities_with_two_buckets(tmp_path, broker):
    config = daemon_config(
        tmp_path, broker.port, tools={"rate_limit": 3, "rate_per_minute": 0.01}, top=callers(
            alice=["operate"], bob=["operate"]
        )
    )  # fmt: skip
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        # Alice uses up her bucket, whatever sender names she declares...
        got = [
            await ask(c, CALL, signed("alice", CALL, {**call(f"a{i}"), "sender": f"s{i}"}), f"a{i}")
            for i in range(5)
        ]
        assert [a["ok"] for a in got] == [True, True, True, False, False]
        assert got[-1]["code"] == "rate_limit" and "caller 'mqtt:alice'" in got[-1]["error"]
        # ... and Bob still has his: two keys, two identities.
        bob = await ask(c, CALL, signed("bob", CALL, {**call("b1"), "sender": "s1"}), "b1")
        assert bob["ok"] is True, bob
        seen = {ctx.request_id: (ctx.caller, ctx.session_key, ctx.sender) for ctx in d.work.contexts}
        assert seen["a0"] == ("mqtt:alice", "mqtt:alice:tools", "s0")
        assert seen["b1"] == ("mqtt:bob", "mqtt:bob:tools", "s1")


async def test_a_key_is_named_in_an_mqtt5_user_property_too(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, top=callers(alice=["operate"], bob=["operate"]))
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        body = json.dumps({**call("u1"), "ts": time.time()})
        digest = mac(SECRETS["bob"].encode(), CALL, body.encode(), ANSWERS, None)
        await c.publish(CALL, body, response_topic=ANSWERS, user=[("hmac", digest), ("key", "bob")])
        [got] = await c.wait_for(lambda: [m.json for m in c.on(ANSWERS) if m.json.get("id") == "u1"])
        assert got["ok"] is True and d.work.contexts[-1].caller == "mqtt:bob"


async def test_declared_senders_are_labels_400_of_them_share_the_one_anonymous_bucket(tmp_path, broker):
    config = daemon_config(
        tmp_path, broker.port, inbound_queue=512, tools={"rate_limit": 150, "rate_per_minute": 0.01}
    )
    async with running_daemon(config) as d, Caller(broker.port, [ANSWERS]) as c:
        for i in range(400):
            await c.publish(CALL, {**call(f"n{i}"), "sender": f"invented-{i}"}, response_topic=ANSWERS)
        answers = await c.answers(ANSWERS, 400, within=60)
        ok = sum(a.json["ok"] for a in answers)
        limited = [a.json for a in answers if a.json.get("code") == "rate_limit"]
        assert ok == 150 and len(limited) == 250, (ok, len(limited))
        assert "caller 'mqtt:anonymous'" in limited[-1]["error"]
        assert {ctx.caller for ctx in d.work.contexts} == {"mqtt:anonymous"}
        # The session is the identity's, never the declared sender's.
        assert {ctx.session_key for ctx in d.work.contexts} == {"mqtt:anonymous:tools"}


# -- isolation ---------------------------------------------------------------------------
async def test_bob_cannot_cancel_alices_call_or_reach_her_session_by_naming_it(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, top=callers(alice=["operate"], bob=["operate"]))
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        slow = {**call("slow", sleep_s=30), "session": "s1"}
        await c.publish(CALL, signed("alice", CALL, slow), response_topic=ANSWERS)
        await poll(lambda: d.work.started["slow"], what="alice's call to start")
        # Bob names Alice's call (and her sender name): not his, not found.
        cancel = {"id": "x1", "cancel": "slow", "sender": "alice"}
        other = await ask(c, CANCEL, signed("bob", CANCEL, cancel), "x1")
        assert other["ok"] is False and other["code"] == "not_found", other
        # Bob's session "s1" is his own, not Alice's.
        await ask(c, CALL, signed("bob", CALL, {**call("b1"), "session": "s1"}), "b1")
        assert d.work.contexts[-1].session_key == "mqtt:bob:s1"
        assert d.work.contexts[0].session_key == "mqtt:alice:s1"
        # Naming her session outright in sessions_history is refused too.
        for n, session in enumerate(("mqtt:alice:s1", "s1", "mqtt:s1")):
            body = {"id": f"h{n}", "tool": "sessions_history", "args": {"session": session}}
            history = await ask(c, CALL, signed("bob", CALL, body), f"h{n}")
            assert history["ok"] is False and "belongs to another" in history["error"], history
        own = {"id": "h9", "tool": "sessions_history", "args": {"session": "mqtt:bob:s1"}}
        assert (await ask(c, CALL, signed("bob", CALL, own), "h9"))["ok"] is True
        # A chat in "s1" is Bob's own session too; the answer names it as he did.
        chat = {"id": "c1", "text": '/call work {"n": "from-chat"}', "session": "s1"}
        answer = await ask(c, CHAT, signed("bob", CHAT, chat), "c1")
        assert answer["session"] == "mqtt:s1" and d.work.contexts[-1].session_key == "mqtt:bob:s1"
        # Alice can cancel her own call.
        mine = await ask(c, CANCEL, signed("alice", CANCEL, {"id": "x2", "cancel": "slow"}), "x2")
        assert mine["ok"] is True and mine["state"] == "running"
        # The same id and content from another caller is another request, never the first one's answer.
        again = await ask(c, CALL, signed("alice", CALL, {**call("b1"), "session": "s1"}), "b1")
        assert again["ok"] and "replayed" not in again and d.work.executions["b1"] == 2


# -- keys ----------------------------------------------------------------------------------
async def test_an_unknown_key_name_or_another_callers_secret_is_a_bad_signature(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, top=callers(alice=["operate"], bob=["operate"]))
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        unknown = envelope(b"whatever", CALL, call("k1"), response_topic=ANSWERS, key="mallory")
        refused = await ask(c, CALL, unknown, "k1")
        assert refused["code"] == "bad_signature" and "no caller named 'mallory'" in refused["error"]
        # Bob signs with his own secret but claims to be Alice.
        forged = await ask(c, CALL, signed("alice", CALL, call("k2"), secret=SECRETS["bob"]), "k2")
        assert forged["code"] == "bad_signature"
        # Unsigned, or signed without naming a key (no legacy key to check it against): refused.
        assert (await ask(c, CALL, call("k3"), "k3"))["code"] == "bad_signature"
        unnamed = envelope(SECRETS["alice"].encode(), CALL, call("k4"), response_topic=ANSWERS)
        assert (await ask(c, CALL, unnamed, "k4"))["code"] == "bad_signature"
        assert d.work.executions == {}


# -- roles -----------------------------------------------------------------------------------
async def test_an_observer_runs_only_tools_that_observe(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, top=callers(watcher=["observe"]))
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        refused = await ask(c, CALL, signed("watcher", CALL, call("w1")), "w1")
        assert refused["ok"] is False and refused["code"] == "forbidden", refused
        assert "'operate' role" in refused["error"] and "mqtt:watcher" in refused["error"]
        looked = {"id": "w2", "tool": "list_files", "args": {"path": "."}}
        assert (await ask(c, CALL, signed("watcher", CALL, looked), "w2"))["ok"] is True
        chat = {"id": "w3", "text": '/call work {"n": "w3"}', "session": "s"}
        assert (await ask(c, CHAT, signed("watcher", CHAT, chat), "w3"))["code"] == "forbidden"
        assert d.work.executions == {}


async def test_the_admin_topics_take_an_admin_caller_only(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, top=callers(alice=["operate"], boss=["admin"]))
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        update = {"id": "g1", "action": "update", "url": "http://127.0.0.1:9/edgeclaw.tar.gz"}
        refused = await ask(c, GATEWAY, signed("alice", GATEWAY, update), "g1")
        assert refused["ok"] is False and refused["code"] == "forbidden", refused
        assert "'admin' role" in refused["error"]
        status = await ask(c, GATEWAY, signed("boss", GATEWAY, {"id": "g2", "action": "status"}), "g2")
        assert status.get("code") not in ("forbidden", "bad_signature", "admin_disabled"), status
        # The admin key is no key for tool calls, nor for cancelling them.
        tool = await ask(c, CALL, signed("boss", CALL, call("g3")), "g3")
        assert tool["code"] == "forbidden" and d.work.executions == {}
        cancel = await ask(c, CANCEL, signed("boss", CANCEL, {"id": "g4", "cancel": "g3"}), "g4")
        assert cancel["code"] == "forbidden" and "'operate' role" in cancel["error"], cancel


async def test_without_an_admin_caller_admin_is_off_and_the_command_key_is_no_fallback(tmp_path, broker):
    command = "command-key-6f7a8b9c"
    config = daemon_config(tmp_path, broker.port, hmac_secret_env="EC_HMAC")
    async with running_daemon(config, {"EC_HMAC": command}), Caller(broker.port, [ANSWERS]) as c:
        for n, action in enumerate(("update", "config_apply", "status")):
            body = {"id": f"a{n}", "action": action}
            payload = envelope(command.encode(), GATEWAY, body, response_topic=ANSWERS)
            refused = await ask(c, GATEWAY, payload, f"a{n}")
            assert refused["ok"] is False and refused["code"] == "admin_disabled", refused
            assert 'roles = ["admin"]' in refused["error"] and "admin_secret_env" in refused["error"]
        # The command key still signs ordinary calls.
        ok = await ask(c, CALL, envelope(command.encode(), CALL, call("t1"), response_topic=ANSWERS), "t1")
        assert ok["ok"] is True
    await asyncio.sleep(0)


async def test_a_callers_profile_bounds_its_calls_and_its_chat(tmp_path, broker):
    config = daemon_config(tmp_path, broker.port, top=callers(alice=["operate"]))
    config["callers"]["alice"]["profile"] = "remote"  # the channel's rules are "full" here
    async with running_daemon(config, ENV) as d, Caller(broker.port, [ANSWERS]) as c:
        refused = await ask(c, CALL, signed("alice", CALL, call("p1")), "p1")
        assert refused["ok"] is False and refused["code"] == "policy", refused
        looked = {"id": "p2", "tool": "list_files", "args": {"path": "."}}
        assert (await ask(c, CALL, signed("alice", CALL, looked), "p2"))["ok"] is True
        chat = {"id": "p3", "text": '/call work {"n": "p3"}', "session": "s"}
        answer = await ask(c, CHAT, signed("alice", CHAT, chat), "p3")
        assert "not allowed" in json.dumps(answer) and d.work.executions == {}, answer


def test_keys_prove_the_admin_and_approver_roles_themselves():
    config = config_from_dict(callers(alice=["operate"], boss=["admin"], bob=["approve"]), "t.toml")
    keys = Keys.from_config(config, {f"callers.{n}": s for n, s in SECRETS.items()})
    for topic, authority, role in (
        (GATEWAY, "admin", "'admin'"),
        (f"{BASE}/approval/response", "approver", "'approve'"),
    ):
        body = {"id": "r1", "action": "status", "decision": "deny"}
        msg = Incoming(topic, signed("alice", topic, body), False, ANSWERS, None, None)
        with pytest.raises(WireError) as refused:
            keys.prove(msg, authority)  # type: ignore[arg-type]
        assert refused.value.code == "forbidden" and role in refused.value.message
    gateway = Incoming(GATEWAY, signed("boss", GATEWAY, {"id": "g"}), False, ANSWERS, None, None)
    assert keys.prove(gateway, "admin").caller() == "mqtt:boss"
    approval = Incoming(
        f"{BASE}/approval/response",
        signed("bob", f"{BASE}/approval/response", {"id": "a"}),
        False,
        ANSWERS,
        None,
        None,
    )
    assert keys.prove(approval, "approver").caller() == "mqtt:bob"


# -- the config ------------------------------------------------------------------------------
def test_no_two_callers_may_share_a_secret_and_the_error_names_both():
    config = config_from_dict(
        {"mqtt": {"hmac_secret_env": "EC_HMAC"}, **callers(alice=["operate"], bob=["approve"])}, "t.toml"
    )
    same = {"mqtt.hmac": "one-secret", "callers.alice": "other", "callers.bob": "one-secret"}
    with pytest.raises(ConfigErrors) as refused:
        Keys.from_config(config, same)
    [error] = refused.value.errors
    assert error.key == "callers.bob.secret_env" and "mqtt.hmac_secret_env" in error.problem
    assert "mqtt:command" in error.problem and "mqtt:bob" in error.problem
    keys = Keys.from_config(config, {**same, "callers.bob": "a third"})
    assert sorted(keys.callers) == ["alice", "bob", "command"]
    assert keys.callers["command"].roles == {"operate"} and keys.callers["bob"].roles == {"approve"}


@pytest.mark.parametrize(
    ("table", "key", "problem"),
    [
        ({"secret_env": "X", "roles": ["operate"]}, "callers.Bad_Name", "lowercase"),
        ({"secret_env": "X", "roles": ["operate"]}, "callers.anonymous", "reserved"),
        ({"roles": ["operate"]}, "callers.ops", "never inline"),
        ({"secret_env": "X", "secret_file": "/k", "roles": ["operate"]}, "callers.ops", "one of them"),
        ({"secret_env": "X", "roles": []}, "callers.ops.roles", "at least one role"),
        (
            {"secret_env": "X", "roles": ["operate"], "profile": "everything"},
            "callers.ops.profile",
            "unknown",
        ),
        ({"secret_env": "X", "roles": ["operate"]}, "callers.command", "already the caller"),
    ],
)
def test_caller_tables_are_checked(table, key, problem):
    name = key.split(".")[1]
    data = {"mqtt": {"hmac_secret_env": "EC_HMAC"}, "callers": {name: table}}
    with pytest.raises(ConfigErrors) as refused:
        config_from_dict(data, "t.toml")
    assert any(e.key == key and problem in e.problem for e in refused.value.errors), refused.value.errors


def test_an_unknown_role_is_a_config_error():
    with pytest.raises(ConfigErrors, match=r"callers\.ops\.roles"):
        config_from_dict({"callers": {"ops": {"secret_env": "X", "roles": ["root"]}}}, "t.toml")


# -- the fleet page -------------------------------------------------------------------------
async def test_the_fleet_page_names_the_key_it_signs_with(tmp_path):
    from edgeclaw.fleetpage.broker import FleetBroker
    from edgeclaw.fleetpage.window import FleetWindow
    from edgeclaw.net.mqtt_connection import ConnectionSettings

    class Sent:
        def __init__(self) -> None:
            self.properties: list[Any] = []

        async def publish(self, topic: str, body: bytes, properties: Any) -> None:
            self.properties.append(properties)

    page = FleetBroker(
        ConnectionSettings(host="127.0.0.1", port=1, client_id="page"),
        FleetWindow(),
        command_secret="page-command",
        approver_secret="page-approver",
        command_key_name="fleet-page",
        approver_key_name="fleet-approver",
    )
    # The page answers only a question the device signed (docs/fleet.md#device-keys).
    device = SignedDevice(tmp_path, "dev-01")
    page.window.take(*device.message("status", {"state": "online"}))
    question = {"id": "q1", "tool": "exec", "expires_at": time.time() + 60, "action_digest": "ab" * 32}
    page.window.take(*device.message("approval/request", question))
    sent = Sent()
    page.connection = sent  # type: ignore[assignment]
    with contextlib.suppress(TimeoutError):  # nobody answers here
        await page.call("dev-01", "i2c", {}, 0.01)
    with contextlib.suppress(TimeoutError):
        await page.decide("dev-01", "q1", "deny", 0.01)
    named = [dict(p.UserProperty)["key"] for p in sent.properties]
    assert named == ["fleet-page", "fleet-approver"]
