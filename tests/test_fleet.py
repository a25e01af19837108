"""A fleet on one broker: retained status and health, broadcast and group commands, fleet events.

Real mosquitto, real `edgeclaw run` daemons on the sim board (tests/fleet_support.py). The big
fleet is `EDGECLAW_FLEET_SIZE` daemons (default 5; 20 is the product's figure and works here, see
docs/fleet.md for the start-up time it costs).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from edgeclaw import __version__
from edgeclaw.net.signing import envelope
from tests.fleet_support import Fleet, FleetDaemon, fleet_size
from tests.mqtt_support import Caller, Mosquitto, needs_mosquitto

pytestmark = needs_mosquitto

SIZE = fleet_size(5)
SETTLE_S = 1.5  # after the expected answers, how long a test waits for a second (wrong) one


@pytest.fixture
def broker(tmp_path: Path):
    b = Mosquitto(tmp_path / "broker").start()
    yield b
    b.kill()


@pytest.fixture
def fleet(tmp_path: Path, broker: Mosquitto):
    f = Fleet(
        tmp_path / "fleet",
        broker.port,
        SIZE,
        groups={0: ["greenhouse"], 2: ["greenhouse", "north"], 3: ["north"]},
    ).start()
    yield f
    f.stop()


async def all_online(broker: Mosquitto, fleet: Fleet, within: float = 90.0) -> dict[str, dict[str, Any]]:
    """Every device's online status (from a subscriber that is there from the start)."""
    async with Caller(broker.port, ["edgeclaw/+/status"]) as c:

        def online() -> dict[str, dict[str, Any]] | None:
            found = {}
            for m in c.received:
                status = m.json
                if status.get("state") == "online":
                    found[m.topic.split("/")[1]] = status
            return found if set(found) >= set(fleet.devices) else None

        try:
            return await c.wait_for(online, within, f"{len(fleet.devices)} devices online")
        except AssertionError:
            raise AssertionError(fleet.logs()) from None


async def healthy(broker: Mosquitto, fleet: Fleet) -> None:
    async with Caller(broker.port, ["edgeclaw/+/health"]) as c:
        await c.wait_for(
            lambda: {m.topic.split("/")[1] for m in c.received} >= set(fleet.devices),
            30,
            "a health message from every device",
        )


def by_device(messages) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for m in messages:
        answer = m.json
        out.setdefault(answer.get("device"), []).append(answer)
    return out


# -- status and health ------------------------------------------------------------------------
async def test_a_late_subscriber_sees_every_device_status_and_health_at_once(broker, fleet):
    await all_online(broker, fleet)
    await healthy(broker, fleet)
    # A dashboard opened now: everything it needs is retained.
    opened = time.time()
    async with Caller(broker.port, ["edgeclaw/+/status", "edgeclaw/+/health"]) as c:
        await c.wait_for(lambda: len(c.received) >= 2 * SIZE, 30, "retained status and health")
        received = list(c.received)
    assert all(m.retain for m in received)
    status = {m.topic.split("/")[1]: m.json for m in received if m.topic.endswith("/status")}
    health = {m.topic.split("/")[1]: m.json for m in received if m.topic.endswith("/health")}
    assert set(status) == set(health) == set(fleet.devices)
    # ... delivered at once, not as the devices get round to it
    assert max(m.at for m in received) - min(m.at for m in received) < 1.0

    hostname = socket.gethostname()
    for device, s in status.items():
        assert s["state"] == "online" and s["device"] == device
        assert s["version"] == __version__ and s["board"] == "sim"
        assert s["hostname"] == hostname
        assert s["python"] == platform.python_version()
        assert s["kernel"] == f"{platform.system()} {platform.release()}"
        assert s["addresses"] and not any(a.startswith("127.") or a == "::1" for a in s["addresses"])
        assert s["since"] <= s["ts"] <= opened + 1
        assert s["config_hash"].startswith("sha256:")
        # The sim board names an ESP32 bridge (not shaken hands yet: no firmware known) and a probe.
        assert s["firmware"]["esp32"] == {"port": "sim", "firmware": None}
        assert s["firmware"]["probe"]["target"]
        assert s["sandbox"]["configured"] == "auto"
        assert s["providers"] == {}
        assert "mcp" not in s  # no MCP servers configured: nothing to say
    assert status["dev-02"]["groups"] == ["greenhouse", "north"]
    assert status["dev-01"]["groups"] == []
    # Each device's configuration differs (its device id), so do the hashes.
    assert len({s["config_hash"] for s in status.values()}) == SIZE

    for device, h in health.items():
        assert h["device"] == device and h["board"] == "sim"
        assert opened - 5 < h["ts"] <= time.time()  # last seen: within the telemetry interval
        assert h["mem_total_kb"] > 0 and "tool_calls" in h


