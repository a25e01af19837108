"""Fuzzing the MQTT channel against a real mosquitto: every command topic gets nasty payloads (deep
nesting, huge numbers, NaN, wrong types, broken UTF-8, envelopes inside out) and payloads that
hypothesis generates. Each request must get exactly one answer, and nothing may end in a traceback."""

from __future__ import annotations

import asyncio
import json
import logging
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgeclaw.net.signing import envelope
from tests.mqtt_support import Caller, needs_mosquitto
from tests.test_mqtt import BASE, broker, daemon_config, running_daemon

pytestmark = needs_mosquitto
__all__ = ["broker"]  # the fixture, shared with tests/test_mqtt.py

REPLY = "fuzz/answers"
COMMANDS = ["tool/call", "tool/cancel", "chat/in", "admin/tools"]
SECRET = "fuzz-signing-key-778899"


def deep(depth: int, opener: str = "[", closer: str = "]", inner: str = "0") -> bytes:
    return (opener * depth + inner + closer * depth).encode()


NASTY: list[bytes] = [
    deep(1000),
    deep(100_000),
    b'{"id": "d1", "tool": "i2c", "args": ' + deep(1000) + b"}",
    b'{"id": "d2", "tool": "i2c", "args": {"a": ' + deep(990, '{"a":', "}") + b"}}",
    b'{"id": "d3", "tool": "i2c", "args": ' + deep(70) + b"}",
    b'{"id": "d4", "text": ' + deep(1000) + b"}",
    b'{"id": "d5", "action": "define", "tool": ' + deep(995, '{"x":', "}") + b"}",
    b'{"id": "d6", "cancel": ' + deep(1000) + b"}",
    b'{"id": "n1", "tool": "i2c", "args": {"bus": ' + b"9" * 5000 + b"}}",
    b'{"id": ' + b"7" * 5000 + b', "tool": "i2c"}',
    b'{"id": "n2", "tool": "i2c", "args": {"bus": 1e99999}}',
    b'{"id": "n3", "tool": "i2c", "args": {"bus": NaN}}',
    b'{"id": "n4", "tool": "i2c", "args": {"bus": -Infinity}}',
    b'{"id": 1, "tool": 5, "session": 7}',
    b'{"id": "t1", "tool": "i2c", "args": "not an object"}',
    b'{"id": "t2", "text": 5, "session": []}',
    b'{"id": "t3", "action": ["define"]}',
    b'{"id": "t4", "cancel": {"id": "x"}}',
    b'{"id": "u1", "tool": "\xff\xfe"}',
    b"\xff\xfe\x00",
    b"",
    b"{",
    b"null",
    b"[]",
    b'"just a string"',
    b'{"signed": ' + deep(1000) + b', "hmac": "00"}',
    b'{"signed": "' + b'{\\"a\\":' * 900 + b"1" + b"}" * 900 + b'", "hmac": "00"}',
    b'{"signed": "{}", "hmac": "' + "é".encode() * 64 + b'"}',
    b'{"signed": 5, "hmac": null}',
    b'{"id": "dup", "id": 5, "tool": "i2c"}',
    b'{"id": "\\ud800", "tool": "i2c"}',
    b'{"id": "big", "tool": "i2c", "args": {"pad": "' + b"x" * 60_000 + b'"}}',
]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
field = st.sampled_from(["id", "tool", "args", "text", "session", "sender", "action", "cancel", "ts", "name"])
requests = st.dictionaries(field, json_values, max_size=6)
payloads = st.one_of(
    requests.map(lambda obj: json.dumps(obj).encode()),
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.integers(min_value=1, max_value=3000).map(deep),
    st.tuples(st.integers(min_value=60, max_value=2000), requests).map(
        lambda t: json.dumps({**t[1], "args": 0}).replace("0}", deep(t[0]).decode() + "}").encode()
    ),
)


def generated(count: int) -> list[bytes]:
    """`count` payloads from hypothesis (reproducible: derandomized, no example database)."""
    found: list[bytes] = []

    @settings(
        max_examples=count,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(payloads)
    def collect(payload: bytes) -> None:
        found.append(payload)

    collect()
    return found


async def fire(c: Caller, sent: list[bytes], topic: str, payload: bytes, **kw: Any) -> None:
    corr = f"{len(sent)}".encode()
    sent.append(corr)
    await c.publish(topic, payload, response_topic=REPLY, correlation=corr, **kw)


async def exactly_one_answer_each(c: Caller, sent: list[bytes]) -> None:
    await c.wait_for(
        lambda: {r.correlation for r in c.on(REPLY)} >= set(sent), 120, f"answers to all {len(sent)} requests"
    )
    await asyncio.sleep(0.5)  # time for a second answer to show up, if one were coming
    counts = Counter(r.correlation for r in c.on(REPLY))
    assert {corr: n for corr, n in counts.items() if n != 1} == {}
    assert set(counts) == set(sent)
    for r in c.on(REPLY):
        body = r.json
        assert isinstance(body, dict) and "Traceback" not in json.dumps(body)
        assert body.get("code") != "internal", body


def no_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    bad = [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    assert not bad, [r.getMessage()[:300] for r in bad]


async def test_fuzzed_requests_each_get_exactly_one_answer_and_no_traceback(tmp_path, broker, caplog):
    caplog.set_level(logging.WARNING)
    config = daemon_config(tmp_path, broker.port, admin_unsigned=True, inbound_queue=1024, max_concurrent=16)
    fuzz = NASTY + generated(150)
    sent: list[bytes] = []
    async with running_daemon(config, {"PATH": "/usr/bin:/bin"}) as d, Caller(broker.port, [REPLY]) as c:
        for payload in fuzz:
            for command in COMMANDS:
                await fire(c, sent, f"{BASE}/{command}", payload)
            # Approval responses are answered when they carry a Response Topic.
            await fire(c, sent, f"{BASE}/approval/response", payload)
        await exactly_one_answer_each(c, sent)
        assert d.ch.counters["answered"] == d.ch.counters["requests"]
    no_tracebacks(caplog)


async def test_fuzzed_requests_inside_valid_signatures_are_refused_cleanly(tmp_path, broker, caplog):
    """With signing on, the request inside a correct envelope is parsed like any other; a payload
    that is no envelope at all is a missing signature. Either way: one answer, no traceback."""
    caplog.set_level(logging.WARNING)
    config = daemon_config(
        tmp_path,
        broker.port,
        hmac_secret_env="EC_HMAC",
        approver_secret_env="EC_APPROVER",
        inbound_queue=1024,
    )
    environ = {"EC_HMAC": SECRET, "EC_APPROVER": SECRET + "-approver"}
    fuzz = NASTY + generated(40)
    sent: list[bytes] = []
    async with running_daemon(config, environ), Caller(broker.port, [REPLY]) as c:
        for payload in fuzz:
            text = payload.decode("utf-8", "replace")
            for command in COMMANDS:
                topic = f"{BASE}/{command}"
                await fire(c, sent, topic, payload)  # unsigned
                corr = f"{len(sent)}".encode()
                wrapped = envelope(SECRET.encode(), topic, text, response_topic=REPLY, correlation=corr)
                await fire(c, sent, topic, wrapped)
            topic = f"{BASE}/approval/response"
            corr = f"{len(sent)}".encode()
            key = (SECRET + "-approver").encode()
            await fire(c, sent, topic, envelope(key, topic, text, response_topic=REPLY, correlation=corr))
        await exactly_one_answer_each(c, sent)
    no_tracebacks(caplog)
