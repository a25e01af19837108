"""The shipped mosquitto ACL (deploy/mosquitto/acl) on a real mosquitto, every user logging in with a
password `mosquitto_passwd` made: what each role can publish and read, and what it cannot -- a device
under another's name, a backend as a device, an MCP client on another client's RPC topic -- and a real
`edgeclaw run` daemon that logs in as its own device user, goes online and answers a call under it.

A publish the ACL denies is dropped by mosquitto without telling the publisher; a privileged test-only
user (`watcher`, appended to the template here) reads everything, and each role's allowed last publish
marks when the denied ones before it would have arrived.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from edgeclaw.config.device_key_text import parse_public_key
from edgeclaw.net.device_key import signature_of, verify
from tests.mqtt_support import (
    Caller,
    Mosquitto,
    daemon_env,
    needs_mosquitto,
    run_daemon,
    stop_daemon,
    write_password_file,
)

pytestmark = needs_mosquitto

TEMPLATE = Path(__file__).resolve().parent.parent / "deploy" / "mosquitto" / "acl"
A, B = "greenhouse-07", "greenhouse-08"
PASSWORDS = {
    A: "pw-device-a",
    B: "pw-device-b",
    "fleet-backend": "pw-backend",
    "fleet-page": "pw-page",
    "fleet-admin": "pw-admin",
    "mcp-ops": "pw-mcp-ops",
    "mcp-other": "pw-mcp-other",  # a second MCP client, with only what `pattern` lines give every user
    "watcher": "pw-watcher",
}
WATCHER_ACL = "\nuser watcher\ntopic read #\n" + "".join(
    f"topic read {root}/#\n" for root in ("$mcp-rpc", "$mcp-server", "$mcp-client")
)
EVERYTHING = ["#", "$mcp-rpc/#", "$mcp-server/#", "$mcp-client/#"]


@pytest.fixture
def broker(tmp_path: Path) -> Mosquitto:
    work = tmp_path / "broker"
    work.mkdir()
    acl = work / "acl"
    acl.write_text(TEMPLATE.read_text() + WATCHER_ACL)
    passwd = write_password_file(work / "passwd", PASSWORDS)
    b = Mosquitto(work, password_file=passwd, acl_file=acl).start()
    yield b
    b.kill()


@contextlib.asynccontextmanager
async def login(broker: Mosquitto, user: str, topics: list[str] = (), **kw: object) -> AsyncIterator[Caller]:
    async with Caller(broker.port, list(topics), username=user, password=PASSWORDS[user], **kw) as c:
        yield c


async def delivered(broker: Mosquitto, user: str, topics: list[str], marker: str, **kw: object) -> set[str]:
    """Which of `topics` a QoS 1 publish by `user` reached a reader on; `marker` is one it may write."""
    async with login(broker, "watcher", EVERYTHING) as watcher, login(broker, user, **kw) as c:
        token = f"{user}-{id(topics)}"
        for topic in topics:
            await c.publish(topic, json.dumps({"token": token}), qos=1)
        await c.publish(marker, json.dumps({"token": token, "last": True}), qos=1)

        def seen(last: bool = False) -> set[str]:
            return {
                m.topic
                for m in watcher.received
                if m.payload.startswith(b"{")
                and m.json.get("token") == token
                and m.json.get("last", False) == last
            }

        await watcher.wait_for(lambda: marker in seen(last=True), 10, f"{user}'s own {marker}")
        return seen()


def may_write(who: str, allowed: list[str], denied: list[str]):
    return pytest.param(who, allowed, denied, id=who)


@pytest.mark.parametrize(
    ("user", "allowed", "denied"),
    [
        may_write(
            A,
            [
                f"edgeclaw/{A}/status",
                f"edgeclaw/{A}/health",
                f"edgeclaw/{A}/events",
                f"edgeclaw/{A}/tool/result",
                f"edgeclaw/{A}/approval/request",
                f"reply/{A}/fleet-backend/1",
                # a broadcast's shared answer topic: checked by the device's signature, not the broker
                "reply/fleetpage/srv/broadcast",
                f"$mcp-rpc/mcp-ops/{A}-mcp/edgeclaw/{A}",
                f"$mcp-server/presence/{A}-mcp/edgeclaw/{A}",
            ],
            [
                f"edgeclaw/{A}/tool/call",  # not even its own commands
                f"edgeclaw/{A}/approval/response",  # nor approve its own questions
                "edgeclaw/_all/tool/call",
                f"reply/{B}/fleet-backend/1",
                "reply/fleetpage/srv/other",
                f"$mcp-server/presence/{B}-mcp/edgeclaw/{B}",
            ],
        ),
        may_write(
            B,
            [f"edgeclaw/{B}/status"],
            [
                f"edgeclaw/{A}/status",
                f"edgeclaw/{A}/health",
                f"edgeclaw/{A}/events",
                f"edgeclaw/{A}/chat/out",
                f"edgeclaw/{A}/tool/result",
                f"edgeclaw/{A}/approval/request",
                f"edgeclaw/{A}/tool/call",
                f"reply/{A}/fleet-backend/1",
                f"reply/{A}/fleetpage/srv",
                f"$mcp-rpc/mcp-ops/{A}-mcp/edgeclaw/{A}",
            ],
        ),
        may_write(
            "fleet-backend",
            [
                f"edgeclaw/{A}/tool/call",
                f"edgeclaw/{A}/chat/in",
                f"edgeclaw/{A}/tool/cancel",
                "edgeclaw/_all/tool/call",
                "edgeclaw/_group/greenhouse/tool/call",
            ],
            [
                f"edgeclaw/{A}/status",
                f"edgeclaw/{A}/health",
                f"edgeclaw/{A}/events",
                f"edgeclaw/{A}/tool/result",
                f"edgeclaw/{A}/approval/request",
                f"edgeclaw/{A}/approval/response",
                f"edgeclaw/{A}/admin/gateway",
                f"reply/{A}/fleet-backend/1",
            ],
        ),
        may_write(
            "fleet-page",
            [
                f"edgeclaw/{A}/tool/call",
                f"edgeclaw/{A}/chat/in",
                f"edgeclaw/{A}/approval/response",
                "edgeclaw/_all/tool/call",
            ],
            [
                f"edgeclaw/{A}/status",
                f"edgeclaw/{A}/events",
                f"edgeclaw/{A}/approval/request",
                f"edgeclaw/{A}/admin/gateway",
                f"edgeclaw/{A}/admin/tools",
                f"reply/{A}/fleetpage/srv",
            ],
        ),
        may_write(
            "fleet-admin",
            [f"edgeclaw/{A}/admin/gateway", f"edgeclaw/{A}/admin/tools", f"edgeclaw/{A}/admin/cron"],
            [f"edgeclaw/{A}/status", f"edgeclaw/{A}/tool/call", f"edgeclaw/{A}/approval/response"],
        ),
        may_write(
            "mcp-ops",
            [
                f"$mcp-rpc/mcp-ops/{A}-mcp/edgeclaw/{A}",
                "$mcp-client/presence/mcp-ops",
                f"$mcp-server/{A}-mcp/edgeclaw/{A}",
            ],
            [
                f"$mcp-rpc/mcp-other/{A}-mcp/edgeclaw/{A}",
                "$mcp-client/presence/mcp-other",
                f"$mcp-server/presence/{A}-mcp/edgeclaw/{A}",
                f"edgeclaw/{A}/tool/call",
                f"edgeclaw/{A}/status",
            ],
        ),
    ],
)
async def test_each_role_publishes_only_what_it_is_given(broker, user, allowed, denied):
    got = await delivered(broker, user, allowed + denied, marker=allowed[0])
    assert got == set(allowed), (
        f"{user}: wrongly dropped {set(allowed) - got}, let through {got - set(allowed)}"
    )


async def test_an_mcp_client_naming_itself_as_another_still_gets_only_its_own_rpc_topic(broker):
    """The RPC level is bound to the user name, not to the MQTT client id the client picks."""
    mine, theirs = f"$mcp-rpc/mcp-ops/{A}-mcp/edgeclaw/{A}", f"$mcp-rpc/mcp-other/{A}-mcp/edgeclaw/{A}"
    got = await delivered(
        broker, "mcp-ops", [theirs, "$mcp-client/presence/mcp-other"], mine, client_id="mcp-other"
    )
    assert got == set()


async def test_reads_another_device_or_mcp_client_cannot_see(broker):
    a_call, b_call = f"edgeclaw/{A}/tool/call", f"edgeclaw/{B}/tool/call"
    rpc = f"$mcp-rpc/mcp-ops/{A}-mcp/edgeclaw/{A}"
    async with (
        login(broker, A, [a_call, f"$mcp-rpc/+/+/edgeclaw/{A}"]) as a,
        login(broker, B, [a_call, "edgeclaw/+/tool/call", f"reply/{A}/#", rpc]) as b,
        login(broker, "mcp-other", [rpc, "$mcp-rpc/#"]) as other,
        login(broker, "fleet-page", ["edgeclaw/#"]) as page,
        login(broker, "fleet-backend", [f"reply/{A}/#"]) as backend,
        login(broker, "mcp-ops") as ops,
    ):
        await backend.publish(a_call, {"id": "1"})
        await backend.publish(b_call, {"id": "2"})
        await ops.publish(rpc, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        await a.publish(f"edgeclaw/{A}/status", {"state": "online"})
        await a.publish(f"reply/{A}/fleet-backend/1", {"ok": True})
        await a.answers(a_call, 1)
        await a.answers(rpc, 1)
        await page.answers(f"edgeclaw/{A}/status", 1)  # the fleet page reads every report
        await backend.answers(f"reply/{A}/fleet-backend/1", 1)
        await b.answers(b_call, 1)  # B's own, after A's: A's would have come first
        assert [m.topic for m in b.received] == [b_call]
        assert other.received == []


async def test_a_daemon_logs_in_as_its_device_goes_online_and_answers_under_the_acl(broker, tmp_path):
    work = tmp_path / "daemon"
    work.mkdir()
    config = daemon_config(work, broker.port, "[tools.channels.mqtt]", 'allow = ["i2c"]')
    log = work / "daemon.log"
    answers, status = f"reply/{A}/fleet-backend/1", f"edgeclaw/{A}/status"
    async with (
        login(broker, "fleet-backend", [answers, status]) as backend,
        login(broker, B, [answers]) as b,
    ):
        proc = run_daemon(
            daemon_env(work / "state", config, BROKER_PASSWORD=PASSWORDS[A]), log, "--board", "sim"
        )
        try:
            await backend.wait_for(
                lambda: any(m.json.get("state") == "online" for m in backend.on(status)),
                60,
                "the device online",
            )
            request = {"id": "1", "tool": "i2c", "args": {"action": "scan", "bus": 1}}
            await backend.publish(
                f"edgeclaw/{A}/tool/call", request, response_topic=answers, correlation=b"c1"
            )
            [answer] = await backend.answers(answers, 1, within=30)
            assert answer.correlation == b"c1" and answer.json["ok"], answer.json
            assert "0x48" in answer.json["for_llm"]
            assert b.received == []  # another device reads none of A's answers
        finally:
            stop_daemon(proc)
    assert "not authorized" not in log.read_text().lower(), log.read_text()[-3000:]


async def test_a_broadcast_answer_under_the_acl_verifies_and_one_in_another_s_name_does_not(broker, tmp_path):
    """The shared broadcast answer topic names no device, so the broker admits B answering as A there;
    what tells them apart is A's signature, which the fleet page checks (tests/test_fleet_page_trust.py)."""
    work = tmp_path / "daemon"
    work.mkdir()
    config = daemon_config(work, broker.port, "[tools.channels.mqtt]", 'allow = ["i2c"]')
    log = work / "daemon.log"
    answers, status = "reply/fleetpage/srv/broadcast", f"edgeclaw/{A}/status"
    async with login(broker, "fleet-page", [answers, status]) as page, login(broker, B) as b:
        proc = run_daemon(
            daemon_env(work / "state", config, BROKER_PASSWORD=PASSWORDS[A]), log, "--board", "sim"
        )
        try:
            online = await page.wait_for(
                lambda: next((m for m in page.on(status) if m.json.get("state") == "online"), None),
                60,
                "the device online",
            )
            key = parse_public_key(online.json["device_key"])
            request = {"id": "b1", "tool": "i2c", "args": {"action": "scan", "bus": 1}}
            await page.publish("edgeclaw/_all/tool/call", request, response_topic=answers, correlation=b"b1")
            [genuine] = await page.answers(answers, 1, within=30)
            forged = {**genuine.json, "for_llm": "nothing on the bus"}
            await b.publish(answers, forged, correlation=b"b1", user=genuine.user)  # A's signature copied
            await page.answers(answers, 2)
        finally:
            stop_daemon(proc)
    first, second = page.on(answers)
    assert first.json["device"] == second.json["device"] == A  # both in A's name
    assert verify(key, answers, first.payload, first.correlation, signature_of(first.user))
    assert not verify(key, answers, second.payload, second.correlation, signature_of(second.user))