async def test_health_is_refreshed_with_each_telemetry_and_the_broker_says_offline(broker, fleet):
    await all_online(broker, fleet)
    await healthy(broker, fleet)
    async with Caller(broker.port, ["edgeclaw/dev-01/health"]) as c:
        first = (await c.answers("edgeclaw/dev-01/health", 1))[0].json["ts"]
        later = await c.answers("edgeclaw/dev-01/health", 2, within=30)
        assert later[-1].json["ts"] > first and not later[-1].retain  # live, and retained for later
    # A clean stop says offline; a kill leaves it to the broker, which publishes the Will.
    fleet.daemons[0].stop()
    fleet.daemons[1].kill()
    async with Caller(broker.port, ["edgeclaw/+/status"]) as c:

        def states() -> dict[str, str] | None:
            seen = {m.topic.split("/")[1]: m.json["state"] for m in c.received}
            return seen if seen.get("dev-00") == "offline" and seen.get("dev-01") == "offline" else None

        seen = await c.wait_for(states, 15, "dev-00 and dev-01 offline")
    assert all(seen[d] == "online" for d in fleet.devices[2:])


async def test_the_config_hash_is_stable_across_restarts_and_follows_the_file(tmp_path, broker):
    d = FleetDaemon(tmp_path / "one", "solo", broker.port)
    hashes = []
    async with Caller(broker.port, ["edgeclaw/solo/status"]) as c:
        for change in (False, False, True):
            if change:
                d.config.write_text(
                    d.config.read_text().replace("telemetry_interval_s = 1.0", "telemetry_interval_s = 2.0")
                )
            since = len(c.received)
            d.start()
            try:
                online = await c.wait_for(
                    lambda since=since: [m.json for m in c.received[since:] if m.json["state"] == "online"],
                    60,
                    "solo online",
                )
            finally:
                d.stop()
            hashes.append(online[0]["config_hash"])
    assert hashes[0] == hashes[1] != hashes[2]


# -- broadcast and groups -----------------------------------------------------------------------
async def test_a_broadcast_is_answered_by_every_device_exactly_once(broker, fleet):
    await all_online(broker, fleet)
    reply = "reply/fleet/b1"
    async with Caller(broker.port, [reply, "edgeclaw/+/tool/result"]) as c:
        await c.publish(
            "edgeclaw/_all/tool/call",
            {"id": "b1", "tool": "hardware_info", "args": {}},
            response_topic=reply,
            correlation=b"\x07b1",
        )
        answers = await c.answers(reply, SIZE)
        await asyncio.sleep(SETTLE_S)
        got = by_device(c.on(reply))
        assert sorted(got) == sorted(fleet.devices)
        assert all(len(v) == 1 for v in got.values()), got  # once each
        for answer, *_ in got.values():
            assert answer["ok"] is True and answer["id"] == "b1" and answer["tool"] == "hardware_info"
            assert "sim" in answer["for_llm"]
        assert all(m.correlation == b"\x07b1" for m in answers)
        # Without a Response Topic each device answers on its own result topic.
        await c.publish("edgeclaw/_all/tool/call", {"id": "b2", "tool": "hardware_info", "args": {}})
        await c.wait_for(
            lambda: len([m for m in c.received if m.topic.endswith("/tool/result")]) >= SIZE, 20, "results"
        )
        await asyncio.sleep(SETTLE_S)
        results = [m for m in c.received if m.topic.endswith("/tool/result")]
        assert sorted(m.topic.split("/")[1] for m in results) == sorted(fleet.devices)
        assert all(m.json["device"] == m.topic.split("/")[1] for m in results)


async def test_a_group_call_is_answered_by_its_members_only(broker, fleet):
    await all_online(broker, fleet)
    async with Caller(broker.port, ["reply/g/#"]) as c:
        for group, members in (("greenhouse", ["dev-00", "dev-02"]), ("north", ["dev-02", "dev-03"])):
            await c.publish(
                f"edgeclaw/_group/{group}/tool/call",
                {"id": f"g-{group}", "tool": "hardware_info", "args": {}},
                response_topic=f"reply/g/{group}",
            )
            await c.answers(f"reply/g/{group}", len(members))
        await c.publish(
            "edgeclaw/_group/nobody/tool/call",
            {"id": "g-none", "tool": "hardware_info", "args": {}},
            response_topic="reply/g/nobody",
        )
        await asyncio.sleep(SETTLE_S)
        assert sorted(by_device(c.on("reply/g/greenhouse"))) == ["dev-00", "dev-02"]
        assert sorted(by_device(c.on("reply/g/north"))) == ["dev-02", "dev-03"]
        assert all(len(v) == 1 for v in by_device(c.on("reply/g/north")).values())
        assert c.on("reply/g/nobody") == []


