"""The fleet page believes only what a device signed: each attack replayed against the page's window,
with real Ed25519 keys (pinned at first sight or provisioned)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeclaw.fleetpage.window import MAX_SUSPECT, FleetWindow
from edgeclaw.net import device_key
from edgeclaw.net.device_key import DeviceKeyUnavailable
from edgeclaw.net.device_trust import DeviceKeys, DeviceKeysError
from edgeclaw.tools.approval import action_digest
from tests.fleet_support import SignedDevice, page_on_a_broker

NOW = 1000.0
REAL = "touch PWNED_APPROVAL"


def window(tmp_path: Path, **keys: object) -> FleetWindow:
    file = keys.pop("file", tmp_path / "pins")
    return FleetWindow(clock=lambda: NOW, keys=DeviceKeys(file=file, **keys))  # type: ignore[arg-type]


def take(w: FleetWindow, message: tuple[str, bytes, str | None]) -> list:
    return w.take(*message)


def unsigned(device: str, what: str, body: dict) -> tuple[str, bytes, None]:
    """What another MQTT client publishes in `device`'s name: it has no key of the device."""
    return f"edgeclaw/{device}/{what}", json.dumps(body).encode(), None


def question(command: str = REAL, qid: str = "q1") -> dict:
    return {
        "id": qid,
        "tool": "exec",
        "summary": command,
        "expires_at": NOW + 100,
        "action_digest": action_digest("exec", {"command": command}),
    }


def waiting(w: FleetWindow) -> list[tuple[str, str, str]]:
    return [(q["device"], q["summary"], q["trust"]) for q in w.snapshot()["approvals"]]


def test_a_device_is_pinned_at_first_sight_and_the_pin_outlives_the_page(tmp_path):
    dev = SignedDevice(tmp_path, "a")
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    [row] = w.snapshot()["devices"]
    assert row["trust"] == "verified" and row["trust_note"] == "" and row["forged"] == 0
    assert (tmp_path / "pins").read_text() == f"a {dev.key.public}\n"
    # A restarted page has the pin from the file: a status signed with another key is not taken.
    again = window(tmp_path)
    impostor = SignedDevice(tmp_path / "impostor", "a")
    take(again, impostor.message("status", {"state": "offline"}))
    row = again.snapshot()["devices"][0]
    assert row["trust"] == "key_changed" and row["state"] == "unknown" and row["forged"] == 1


def test_a_forged_approval_request_is_listed_as_forged_and_cannot_be_answered(tmp_path):
    dev = SignedDevice(tmp_path, "a")
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    take(w, dev.message("approval/request", question()))
    # The attack: the real id re-published with a harmless summary, by a client without the key.
    take(w, unsigned("a", "approval/request", question("ls -la")))
    assert waiting(w) == [("a", REAL, "verified"), ("a", "ls -la", "forged")]
    answerable = w.question("a", "q1")
    assert answerable is not None and answerable["summary"] == REAL
    assert answerable["action_digest"] == action_digest("exec", {"command": REAL})
    # The forgery first, the device's own after: the same. A forgery alone is never answerable.
    w2 = window(tmp_path)
    take(w2, dev.message("status", {"state": "online"}))
    take(w2, unsigned("a", "approval/request", question("ls -la", qid="q2")))
    assert w2.question("a", "q2") is None
    take(w2, dev.message("approval/request", question(qid="q2")))
    assert w2.question("a", "q2")["summary"] == REAL  # type: ignore[index]
    # Forgeries cannot crowd out the queue: a bounded list of their own.
    for i in range(3 * MAX_SUSPECT):
        take(w2, unsigned("a", "approval/request", question("ls", qid=f"f{i}")))
    assert len(w2.suspect) == MAX_SUSPECT and w2.question("a", "q2") is not None


def test_a_forged_decided_event_does_not_hide_a_waiting_question(tmp_path):
    dev = SignedDevice(tmp_path, "a")
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    take(w, dev.message("approval/request", question()))
    decided = {"kind": "approval", "decision": "deny", "approval": "q1", "by": "mqtt:approver"}
    assert take(w, unsigned("a", "events", decided)) == [("device", w.row(w.devices["a"]))]
    assert waiting(w) == [("a", REAL, "verified")] and list(w.events) == []
    assert w.devices["a"].forged == 1
    # The device's own event closes it.
    updates = take(w, dev.message("events", decided))
    assert ("approval_done", {"device": "a", "id": "q1", "decision": "deny"}) in updates
    assert waiting(w) == [] and w.events[-1]["verified"] is True


