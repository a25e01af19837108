"""The `nodes` tool: one device lists its peers on the broker and calls a peer's tools.

Real mosquitto, two real `edgeclaw run` daemons on the sim board sharing a command key. The
technician's side is `edgeclaw tool call nodes ...` on the bench device (it runs in that device's
daemon, over the control socket); the other device is a greenhouse board whose TMP102 is read.
The ghost is played by the test with a device key of its own; the unsigned one signs nothing.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.backends.sim.tmp102 import decode_temperature
from edgeclaw.channels.mqtt.peers import PeerDirectory
from edgeclaw.channels.mqtt.topics import DeviceTopics
from edgeclaw.net import ed25519_openssl
from edgeclaw.net.device_key import SIG_PROPERTY, DeviceKey
from edgeclaw.net.signing import envelope
from edgeclaw.tools.nodes.tool import NodesPolicy
from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools
from tests.mqtt_support import Caller, Mosquitto, daemon_env, needs_mosquitto, run_daemon, stop_daemon

pytestmark = needs_mosquitto

KEY = "nodes-test-command-key-0123456789"
BENCH = "bench-1"
GREENHOUSE = "greenhouse-1"
GHOST = "greenhouse-ghost"  # online by its retained status, but nobody answers for it
GHOST_KEY = DeviceKey(ed25519_openssl.PrivateKey(bytes(range(32))))
UNSIGNED = "greenhouse-unsigned"  # an older device: its status carries no key and no signature
TEMPERATURE_C = 21.5  # the sim board's TMP102 at power-up


class Daemon:
    """`edgeclaw run --board sim` as `device`, MQTT to `port`, with the shared command key; `tools`:
    more [tools] keys, `tables`: more tables."""

    def __init__(
        self,
        root: Path,
        device: str,
        port: int,
        *,
        tools: Sequence[str] = (),
        tables: Sequence[str] = (),
        top: Sequence[str] = (),
        channel_mqtt: Sequence[str] = (),
    ) -> None:
        self.device = device
        workdir = root / device
        workdir.mkdir(parents=True)
        self.log = workdir / "daemon.log"
        config = workdir / "edgeclaw.toml"
        lines = ['board = "sim"', f'device_id = "{device}"', *top, "[tools]", "rate_limit = 0", *tools,
                 *(["[tools.channels.mqtt]", *channel_mqtt] if channel_mqtt else []), "[mqtt]",
                 "enabled = true", f"port = {port}", "discovery = false", "telemetry_interval_s = 1.0",
                 'hmac_secret_env = "NODES_KEY"', 'hmac_key_name = "fleet"', *tables]  # fmt: skip
        config.write_text("\n".join(lines) + "\n")
        self.env = daemon_env(workdir / "state", config, NODES_KEY=KEY)
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = run_daemon(self.env, self.log, "--board", "sim")

    def stop(self) -> None:
        stop_daemon(self.proc)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory):
    b = Mosquitto(tmp_path_factory.mktemp("broker")).start()
    yield b
    b.kill()


@pytest.fixture(scope="module")
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture(scope="module")
def devices(tmp_path_factory: pytest.TempPathFactory, broker: Mosquitto, llm: ScriptedLLM):
    root = tmp_path_factory.mktemp("fleet")
    bench = Daemon(
        root,
        BENCH,
        broker.port,
        top=[
            "[agent]",
            'providers = ["local"]',
            "provider_attempts = 1",
            "[providers.local]",
            'kind = "openai"',
            'model = "m"',
            f'base_url = "{llm.url}/v1"',
            "timeout_s = 20",
        ],
        # Its MQTT callers may use every tool (the test's chat asks the agent to use nodes).
        channel_mqtt=['profile = "full"'],
        tables=[
            "[tools.nodes]",
            'peers = ["greenhouse-*"]',
            'tools = ["i2c", "hardware_info"]',
            "timeout_s = 30",  # a call's default wait: far beyond the short ones tests ask for
        ],
    )
    # The greenhouse board refuses hardware_info to everyone: its own policy, which a caller's
    # [tools.nodes] cannot widen.
    greenhouse = Daemon(root, GREENHOUSE, broker.port, tools=['deny = ["hardware_info"]'])

    async def up() -> None:
        async with Caller(broker.port, [f"edgeclaw/{GREENHOUSE}/events", "edgeclaw/+/status"]) as c:
            bench.start()
            greenhouse.start()

            def online() -> bool:
                seen = {m.topic.split("/")[1] for m in c.received if m.topic.endswith("/status")
                        and m.json.get("state") == "online"}  # fmt: skip
                return {BENCH, GREENHOUSE} <= seen

            try:
                await c.wait_for(online, 90, "both devices online")
            except AssertionError:
                raise AssertionError(logs(bench, greenhouse)) from None
            # A device that is listed but never answers: its status alone, retained, signed.
            status = {"state": "online", "version": "0", "board": "sim", "ts": time.time()}
            await publish_as_ghost(c, f"edgeclaw/{GHOST}/status", {**status, "device_key": GHOST_KEY.public})
            await c.publish(f"edgeclaw/{UNSIGNED}/status", status, retain=True)

    asyncio.run(up())
    yield bench, greenhouse
    bench.stop()
    greenhouse.stop()


async def publish_as_ghost(
    c: Caller,
    topic: str,
    body: dict[str, Any],
    *,
    correlation: bytes | None = None,
    key: DeviceKey = GHOST_KEY,
) -> None:
    """Publish `body` signed with `key` (the ghost's own by default), as a device signs; retained when
    it is a status."""
    payload = json.dumps(body).encode()
    signature = key.sign(topic, payload, correlation)
    retain = topic.endswith("/status")
    await c.publish(topic, payload, correlation=correlation, user=[(SIG_PROPERTY, signature)], retain=retain)


def logs(*daemons: Daemon) -> str:
    return "\n".join(
        f"--- {d.device} ---\n{d.log.read_text(errors='replace')[-3000:] if d.log.exists() else ''}"
        for d in daemons
    )


def nodes(bench: Daemon, args: dict[str, Any], timeout: float = 60) -> tuple[int, dict[str, Any]]:
    """`edgeclaw tool call nodes ARGS --json` on the bench device, as its technician would type it."""
    proc = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "tool", "call", "nodes", json.dumps(args), "--json"],
        env=bench.env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.stdout.strip(), proc.stderr
    return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_bench_lists_its_peers_from_their_retained_status(devices):
    bench, _ = devices
    deadline = time.monotonic() + 60
    while True:
        code, out = nodes(bench, {"action": "list"})
        assert out["ok"], out
        peers = {p["device"]: p for p in out["data"]["peers"]}
        if {GREENHOUSE, GHOST, UNSIGNED} <= set(peers) and peers[GREENHOUSE].get("last_seen"):
            break
        assert time.monotonic() < deadline, out
        time.sleep(0.5)
    assert BENCH not in peers  # not its own peer
    g = peers[GREENHOUSE]
    assert g["state"] == "online" and g["board"] == "sim" and g["callable"] is True
    # The daemon's status is signed with the key it announces: pinned at first sight, as is the ghost's.
    assert g["trust"] == "verified" and peers[GHOST]["trust"] == "verified"
    assert peers[UNSIGNED]["trust"] == "unverifiable"
    line = next(x for x in out["for_llm"].splitlines() if x.startswith(UNSIGNED))
    assert "unverified" in line
    line = next(x for x in out["for_llm"].splitlines() if x.startswith(GREENHOUSE))
    assert "online" in line and "callable" in line and " s ago" in line
    code, out = nodes(bench, {"action": "status", "peer": GREENHOUSE})
    assert code == 0 and out["ok"], out
    assert out["data"]["status"]["state"] == "online"
    assert out["data"]["last_seen"] is not None


def test_the_bench_reads_the_greenhouse_tmp102_through_nodes(devices, broker: Mosquitto):
    bench, greenhouse = devices

    async def run() -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
        async with Caller(broker.port, [f"edgeclaw/{GREENHOUSE}/events"]) as c:
            code, out = await asyncio.to_thread(
                nodes,
                bench,
                {
                    "action": "call",
                    "peer": GREENHOUSE,
                    "tool": "i2c",
                    "args": {"action": "read_word", "bus": 1, "address": "0x48", "register": 0},
                },
            )
            assert code == 0 and out["ok"], (out, logs(bench, greenhouse))
            await c.wait_for(
                lambda: any(m.json.get("tool") == "i2c" for m in c.received), 10, "the i2c event"
            )
            return code, out, [m.json for m in c.received]

    code, out, events = asyncio.run(run())
    assert code == 0 and out["ok"], (out, logs(bench, greenhouse))
    answer = out["data"]["answer"]
    raw = int(answer["bytes"].replace(" ", ""), 16)  # MSB first, as on the wire
    assert decode_temperature(raw) == TEMPERATURE_C
    assert out["for_llm"].startswith(f"[{GREENHOUSE}]")
    # The greenhouse ran it as the MQTT caller the bench signed as, under its own policy.
    i2c = next(e for e in events if e.get("tool") == "i2c")
    assert i2c["caller"] == "mqtt:fleet" and i2c["channel"] == "mqtt" and i2c["ok"] is True


def test_the_bench_agent_reads_the_greenhouse_sensor_when_asked(devices, broker: Mosquitto, llm):
    """A person asks the bench device's agent (a signed MQTT chat); the model calls nodes; the answer
    it writes is made from what the greenhouse's i2c returned."""
    bench, greenhouse = devices
    read = {"action": "read_word", "bus": 1, "address": "0x48", "register": 0}

    def quote_the_tool_result(body: dict[str, Any]) -> Scripted:
        results = [m["content"] for m in body["messages"] if m.get("role") == "tool"]
        return openai_text(f"The greenhouse says: {results[-1] if results else 'nothing'}")

    llm.reply(
        openai_tools(("nodes", {"action": "call", "peer": GREENHOUSE, "tool": "i2c", "args": read})),
        quote_the_tool_result,
    )

    async def run() -> dict[str, Any]:
        reply = "reply/tech/chat"
        async with Caller(broker.port, [reply]) as c:
            topic = f"edgeclaw/{BENCH}/chat/in"
            request = {"id": "chat-1", "text": "What does the greenhouse TMP102 read?", "session": "tech"}
            await c.publish(
                topic,
                envelope(KEY.encode(), topic, request, response_topic=reply, correlation=b"chat-1"),
                response_topic=reply,
                correlation=b"chat-1",
            )
            (answer,) = await c.answers(reply, 1, within=60)
            return answer.json

    answer = asyncio.run(run())
    assert answer.get("ok"), (answer, logs(bench, greenhouse))
    assert f"The greenhouse says: [{GREENHOUSE}] 0x48 register 0x00 on bus 1: 0x8015" in answer["text"]


def test_calls_outside_the_nodes_policy_are_refused_and_nothing_is_published(devices, broker: Mosquitto):
    bench, _ = devices

    async def run() -> tuple[list[dict[str, Any]], list[Any]]:
        async with Caller(broker.port, ["edgeclaw/+/tool/call"]) as c:
            outs = []
            for args in (
                {"action": "call", "peer": "office-1", "tool": "i2c", "args": {"action": "scan", "bus": 1}},
                {"action": "call", "peer": GREENHOUSE, "tool": "exec", "args": {"command": "id"}},
            ):
                outs.append(await asyncio.to_thread(nodes, bench, args))
            await asyncio.sleep(1.0)
            return outs, c.received

    outs, published = asyncio.run(run())
    (code1, peer_out), (code2, tool_out) = outs
    assert not peer_out["ok"] and "'office-1' is not in [tools.nodes] peers" in peer_out["error"]
    assert not tool_out["ok"] and "'exec' is not in [tools.nodes] tools" in tool_out["error"]
    assert code1 == code2 == 2  # refused
    assert published == []


def test_a_peer_whose_status_says_offline_is_not_called(devices, broker: Mosquitto):
    bench, _ = devices
    gone = "greenhouse-gone"

    async def run() -> tuple[tuple[int, dict[str, Any]], list[Any]]:
        async with Caller(broker.port, [f"edgeclaw/{gone}/tool/call"]) as c:
            status = {"state": "offline", "version": "0", "board": "sim", "ts": time.time()}
            await c.publish(f"edgeclaw/{gone}/status", status, retain=True)
            deadline = time.monotonic() + 60
            while True:  # until the bench has taken in the retained status
                _, listed = await asyncio.to_thread(nodes, bench, {"action": "list"})
                if any(p["device"] == gone for p in listed["data"]["peers"]):
                    break
                assert time.monotonic() < deadline, listed
            out = await asyncio.to_thread(
                nodes, bench, {"action": "call", "peer": gone, "tool": "hardware_info", "args": {}}
            )
            await asyncio.sleep(0.5)
            return out, c.received

    (code, out), published = asyncio.run(run())
    assert code != 0 and f"peer {gone!r} is offline" in out["error"], out
    assert published == []


def test_a_peer_that_does_not_answer_times_out_naming_it(devices):
    bench, _ = devices
    started = time.monotonic()
    code, out = nodes(
        bench,
        {"action": "call", "peer": GHOST, "tool": "hardware_info", "args": {}, "timeout_s": 2},
    )
    took = time.monotonic() - started
    assert code != 0 and not out["ok"]
    assert f"peer {GHOST!r} did not answer hardware_info within 2 s" in out["error"]
    assert took < 20  # the call's own 2 s (and the command's start), not the 30 s default


def test_only_the_called_peer_can_answer_the_call(devices, broker: Mosquitto):
    """The answer counts only on the called peer's own reply level (reply/{peer}/..., which the broker
    ACL gives that peer alone): one with the right id under another device's level is ignored."""
    bench, _ = devices

    async def run() -> tuple[int, dict[str, Any]]:
        async with Caller(broker.port, [f"edgeclaw/{GHOST}/tool/call"]) as c:
            call = asyncio.create_task(
                asyncio.to_thread(
                    nodes, bench, {"action": "call", "peer": GHOST, "tool": "hardware_info", "timeout_s": 25}
                )
            )
            (request,) = await c.answers(f"edgeclaw/{GHOST}/tool/call", 1)
            request_id = request.json["id"]
            correlation = request_id.encode()
            forged = {"id": request_id, "ok": True, "tool": "hardware_info", "for_llm": "forged"}
            await c.publish(f"reply/{GREENHOUSE}/nodes/{BENCH}", forged, correlation=correlation)
            # On the ghost's own level, but unsigned, or signed with another key, or signed for
            # another call: each is dropped, so the ghost's own answer still counts.
            reply = f"reply/{GHOST}/nodes/{BENCH}"
            await c.publish(reply, forged, correlation=correlation)
            stranger = DeviceKey(ed25519_openssl.PrivateKey(b"\x07" * 32))
            await publish_as_ghost(c, reply, forged, correlation=correlation, key=stranger)
            await publish_as_ghost(c, reply, forged, correlation=b"another call's id")
            await asyncio.sleep(0.5)
            genuine = {"id": request_id, "ok": True, "tool": "hardware_info", "for_llm": "ghost board"}
            await publish_as_ghost(c, reply, genuine, correlation=correlation)
            return await call

    code, out = asyncio.run(run())
    assert code == 0 and out["ok"], out
    assert out["for_llm"] == f"[{GHOST}] ghost board" and out["data"]["verified"] is True


def test_a_peer_that_signs_nothing_is_not_called(devices, broker: Mosquitto):
    """Anyone on the broker could answer in the name of a peer that signs nothing: fail closed."""
    bench, _ = devices

    async def run() -> tuple[tuple[int, dict[str, Any]], list[Any]]:
        async with Caller(broker.port, [f"edgeclaw/{UNSIGNED}/tool/call"]) as c:
            result = await asyncio.to_thread(
                nodes, bench, {"action": "call", "peer": UNSIGNED, "tool": "hardware_info", "timeout_s": 5}
            )
            await asyncio.sleep(0.5)
            return result, c.on(f"edgeclaw/{UNSIGNED}/tool/call")

    (code, out), requests = asyncio.run(run())
    assert code != 0 and "cannot be verified" in out["error"] and "unsigned_peers" in out["error"], out
    assert requests == []  # nothing was sent to it


def test_a_status_not_signed_with_the_pinned_key_does_not_replace_the_peer_s(devices, broker: Mosquitto):
    bench, _ = devices

    async def forge() -> None:
        async with Caller(broker.port, []) as c:
            fake = {"state": "offline", "version": "6.6.6", "board": "sim", "ts": time.time()}
            await c.publish(f"edgeclaw/{GHOST}/health", {"ts": time.time() + 3600})
            stranger = DeviceKey(ed25519_openssl.PrivateKey(b"\x09" * 32))
            await publish_as_ghost(
                c, f"edgeclaw/{GHOST}/status", {**fake, "device_key": stranger.public}, key=stranger
            )
            await asyncio.sleep(0.5)

    asyncio.run(forge())
    code, out = nodes(bench, {"action": "status", "peer": GHOST})
    assert code == 0 and out["ok"], out
    assert out["data"]["state"] == "online" and out["data"]["version"] == "0"
    assert out["data"]["trust"] == "verified" and out["data"]["health"] is None


def test_a_peer_refusing_under_its_own_policy_passes_the_refusal_back(devices):
    bench, _ = devices
    code, out = nodes(bench, {"action": "call", "peer": GREENHOUSE, "tool": "hardware_info", "args": {}})
    assert code != 0 and not out["ok"]
    assert f"peer {GREENHOUSE} refused or failed hardware_info (policy)" in out["error"], out
    assert "hardware_info" in out["error"]


# -- the pieces, without daemons ---------------------------------------------------------------
def test_the_policy_fails_closed():
    assert NodesPolicy().refusal("greenhouse-1", "i2c") is not None  # nothing named: no calls
    assert NodesPolicy(peers=("greenhouse-*",)).refusal("greenhouse-1", "i2c") is not None
    allowed = NodesPolicy(peers=("greenhouse-*",), tools=("i2c",))
    assert allowed.refusal("greenhouse-1", "i2c") is None
    assert allowed.refusal("greenhouse-1", "i2cx") is not None
    assert allowed.refusal("office-greenhouse-1", "i2c") is not None


def test_only_other_devices_reports_are_taken():
    directory = PeerDirectory(None, DeviceTopics("site/a", "me"))  # type: ignore[arg-type]
    for topic in ("site/a/me/status", "site/a/_all/status", "site/b/x/status", "site/a/x/tool/status"):
        assert not directory.handles(topic), topic
    assert directory.handles("site/a/x/health") and directory.handles("reply/x/nodes/me")
    assert not directory.handles("reply/x/nodes/other") and not directory.handles("reply/x/y/nodes/me")
    directory.on_message("site/a/x/status", b'{"state": "online", "ts": 5}', None, True)
    directory.on_message("site/a/x/health", b'{"ts": 9}', None, True)
    assert [(p.device, p.state, p.last_seen) for p in directory.peers()] == [("x", "online", 9)]
    directory.on_message("site/a/x/status", b"", None, True)  # cleared retained status
    directory.on_message("site/a/x/health", b"", None, True)
    assert directory.peers() == []


def test_no_link_says_why():
    from edgeclaw.config.schema import NodesToolConfig
    from edgeclaw.tools.base import ToolContext
    from edgeclaw.tools.nodes.tool import PeerUnavailable, nodes_tool

    tool = nodes_tool(NodesToolConfig())
    with pytest.raises(PeerUnavailable, match=r"no MQTT connection"):
        asyncio.run(tool.execute({"action": "list"}, ToolContext()))


def test_the_restricted_profiles_leave_the_nodes_tool_out():
    from edgeclaw.config.policy_rules import PROFILES, PolicyRules
    from edgeclaw.tools.base import ToolContext
    from edgeclaw.tools.policy import PolicyEngine

    for profile in PROFILES:
        e = PolicyEngine(PolicyRules(profile=profile))
        e.set_tools({"nodes": "nodes", "i2c": "hardware", "session_status": "sessions"})
        assert ("nodes" in e.allowed(ToolContext())) == (profile == "full"), profile
    # An MQTT caller gets the `remote` profile unless the config widens it: no calls of peers.
    e = PolicyEngine(PolicyRules())
    e.set_tools({"nodes": "nodes", "i2c": "hardware"})
    assert "nodes" not in e.allowed(ToolContext(channel="mqtt"))
    assert "nodes" in e.allowed(ToolContext(channel="cli"))


def test_calls_need_mqtt_5_and_another_device():
    from edgeclaw.tools.nodes.tool import PeerUnavailable

    v311 = PeerDirectory(None, DeviceTopics("edgeclaw", "me"), v5=False)  # type: ignore[arg-type]
    with pytest.raises(PeerUnavailable, match=r"needs MQTT 5"):
        asyncio.run(v311.call("peer-1", "i2c", {}, timeout_s=1))
    with pytest.raises(PeerUnavailable, match=r"'me' is this device"):
        asyncio.run(v311.call("me", "i2c", {}, timeout_s=1))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[tools.nodes]\npeers = ["green/house"]\n', "tools.nodes.peers[0]"),
        ('[tools.nodes]\ntools = ["i2c#"]\n', "tools.nodes.tools[0]"),
        ("[tools.nodes]\ntimeout_s = 0\n", "tools.nodes.timeout_s"),
        ('[tools.nodes]\npeers = ["a"]\ntools = ["i2c"]\n[mqtt]\nprotocol = "3.1.1"\n', "needs MQTT 5"),
    ],
)
def test_a_bad_nodes_policy_is_a_config_error(tmp_path: Path, text: str, expected: str):
    from edgeclaw.config.loader import load_config
    from edgeclaw.errors import ConfigErrors

    path = tmp_path / "edgeclaw.toml"
    path.write_text(text)
    with pytest.raises(ConfigErrors, match=expected.replace("[", r"\[").replace("]", r"\]")):
        load_config(path)
