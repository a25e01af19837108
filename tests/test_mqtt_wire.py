"""The MQTT wire format on its own (no broker): JSON this device will not take, field types,
Response Topics that belong to the devices, the exact signed input, and answer shapes."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import sys

import pytest

from edgeclaw.channels.mqtt.protocol import (
    parse_admin,
    parse_approval,
    parse_cancel,
    parse_chat,
    parse_json_object,
    parse_tool_call,
    peek_id,
    response_topic_problem,
    tool_answer,
)
from edgeclaw.config.loader import config_from_dict
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.signing import Verifier, envelope, mac, signed_input
from edgeclaw.net.wire import MAX_JSON_DEPTH, WireError, load_json
from edgeclaw.tools.approval import ApprovalBroker, ApprovalUnavailable, Decision, Verdict
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import CallOutcome


def nested(depth: int, inner: str = "1") -> str:
    return "[" * depth + inner + "]" * depth


# Payloads that must each be refused as `bad_json`, with the words the answer says.
NASTY_JSON: list[tuple[str, bytes, str]] = [
    ("deep-top", nested(1000).encode(), "nested deeper than"),
    (
        "deep-args",
        b'{"id": "d", "tool": "t", "args": {"x": ' + nested(1000).encode() + b"}}",
        "nested deeper",
    ),
    ("deep-objects", b'{"a":' * 990 + b"1" + b"}" * 990, "nested deeper than"),
    ("just-too-deep", b'{"id": "d", "args": ' + nested(MAX_JSON_DEPTH).encode() + b"}", "nested deeper"),
    ("very-deep", nested(200_000).encode(), "nested deeper than"),
    ("long-int", b'{"id": "i", "tool": "t", "args": {"n": ' + b"9" * 5000 + b"}}", "characters"),
    ("long-negative", b'{"id": "i", "args": {"n": -' + b"1" * 4299 + b"}}", "characters"),
    ("long-float", b'{"id": "f", "args": {"n": 0.' + b"1" * 500 + b"}}", "characters"),
    ("overflow", b'{"id": "o", "args": {"n": 1e999}}', "out of range"),
    ("nan", b'{"id": "n", "args": {"n": NaN}}', "not a JSON number"),
    ("infinity", b'{"id": "n", "args": {"n": -Infinity}}', "not a JSON number"),
    ("surrogate", b'{"id": "\\ud800", "tool": "t"}', "lone surrogate"),
    ("surrogate-key", b'{"id": "s", "args": {"\\udfff": 1}}', "lone surrogate"),
    ("surrogate-bytes", b'{"id": "s", "args": {"x": "\xed\xa0\x80"}}', "lone surrogate"),
]


@pytest.mark.parametrize(("name", "payload", "words"), NASTY_JSON, ids=[n for n, _, _ in NASTY_JSON])
def test_json_this_device_will_not_take_is_bad_json_in_every_parser(name, payload, words):
    parsers = [lambda p: parse_json_object(p, "tool/call")]
    if payload.startswith(b"{"):  # chat/in takes anything else as plain text
        parsers.append(parse_chat)
    for parse in parsers:
        with pytest.raises(WireError) as e:
            parse(payload)
        assert e.value.code == "bad_json" and words in e.value.message, (name, e.value.message)
    assert peek_id(payload) is None
    # Inside a signed envelope: the envelope checks out, the request inside is refused the same way.
    secret, topic = "k3y", "edgeclaw/d/tool/call"
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        return  # cannot be a JSON string inside an envelope
    signed = envelope(secret.encode(), topic, text)
    body = Verifier(secret).verify(topic, signed, None)
    with pytest.raises(WireError) as e:
        parse_json_object(body, "tool/call")
    assert e.value.code == "bad_json"
    # A payload that is itself an unparseable envelope-to-be is a missing signature, not a crash.
    with pytest.raises(WireError) as e:
        Verifier(secret).verify(topic, payload, None)
    assert e.value.code == "bad_signature"


def test_json_just_inside_the_limits_is_taken():
    assert load_json(nested(MAX_JSON_DEPTH - 1), "x")
    assert load_json(b'{"n": ' + b"9" * 100 + b"}", "x")["n"] == int("9" * 100)
    assert load_json(b'{"n": -1.5e300, "m": 0.25}', "x") == {"n": -1.5e300, "m": 0.25}
    assert load_json(b'{"pair": "\\ud83d\\ude00"}', "x") == {"pair": "\U0001f600"}


def test_deep_json_is_refused_even_when_the_stack_is_already_deep():
    """The parser's own recursion limit depends on how deep the caller's stack is: whatever fails
    first, the answer is the same bad_json."""

    def at_depth(n: int) -> WireError:
        if n:
            return at_depth(n - 1)
        with pytest.raises(WireError) as e:
            load_json(nested(900), "x")
        return e.value

    assert at_depth(sys.getrecursionlimit() - 150).code == "bad_json"


def test_field_types_are_not_coerced():
    for obj, key in (
        ({"id": 1, "tool": "t"}, "id"),
        ({"id": "1", "tool": 5}, "tool"),
        ({"id": "1", "tool": "t", "session": 7}, "session"),
        ({"id": "1", "tool": "t", "sender": 1.5}, "sender"),
        ({"id": "1", "tool": "t", "session": True}, "session"),
    ):
        with pytest.raises(WireError) as e:
            parse_tool_call(obj)
        assert e.value.code == "bad_field" and f"{key!r} must be a string" in e.value.message
    for parse, obj, key in (
        (parse_chat, b'{"text": "hi", "session": 7}', "session"),
        (parse_chat, b'{"text": "hi", "id": 1}', "id"),
        (parse_approval, {"id": 1, "decision": "deny"}, "id"),
        (parse_admin, {"id": 2, "action": "list"}, "id"),
        (parse_cancel, {"id": "c", "cancel": 3}, "cancel"),
    ):
        with pytest.raises(WireError) as e:
            parse(obj)
        assert e.value.code == "bad_field" and key in e.value.message
    cancel = parse_cancel({"id": "c1", "cancel": "run-7", "sender": "ops"})
    assert (cancel.id, cancel.target, cancel.sender) == ("c1", "run-7", "ops")
    with pytest.raises(WireError) as e:
        parse_cancel({"id": "c1"})
    assert e.value.code == "missing_field" and "'cancel'" in e.value.message


# -- where answers may go --------------------------------------------------------------
REFUSED_TOPICS = [
    # this device's and any other device's reports ...
    "edgeclaw/dev/status",
    "edgeclaw/other/status",
    "edgeclaw/other/events",
    "edgeclaw/other/telemetry",
    "edgeclaw/other/health",
    "edgeclaw/other/tool/result",
    "edgeclaw/other/chat/out",
    "edgeclaw/other/approval/request",
    "edgeclaw/other/admin/result",
    "edgeclaw/other/status/below",
    # ... and commands, broadcast and group ones included
    "edgeclaw/other/tool/call",
    "edgeclaw/other/tool/cancel",
    "edgeclaw/other/approval/response",
    "edgeclaw/other/admin/tools",
    "edgeclaw/_all/tool/call",
    "edgeclaw/_group/greenhouses/tool/call",
    "edgeclaw/_group/greenhouses/tool/result",
    "edgeclaw/other",
    "edgeclaw",
    "edgeclaw//status",
    # Home Assistant's discovery and birth topics
    "homeassistant/device/other/config",
    "homeassistant/status",
    "homeassistant",
    # command topics under any prefix, and the generic ones
    "fleet/x/tool/call",
    "",
    "reply/#",
    "reply/+/x",
    "$SYS/broker",
    "reply/a\nb",
    "reply/\x7f",
    "r" * 513,
]


def test_response_topics_under_any_device_or_home_assistant_are_refused():
    for topic in REFUSED_TOPICS:
        assert response_topic_problem(topic, "edgeclaw", "homeassistant") is not None, topic
    for topic in ("reply/dev/1", "edgeclaw-replies/x", "edgeclaw/dev/replies/x", "backend/status"):
        assert response_topic_problem(topic, "edgeclaw", "homeassistant") is None, topic
    # The configured prefixes, not fixed names.
    assert response_topic_problem("fleet/a/other/events", "fleet/a", "ha") is not None
    assert response_topic_problem("edgeclaw/other/events", "fleet/a", "ha") is None
    assert response_topic_problem("ha/device/x/config", "fleet/a", "ha") is not None
    why = response_topic_problem("edgeclaw/other/status", "edgeclaw", "homeassistant")
    assert why is not None and "'status'" in why


# -- the signed input ------------------------------------------------------------------
SECRET = b"wire-secret-1234"
TOPIC = "edgeclaw/d/tool/call"
BODY = b'{"id":"1","tool":"t","ts":1}'


def test_the_mac_input_is_exactly_as_documented():
    assert signed_input(TOPIC, BODY, "reply/x", b"\x00\xff") == (
        b"edgeclaw/d/tool/call\nreply/x\n00ff\n" + BODY
    )
    assert signed_input(TOPIC, BODY) == b"edgeclaw/d/tool/call\n\n\n" + BODY
    expected = hmac.new(SECRET, b"edgeclaw/d/tool/call\nreply/x\n00ff\n" + BODY, hashlib.sha256).hexdigest()
    assert mac(SECRET, TOPIC, BODY, "reply/x", b"\x00\xff") == expected


def test_the_mac_covers_the_response_topic_and_correlation_data():
    verifier = Verifier(SECRET.decode())
    good = [("hmac", mac(SECRET, TOPIC, BODY, "reply/x", b"c1"))]
    assert verifier.verify(TOPIC, BODY, good, "reply/x", b"c1") == BODY
    env = envelope(SECRET, TOPIC, BODY.decode(), response_topic="reply/x", correlation=b"c1")
    assert verifier.verify(TOPIC, env, None, "reply/x", b"c1") == BODY
    for props, payload in ((good, BODY), (None, env)):
        for rt, corr in (("reply/evil", b"c1"), (None, b"c1"), ("reply/x", b"c2"), ("reply/x", None)):
            with pytest.raises(WireError) as e:
                verifier.verify(TOPIC, payload, props, rt, corr)
            assert e.value.code == "bad_signature", (rt, corr)


def test_a_mac_must_match_whole_an_empty_or_cut_one_never_verifies():
    verifier = Verifier(SECRET.decode())
    right = mac(SECRET, TOPIC, BODY)
    assert verifier.verify(TOPIC, BODY, [("hmac", right)]) == BODY
    for digest in ("", " ", right[:1], right[:32], right[:-1], right + "0", right + right):
        with pytest.raises(WireError) as e:
            verifier.verify(TOPIC, BODY, [("hmac", digest)])
        assert e.value.code == "bad_signature", digest
        outer = json.dumps({"signed": BODY.decode(), "hmac": digest}).encode()
        with pytest.raises(WireError) as e:
            verifier.verify(TOPIC, outer, None)
        assert e.value.code == "bad_signature", digest


def test_a_non_ascii_mac_is_a_bad_signature_not_a_crash():
    verifier = Verifier(SECRET.decode())
    for digest in ("é" * 64, "\udcff" * 64, mac(SECRET, TOPIC, BODY)[:63] + "é", "\u0660" * 64):
        with pytest.raises(WireError) as e:
            verifier.verify(TOPIC, BODY, [("hmac", digest)])
        assert e.value.code == "bad_signature"
        outer = json.dumps({"signed": BODY.decode(), "hmac": digest}).encode()
        with pytest.raises(WireError) as e:
            verifier.verify(TOPIC, outer, None)
        assert e.value.code == "bad_signature"


def test_envelope_stamps_a_time_and_keys_have_names():
    inner = json.loads(json.loads(envelope(SECRET, TOPIC, {"id": "1"}))["signed"])
    assert isinstance(inner["ts"], float)
    assert json.loads(json.loads(envelope(SECRET, TOPIC, {"id": "1", "ts": 5}))["signed"])["ts"] == 5
    assert "ts" not in json.loads(json.loads(envelope(SECRET, TOPIC, {"id": "1"}, stamp=False))["signed"])
    assert Verifier("x", "backend-1").identity == "mqtt:backend-1"
    assert Verifier("x").same_secret(Verifier("x", "other")) and not Verifier("x").same_secret(Verifier("y"))


# -- answers ---------------------------------------------------------------------------
def outcome(**kw) -> CallOutcome:
    fields = {"tool": "i2c", "ok": True, "for_llm": "text", "for_user": None, "error": None}
    return CallOutcome(**{**fields, "duration_ms": 1.0, **kw})


def test_tool_answer_sends_each_text_once_and_data_when_there_is_some():
    same = tool_answer("1", outcome(for_llm="32 KiB of text", for_user="32 KiB of text"))
    assert same["for_llm"] == "32 KiB of text" and "for_user" not in same
    differs = tool_answer("2", outcome(for_llm="{...}", for_user="3 devices"))
    assert differs["for_user"] == "3 devices" and differs["for_llm"] == "{...}"
    assert "data" not in differs
    with_data = tool_answer("3", outcome(data={"addresses": ["0x48"]}))
    assert with_data["data"] == {"addresses": ["0x48"]} and with_data["for_llm"] == "text"


# -- config ----------------------------------------------------------------------------
def test_signing_config_checks():
    def problems(**mqtt) -> str:
        with pytest.raises(ConfigErrors) as e:
            config_from_dict({"mqtt": mqtt}, "m.toml")
        return str(e.value)

    # The ledger must remember a signed command for as long as it could be accepted (2 x max age).
    text = problems(hmac_secret_env="S", hmac_max_age_s=300, dedup_window_s=599)
    assert "mqtt.dedup_window_s" in text and "600" in text
    config_from_dict(
        {"mqtt": {"hmac_secret_env": "S", "hmac_max_age_s": 300, "dedup_window_s": 600}}, "m.toml"
    )
    assert "mqtt.dedup_window_s" in problems(hmac_secret_env="S", dedup_window_s=0)
    assert "mqtt.hmac_max_age_s" in problems(hmac_max_age_s=0)
    assert "approver_secret_env or approver_secret_file" in problems(
        approver_secret_env="A", approver_secret_file="/a"
    )
    assert "mqtt.hmac_key_name" in problems(hmac_key_name="no spaces")
    assert "mqtt.approver_key_name" in problems(approver_key_name="")
    assert "mqtt.approver_key_name" in problems(hmac_key_name="ops", approver_key_name="ops")
    # Without signing the window may be anything.
    config_from_dict({"mqtt": {"dedup_window_s": 0}}, "m.toml")
    defaults = config_from_dict({}, "m.toml").mqtt
    assert defaults.hmac_max_age_s == 300 and defaults.dedup_window_s >= 2 * defaults.hmac_max_age_s


# -- the approval broker's record (every channel's approvals) --------------------------
async def test_every_approval_question_and_decision_is_on_the_audit_trail():
    events: list[dict] = []
    trail = AuditTrail()
    trail.add_sink(events.append)
    broker = ApprovalBroker(timeout_s=0.2, audit=trail)

    class Scripted:
        def __init__(self, answer):
            self.answer = answer

        async def ask_approval(self, request):
            if self.answer == "hang":
                await asyncio.sleep(10)
            if isinstance(self.answer, Exception):
                raise self.answer
            return self.answer

    ctx = ToolContext(channel="console", caller="console:/dev/ttyGS0", request_id="r1", session_key="s")
    outcomes = []
    for answer in (
        Decision.ALLOW_ONCE,
        Verdict(Decision.DENY, "mqtt:key:approver"),
        "hang",
        None,
        ApprovalUnavailable("approvals are off here"),
    ):
        broker.register("console", Scripted(answer))
        outcomes.append(await broker.request("exec", "rm -rf build", ctx))
    broker.refuse("console", "no approver on this channel")
    outcomes.append(await broker.request("exec", "rm -rf build", ctx))
    broker.unregister("console")
    outcomes.append(await broker.request("exec", "rm -rf build", ctx))

    assert outcomes[0] == (Decision.ALLOW_ONCE, "")
    assert outcomes[1] == (Decision.DENY, "denied by mqtt:key:approver")
    assert [o[0] for o in outcomes[2:]] == [Decision.DENY] * 5
    assert "timed out" in outcomes[2][1] and outcomes[4][1] == "approvals are off here"
    assert outcomes[5][1] == "no approver on this channel" and "cannot ask anyone" in outcomes[6][1]
    decisions = [e["decision"] for e in events]
    assert decisions == [
        "asked", "allow-once",
        "asked", "deny",
        "asked", "timeout",
        "asked", "unavailable",
        "asked", "unavailable",
        "unavailable",  # refused: nobody was asked
        "unavailable",  # no approver registered
    ]  # fmt: skip
    assert events[1]["by"] == "console:/dev/ttyGS0" and events[3]["by"] == "mqtt:key:approver"
    for e in events:
        assert e["kind"] == "approval" and e["request_id"] == "r1" and e["caller"] == "console:/dev/ttyGS0"
        assert e["channel"] == "console" and "rm -rf" not in json.dumps(e)  # the summary is not recorded