def test_forged_status_and_health_change_nothing_but_the_count(tmp_path):
    dev = SignedDevice(tmp_path, "a")
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    take(w, dev.message("health", {"ts": 5.0, "cpu_temp_c": 40.0}))
    take(w, unsigned("a", "status", {"state": "offline", "device_key": dev.key.public}))
    take(w, unsigned("a", "health", {"ts": 6.0, "cpu_temp_c": 99.0}))
    [row] = w.snapshot()["devices"]
    assert row["state"] == "online" and row["cpu_temp_c"] == 40.0 and row["forged"] == 2
    assert row["trust"] == "verified"
    # Signed for another device: moved onto this device's topic, it does not verify.
    other = SignedDevice(tmp_path, "b")
    topic, payload, sig = other.message("health", {"ts": 7.0, "cpu_temp_c": 1.0})
    w.take(topic.replace("/b/", "/a/"), payload, sig)
    assert w.snapshot()["devices"][0]["cpu_temp_c"] == 40.0


def test_a_changed_key_is_a_warning_until_the_device_is_re_pinned(tmp_path, caplog):
    dev = SignedDevice(tmp_path, "a")
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    reinstalled = SignedDevice(tmp_path / "new", "a")
    take(w, reinstalled.message("status", {"state": "online", "version": "2"}))
    row = w.snapshot()["devices"][0]
    assert row["trust"] == "key_changed" and reinstalled.key.public in row["trust_note"]
    assert "re-pinned" in row["trust_note"] and row["version"] != "2"
    assert any("re-pinned" in r.getMessage() for r in caplog.records)
    take(w, reinstalled.message("approval/request", question()))
    assert w.question("a", "q1") is None and waiting(w) == [("a", REAL, "forged")]
    # Re-pinned the documented way: the device's line in the keys file holds its new key.
    (tmp_path / "pins").write_text(f"# re-pinned after a re-install\na {reinstalled.key.public}\n")
    take(w, reinstalled.message("status", {"state": "online", "version": "2"}))
    row = w.snapshot()["devices"][0]
    assert row["trust"] == "verified" and row["version"] == "2"
    take(w, reinstalled.message("approval/request", question(qid="q3")))
    assert w.question("a", "q3") is not None
    # And the old key is now the stranger.
    take(w, dev.message("approval/request", question(qid="q4")))
    assert w.question("a", "q4") is None


def test_provisioned_keys_and_no_first_use(tmp_path):
    dev, stranger = SignedDevice(tmp_path, "a"), SignedDevice(tmp_path, "b")
    w = window(tmp_path, provisioned={"a": dev.key.public}, first_use=False)
    take(w, dev.message("status", {"state": "online"}))
    take(w, stranger.message("status", {"state": "online"}))
    rows = {r["device"]: r for r in w.snapshot()["devices"]}
    assert rows["a"]["trust"] == "verified"
    assert rows["b"]["trust"] == "unverifiable" and "trust_on_first_use is off" in rows["b"]["trust_note"]
    take(w, stranger.message("approval/request", question()))
    assert w.question("b", "q1") is None and waiting(w) == [("b", REAL, "unverifiable")]
    assert not (tmp_path / "pins").exists()  # nothing pinned
    # A provisioned key wins over a different one announced.
    impostor = SignedDevice(tmp_path / "x", "a")
    take(w, impostor.message("status", {"state": "offline"}))
    assert w.snapshot()["devices"][0]["trust"] == "key_changed"


@pytest.mark.parametrize(
    ("keys", "file", "says"),
    [
        ({"a": "ed25519:QUJD"}, "", "fleet_page.device_keys.a: an ed25519 key is 32 bytes"),
        ({"a": "rsa:AAAA"}, "", "must start with 'ed25519:'"),
        ({}, "a\n", "line 1: expected 'DEVICE ed25519:BASE64'"),
        ({}, "# ok\na ed25519:***\n", "line 2: the device key"),
    ],
)
def test_keys_that_cannot_be_used_are_refused_naming_them(tmp_path, keys, file, says):
    path = tmp_path / "pins"
    if file:
        path.write_text(file)
    with pytest.raises(DeviceKeysError, match=says.replace("*", r"\*")):
        DeviceKeys(keys, file=path)