async def test_admin_commands_by_broadcast_are_refused_by_each_device(broker, fleet):
    await all_online(broker, fleet)
    async with Caller(broker.port, ["reply/admin"]) as c:
        await c.publish(
            "edgeclaw/_all/admin/gateway",
            {"id": "a1", "action": "restart", "reason": "everyone at once"},
            response_topic="reply/admin",
        )
        await c.answers("reply/admin", SIZE)
        await asyncio.sleep(SETTLE_S)
        got = by_device(c.on("reply/admin"))
        assert sorted(got) == sorted(fleet.devices)
        for (answer,) in got.values():
            assert answer["ok"] is False and answer["code"] == "broadcast_refused"
    # ... and nobody restarted
    status = await all_online(broker, fleet, within=5)
    assert len(status) == SIZE


async def test_admin_by_broadcast_where_the_config_allows_it(tmp_path, broker):
    fleet = Fleet(
        tmp_path / "admin", broker.port, 2, name="adm", groups={1: ["ops"]}, broadcast_admin=True,
        admin_unsigned=True,
    )  # fmt: skip
    fleet.start()
    try:
        await all_online(broker, fleet)
        async with Caller(broker.port, ["reply/adm/#"]) as c:
            for topic, reply, expect in (
                ("edgeclaw/_all/admin/gateway", "reply/adm/all", ["adm-00", "adm-01"]),
                ("edgeclaw/_group/ops/admin/gateway", "reply/adm/ops", ["adm-01"]),
            ):
                await c.publish(topic, {"id": reply, "action": "version"}, response_topic=reply)
                await c.answers(reply, len(expect))
            await asyncio.sleep(SETTLE_S)
            for reply, expect in (("reply/adm/all", ["adm-00", "adm-01"]), ("reply/adm/ops", ["adm-01"])):
                got = by_device(c.on(reply))
                assert sorted(got) == expect
                assert all(len(v) == 1 and v[0]["ok"] is True for v in got.values()), got
    finally:
        fleet.stop()


def test_a_group_name_that_is_no_topic_level_is_refused_at_start(tmp_path):
    d = FleetDaemon(tmp_path / "bad", "bad-groups", 1, groups=["green/house", "ok"])
    run = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "run", "--board", "sim"], env=d.env, capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode != 0
    assert "mqtt.groups" in run.stderr and "'green/house'" in run.stderr


def sign(secret: bytes, topic: str, body: str, reply: str) -> str:
    return hmac.new(secret, f"{topic}\n{reply}\n\n{body}".encode(), hashlib.sha256).hexdigest()


async def test_signed_broadcasts_and_bad_signatures_on_events(tmp_path, broker):
    secret = b"fleet-command-key-0123456789"
    (tmp_path / "key").write_bytes(secret)
    fleet = Fleet(
        tmp_path / "signed", broker.port, 2, name="sig", hmac_secret_file=str(tmp_path / "key")
    ).start()
    try:
        await all_online(broker, fleet)
        async with Caller(broker.port, ["reply/s/#", "edgeclaw/+/events"]) as c:
            body = json.dumps({"id": "s1", "tool": "hardware_info", "args": {}, "ts": time.time()})
            topic = "edgeclaw/_all/tool/call"
            digest = sign(secret, topic, body, "reply/s/ok")
            await c.publish(topic, body, response_topic="reply/s/ok", user=[("hmac", digest)])
            ok = await c.answers("reply/s/ok", 2)
            assert all(m.json["ok"] for m in ok)
            # The same signature on a device's own topic is not valid there: it was made for _all.
            await c.publish(
                "edgeclaw/sig-00/tool/call", body, response_topic="reply/s/moved", user=[("hmac", digest)]
            )
            (moved,) = await c.answers("reply/s/moved", 1)
            assert moved.json["code"] == "bad_signature"
            for i in range(3):
                await c.publish(
                    topic,
                    envelope(
                        b"wrong-key",
                        topic,
                        {"id": f"x{i}", "tool": "hardware_info"},
                        response_topic="reply/s/bad",
                    ),
                    response_topic="reply/s/bad",
                )
            await c.answers("reply/s/bad", 6)

            def failures() -> list[dict[str, Any]]:
                return [
                    m.json
                    for m in c.received
                    if m.topic.endswith("/events") and m.json.get("kind") == "auth_failure"
                ]

            await c.wait_for(
                lambda: {e["device"] for e in failures()} == {"sig-00", "sig-01"}, 10, "auth events"
            )
            await asyncio.sleep(0.5)
            # One report per device per minute, however many were refused.
            events = failures()
            assert len(events) == 2
            assert events[0]["what"] == "bad_signature" and events[0]["count"] >= 1
    finally:
        fleet.stop()


