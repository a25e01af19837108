"""The MQTT channel's parts on their own: backoff, outbox, request ledger, payloads, signing,
telemetry, discovery and the [mqtt] config checks. No broker needed."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path

import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.reasoncodes import ReasonCode

from edgeclaw.channels.mqtt.discovery import SENSORS, discovery_payload, discovery_topic_usable
from edgeclaw.channels.mqtt.outbox import MAX_ATTEMPTS, Kind, Outbox, OutMessage
from edgeclaw.channels.mqtt.protocol import (
    WireError,
    check_fresh,
    parse_approval,
    parse_chat,
    parse_json_object,
    parse_tool_call,
    peek_id,
    replayed,
    safe_response_topic,
    tool_answer,
)
from edgeclaw.channels.mqtt.telemetry import HealthSources, TelemetryCollector, cpu_temperature_c
from edgeclaw.channels.mqtt.topics import DeviceTopics
from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.secrets import resolve_secrets
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.mqtt_connection import Connection, ConnectionSettings, ReconnectBackoff
from edgeclaw.net.signing import Verifier, envelope, mac
from edgeclaw.store.db import Database
from edgeclaw.tools.approval import Decision
from edgeclaw.tools.audit import ToolStats
from edgeclaw.tools.registry import CallOutcome


@pytest.fixture
def db(tmp_path: Path):
    database = Database(tmp_path / "state.db")
    yield database
    database.close()


# -- backoff ----------------------------------------------------------------------
def test_backoff_doubles_from_one_second_to_sixty_with_jitter_and_resets():
    low = ReconnectBackoff(rng=lambda: 0.0)
    high = ReconnectBackoff(rng=lambda: 1.0)
    lows = [low.next() for _ in range(9)]
    highs = [high.next() for _ in range(9)]
    assert highs == [1, 2, 4, 8, 16, 32, 60, 60, 60]
    assert lows == [h / 2 for h in highs]  # never less than half: no thundering retries at 0 s
    high.reset()
    assert high.next() == 1


# -- outbox -----------------------------------------------------------------------
def _msg(box: Outbox, kind: Kind, text: str, corr: bytes | None = None) -> OutMessage:
    return OutMessage(kind, f"t/{text}", text.encode(), box.next_order(), correlation=corr)


def test_outbox_keeps_order_and_correlation_across_reopen(db, tmp_path):
    box = Outbox(db, 100)
    first = _msg(box, Kind.ANSWER, "a", b"\x01\x02")
    second = _msg(box, Kind.EVENT, "b")
    # Stored out of order (a failed publish going back in): leaves in the order made.
    box.put(second)
    box.put(first)
    assert [m.message.payload for m in box.peek(10)] == [b"a", b"b"]
    db.close()
    reopened = Outbox(Database(tmp_path / "state.db"), 100)
    stored = reopened.peek(10)
    assert reopened.depth == 2 and [m.message.correlation for m in stored] == [b"\x01\x02", None]
    assert reopened.next_order() > second.ord
    reopened.delete([stored[0].seq])
    assert reopened.depth == 1 and reopened.peek(10)[0].message.payload == b"b"


def test_outbox_bound_drops_oldest_telemetry_then_events_and_answers_last(db):
    box = Outbox(db, 4)
    for text, kind in (
        ("t1", Kind.TELEMETRY),
        ("a1", Kind.ANSWER),
        ("e1", Kind.EVENT),
        ("t2", Kind.TELEMETRY),
    ):
        assert box.put(_msg(box, kind, text))
    box.put(_msg(box, Kind.ANSWER, "a2"))  # t1 goes
    box.put(_msg(box, Kind.ANSWER, "a3"))  # t2 goes
    box.put(_msg(box, Kind.EVENT, "e2"))  # e1 goes (oldest event)
    assert [m.message.payload for m in box.peek(10)] == [b"a1", b"a2", b"a3", b"e2"]
    assert box.dropped == 3
    # Telemetry arriving at a box full of answers and events is itself the one dropped.
    assert box.put(_msg(box, Kind.TELEMETRY, "t3")) is None
    assert box.dropped == 4 and box.depth == 4
    box.put(_msg(box, Kind.ANSWER, "a4"))  # e2 goes
    box.put(_msg(box, Kind.ANSWER, "a5"))  # only answers left: the oldest answer goes
    assert [m.message.payload for m in box.peek(10)] == [b"a2", b"a3", b"a4", b"a5"]
    assert Outbox(db, 4).dropped == 6  # persisted


def test_outbox_back_within_a_lowered_bound_at_the_next_message(db):
    box = Outbox(db, 10)
    for i in range(10):
        box.put(_msg(box, Kind.ANSWER if i % 2 else Kind.TELEMETRY, f"m{i}"))
    smaller = Outbox(db, 4)  # restarted with a lower outbox_max
    assert smaller.put(_msg(smaller, Kind.ANSWER, "new"))
    assert smaller.depth == 4 and smaller.dropped == 7
    # The telemetry went first, then the oldest answers.
    assert [m.message.payload for m in smaller.peek(10)] == [b"m5", b"m7", b"m9", b"new"]


def test_outbox_drops_a_message_the_broker_keeps_refusing(db):
    box = Outbox(db, 10)
    box.put(_msg(box, Kind.ANSWER, "poison"))
    seq = box.peek(1)[0].seq
    for _ in range(MAX_ATTEMPTS - 1):
        assert box.failed([seq]) == 0
    assert box.failed([seq]) == 1 and box.depth == 0 and box.dropped == 1


# -- payloads ---------------------------------------------------------------------
def test_tool_call_parsing_names_each_problem():
    call = parse_tool_call({"id": "7", "tool": "i2c", "args": {"bus": 1}, "session": "s"})
    assert (call.id, call.tool, call.args, call.session) == ("7", "i2c", {"bus": 1}, "s")
    assert parse_tool_call({"id": "x", "tool": "t"}).args == {}
    for obj, code, words in (
        ({"tool": "t"}, "missing_field", "'id'"),
        ({"id": "", "tool": "t"}, "missing_field", "'id' is empty"),
        ({"id": "x"}, "missing_field", "'tool'"),
        ({"id": "x", "tool": ["t"]}, "bad_field", "'tool' must be a string"),
        ({"id": "x", "tool": "t", "args": "{}"}, "bad_field", "'args'"),
        ({"id": True, "tool": "t"}, "bad_field", "'id'"),
        # Numbers are not coerced: `1` is not the request "1" (it would replay its answer).
        ({"id": 1, "tool": "t"}, "bad_field", "'id' must be a string, got a number"),
        ({"id": "x", "tool": 5}, "bad_field", "'tool' must be a string, got a number"),
        ({"id": "x", "tool": "t", "session": 7}, "bad_field", "'session' must be a string"),
        ({"id": "x", "tool": "t", "sender": 7}, "bad_field", "'sender' must be a string"),
        ({"id": "x" * 500, "tool": "t"}, "bad_field", "longer than"),
    ):
        with pytest.raises(WireError) as e:
            parse_tool_call(obj)
        assert e.value.code == code and words in e.value.message
    with pytest.raises(WireError, match="malformed JSON") as e:
        parse_json_object(b'{"id": ', "tool/call")
    assert e.value.code == "bad_json"
    with pytest.raises(WireError, match="not UTF-8"):
        parse_json_object(b'{"id": "\xff"}', "tool/call")


def test_chat_parsing_json_or_plain_text():
    assert parse_chat(b"hello there").text == "hello there"
    chat = parse_chat(b'{"text": "hi", "session": "s", "sender": "bob", "id": "m1"}')
    assert (chat.text, chat.session, chat.sender, chat.id) == ("hi", "s", "bob", "m1")
    with pytest.raises(WireError, match="'text'"):
        parse_chat(b'{"session": "s"}')
    with pytest.raises(WireError, match="malformed"):
        parse_chat(b"{oops")
    with pytest.raises(WireError, match="neither JSON nor UTF-8"):
        parse_chat(b"\xff")


def test_approval_parsing():
    digest = "ab" * 32
    answer = parse_approval({"id": "a", "decision": "allow-always", "action_digest": digest})
    assert answer.decision is Decision.ALLOW_ALWAYS and answer.action_digest == digest
    with pytest.raises(WireError, match="allow-once, allow-always, deny"):
        parse_approval({"id": "a", "decision": "yes", "action_digest": digest})


@pytest.mark.parametrize(
    ("digest", "code", "says"),
    [
        (None, "missing_field", "missing field 'action_digest': copy it from the approval request"),
        ("", "missing_field", "missing field 'action_digest'"),
        ("AB" * 32, "bad_field", "64 lower-case hex digits"),
        ("ab" * 31, "bad_field", "64 lower-case hex digits"),
        ("zz" * 32, "bad_field", "64 lower-case hex digits"),
        (7, "bad_field", "must be a string"),
    ],
)
def test_an_approval_answer_must_name_the_action_it_decides(digest, code, says):
    body = {"id": "a", "decision": "deny"}
    if digest is not None:
        body["action_digest"] = digest
    with pytest.raises(WireError) as refused:
        parse_approval(body)
    assert refused.value.code == code and says in refused.value.message and refused.value.request_id == "a"


def test_answers_and_replays():
    outcome = CallOutcome("i2c", False, "i2c: nope", None, "i2c: nope", 1.23456, True, "policy")
    answer = tool_answer("9", outcome)
    assert answer == {
        "id": "9",
        "ok": False,
        "tool": "i2c",
        "for_llm": "i2c: nope",
        "error": "i2c: nope",
        "code": "policy",
        "duration_ms": 1.235,
    }
    again = json.loads(replayed(json.dumps(answer).encode()))
    assert again.pop("replay") is True and again == answer


def test_peek_id_finds_the_id_of_a_refused_request_even_in_an_envelope():
    assert peek_id(b'{"id": "a", "tool": "t"}') == "a"
    assert peek_id(b'{"id": 7}') is None  # not a usable id: the answer says null, not "7"
    assert peek_id(envelope(b"k", "t", {"id": "inner"})) == "inner"
    assert peek_id(b'{"id": "deep", "args": ' + b"[" * 5000 + b"]" * 5000 + b"}") is None
    for payload in (
        b"[1]",
        b"{oops",
        b'{"id": true}',
        b'{"id": ""}',
        b"\xff",
        json.dumps({"id": "x" * 500}).encode(),
    ):
        assert peek_id(payload) is None, payload
    assert peek_id(b'{"id": "big", "pad": "' + b"x" * (2 << 20) + b'"}') is None  # not parsed


def test_response_topics_that_are_refused():
    assert safe_response_topic("reply/x")
    for topic in ("", "a/#", "a/+/b", "$SYS/x", "edgeclaw/other/tool/call", "edgeclaw/x/chat/in"):
        assert not safe_response_topic(topic), topic
    # The rest is in tests/test_mqtt_wire.py (every device's topics, signing of the route).


def test_freshness_of_signed_commands():
    now = 1_000_000.0
    check_fresh({"ts": now - 10}, 60, now)
    for obj in ({}, {"ts": "now"}, {"ts": now - 61}, {"ts": now + 61}):
        with pytest.raises(WireError) as e:
            check_fresh(obj, 60, now)
        assert e.value.code == "stale"


# -- signing ----------------------------------------------------------------------
def test_hmac_user_property_and_envelope():
    secret = "s3cret-value"
    verifier = Verifier(secret)
    topic = "edgeclaw/d/tool/call"
    body = b'{"id":"1","tool":"t"}'
    assert verifier.verify(topic, body, [("hmac", mac(secret.encode(), topic, body))]) == body
    assert verifier.verify(topic, body, [("hmac", mac(secret.encode(), topic, body).upper())]) == body
    env = envelope(secret.encode(), topic, {"id": "1", "tool": "t"}, stamp=False)
    assert json.loads(verifier.verify(topic, env, None)) == {"id": "1", "tool": "t"}
    assert env.replace(b'\\"1\\"', b'\\"2\\"') != env  # the tampering below really changes it
    for payload, props in (
        (body, None),
        (body, [("hmac", "00" * 32)]),
        (body, [("hmac", mac(secret.encode(), "edgeclaw/other/tool/call", body))]),
        (env.replace(b'\\"1\\"', b'\\"2\\"'), None),
        (envelope(b"other", topic, {"id": "1"}), None),
    ):
        with pytest.raises(WireError) as e:
            verifier.verify(topic, payload, props)
        assert e.value.code == "bad_signature"
    with pytest.raises(ValueError):
        Verifier("")


# -- connection -------------------------------------------------------------------
class RefusingClient:
    """Stands in for aiomqtt.Client: the broker grants the first subscription and refuses the rest."""

    async def subscribe(self, topics):
        granted = ReasonCode(PacketTypes.SUBACK, identifier=1)
        refused = ReasonCode(PacketTypes.SUBACK, identifier=0x87)  # not authorized
        return [granted] + [refused] * (len(topics) - 1)


async def test_subscriptions_refused_by_the_broker_are_reported(caplog):
    topics = DeviceTopics("edgeclaw", "d").subscriptions(admin=False, discovery=False)
    for protocol in ("5", "3.1.1"):
        settings = ConnectionSettings("127.0.0.1", 1883, "d", protocol=protocol, subscriptions=tuple(topics))
        caplog.clear()
        with caplog.at_level(logging.ERROR, "edgeclaw.mqtt"):
            await Connection(settings, lambda m: None)._subscribe(RefusingClient())  # type: ignore[arg-type]
        [record] = caplog.records
        assert topics[0] not in record.message  # granted
        assert all(t in record.message for t in topics[1:]) and "ACL" in record.message


async def test_a_socket_closed_before_the_loop_watches_it_leaves_no_traceback():
    """paho asks for a write watch from its thread; the broker dies before the loop adds it."""
    import asyncio
    import socket

    loop = asyncio.get_running_loop()
    errors: list[dict] = []
    loop.set_exception_handler(lambda _loop, context: errors.append(context))
    try:
        client = Connection(ConnectionSettings("127.0.0.1", 1883, "d"), lambda m: None)._build_client()
        closing, peer = socket.socketpair()
        kept, peer2 = socket.socketpair()
        with peer, peer2, kept:
            fileno = closing.fileno()
            client._on_socket_register_write(client._client, None, closing)
            closing.close()  # before the loop runs the scheduled watch
            client._on_socket_register_write(client._client, None, kept)
            await asyncio.sleep(0.05)
            assert not errors, errors
            assert not loop.remove_writer(fileno)  # nothing watched under the closed socket's number
            assert loop.remove_writer(kept.fileno())  # an open socket is watched as before
    finally:
        loop.set_exception_handler(None)


class CancelSwallowingClient:
    """A client whose connect swallows one cancellation as the CONNACK arrives, as aiomqtt's does on
    Python 3.11 (asyncio.wait_for loses a cancel that lands as its future completes)."""

    def __init__(self, connecting: asyncio.Event) -> None:
        self.connecting = connecting
        self.served = False

    async def __aenter__(self) -> CancelSwallowingClient:
        self.connecting.set()
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    @property
    def messages(self) -> CancelSwallowingClient:
        self.served = True
        return self

    def __aiter__(self) -> CancelSwallowingClient:
        return self

    async def __anext__(self) -> None:
        await asyncio.sleep(30)


async def test_stop_while_connecting_ends_the_connection_even_when_the_cancel_is_swallowed():
    """SIGTERM as the daemon connects: stop() must end the connection task, not wait forever."""
    connecting = asyncio.Event()
    client = CancelSwallowingClient(connecting)
    connection = Connection(ConnectionSettings("127.0.0.1", 1883, "d"), lambda m: None)
    connection._next_client = lambda: client  # type: ignore[method-assign,assignment,return-value]
    runner = asyncio.get_running_loop().create_task(connection.run())
    await asyncio.wait_for(connecting.wait(), 10)
    await asyncio.wait_for(connection.stop(runner), 10)
    assert runner.done()
    assert not client.served  # it left as soon as it was in, rather than serving a connection


async def test_stop_cancels_again_a_connection_task_that_swallowed_the_first_cancel():
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            asyncio.current_task().uncancel()  # type: ignore[union-attr]
            swallowed.set()
        await asyncio.sleep(30)

    runner = asyncio.get_running_loop().create_task(stubborn())
    await asyncio.sleep(0)
    connection = Connection(ConnectionSettings("127.0.0.1", 1883, "d"), lambda m: None)
    await asyncio.wait_for(connection.stop(runner), 10)
    assert swallowed.is_set() and runner.cancelled()


# -- telemetry and discovery ------------------------------------------------------
def _fake_tree(root: Path, zones: dict[str, tuple[str, str]]) -> HealthSources:
    thermal = root / "thermal"
    for name, (kind, temp) in zones.items():
        (thermal / name).mkdir(parents=True)
        (thermal / name / "type").write_text(kind + "\n")
        (thermal / name / "temp").write_text(temp + "\n")
    proc = root / "proc"
    proc.mkdir()
    (proc / "loadavg").write_text("0.50 0.25 0.10 1/123 4567\n")
    (proc / "meminfo").write_text("MemTotal:        1000000 kB\nMemFree: 1 kB\nMemAvailable:     250000 kB\n")
    (proc / "uptime").write_text("12345.67 100.00\n")
    return HealthSources(thermal=thermal, proc=proc, disk=root)


def test_telemetry_reads_the_cpu_zone_load_memory_disk_and_tool_stats(tmp_path):
    sources = _fake_tree(
        tmp_path, {"thermal_zone0": ("acpitz", "30000"), "thermal_zone1": ("cpu-thermal", "47312")}
    )
    stats = ToolStats()
    stats.record("i2c", "s", True, False, 2.0, time.time())
    stats.record("i2c", "s", False, False, 4.0, time.time())
    snap = TelemetryCollector("sim", "1.0", stats, sources).snapshot(outbox_depth=3)
    assert snap["cpu_temp_c"] == 47.3  # the CPU's zone, not the first one
    assert (snap["load_1m"], snap["load_5m"], snap["load_15m"]) == (0.5, 0.25, 0.1)
    assert snap["mem_used_pct"] == 75.0 and snap["system_uptime_s"] == 12345.67
    assert snap["disk_total_bytes"] > 0 and 0 <= snap["disk_used_pct"] <= 100
    assert snap["tool_calls"] == 2 and snap["tool_errors"] == 1
    assert snap["tools"]["i2c"] == {"calls": 2, "errors": 1, "refused": 0, "avg_ms": 3.0}
    assert snap["outbox_depth"] == 3 and snap["board"] == "sim"
    json.dumps(snap)


def test_telemetry_without_thermal_zones_or_proc_reports_null(tmp_path):
    assert cpu_temperature_c(tmp_path / "missing") is None
    only = _fake_tree(tmp_path, {"thermal_zone0": ("acpitz", "31000")})
    assert cpu_temperature_c(only.thermal) == 31.0
    snap = TelemetryCollector(
        "sim", "1", ToolStats(), HealthSources(tmp_path / "x", tmp_path / "y", tmp_path / "z")
    ).snapshot()
    assert snap["cpu_temp_c"] is None and snap["load_1m"] is None and snap["mem_used_pct"] is None


def test_discovery_payload_shape():
    topics = DeviceTopics("edgeclaw", "green house/7")
    p = discovery_payload(topics, board="rpi4", version="1.2", telemetry_interval_s=30)
    assert topics.discovery == "homeassistant/device/green house/7/config"
    assert p["dev"] == {
        "ids": ["edgeclaw_green_house_7"],
        "name": "green house/7",
        "mf": "edgeclaw",
        "mdl": "rpi4",
        "sw": "1.2",
    }
    assert p["o"] == {"name": "edgeclaw", "sw": "1.2"}
    assert len(p["cmps"]) == len(SENSORS)
    for uid, comp in p["cmps"].items():
        assert comp["p"] == "sensor" and comp["unique_id"] == uid and comp["expire_after"] == 90
        assert all(c.isalnum() or c in "_-" for c in uid)
    assert discovery_payload(
        DeviceTopics("e", "gewächshaus"), board="b", version="1", telemetry_interval_s=0
    )["dev"]["ids"] == ["edgeclaw_gew_chshaus"]


def test_device_ids_home_assistant_would_ignore_in_the_discovery_topic():
    assert discovery_topic_usable("greenhouse-07") and discovery_topic_usable("pi_4")
    for device in ("pi.local", "green house", "gewächshaus", ""):
        assert not discovery_topic_usable(device), device


# -- config -----------------------------------------------------------------------
def test_mqtt_config_checks_name_the_key():
    with pytest.raises(ConfigErrors) as e:
        config_from_dict(
            {
                "mqtt": {
                    "inbound_queue": 0,
                    "max_concurrent": 0,
                    "telemetry_interval_s": 0.01,
                    "dedup_window_s": -1,
                    "hmac_secret_env": "A",
                    "hmac_secret_file": "/x",
                    "discovery_prefix": "home/#",
                    "tls": {"cert_file": "c.pem"},
                }
            },
            "e.toml",
        )
    text = str(e.value)
    for key in (
        "mqtt.inbound_queue",
        "mqtt.max_concurrent",
        "mqtt.telemetry_interval_s",
        "mqtt.dedup_window_s",
        "hmac_secret_env or hmac_secret_file",
        "mqtt.discovery_prefix",
        "mqtt.tls",
    ):
        assert key in text, key
    with pytest.raises(ConfigErrors, match=r"mqtt\.hmac_max_age_s"):
        config_from_dict({"mqtt": {"hmac_max_age_s": 0}}, "e.toml")


def test_hmac_secret_comes_from_the_environment_or_a_file(tmp_path):
    config = config_from_dict({"mqtt": {"hmac_secret_env": "EC_SECRET"}}, "c.toml")
    values, problems = resolve_secrets(config, {"EC_SECRET": "from-env"})
    assert values["mqtt.hmac"] == "from-env" and not problems
    _, problems = resolve_secrets(config, {})
    assert "mqtt.hmac_secret_env" in str(problems[0])
    (tmp_path / "secret").write_text("from-file\n")
    config = config_from_dict({"mqtt": {"hmac_secret_file": str(tmp_path / "secret")}}, "c.toml")
    assert resolve_secrets(config, {})[0]["mqtt.hmac"] == "from-file"