def test_config_check_refuses_a_provisioned_key_that_cannot_be_one(tmp_path):
    from edgeclaw.config.loader import load_config
    from edgeclaw.errors import ConfigErrors

    good = SignedDevice(tmp_path / "good", "good").key.public
    path = tmp_path / "edgeclaw.toml"
    path.write_text(f'[fleet_page.device_keys]\ngood = "{good}"\nbad = "ed25519:QUJD"\n')
    with pytest.raises(ConfigErrors) as caught:
        load_config(path)
    assert "fleet_page.device_keys.bad: an ed25519 key is 32 bytes" in str(caught.value)
    assert "device_keys.good" not in str(caught.value)


def test_a_device_that_signs_nothing_is_shown_unverifiable_and_never_answered(tmp_path):
    w = window(tmp_path)
    problem = "device signatures need the 'cryptography' package; install ..."
    take(w, unsigned("old", "status", {"state": "online", "device_key": None, "device_key_problem": problem}))
    row = w.snapshot()["devices"][0]
    assert (
        row["trust"] == "unverifiable"
        and "signs nothing" in row["trust_note"]
        and "cryptography" in row["trust_note"]
    )
    take(w, unsigned("old", "approval/request", question()))
    assert w.question("old", "q1") is None and waiting(w) == [("old", REAL, "unverifiable")]
    decided = {"kind": "approval", "decision": "deny", "approval": "q1"}
    assert not [u for u in take(w, unsigned("old", "events", decided)) if u[0] == "approval_done"]
    assert w.events[-1]["verified"] is False


def test_a_page_that_cannot_check_signatures_trusts_nothing(tmp_path, monkeypatch):
    dev = SignedDevice(tmp_path, "a")

    def missing() -> None:
        raise DeviceKeyUnavailable("device signatures need OpenSSL 1.1.1 or the 'cryptography' package")

    monkeypatch.setattr(device_key, "_ed25519", missing)
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    take(w, dev.message("approval/request", question()))
    row = w.snapshot()["devices"][0]
    assert row["trust"] == "unverifiable" and "cannot check device signatures" in row["trust_note"]
    assert w.question("a", "q1") is None


# -- the page's side of the broker, against a real mosquitto -------------------------------------
@pytest.fixture
async def page_broker(tmp_path: Path):
    keys = {"command_secret": "command-key", "approver_secret": "approver-key"}
    async with page_on_a_broker(tmp_path, window(tmp_path), "page-trust", **keys) as running:
        yield running


def _properties(correlation: bytes | None, sig: str | None):
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    props = Properties(PacketTypes.PUBLISH)
    if correlation is not None:
        props.CorrelationData = correlation
    if sig is not None:
        props.UserProperty = ("sig", sig)
    return props


async def _publish(client, message: tuple[str, bytes, str | None], correlation: bytes | None = None, **kw):
    topic, payload, sig = message
    await client.publish(topic, payload, qos=1, properties=_properties(correlation, sig), **kw)


async def test_approve_names_the_signed_questions_action_and_a_forgery_is_not_answered(page_broker, tmp_path):
    import asyncio

    import aiomqtt

    from edgeclaw.fleetpage.broker import CommandRefused
    from tests.mqtt_support import poll

    broker, fb = page_broker
    dev = SignedDevice(tmp_path, "a")
    decisions: list[dict] = []

    async def device() -> None:
        async with aiomqtt.Client("127.0.0.1", broker.port, protocol=aiomqtt.ProtocolVersion.V5) as c:
            await c.subscribe("edgeclaw/a/approval/response", qos=1)
            await _publish(c, dev.message("status", {"state": "online"}), retain=True)
            await _publish(c, dev.message("approval/request", question()))
            async for m in c.messages:
                body = json.loads(m.payload)
                decisions.append(body)
                corr, reply = m.properties.CorrelationData, m.properties.ResponseTopic
                # Someone who read the request answers first, on the device's own reply topic.
                forged = json.dumps({"id": body["id"], "ok": False, "error": "forged"}).encode()
                await c.publish(reply, forged, qos=1, properties=_properties(corr, None))
                answer = {"id": body["id"], "ok": True}
                topic, payload = reply, json.dumps(answer).encode()
                await c.publish(
                    topic, payload, qos=1, properties=_properties(corr, dev.key.sign(topic, payload, corr))
                )

    task = asyncio.create_task(device())
    try:
        await poll(lambda: fb.window.question("a", "q1"), 20, "the device's question")
        async with aiomqtt.Client("127.0.0.1", broker.port, protocol=aiomqtt.ProtocolVersion.V5) as attacker:
            await _publish(attacker, unsigned("a", "approval/request", question("ls -la")))
            await _publish(attacker, unsigned("a", "approval/request", question("ls -la", qid="q9")))
        await poll(lambda: len(fb.window.suspect) == 2, 20, "the forgeries")
        with pytest.raises(CommandRefused, match="no approval request 'q9' signed by a"):
            await fb.decide("a", "q9", "allow-once", 10)
        assert (await fb.decide("a", "q1", "allow-once", 10))["ok"] is True
        [sent] = decisions
        assert sent["id"] == "q1" and sent["action_digest"] == action_digest("exec", {"command": REAL})
    finally:
        task.cancel()