async def test_daemon_start_events_say_why_it_started(tmp_path, broker):
    d = FleetDaemon(tmp_path / "one", "restarts", broker.port)
    async with Caller(broker.port, ["edgeclaw/restarts/events", "edgeclaw/restarts/status"]) as c:

        def starts() -> list[dict[str, Any]]:
            return [m.json for m in c.on("edgeclaw/restarts/events") if m.json.get("kind") == "daemon_start"]

        reasons = []
        for end in ("stop", "kill", "stop"):
            d.start()
            assert d.proc is not None
            pid = d.proc.pid
            # Events are at-least-once (the outbox resends what the broker did not acknowledge): this
            # run's is the one with its pid.
            mine = await c.wait_for(
                lambda pid=pid: [e for e in starts() if e["pid"] == pid], 60, "a daemon_start event"
            )
            reasons.append(mine[0]["previous"])
            if end == "kill":
                d.kill()
            else:
                d.stop()
    assert reasons == ["none", "stopped", "unclean"]


TIME_SERVER = Path(sys.executable).parent / "mcp-server-time"


@pytest.mark.skipif(not TIME_SERVER.exists(), reason="mcp-server-time is not installed (the dev extra)")
async def test_mcp_servers_in_the_status_and_on_events(tmp_path, broker):
    d = FleetDaemon(
        tmp_path / "one", "mcp-dev", broker.port, extra=f'[mcp.servers.time]\ncommand = "{TIME_SERVER}"\n'
    )
    async with Caller(broker.port, ["edgeclaw/mcp-dev/events", "edgeclaw/mcp-dev/status"]) as c:
        d.start()
        try:

            def connected() -> list[dict[str, Any]]:
                return [
                    m.json
                    for m in c.on("edgeclaw/mcp-dev/status")
                    if m.json.get("mcp", {}).get("time", {}).get("state") == "connected"
                ]

            (status, *_) = await c.wait_for(connected, 60, "the MCP server connected in the status")
            assert status["mcp"]["time"]["tools"] == 2
            events = [m.json for m in c.on("edgeclaw/mcp-dev/events") if m.json.get("kind") == "mcp_server"]
            assert events and events[0]["server"] == "time" and events[0]["state"] == "connected"
            assert events[0]["tools"] == 2
        finally:
            d.stop()


# -- the operator's own tools -------------------------------------------------------------------
MOSQUITTO_RR = shutil.which("mosquitto_rr")
MOSQUITTO_SUB = shutil.which("mosquitto_sub")


@pytest.mark.skipif(
    MOSQUITTO_RR is None or MOSQUITTO_SUB is None,
    reason="mosquitto-clients is not installed (scripts/bootstrap --system installs it)",
)
async def test_mosquitto_rr_broadcast_and_a_late_mosquitto_sub(broker, fleet):
    await all_online(broker, fleet)
    await healthy(broker, fleet)
    port = str(broker.port)
    reply = "reply/rr/1"
    # Everything that arrives on the Response Topic, counted by a plain subscriber ...
    # (-d: it also says when the broker has taken its subscription, line-buffered by stdbuf so the
    # line comes when it is printed; the payloads are the JSON lines.)
    counter = await asyncio.create_subprocess_exec(
        "stdbuf", "-oL", MOSQUITTO_SUB, "-d", "-p", port, "-V", "5", "-t", reply, "-C", str(SIZE), "-W", "60",
        stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert counter.stdout is not None
    async with asyncio.timeout(30):
        while b"received SUBACK" not in await counter.stdout.readline():
            pass
    request = json.dumps({"id": "rr1", "tool": "hardware_info", "args": {}})
    # ... while mosquitto_rr sends the one broadcast (it prints the first answer and stops).
    rr = await asyncio.to_thread(
        subprocess.run,
        [
            MOSQUITTO_RR,
            "-p",
            port,
            "-V",
            "5",
            "-t",
            "edgeclaw/_all/tool/call",
            "-e",
            reply,
            "-m",
            request,
            "-W",
            "20",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert rr.returncode == 0, rr.stderr
    assert json.loads(rr.stdout.splitlines()[0])["device"] in fleet.devices
    out, _ = await asyncio.wait_for(counter.communicate(), 70)
    answers = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert sorted(a["device"] for a in answers) == sorted(fleet.devices)
    # A late `mosquitto_sub -t 'edgeclaw/+/health'` prints one retained message per device.
    late = await asyncio.to_thread(
        subprocess.run,
        [MOSQUITTO_SUB, "-p", port, "-t", "edgeclaw/+/health", "-C", str(SIZE), "-W", "10", "-F", "%r %t"],
        capture_output=True,
        text=True,
        timeout=20,
    )
    lines = [line.split(" ") for line in late.stdout.splitlines()]
    assert all(retained == "1" for retained, _ in lines), lines  # what was there, not what came after
    assert sorted(topic.split("/")[1] for _, topic in lines) == sorted(fleet.devices)