@pytest.mark.skipif(shutil.which("mosquitto_pub") is None, reason="mosquitto_pub is not installed")
def test_a_denied_qos1_publish_is_acknowledged_not_authorized_under_mqtt5(broker):
    """What a client sees of the ACL itself: the broker's PUBACK carries reason code 135."""

    def puback(user: str, topic: str) -> str:
        credentials = ["-p", str(broker.port), "-u", user, "-P", PASSWORDS[user]]
        out = subprocess.run(
            ["mosquitto_pub", *credentials, "-V", "5", "-q", "1", "-d", "-t", topic, "-m", "{}"],
            capture_output=True,
            text=True,
            timeout=10,
        )
        [line] = [line for line in out.stdout.splitlines() if "received PUBACK" in line]
        return line

    assert "RC:135" in puback(B, f"edgeclaw/{A}/status")
    assert "RC:135" in puback("fleet-backend", f"edgeclaw/{A}/status")
    assert "RC:135" in puback("mcp-ops", f"$mcp-rpc/mcp-other/{A}-mcp/edgeclaw/{A}")
    assert "RC:135" not in puback(B, f"edgeclaw/{B}/status")


def daemon_config(work: Path, port: int, *extra: str) -> Path:
    """The config of device A logging in as its own user (password in BROKER_PASSWORD)."""
    config = work / "edgeclaw.toml"
    lines = ['board = "sim"', f'device_id = "{A}"', *extra, "[mqtt]", "enabled = true", f"port = {port}"]
    lines += [f'username = "{A}"', 'password_env = "BROKER_PASSWORD"', "telemetry_interval_s = 0"]
    config.write_text("\n".join(lines) + "\n")
    return config