async def test_a_broadcast_answer_in_another_devices_name_is_dropped(page_broker, tmp_path):
    import asyncio

    import aiomqtt

    from tests.mqtt_support import poll

    broker, fb = page_broker
    dev = SignedDevice(tmp_path, "a")

    async def fleet() -> None:
        """Device `a` (signed), an old device `u` (signs nothing) and, first, a client answering as `a`."""
        async with aiomqtt.Client("127.0.0.1", broker.port, protocol=aiomqtt.ProtocolVersion.V5) as c:
            await c.subscribe("edgeclaw/_all/tool/call", qos=1)
            await _publish(c, dev.message("status", {"state": "online"}), retain=True)
            await _publish(c, unsigned("u", "status", {"state": "online", "device_key": None}), retain=True)
            async for m in c.messages:
                corr, reply = m.properties.CorrelationData, m.properties.ResponseTopic
                request = json.loads(m.payload)

                def answer(device: str, text: str, request_id: str = request["id"]) -> bytes:
                    return json.dumps(
                        {"id": request_id, "ok": True, "for_llm": text, "device": device}
                    ).encode()

                await _publish(c, (reply, answer("a", "forged"), None), corr)
                other = SignedDevice(tmp_path / "x", "a")  # signed, but with a key that is not a's
                await _publish(
                    c,
                    (reply, answer("a", "forged 2"), other.key.sign(reply, answer("a", "forged 2"), corr)),
                    corr,
                )
                real = answer("a", "real")
                await _publish(c, (reply, answer("u", "from u"), None), corr)
                await _publish(c, (reply, real, dev.key.sign(reply, real, corr)), corr)

    task = asyncio.create_task(fleet())
    try:
        await poll(lambda: len(fb.window.online()) == 2, 20, "two devices online")
        answers, missing = await fb.broadcast("", "hardware_info", {}, 20)
        got = {a["device"]: (a["for_llm"], a["verified"]) for a in answers}
        assert got == {"a": ("real", True), "u": ("from u", False)} and missing == []
    finally:
        task.cancel()


def test_the_history_of_a_shared_copy_keeps_only_what_the_device_signed(tmp_path):
    """A share group's page writes the history from its shared copies (`history_of`): judged as the
    window judges, the window itself left as it is."""
    dev = SignedDevice(tmp_path, "a")
    w = window(tmp_path)
    take(w, dev.message("status", {"state": "online"}))
    health = {"ts": NOW, "cpu_temp_c": 41.0, "load_1m": 0.5, "mem_used_pct": 30.0}
    assert w.history_of(*dev.message("health", health)) == [
        ("health", {"device": "a", "point": [NOW, 41.0, 0.5, 30.0]})
    ]
    decided = {"kind": "approval", "approval": "q1", "decision": "deny", "ts": NOW}
    [event, done] = w.history_of(*dev.message("events", decided))
    assert event[0] == "event" and event[1]["verified"] is True
    assert done == ("approval_done", {"device": "a", "id": "q1", "decision": "deny"})
    # In the device's name without its key: nothing for the history; a question is kept as forged.
    assert w.history_of(*unsigned("a", "health", health)) == []
    assert w.history_of(*unsigned("a", "events", decided)) == []
    [(kind, forged)] = w.history_of(*unsigned("a", "approval/request", question()))
    assert kind == "approval" and forged["trust"] == "forged"
    # The window is as it was: its view comes from the ordinary subscription's copies.
    assert list(w.events) == [] and w.snapshot()["approvals"] == []
    assert w.devices["a"].health == {}
