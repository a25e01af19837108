"""Keys on their own (no broker): which key each authority needs, the caller that follows, and the
refusals."""

from __future__ import annotations

import json

import pytest

from edgeclaw.channels.mqtt.inbound import Incoming
from edgeclaw.channels.mqtt.keys import ANONYMOUS, Keys
from edgeclaw.config.schema import MqttConfig
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.signing import envelope
from edgeclaw.net.wire import WireError

TOPIC = "edgeclaw/dev/tool/call"
BODY = {"id": "k1", "tool": "time", "args": {}}


def message(payload: bytes, topic: str = TOPIC) -> Incoming:
    return Incoming(topic, payload, False, None, None, None)


def test_without_keys_the_body_is_taken_as_sent_and_every_caller_is_anonymous():
    keys = Keys(MqttConfig())
    proof = keys.prove(message(b'{"id": "k1", "sender": "alice"}'), "command")
    assert proof.body == b'{"id": "k1", "sender": "alice"}' and not proof.signed
    # A declared sender is a label: the caller is the one anonymous identity, with the channel's tools.
    assert proof.caller() == ANONYMOUS and proof.profile == "" and proof.roles == {"observe", "operate"}


def test_a_signed_command_is_proven_and_its_caller_is_the_key_whatever_it_declares():
    keys = Keys(MqttConfig(), command_secret="c" * 32)
    proof = keys.prove(message(envelope(b"c" * 32, TOPIC, BODY)), "command")
    assert proof.signed and json.loads(proof.body)["id"] == "k1"
    assert proof.caller() == "mqtt:command"
    with pytest.raises(WireError) as refused:
        keys.prove(message(envelope(b"x" * 32, TOPIC, BODY)), "command")
    assert refused.value.code == "bad_signature"


def test_the_admin_topics_take_the_admin_key_only():
    keys = Keys(MqttConfig(), command_secret="c" * 32, admin_secret="a" * 32)
    topic = "edgeclaw/dev/admin/tools"
    assert keys.prove(message(envelope(b"a" * 32, topic, BODY), topic), "admin").caller() == "mqtt:admin"
    with pytest.raises(WireError) as refused:
        keys.prove(message(envelope(b"c" * 32, topic, BODY), topic), "admin")
    assert refused.value.message.startswith("admin commands must be signed with the admin key")
    # Without an admin key, the command key never serves the admin topics: they are off.
    no_admin = Keys(MqttConfig(), command_secret="c" * 32)
    assert no_admin.admin is None and not no_admin.admin_enabled()
    with pytest.raises(WireError) as refused:
        no_admin.prove(message(envelope(b"c" * 32, topic, BODY), topic), "admin")
    assert refused.value.code == "bad_signature"


def test_an_approval_signed_with_the_command_key_is_refused_saying_so():
    keys = Keys(MqttConfig(), command_secret="c" * 32, approver_secret="p" * 32)
    topic = "edgeclaw/dev/approval/response"
    decision = {"id": "a1", "decision": "deny"}
    proof = keys.prove(message(envelope(b"p" * 32, topic, decision), topic), "approver")
    assert proof.caller() == "mqtt:approver"
    with pytest.raises(WireError) as refused:
        keys.prove(message(envelope(b"c" * 32, topic, decision), topic), "approver")
    assert refused.value.request_id == "a1" and "signed with the command key" in refused.value.message


@pytest.mark.parametrize(
    ("secrets", "key"),
    [
        ({"command_secret": "s" * 32, "approver_secret": "s" * 32}, "mqtt.approver_secret_file"),
        ({"command_secret": "s" * 32, "admin_secret": "s" * 32}, "mqtt.admin_secret_file"),
        ({"approver_secret": "s" * 32, "admin_secret": "s" * 32}, "mqtt.admin_secret_file"),
    ],
)
def test_no_two_keys_may_be_the_same_secret(secrets, key):
    with pytest.raises(ConfigErrors) as refused:
        Keys(MqttConfig(), source="edgeclaw.toml", **secrets)
    assert [e.key for e in refused.value.errors] == [key]
