"""What a device publishes is signed with its own key, and an approval counts only for the action
asked about: a real `edgeclaw run` on the sim board and a real mosquitto."""

from __future__ import annotations

import asyncio
import stat
from collections.abc import Iterator
from typing import Any

import pytest

from edgeclaw.config.device_key_text import parse_public_key
from edgeclaw.net.device_key import KEY_FILENAME, signature_of, verify
from edgeclaw.net.signing import envelope
from edgeclaw.tools.approval import action_digest
from tests.fleet_support import FleetDaemon
from tests.mqtt_support import Caller, Mosquitto, Received, needs_mosquitto

pytestmark = needs_mosquitto

DEV = "dev-sig"
BASE = f"edgeclaw/{DEV}"
COMMAND_KEY = "command-key-for-signatures"
APPROVER_KEY = "approver-key-for-signatures"
ANSWERS = f"reply/{DEV}/tests"
EXTRA = '[tools.channels.mqtt]\nprofile = "full"\n[tools.exec]\nask = "always"\n'


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mosquitto]:
    b = Mosquitto(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.stop()


@pytest.fixture(scope="module")
def device(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto) -> Iterator[FleetDaemon]:
    d = FleetDaemon(
        tmp_path_factory.mktemp("device"),
        DEV,
        broker.port,
        extra=EXTRA,
        hmac_secret_env="EC_HMAC",
        approver_secret_env="EC_APPROVER",
    )
    d.env.update(EC_HMAC=COMMAND_KEY, EC_APPROVER=APPROVER_KEY)
    d.start()
    yield d
    d.stop()


def signed_by_device(key: bytes, message: Received) -> bool:
    return verify(key, message.topic, message.payload, message.correlation, signature_of(message.user))


async def device_key(c: Caller) -> bytes:
    [status] = await c.wait_for(
        lambda: [m for m in c.on(f"{BASE}/status") if m.json.get("state") == "online"][-1:], 30, "status"
    )
    return parse_public_key(status.json["device_key"])


async def test_the_status_announces_the_key_that_signs_what_the_device_publishes(device, broker):
    async with Caller(broker.port, [f"{BASE}/status", f"{BASE}/health"]) as c:
        key = await device_key(c)
        [health] = await c.answers(f"{BASE}/health", 1, 30)
        status = c.on(f"{BASE}/status")[-1]
        assert signed_by_device(key, status) and signed_by_device(key, health)
        # Signed for where it was published: the same bytes under another device's topic do not verify.
        moved = Received("edgeclaw/other/status", status.payload, None, True, 0.0, status.user)
        assert not signed_by_device(key, moved)
    path = device.state / KEY_FILENAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


async def test_an_approval_answer_naming_another_action_does_not_approve(device, broker):
    request_topic, respond = f"{BASE}/approval/request", f"{BASE}/approval/response"
    async with Caller(broker.port, [f"{BASE}/status", request_topic, ANSWERS, f"{BASE}/events"]) as c:
        key = await device_key(c)
        command = "touch PWNED_APPROVAL"
        call = {"id": "x1", "tool": "exec", "args": {"command": command}}
        await c.publish(
            f"{BASE}/tool/call",
            envelope(COMMAND_KEY.encode(), f"{BASE}/tool/call", call, response_topic=ANSWERS),
            response_topic=ANSWERS,
        )
        [question] = await c.answers(request_topic, 1, 30)
        q = question.json
        assert signed_by_device(key, question)
        assert q["action_digest"] == action_digest("exec", {"command": command})

        async def respond_with(body: dict[str, Any], corr: bytes) -> dict[str, Any]:
            signed = envelope(APPROVER_KEY.encode(), respond, body, response_topic=ANSWERS, correlation=corr)
            await c.publish(respond, signed, response_topic=ANSWERS, correlation=corr)
            [answer] = await c.wait_for(lambda: [a for a in c.on(ANSWERS) if a.correlation == corr][:1])
            assert signed_by_device(key, answer)  # answers are signed too, with their correlation
            return answer.json

        # The attack: a question re-published with a harmless summary, approved for what it showed.
        harmless = action_digest("exec", {"command": "ls -la"})
        wrong = await respond_with({"id": q["id"], "decision": "allow-once", "action_digest": harmless}, b"w")
        assert wrong["ok"] is False and wrong["code"] == "wrong_action", wrong
        assert "nothing was decided" in wrong["error"]
        missing = await respond_with({"id": q["id"], "decision": "allow-once"}, b"m")
        assert missing["code"] == "missing_field" and "action_digest" in missing["error"]
        await asyncio.sleep(0.5)
        assert not [a for a in c.on(ANSWERS) if a.json.get("id") == "x1"], "the call ran or ended"

        # The question is still waiting, and the answer naming its own action decides it.
        right = {"id": q["id"], "decision": "deny", "action_digest": q["action_digest"]}
        assert await respond_with(right, b"r") == {"id": q["id"], "ok": True}
        [result] = await c.wait_for(lambda: [a for a in c.on(ANSWERS) if a.json.get("id") == "x1"])
        assert result.json["ok"] is False and "denied by mqtt:approver" in result.json["error"]
        assert signed_by_device(key, result)
        events = await c.wait_for(
            lambda: [e for e in c.on(f"{BASE}/events") if e.json.get("decision") == "deny"]
        )
        assert all(signed_by_device(key, e) for e in events)