async def test_mcp_over_mqtt_under_the_acl_serves_its_client_and_nobody_posing_as_it(broker, tmp_path):
    """The daemon serves MCP over MQTT under the template; another MCP client can neither read the
    first one's RPC topic nor put a request on it."""
    work = tmp_path / "daemon"
    work.mkdir()
    mcp = ["[tools.channels.mcp]", 'allow = ["i2c"]', "[mcp.server]", "mqtt = true"]
    config = daemon_config(work, broker.port, *mcp)
    name = f"edgeclaw/{A}"
    rpc = f"$mcp-rpc/mcp-ops/{A}-mcp/{name}"
    as_client = [("MCP-COMPONENT-TYPE", "mcp-client"), ("MCP-MQTT-CLIENT-ID", "mcp-ops")]

    def answer(c: Caller, request_id: int) -> dict | None:
        for m in c.on(rpc):
            body = m.json
            if body.get("id") == request_id and ("result" in body or "error" in body):
                return body
        return None

    env = daemon_env(work / "state", config, BROKER_PASSWORD=PASSWORDS[A])
    async with (
        login(broker, "mcp-ops", [f"$mcp-server/presence/{A}-mcp/#", rpc], client_id="mcp-ops") as ops,
        login(broker, "mcp-other", [rpc, "$mcp-rpc/#"], client_id="mcp-other") as other,
    ):
        proc = run_daemon(env, work / "daemon.log", "--board", "sim")
        try:
            await ops.wait_for(lambda: ops.received, 60, "the device's MCP presence")
            hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ops"}}
            init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
            await ops.publish(f"$mcp-server/{A}-mcp/{name}", init, user=as_client)
            await ops.wait_for(lambda: answer(ops, 1), 20, "initialize answered")
            await ops.publish(rpc, {"jsonrpc": "2.0", "method": "notifications/initialized"}, user=as_client)
            call = {"name": "i2c", "arguments": {"action": "scan", "bus": 1}}
            await ops.publish(
                rpc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": call}, user=as_client
            )
            result = await ops.wait_for(lambda: answer(ops, 2), 20, "tools/call answered")
            assert result["result"]["isError"] is False, result

            # mcp-other, claiming to be mcp-ops on its topic: the broker drops it before the device sees it
            forged = {"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": call}
            await other.publish(rpc, forged, user=as_client)
            await ops.publish(rpc, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"}, user=as_client)
            await ops.wait_for(lambda: answer(ops, 3), 20, "tools/list answered")
            assert answer(ops, 99) is None and not [m for m in ops.on(rpc) if m.json.get("id") == 99]
            assert other.received == []
        finally:
            stop_daemon(proc)
