"""The fleet page's parts without a browser: sessions and logins, and the bounded window."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgeclaw.config.pin_hash import hash_pin, parse_pin_hash
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.fleetpage.access import Access, LockedOut
from edgeclaw.fleetpage.service import host_port
from edgeclaw.fleetpage.window import HISTORY_POINTS, MAX_MESSAGE_BYTES, FleetWindow
from tests.fleet_support import SignedDevice, page_on_a_broker


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


TOK = "tok-0123456789abcdefghij"


def access(clock: Clock, **kw: object) -> Access:
    defaults: dict[str, object] = {
        "password_hash": parse_pin_hash(hash_pin("pass-word", "pbkdf2-sha256")),
        "token": TOK,
        "ttl_s": 60.0,
        "failure_delay_s": 0.0,
        "clock": clock,
    }
    return Access(**{**defaults, **kw})  # type: ignore[arg-type]


async def test_a_session_ends_at_its_expiry_however_much_it_is_used():
    clock = Clock()
    a = access(clock)
    session = await a.login("pass-word")
    assert session is not None and session.who == "password"
    clock.now += 59
    assert a.session(session.id) == session  # used: not extended
    clock.now += 1
    assert a.session(session.id) is None
    assert a.sessions == 0


async def test_the_token_logs_in_and_wrong_entries_lock_the_form():
    clock = Clock()
    a = access(clock, max_failures=3, lockout_s=30.0)
    assert (await a.login(TOK)).who == "token"
    for entry in ("", TOK + " ", "PASS-WORD"):
        assert await a.login(entry) is None
    with pytest.raises(LockedOut):
        await a.login("pass-word")  # even the right one, while locked
    clock.now += 31
    assert (await a.login("pass-word")) is not None


async def test_a_lockout_holds_one_source_and_the_bearer_too():
    clock = Clock()
    a = access(clock, max_failures=3, lockout_s=30.0)
    for _ in range(3):
        assert not await a.bearer("guess-0123456789abcdefghij", "10.0.0.9")
    with pytest.raises(LockedOut):
        await a.bearer(TOK, "10.0.0.9")  # the right token, from the locked source
    with pytest.raises(LockedOut):
        await a.login("pass-word", "10.0.0.9")
    assert await a.bearer(TOK, "10.0.0.1")  # another source is not locked out
    assert (await a.login("pass-word", "10.0.0.1")) is not None
    for _ in range(3):  # wrong form entries lock their own source too, and only it
        assert await a.login("guess", "10.0.0.8") is None
    with pytest.raises(LockedOut):
        await a.login("pass-word", "10.0.0.8")
    assert (await a.login("pass-word", "10.0.0.1")) is not None


def test_a_short_token_is_refused_naming_its_key():
    with pytest.raises(ConfigErrors, match=r"fleet_page.token_file.*128 bits.*token_urlsafe"):
        Access(token="0123456789abcdef0123")


async def test_the_csrf_token_is_the_sessions_own():
    clock = Clock()
    a = access(clock)
    one, two = await a.login("pass-word"), await a.login("pass-word")
    assert one is not None and two is not None
    assert a.csrf_ok(one, one.csrf)
    assert not a.csrf_ok(one, two.csrf)
    assert not a.csrf_ok(one, "")
    assert not a.csrf_ok(one, one.csrf[:-1])


async def test_sessions_are_bounded_the_oldest_ends_first():
    clock = Clock()
    a = access(clock, max_sessions=2)
    first, second, third = [await a.login("pass-word") for _ in range(3)]
    assert first is not None and second is not None and third is not None
    assert a.session(first.id) is None and a.session(second.id) and a.session(third.id)


def test_nobody_is_let_in_without_a_hash_or_a_token():
    with pytest.raises(ValueError, match="password hash or a token"):
        Access()


def test_listen_addresses_are_checked():
    assert host_port("127.0.0.1:8088", "k", "f") == ("127.0.0.1", 8088)
    assert host_port("[::1]:9", "k", "f") == ("::1", 9)
    for bad in ("8088", "host:", "host:99999", ":80"):
        with pytest.raises(ConfigError, match="HOST:PORT"):
            host_port(bad, "fleet_page.listen", "f")


# -- the window ---------------------------------------------------------------------------------
def status(state: str = "online", **kw: object) -> bytes:
    return json.dumps({"state": state, "version": "0.1.0", "board": "sim", **kw}).encode()


def test_rows_come_from_status_and_health():
    w = FleetWindow()
    w.take("edgeclaw/a/status", status(groups=["north"], sandbox={"in_force": "firejail"}))
    w.take("edgeclaw/a/health", json.dumps({"ts": 5.0, "cpu_temp_c": 41.5, "outbox_depth": 2}).encode())
    [row] = w.snapshot()["devices"]
    assert row["state"] == "online" and row["groups"] == ["north"] and row["sandbox"] == "firejail"
    assert row["cpu_temp_c"] == 41.5 and row["last_seen"] == 5.0 and row["outbox_depth"] == 2
    assert row["load_1m"] is None  # not said: null, never made up
    w.take("edgeclaw/a/status", status("offline"))
    assert w.snapshot()["devices"][0]["state"] == "offline"
    assert w.online() == []
    # An empty retained status is a retired device.
    assert w.take("edgeclaw/a/status", b"") == [("gone", {"device": "a"})]
    assert w.snapshot()["devices"] == []


def test_what_devices_send_is_bounded():
    w = FleetWindow(max_devices=3, max_events=10, history_s=3600)
    for i in range(5):
        w.take(f"edgeclaw/d{i}/status", status())
    assert len(w.devices) == 3
    for i in range(50):
        w.take("edgeclaw/d0/events", json.dumps({"tool": "i2c", "n": i}).encode())
    assert len(w.events) == 10 and w.events[-1]["n"] == 49
    for i in range(5000):  # a report a second for well over an hour
        w.take("edgeclaw/d0/health", json.dumps({"ts": 1000.0 + i, "load_1m": 0.1}).encode())
    history = w.devices["d0"].history
    assert len(history) <= HISTORY_POINTS
    assert history[-1][0] - history[0][0] <= 3600
    assert w.take("edgeclaw/d1/status", b"{" + b" " * MAX_MESSAGE_BYTES + b"}") == []
    for junk in (b"not json", b"[1, 2]", b"\xff"):
        assert w.take("edgeclaw/d1/status", junk) == []
    # Broadcast topics and other prefixes are not devices.
    assert w.take("edgeclaw/_all/status", status()) == []
    assert w.take("other/d1/status", status()) == []


def test_an_approval_waits_until_an_event_decides_it(tmp_path: Path):
    dev = SignedDevice(tmp_path, "a")  # only what the device signed can be answered or close a question
    w = FleetWindow(clock=lambda: 100.0)
    w.take(*dev.message("status", {"state": "online"}))
    question = {"id": "q1", "tool": "exec", "summary": "echo hi", "expires_at": 200.0}
    w.take(*dev.message("approval/request", question))
    assert [q["id"] for q in w.snapshot()["approvals"]] == ["q1"]
    asked = {"kind": "approval", "decision": "asked", "approval": "q1"}
    w.take(*dev.message("events", asked))
    assert len(w.snapshot()["approvals"]) == 1
    decided = {"kind": "approval", "decision": "allow-once", "approval": "q1"}
    updates = w.take(*dev.message("events", decided))
    assert ("approval_done", {"device": "a", "id": "q1", "decision": "allow-once"}) in updates
    assert w.snapshot()["approvals"] == []
    # An expired question leaves the queue by itself.
    late = FleetWindow(clock=lambda: 300.0)
    late.take(*dev.message("status", {"state": "online"}))
    late.take(*dev.message("approval/request", question))
    assert late.snapshot()["approvals"] == []


@pytest.mark.parametrize(
    ("config", "argv", "says"),
    [
        ("", ["--listen", "nonsense"], "--listen: expected HOST:PORT"),
        ('[fleet_page]\nlogin_hash = "plain text"\n', [], "fleet_page.login_hash: expected $ALGORITHM"),
        ("[fleet_page]\nsession_ttl_s = 0\n", [], "fleet_page.session_ttl_s"),
        ('[mqtt]\nprotocol = "3.1.1"\n', [], "needs MQTT 5"),
        (
            '[fleet_page]\ndevice_keys = { a = "ed25519:QUJD" }\n',
            [],
            "page.toml: fleet_page.device_keys.a: an ed25519 key is 32 bytes",
        ),
        (
            '[fleet_page]\nhistory_store = "postgresql"\n',
            [],
            'fleet_page.history_store: history_store = "postgresql" needs history_dsn',
        ),
        (
            '[fleet_page]\ndevice_keys_file = "/dev/null/keys"\n',
            [],
            "fleet_page.device_keys_file: cannot read the device keys file /dev/null/keys",
        ),
    ],
)
def test_fleet_serve_refuses_what_it_cannot_use(tmp_path: Path, config: str, argv: list[str], says: str):
    path = tmp_path / "page.toml"
    path.write_text(config)
    env = {k: v for k, v in os.environ.items() if not k.startswith("EDGECLAW_")}
    done = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "fleet", "serve", "--config", str(path), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert says in done.stderr


# -- the broker side, against a real mosquitto ---------------------------------------------------
@pytest.fixture
async def fleet_broker(tmp_path: Path):
    async with page_on_a_broker(
        tmp_path, FleetWindow(), "page-test", command_secret="command-key"
    ) as running:
        yield running


async def _device(port: int, device: str, forge_as: str = ""):
    """A device that answers its tool/call (checking the signature), after a forged answer when asked."""
    import aiomqtt
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    from edgeclaw.net.signing import Verifier

    verifier = Verifier("command-key")
    async with aiomqtt.Client("127.0.0.1", port, protocol=aiomqtt.ProtocolVersion.V5) as c:
        await c.subscribe(f"edgeclaw/{device}/tool/call", qos=1)
        await c.subscribe("edgeclaw/_all/tool/call", qos=1)
        await c.publish(f"edgeclaw/{device}/status", b'{"state": "online"}', qos=1, retain=True)
        async for m in c.messages:
            p = m.properties
            user = list(getattr(p, "UserProperty", []) or [])
            body = verifier.verify(m.topic.value, m.payload, user, p.ResponseTopic, p.CorrelationData)
            request = json.loads(body)
            props = Properties(PacketTypes.PUBLISH)
            props.CorrelationData = p.CorrelationData
            if forge_as:
                forged = p.ResponseTopic.replace(f"reply/{device}/", f"reply/{forge_as}/")
                answer = {"id": request["id"], "ok": True, "for_llm": "forged", "device": device}
                await c.publish(forged, json.dumps(answer).encode(), qos=1, properties=props)
            answer = {"id": request["id"], "ok": True, "for_llm": f"real from {device}", "device": device}
            await c.publish(p.ResponseTopic, json.dumps(answer).encode(), qos=1, properties=props)


async def test_an_answer_counts_only_from_under_the_called_devices_own_level(fleet_broker):
    import asyncio

    broker, fb = fleet_broker
    device = asyncio.create_task(_device(broker.port, "d1", forge_as="d2"))
    try:
        from tests.mqtt_support import poll

        await poll(lambda: "d1" in fb.window.devices, 20, "the device's status")
        answer = await fb.call("d1", "hardware_info", {}, 20)
        assert answer["for_llm"] == "real from d1"
    finally:
        device.cancel()


async def test_a_broadcast_ends_when_every_online_device_has_answered(fleet_broker):
    import asyncio
    import time

    from tests.mqtt_support import poll

    broker, fb = fleet_broker
    devices = [asyncio.create_task(_device(broker.port, name)) for name in ("a", "b")]
    try:
        await poll(lambda: len(fb.window.online()) == 2, 20, "two devices online")
        started = time.monotonic()
        answers, missing = await fb.broadcast("", "hardware_info", {}, 60)
        assert sorted(a["device"] for a in answers) == ["a", "b"] and missing == []
        assert time.monotonic() - started < 30  # did not sit out the whole minute
    finally:
        for d in devices:
            d.cancel()


async def test_two_pages_on_one_broker_each_get_their_own_answers(fleet_broker):
    import asyncio

    from edgeclaw.fleetpage.broker import FleetBroker
    from edgeclaw.net.mqtt_connection import ConnectionSettings
    from tests.mqtt_support import poll

    broker, first = fleet_broker
    second = FleetBroker(
        ConnectionSettings(host="127.0.0.1", port=broker.port, client_id="page-test-2"),
        FleetWindow(),
        command_secret="command-key",
    )
    runner = asyncio.create_task(second.run())
    device = asyncio.create_task(_device(broker.port, "d1"))
    try:
        assert await second.connection.wait_connected(20)
        # Each rebuilt the device from the broker alone (its retained status).
        await poll(lambda: "d1" in first.window.devices and "d1" in second.window.devices, 20, "d1 on both")
        one, two = await asyncio.gather(
            first.call("d1", "hardware_info", {}, 20), second.call("d1", "hardware_info", {}, 20)
        )
        assert one["ok"] and two["ok"] and one["id"] != two["id"]
    finally:
        device.cancel()
        await second.connection.stop(runner)


async def test_a_big_batch_is_called_at_most_max_in_flight_at_once():
    # A wave of 300 devices: every device is called, but never more at once than the page's broker
    # side lets wait for answers, so none is refused for being one too many.
    from edgeclaw.fleetpage.metrics import PageMetrics
    from edgeclaw.fleetpage.rollout import MAX_IN_FLIGHT, RolloutPlan, Rollouts

    busy, most, called = 0, 0, []

    async def call(device: str, tool: str, args: dict[str, object], wait_s: float) -> dict[str, object]:
        nonlocal busy, most
        busy += 1
        most = max(most, busy)
        await asyncio.sleep(0.01)
        busy -= 1
        called.append(device)
        return {"ok": True}

    rollouts = Rollouts(
        call, lambda views: None, lambda: None, PageMetrics(), names=set("d0123456789-"), max_wait_s=5
    )
    devices = [f"d-{i:03d}" for i in range(301)]
    rollout = rollouts.start(RolloutPlan(tool="t", args={}, batch_size=300), devices)
    for _ in range(400):  # 20 s at most
        if rollout.state != "running":
            break
        await asyncio.sleep(0.05)
    assert rollout.state == "done" and sorted(called) == devices
    assert 1 < most <= MAX_IN_FLIGHT, most
