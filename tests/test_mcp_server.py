"""edgeclaw's tools served over MCP, driven by the official SDK's client (the `mcp` package).

Over stdio the client starts the real `edgeclaw mcp serve` (sim board); over streamable HTTP it
talks to the running daemon's endpoint; over MQTT a client written from the MQTT transport's
description talks to the daemon through a real mosquitto. What a user would notice: the tools
the policy lets through, the sim TMP102's reading, refusals as tool errors with their reason,
approvals asked of the client (elicitation) or refused when it cannot be asked.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import ssl
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiomqtt
import httpx
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties
from paho.mqtt.subscribeoptions import SubscribeOptions

mcp = pytest.importorskip("mcp")
from mcp import ClientSession, types  # noqa: E402
from mcp.client.stdio import StdioServerParameters, stdio_client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from edgeclaw.backends.sim.tmp102 import decode_temperature  # noqa: E402
from edgeclaw.config.loader import config_from_dict  # noqa: E402
from edgeclaw.daemon.lifecycle import Daemon  # noqa: E402
from edgeclaw.daemon.mcp_server import mcp_http_service, mcp_over_mqtt  # noqa: E402
from edgeclaw.daemon.mqtt import mqtt_service  # noqa: E402
from edgeclaw.errors import ToolRefused  # noqa: E402
from edgeclaw.tools.base import Tool, ToolContext, ToolResult  # noqa: E402
from tests.mqtt_support import OPENSSL, Mosquitto, free_port, make_certificates, needs_mosquitto  # noqa: E402

httpx2 = pytest.importorskip("httpx2")

DEMO = str(Path(__file__).resolve().parent / "mcp_servers" / "demo_server.py")
TMP102_READ = {"action": "read_word", "bus": 1, "address": 0x48, "register": 0}
# A shell the approval tests may ask about: exec in the mcp channel, asking every time.
APPROVING_CONFIG = 'board = "sim"\n[tools.channels.mcp]\nprofile = "full"\n[tools.exec]\nask = "always"\n'

sandboxed = pytest.mark.skipif(
    not (os.path.exists("/usr/bin/firejail") or os.path.exists("/usr/bin/bwrap")),
    reason="no sandbox installed (firejail or bubblewrap)",
)


def _text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def _celsius(result: types.CallToolResult) -> float:
    """The TMP102's temperature from the i2c tool's structured result (the register's two bytes)."""
    assert result.structured_content is not None, _text(result)
    high, low = (int(b, 16) for b in result.structured_content["bytes"].split())
    return decode_temperature((high << 8) | low)


def _serve(state_env: dict[str, str]) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable, args=["-m", "edgeclaw", "mcp", "serve", "--board", "sim"], env=state_env
    )


async def _accept(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    _accept.asked.append(params)  # type: ignore[attr-defined]
    return types.ElicitResult(action="accept", content={"decision": "allow-once"})


async def _decline(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


# -- stdio: `edgeclaw mcp serve` ------------------------------------------------------------


async def test_stdio_lists_the_device_tools_and_reads_the_sim_tmp102(state_env: dict[str, str]) -> None:
    async with stdio_client(_serve(state_env)) as (read, write), ClientSession(read, write) as session:
        init = await session.initialize()
        assert init.server_info.name == "edgeclaw"
        assert init.capabilities.tools is not None and init.capabilities.tools.list_changed
        tools = {t.name: t for t in (await session.list_tools()).tools}
        # The mcp channel's default profile is `device`: hardware and files, no shell.
        assert {"i2c", "gpio", "spi", "read_file"} <= set(tools)
        assert "exec" not in tools and "process" not in tools
        assert tools["i2c"].input_schema["type"] == "object"
        assert "address" in tools["i2c"].input_schema["properties"]

        result = await session.call_tool("i2c", TMP102_READ)
        assert not result.is_error, _text(result)
        assert _celsius(result) == pytest.approx(21.5)  # the sim board's TMP102
        assert "0x48" in _text(result)


async def test_stdio_refused_calls_are_tool_errors_with_the_reason(state_env: dict[str, str]) -> None:
    async with stdio_client(_serve(state_env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        outside = await session.call_tool("exec", {"command": "echo hi"})
        assert outside.is_error
        assert "not allowed here" in _text(outside) and "'device'" in _text(outside)
        # Outside the board profile's grants: the tool's bounds check refuses, before the bus.
        off_bus = await session.call_tool("i2c", {**TMP102_READ, "bus": 7})
        assert off_bus.is_error and "bus 7" in _text(off_bus)
        bad = await session.call_tool("i2c", {"action": "read_word", "bus": "one"})
        assert bad.is_error and "i2c" in _text(bad)
        with pytest.raises(Exception, match="unknown tool"):
            await session.call_tool("no_such_tool", {})


@sandboxed
async def test_stdio_approval_is_asked_of_the_client_by_elicitation(
    state_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "edgeclaw.toml").write_text(APPROVING_CONFIG)
    _accept.asked = []  # type: ignore[attr-defined]
    async with (
        stdio_client(_serve(state_env)) as (read, write),
        ClientSession(read, write, elicitation_callback=_accept) as session,
    ):
        await session.initialize()
        result = await session.call_tool("exec", {"command": "echo approved-by-elicitation"})
        assert not result.is_error, _text(result)
        assert "approved-by-elicitation" in _text(result)
    (question,) = _accept.asked  # type: ignore[attr-defined]
    assert "exec" in question.message and "echo approved-by-elicitation" in question.message
    assert question.requested_schema["properties"]["decision"]["enum"] == ["allow-once", "deny"]


@sandboxed
async def test_stdio_declined_approval_refuses_the_call(state_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "edgeclaw.toml").write_text(APPROVING_CONFIG)
    async with (
        stdio_client(_serve(state_env)) as (read, write),
        ClientSession(read, write, elicitation_callback=_decline) as session,
    ):
        await session.initialize()
        result = await session.call_tool("exec", {"command": "echo never-runs"})
        assert result.is_error
        assert "not approved" in _text(result) and "never-runs" not in _text(result).split("not approved")[0]


async def test_stdio_approval_without_elicitation_is_refused_saying_why(
    state_env: dict[str, str], tmp_path: Path
) -> None:
    (tmp_path / "edgeclaw.toml").write_text(APPROVING_CONFIG)
    async with stdio_client(_serve(state_env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        result = await session.call_tool("exec", {"command": "echo never-runs"})
        assert result.is_error
        assert "did not declare the elicitation capability" in _text(result)


async def test_stdio_speaks_an_older_revision_when_asked(state_env: dict[str, str]) -> None:
    """On the raw wire: a revision we know is answered as asked; tools/list before initialize, a
    second initialize and messages that are not JSON-RPC are refused with their error codes."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edgeclaw", "mcp", "serve", "--board", "sim",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=state_env,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None

    async def ask(message: dict[str, Any]) -> dict[str, Any]:
        proc.stdin.write(json.dumps(message).encode() + b"\n")  # type: ignore[union-attr]
        return json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))  # type: ignore[union-attr]

    try:
        early = await ask({"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert early["error"]["code"] == -32600 and "initialize first" in early["error"]["message"]
        old = {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        }
        init = await ask({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": old})
        assert init["result"]["protocolVersion"] == "2025-03-26"
        again = await ask({"jsonrpc": "2.0", "id": 3, "method": "initialize", "params": old})
        assert again["error"]["code"] == -32600
        assert (await ask({"jsonrpc": "2.0", "id": 4, "method": "ping"}))["result"] == {}
        junk = await ask({"not": "json-rpc"})
        assert junk["error"]["code"] == -32600
        proc.stdin.write(b"{not json\n")
        broken = json.loads(await asyncio.wait_for(proc.stdout.readline(), 30))
        assert broken["error"]["code"] == -32700
    finally:
        proc.stdin.close()
        await asyncio.wait_for(proc.wait(), 30)
    assert proc.returncode == 0


# -- streamable HTTP in the daemon -----------------------------------------------------------

TOKEN = "t0ken-for-the-mcp-endpoint-tests"


class Echo(Tool):
    """A tool added while clients are connected (as a custom tool or an MCP server's would be)."""

    name = "late_echo"
    group = "custom"
    description = "Echo its text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "additionalProperties": False}

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        return ToolResult(for_llm=args.get("text", ""))


@dataclass
class Served:
    url: str
    runtime: Any
    service: Any  # the McpHttpService: its endpoint's sessions


@contextlib.asynccontextmanager
async def http_daemon(
    tmp_path: Path, *, tools: dict[str, Any] | None = None, **server: Any
) -> AsyncIterator[Served]:
    """The daemon with `[mcp.server] listen` on a free loopback port, bearer token TOKEN."""
    token_file = tmp_path / "mcp-ops.token"
    token_file.write_text(TOKEN + "\n")
    config = {
        "board": "sim",
        "device_id": "bench-07",
        "state_dir": str(tmp_path / "state"),
        "tools": {"rate_limit": 0, **(tools or {})},
        "mcp": {"server": {"listen": f"127.0.0.1:{free_port()}", "token_file": str(token_file), **server}},
    }
    captured: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def capture(runtime: Any) -> AsyncIterator[None]:
        captured["runtime"] = runtime
        yield

    def http(runtime: Any) -> Any:
        captured["service"] = service = mcp_http_service(runtime)
        return service

    daemon = Daemon(config_from_dict(config, "test.toml"), services=[capture, http], environ={})
    task = asyncio.create_task(daemon.run())
    ready = asyncio.create_task(daemon.ready.wait())
    await asyncio.wait((task, ready), timeout=20, return_when=asyncio.FIRST_COMPLETED)
    if task.done():
        task.result()
    assert daemon.ready.is_set(), "daemon did not become ready"
    try:
        yield Served(captured["service"].url, captured["runtime"], captured["service"])
    finally:
        daemon.request_stop()
        assert await asyncio.wait_for(task, 30) == 0


@contextlib.asynccontextmanager
async def http_session(url: str, token: str = TOKEN, **session: Any) -> AsyncIterator[ClientSession]:
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    async with (
        client,
        streamable_http_client(url, http_client=client) as (read, write),
        ClientSession(read, write, **session) as s,
    ):
        await s.initialize()
        yield s


async def test_http_lists_tools_and_reads_the_sim_tmp102(tmp_path: Path) -> None:
    records: list[Any] = []
    async with http_daemon(tmp_path) as served, http_session(served.url) as session:
        served.runtime.registry.add_audit_sink(records.append)
        names = {t.name for t in (await session.list_tools()).tools}
        assert "i2c" in names and "exec" not in names
        result = await session.call_tool("i2c", TMP102_READ)
        assert not result.is_error, _text(result)
        assert _celsius(result) == pytest.approx(21.5)
        refused = await session.call_tool("exec", {"command": "id"})
        assert refused.is_error and "not allowed here" in _text(refused)
        # On the audit trail: channel mcp, the token's name as the caller, its own session.
        (record,) = [r for r in records if r.tool == "i2c"]
        assert (record.channel, record.caller, record.ok) == ("mcp", "mcp:http:mcp-ops", True)
        assert record.session.startswith("mcp:http:")


async def test_http_without_allowed_origins_refuses_every_browser(tmp_path: Path) -> None:
    # No allowed_origins means no browser: any Origin header is refused; a client without one is served.
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {TOKEN}",
    }
    async with http_daemon(tmp_path) as served, httpx.AsyncClient(timeout=10) as client:
        for origin in ("https://evil.example", "http://127.0.0.1", "null"):
            browser = await client.post(served.url, json=init, headers={**headers, "Origin": origin})
            assert browser.status_code == 403 and "not allowed" in browser.text, origin
            assert "mcp-session-id" not in browser.headers
        plain = await client.post(served.url, json=init, headers=headers)
        assert plain.status_code == 200 and plain.headers["mcp-session-id"]


async def test_http_refuses_a_bad_token_and_a_foreign_origin(tmp_path: Path) -> None:
    hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
    json_headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    origins = ["https://ops.example"]
    async with (
        http_daemon(tmp_path, allowed_origins=origins) as served,
        httpx.AsyncClient(timeout=10) as client,
    ):
        for auth in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {TOKEN}"},
                     {"Authorization": f"Bearer {TOKEN}x"}):  # fmt: skip
            answer = await client.post(served.url, json=init, headers={**json_headers, **auth})
            assert answer.status_code == 401, auth
            assert answer.headers["www-authenticate"].startswith("Bearer")
            assert "mcp-session-id" not in answer.headers
        good = {**json_headers, "Authorization": f"Bearer {TOKEN}"}
        foreign = await client.post(served.url, json=init, headers={**good, "Origin": "https://evil.example"})
        assert foreign.status_code == 403 and "not allowed" in foreign.text
        allowed = await client.post(served.url, json=init, headers={**good, "Origin": "https://ops.example"})
        assert allowed.status_code == 200 and allowed.headers["mcp-session-id"]
        sid = allowed.headers["mcp-session-id"]
        listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
        no_session = await client.post(served.url, json=listed, headers=good)
        assert no_session.status_code == 400 and "Mcp-Session-Id" in no_session.json()["error"]["message"]
        stale = await client.post(served.url, json=listed, headers={**good, "Mcp-Session-Id": "nope"})
        assert stale.status_code == 404
        ok = await client.post(served.url, json=listed, headers={**good, "Mcp-Session-Id": sid})
        assert ok.status_code == 200 and any(t["name"] == "i2c" for t in ok.json()["result"]["tools"])
        # A client that takes only JSON gets its call's answer as JSON.
        read = {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "i2c", "arguments": TMP102_READ},
        }
        json_only = {**good, "Mcp-Session-Id": sid, "Accept": "application/json"}
        called = await client.post(served.url, json=read, headers=json_only)
        assert called.headers["content-type"] == "application/json"
        assert called.json()["result"]["isError"] is False
        ended = await client.delete(served.url, headers={**good, "Mcp-Session-Id": sid})
        assert ended.status_code == 200
        after = await client.post(served.url, json=listed, headers={**good, "Mcp-Session-Id": sid})
        assert after.status_code == 404
        elsewhere = await client.post(served.url.replace("/mcp", "/other"), json=init, headers=good)
        assert elsewhere.status_code == 404


async def test_http_sessions_are_bounded_and_expire_when_idle(tmp_path: Path) -> None:
    async with http_daemon(tmp_path, max_sessions=1, session_idle_s=0.4) as served:
        async with http_session(served.url) as first:
            with pytest.raises(Exception):  # noqa: B017 - the SDK surfaces the 503 as an error
                async with http_session(served.url):
                    pass
            await asyncio.sleep(1.5)  # unused past session_idle_s: ended by the daemon
            with pytest.raises(Exception, match=r"(?i)session"):
                await first.list_tools()
        async with http_session(served.url) as again:  # room again
            assert (await again.list_tools()).tools


@sandboxed
async def test_http_approval_is_asked_on_the_calls_event_stream(tmp_path: Path) -> None:
    approving = {"channels": {"mcp": {"profile": "full"}}, "exec": {"ask": "always"}}
    _accept.asked = []  # type: ignore[attr-defined]
    async with http_daemon(tmp_path, tools=approving) as served:
        async with http_session(served.url, elicitation_callback=_accept) as session:
            allowed = await session.call_tool("exec", {"command": "echo over-http"})
            assert not allowed.is_error, _text(allowed)
            assert "over-http" in _text(allowed)
        async with http_session(served.url, elicitation_callback=_decline) as session:
            declined = await session.call_tool("exec", {"command": "echo over-http"})
            assert declined.is_error and "not approved" in _text(declined)
        async with http_session(served.url) as session:
            unasked = await session.call_tool("exec", {"command": "echo over-http"})
            assert unasked.is_error and "elicitation capability" in _text(unasked)
    assert len(_accept.asked) == 1  # type: ignore[attr-defined]


class Stepper(Echo):
    """A tool that reports its steps (as a bridged MCP tool passes on its server's)."""

    name = "hw_stepper"
    group = "hardware"

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        for step in range(3):
            if ctx.progress is not None:
                ctx.progress(float(step + 1), 3.0, f"step {step + 1} sk-{'a' * 40}")
            await asyncio.sleep(0.05)
        return ToolResult(for_llm="stepped")


async def test_http_progress_comes_on_the_calls_event_stream_scrubbed(tmp_path: Path) -> None:
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with http_daemon(tmp_path) as served, http_session(served.url) as session:
        served.runtime.registry.register(Stepper())
        result = await session.call_tool("hw_stepper", {}, progress_callback=on_progress)
        assert not result.is_error and _text(result) == "stepped", _text(result)
    assert [(done, total) for done, total, _ in seen] == [(1.0, 3.0), (2.0, 3.0), (3.0, 3.0)]
    assert all(m is not None and m.startswith("step ") and "a" * 40 not in m for _, _, m in seen), seen


async def test_http_clients_are_told_when_the_tools_change(tmp_path: Path) -> None:
    changed = asyncio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    full = {"channels": {"mcp": {"profile": "full"}}}
    async with (
        http_daemon(tmp_path, tools=full) as served,
        http_session(served.url, message_handler=on_message) as session,
    ):
        before = {t.name for t in (await session.list_tools()).tools}
        assert "late_echo" not in before
        sessions = served.service.endpoint.sessions
        deadline = time.monotonic() + 20
        while not any(entry.stream is not None for entry in sessions.values()):
            assert time.monotonic() < deadline, "the client never opened its GET event stream"
            await asyncio.sleep(0.02)
        served.runtime.registry.register(Echo())
        await asyncio.wait_for(changed.wait(), 30)
        after = {t.name for t in (await session.list_tools()).tools}
        assert after - before == {"late_echo"}
        echoed = await session.call_tool("late_echo", {"text": "hello"})
        assert _text(echoed) == "hello"


# -- MCP over MQTT, through a real mosquitto ---------------------------------------------------
# The client below is written from the MQTT transport's description (mqtt.ai / EMQX "MCP over
# MQTT"): presence discovery, initialize on the control topic, the RPC topic for the rest.


class McpOverMqttClient:
    """A minimal MCP client on MQTT 5, as a fleet backend would write one."""

    def __init__(self, port: int, client_id: str, id_property: str = "MCP-MQTT-CLIENT-ID") -> None:
        self.client_id = client_id
        self.id_property = id_property  # earlier drafts of the transport spelled it MQTT-CLIENT-ID
        will = aiomqtt.Will(
            f"$mcp-client/presence/{client_id}",
            json.dumps({"jsonrpc": "2.0", "method": "notifications/disconnected"}),
            qos=1,
        )
        self.mqtt = aiomqtt.Client(
            "127.0.0.1", port, identifier=client_id, protocol=aiomqtt.ProtocolVersion.V5, will=will
        )
        self.inbox: asyncio.Queue[tuple[str, bytes, dict[str, str]]] = asyncio.Queue()
        self._reader: asyncio.Task[None] | None = None
        self._ids = 0
        self.answered: list[Any] = []  # the ids of every response seen on the RPC topic

    async def __aenter__(self) -> McpOverMqttClient:
        await self.mqtt.__aenter__()
        self._reader = asyncio.create_task(self._read())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._reader is not None
        self._reader.cancel()
        await self.mqtt.__aexit__(None, None, None)

    async def _read(self) -> None:
        async for message in self.mqtt.messages:
            props = dict(getattr(message.properties, "UserProperty", None) or [])
            payload = message.payload if isinstance(message.payload, bytes) else str(message.payload).encode()
            await self.inbox.put((message.topic.value, payload, props))

    async def next_on(self, prefix: str, within: float = 15) -> tuple[str, bytes, dict[str, str]]:
        async with asyncio.timeout(within):
            while True:
                topic, payload, props = await self.inbox.get()
                if topic.startswith(prefix):
                    return topic, payload, props

    async def publish(self, topic: str, message: dict[str, Any]) -> None:
        props = Properties(PacketTypes.PUBLISH)
        props.UserProperty = [("MCP-COMPONENT-TYPE", "mcp-client"), (self.id_property, self.client_id)]
        await self.mqtt.publish(topic, json.dumps(message), qos=1, properties=props)

    async def request(self, topic: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._ids += 1
        await self.publish(topic, {"jsonrpc": "2.0", "id": self._ids, "method": method, "params": params})
        while True:
            _, payload, props = await self.next_on("$mcp-rpc/")
            assert props.get("MCP-COMPONENT-TYPE") == "mcp-server"
            answer = json.loads(payload)
            self.answered.append(answer.get("id"))
            if answer.get("id") == self._ids:
                return answer


@needs_mosquitto
async def test_mcp_over_mqtt_discovery_initialize_list_and_call(tmp_path: Path) -> None:
    broker = Mosquitto(tmp_path / "broker").start()
    config = {
        "board": "sim",
        "device_id": "bench-07",
        "state_dir": str(tmp_path / "state"),
        "tools": {"rate_limit": 0, "channels": {"mcp": {"profile": "full"}}},
        "mqtt": {"enabled": True, "port": broker.port, "telemetry_interval_s": 0},
        "mcp": {"server": {"mqtt": True}},
    }
    captured: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def capture(runtime: Any) -> AsyncIterator[None]:
        captured["runtime"] = runtime
        yield

    # A retained initialize waits at the broker: it must not open a session when the daemon
    # connects (nor again at every reconnect).
    async with McpOverMqttClient(broker.port, "ghost-01") as ghost:
        stale = Properties(PacketTypes.PUBLISH)
        stale.UserProperty = [("MCP-COMPONENT-TYPE", "mcp-client"), ("MCP-MQTT-CLIENT-ID", "ghost-01")]
        hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "ghost"}}
        retained = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello}
        control = "$mcp-server/bench-07-mcp/edgeclaw/bench-07"
        await ghost.mqtt.publish(control, json.dumps(retained), qos=1, retain=True, properties=stale)
    daemon = Daemon(
        config_from_dict(config, "test.toml"), services=[capture, mqtt_service, mcp_over_mqtt], environ={}
    )
    task = asyncio.create_task(daemon.run())
    try:
        async with McpOverMqttClient(broker.port, "backend-7f3a") as client:
            await client.mqtt.subscribe("$mcp-server/presence/+/edgeclaw/#", qos=1)
            topic, payload, props = await client.next_on("$mcp-server/presence/", within=30)
            server_id, name = topic.removeprefix("$mcp-server/presence/").split("/", 1)
            # The server-id is the client id of the MCP link's own connection.
            assert (server_id, name) == ("bench-07-mcp", "edgeclaw/bench-07")
            online = json.loads(payload)
            assert online["method"] == "notifications/server/online"
            assert online["params"]["server_name"] == name and online["params"]["meta"]["board"] == "sim"
            assert props["MCP-COMPONENT-TYPE"] == "mcp-server"

            rpc = f"$mcp-rpc/{client.client_id}/{server_id}/{name}"
            # No Local, as the transport asks: our own requests must not come back to us.
            await client.mqtt.subscribe(rpc, options=SubscribeOptions(qos=1, noLocal=True))
            await client.mqtt.subscribe(f"$mcp-server/capability/{server_id}/{name}", qos=1)
            # Before initialize, the RPC topic knows no session.
            early = await client.request(rpc, "tools/list", {})
            assert "initialize" in early["error"]["message"]
            init = await client.request(
                f"$mcp-server/{server_id}/{name}",
                "initialize",
                {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "fleet"}},
            )
            assert init["result"]["protocolVersion"] == "2025-06-18"
            assert init["result"]["capabilities"]["tools"]["listChanged"] is True
            await client.publish(rpc, {"jsonrpc": "2.0", "method": "notifications/initialized"})

            listed = await client.request(rpc, "tools/list", {})
            names = {t["name"] for t in listed["result"]["tools"]}
            assert {"i2c", "gpio"} <= names
            read = await client.request(rpc, "tools/call", {"name": "i2c", "arguments": TMP102_READ})
            result = read["result"]
            assert result["isError"] is False
            high, low = (int(b, 16) for b in result["structuredContent"]["bytes"].split())
            assert decode_temperature((high << 8) | low) == pytest.approx(21.5)
            refused = await client.request(
                rpc, "tools/call", {"name": "i2c", "arguments": {**TMP102_READ, "bus": 9}}
            )
            assert refused["result"]["isError"] is True and "bus 9" in refused["result"]["content"][0]["text"]

            # A message on our RPC topic that claims to come from another client is dropped.
            spoof = Properties(PacketTypes.PUBLISH)
            spoof.UserProperty = [
                ("MCP-COMPONENT-TYPE", "mcp-client"),
                ("MCP-MQTT-CLIENT-ID", "someone-else"),
            ]
            spoofed = {"jsonrpc": "2.0", "id": 990, "method": "tools/list", "params": {}}
            elsewhere = f"$mcp-rpc/someone-else/{server_id}/{name}"
            await client.mqtt.subscribe(elsewhere, options=SubscribeOptions(qos=1, noLocal=True))
            await client.mqtt.publish(rpc, json.dumps(spoofed), qos=1, properties=spoof)
            # Refused, not silently: the sender hears why on its own RPC topic.
            _, refusal, _ = await client.next_on("$mcp-rpc/someone-else/")
            assert (
                json.loads(refusal)["id"] == 990
                and "another client" in json.loads(refusal)["error"]["message"]
            )
            await client.request(rpc, "ping", {})  # answered; the spoofed request before it never is
            assert 990 not in client.answered

            # The retained initialize was delivered at the daemon's connect and left alone.
            identities = [s.identity for s in captured["runtime"].mcp_server.built.sessions.values()]
            assert identities == ["mcp:mqtt:backend-7f3a"]

            # A tool added while the client is connected: announced on the capability topic.
            captured["runtime"].registry.register(Echo())
            _, changed, _ = await client.next_on("$mcp-server/capability/")
            assert json.loads(changed)["method"] == "notifications/tools/list_changed"

            # A second client, gone (its goodbye on its presence topic, as its Last Will would say):
            # its session ends; the first one's stays.
            sessions = captured["runtime"].mcp_server.built.sessions
            async with McpOverMqttClient(broker.port, "backend-2b9c", "MQTT-CLIENT-ID") as other:
                other_rpc = f"$mcp-rpc/{other.client_id}/{server_id}/{name}"
                await other.mqtt.subscribe(other_rpc, options=SubscribeOptions(qos=1, noLocal=True))
                hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "b"}}
                await other.request(f"$mcp-server/{server_id}/{name}", "initialize", hello)
                assert len(sessions) == 2
                # A goodbye on the second client's presence topic from the first: its session stays.
                goodbye_msg = {"jsonrpc": "2.0", "method": "notifications/disconnected"}
                await client.publish(f"$mcp-client/presence/{other.client_id}", goodbye_msg)
                await other.request(other_rpc, "ping", {})
                await asyncio.sleep(0.2)
                assert len(sessions) == 2
                goodbye_msg = {"jsonrpc": "2.0", "method": "notifications/disconnected"}
                await other.publish(f"$mcp-client/presence/{other.client_id}", goodbye_msg)
                for _ in range(100):
                    if len(sessions) == 1:
                        break
                    await asyncio.sleep(0.05)
                assert [s.identity for s in sessions.values()] == ["mcp:mqtt:backend-7f3a"]

            daemon.request_stop()
            assert await asyncio.wait_for(task, 30) == 0
            # A clean stop: the session is told, the retained presence is cleared.
            _, goodbye, _ = await client.next_on("$mcp-rpc/")
            assert json.loads(goodbye)["method"] == "notifications/disconnected"
            _, cleared, _ = await client.next_on("$mcp-server/presence/")
            assert cleared == b""
    finally:
        if not task.done():
            daemon.request_stop()
            await asyncio.wait_for(task, 30)
        broker.stop()


@needs_mosquitto
async def test_a_killed_daemons_mcp_presence_is_cleared_by_its_will(tmp_path: Path) -> None:
    """The real `edgeclaw run`, SIGKILLed: an independent client watching discovery sees the board's
    retained presence emptied by the MCP link's Last Will as soon as the broker notices -- not after
    the presence's expiry (set far beyond the test here) -- and a new client finds no server."""
    from tests.mqtt_support import daemon_env, run_daemon, stop_daemon

    broker = Mosquitto(tmp_path / "broker").start()
    config = tmp_path / "edgeclaw.toml"
    config.write_text(
        'board = "sim"\ndevice_id = "pi-dies"\n'
        f"[mqtt]\nenabled = true\nport = {broker.port}\nkeepalive_s = 5\ntelemetry_interval_s = 0\n"
        "[mcp.server]\nmqtt = true\nmqtt_presence_expiry_s = 3600\n"
    )
    log = tmp_path / "daemon.log"
    proc = run_daemon(daemon_env(tmp_path / "state", config), log)
    try:
        async with McpOverMqttClient(broker.port, "watcher-01") as watcher:
            await watcher.mqtt.subscribe("$mcp-server/presence/+/edgeclaw/#", qos=1)
            topic, online, _ = await watcher.next_on("$mcp-server/presence/", within=30)
            assert topic == "$mcp-server/presence/pi-dies-mcp/edgeclaw/pi-dies"
            assert json.loads(online)["method"] == "notifications/server/online"
            proc.kill()
            proc.wait(10)
            killed = time.monotonic()
            topic, gone, _ = await watcher.next_on("$mcp-server/presence/", within=10)
            assert (topic, gone) == ("$mcp-server/presence/pi-dies-mcp/edgeclaw/pi-dies", b"")
            print(f"presence cleared {time.monotonic() - killed:.2f} s after the SIGKILL")
        # A client that looks now finds nothing retained.
        async with McpOverMqttClient(broker.port, "latecomer-01") as late:
            await late.mqtt.subscribe("$mcp-server/presence/+/edgeclaw/#", qos=1)
            with pytest.raises(TimeoutError):
                await late.next_on("$mcp-server/presence/", within=1.5)
    finally:
        stop_daemon(proc)
        broker.stop()
    assert "Traceback" not in log.read_text(errors="replace")


async def _raw_http(url: str, request: bytes) -> bytes:
    """Send raw bytes to the endpoint's port, read until the server closes or answers."""
    host_port = url.split("//", 1)[1].split("/", 1)[0]
    host, port = host_port.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 15)
    finally:
        writer.close()


async def test_http_server_bounds_what_a_client_sends(tmp_path: Path) -> None:
    auth = f"Authorization: Bearer {TOKEN}\r\n".encode()
    async with http_daemon(tmp_path) as served:
        huge_head = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + b"X-Pad: " + b"a" * 20000 + b"\r\n\r\n"
        assert (await _raw_http(served.url, huge_head)).startswith(b"HTTP/1.1 431")
        too_big = b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"Content-Length: 99999999\r\n\r\n"
        assert (await _raw_http(served.url, too_big)).startswith(b"HTTP/1.1 413")
        chunked = (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            + auth
            + b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
        )
        assert (await _raw_http(served.url, chunked)).startswith(b"HTTP/1.1 411")
        garbage = b"HELLO\r\n\r\n"
        assert (await _raw_http(served.url, garbage)).startswith(b"HTTP/1.1 400")
        # Keep-alive: two requests on one connection, both answered.
        ping = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()
        one = (
            b"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\n" + auth + b"Content-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(ping), ping)
        )
        host, port = served.url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        reader, writer = await asyncio.open_connection(host, int(port))
        try:
            for _ in range(2):
                writer.write(one)
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 15)
                assert head.startswith(b"HTTP/1.1 400")  # no session id: refused, but answered
                length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
                assert b"Mcp-Session-Id" in await reader.readexactly(length)
        finally:
            writer.close()


# -- the protocol core, in process -------------------------------------------------------------


class HardwareExtra(Echo):
    name = "hw_extra"
    group = "hardware"  # in the `device` profile the mcp channel gets by default


async def test_list_changed_is_sent_only_when_the_sessions_view_changes() -> None:
    from edgeclaw.channels.mcp.server import McpServer
    from edgeclaw.tools.policy import PolicyEngine, PolicyRules
    from edgeclaw.tools.registry import Registry

    registry = Registry(PolicyEngine(PolicyRules()))
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async with McpServer(registry) as server:
        session = server.open("stdio", "mcp:stdio:test", send)
        hello = {"protocolVersion": "1999-01-01", "capabilities": {}, "clientInfo": {"name": "t"}}
        init = await session.receive({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": hello})
        assert init is not None and init["result"]["protocolVersion"] == "2025-11-25"  # unknown: our newest
        listed = await session.receive({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert listed is not None and listed["result"]["tools"] == []
        registry.register(Echo())  # group custom: not in the device profile, so not this client's
        await asyncio.sleep(0.05)
        assert sent == []
        registry.register(HardwareExtra())
        await asyncio.sleep(0.05)
        assert [m["method"] for m in sent] == ["notifications/tools/list_changed"]
        call = {"name": "late_echo", "arguments": {"text": "x"}}
        refused = await session.receive({"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
        assert refused is not None and refused["result"]["isError"] is True
        assert "not allowed here" in refused["result"]["content"][0]["text"]


def test_config_check_names_what_the_mcp_server_needs(run_cli, tmp_path: Path) -> None:
    (tmp_path / "edgeclaw.toml").write_text(
        'board = "sim"\n[mcp.server]\nlisten = "127.0.0.1:8765"\nmqtt = true\nmax_sessions = 0\n'
    )
    proc = run_cli("config", "check")
    assert proc.returncode == 1
    assert "mcp.server.token_file" in proc.stderr and "required with mcp.server.listen" in proc.stderr
    assert "mcp.server.mqtt" in proc.stderr and "[mqtt] enabled = true" in proc.stderr
    assert "mcp.server.max_sessions" in proc.stderr


class Slow(Echo):
    name = "hw_slow"
    group = "hardware"

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        await asyncio.sleep(30)
        return ToolResult(for_llm="too late")


class Guarded(Echo):
    """A tool that asks a person first, as exec does."""

    name = "hw_guarded"
    group = "hardware"

    def __init__(self, broker: Any) -> None:
        self.broker = broker

    async def execute(self, args: dict[str, Any], ctx: ToolContext) -> ToolResult:
        decision, why = await self.broker.request(self.name, "pulse pin 17", ctx)
        if not decision.allows:
            raise ToolRefused(f"not approved: {why}")
        return ToolResult(for_llm="pulsed")


def _in_process(**server: Any) -> tuple[Any, Any, list[dict[str, Any]]]:
    from edgeclaw.channels.mcp.server import McpServer
    from edgeclaw.tools.approval import ApprovalBroker
    from edgeclaw.tools.policy import PolicyEngine, PolicyRules
    from edgeclaw.tools.registry import Registry

    registry = Registry(PolicyEngine(PolicyRules()))
    broker = ApprovalBroker()
    registry.register_all([Slow(), Guarded(broker)])
    return McpServer(registry, broker, **server), registry, []


async def _ready_session(server: Any, sent: list[dict[str, Any]], capabilities: dict[str, Any]) -> Any:
    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    session = server.open("stdio", "mcp:stdio:test", send)
    hello = {"protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t"}}
    await session.receive({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": hello})
    return session


async def test_a_cancelled_call_stops_and_gets_no_answer() -> None:
    server, registry, sent = _in_process()
    records: list[Any] = []
    registry.add_audit_sink(records.append)
    async with server:
        session = await _ready_session(server, sent, {})
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "hw_slow"}}
        task = asyncio.ensure_future(session.receive(call))
        await asyncio.sleep(0.1)
        cancel = {"requestId": 7, "reason": "user pressed stop"}
        await session.receive({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
        assert await asyncio.wait_for(task, 5) is None  # no response to a withdrawn request
    assert [(r.tool, r.stage) for r in records] == [("hw_slow", "cancelled")]


async def test_an_unanswered_approval_question_is_withdrawn_and_denied() -> None:
    server, _registry, sent = _in_process(approval_timeout_s=0.3)
    async with server:
        session = await _ready_session(server, sent, {"elicitation": {"form": {}}})
        call = {"jsonrpc": "2.0", "id": 8, "method": "tools/call", "params": {"name": "hw_guarded"}}
        answer = await asyncio.wait_for(session.receive(call), 10)
    assert answer is not None and answer["result"]["isError"] is True
    assert "gave no answer within 0.3 s" in answer["result"]["content"][0]["text"]
    asked, withdrawn = sent
    assert asked["method"] == "elicitation/create" and asked["params"]["mode"] == "form"
    assert "pulse pin 17" in asked["params"]["message"]
    assert withdrawn["method"] == "notifications/cancelled"
    assert withdrawn["params"]["requestId"] == asked["id"]


async def test_an_approval_answered_by_the_client_lets_the_call_run() -> None:
    server, _registry, sent = _in_process()
    async with server:
        session = await _ready_session(server, sent, {"elicitation": {}})  # {} = form, 2025-06-18 style
        call = {"jsonrpc": "2.0", "id": 9, "method": "tools/call", "params": {"name": "hw_guarded"}}
        task = asyncio.ensure_future(session.receive(call))
        for _ in range(100):
            if sent:
                break
            await asyncio.sleep(0.02)
        (asked,) = sent
        accept = {"action": "accept", "content": {"decision": "allow-once"}}
        await session.receive({"jsonrpc": "2.0", "id": asked["id"], "result": accept})
        answer = await asyncio.wait_for(task, 5)
    assert answer is not None and answer["result"] == {
        "content": [{"type": "text", "text": "pulsed"}],
        "isError": False,
    }


@pytest.mark.skipif(OPENSSL is None, reason="openssl is not installed")
async def test_http_over_tls(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    tls = {"tls_cert_file": str(certs["server.crt"]), "tls_key_file": str(certs["server.key"])}
    async with http_daemon(tmp_path, **tls) as served:
        assert served.url.startswith("https://127.0.0.1:")
        client = httpx2.AsyncClient(
            headers={"Authorization": f"Bearer {TOKEN}"},
            verify=ssl.create_default_context(cafile=str(certs["ca.crt"])),
            timeout=30,
        )
        async with (
            client,
            streamable_http_client(served.url, http_client=client) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            result = await session.call_tool("i2c", TMP102_READ)
            assert _celsius(result) == pytest.approx(21.5)
        # Plain HTTP on the TLS port gets no MCP answer.
        async with httpx.AsyncClient(timeout=5) as plain:
            with pytest.raises(httpx.HTTPError):
                await plain.post(served.url.replace("https://", "http://"), json={})


def test_doctor_reports_the_mcp_endpoint_and_what_clients_get(run_cli, tmp_path: Path) -> None:
    token = tmp_path / "ops.token"
    token.write_text(TOKEN)
    (tmp_path / "edgeclaw.toml").write_text(
        f'board = "sim"\n[tools.channels.mcp]\nprofile = "full"\n'
        f'[mcp.server]\nlisten = "0.0.0.0:8765"\ntoken_file = "{token}"\nallow_plain_http = true\n'
    )
    out = run_cli("doctor", timeout=120).stdout
    assert "warn  mcp endpoint: http://0.0.0.0:8765/mcp without TLS" in out
    assert "allow_plain_http" in out
    assert "warn  mcp tools:" in out and "the shell among them (exec, process)" in out
    token.write_text("short")
    out = run_cli("doctor", timeout=120).stdout
    assert "mcp.server.token_file" in out and "at least 128 bits" in out and "token_urlsafe" in out


async def test_a_session_answers_a_bounded_number_of_requests_at_once() -> None:
    from edgeclaw.channels.mcp.server import MAX_IN_FLIGHT

    server, _registry, sent = _in_process()
    async with server:
        session = await _ready_session(server, sent, {})
        calls = [
            asyncio.ensure_future(
                session.receive(
                    {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "hw_slow"}}
                )
            )
            for n in range(MAX_IN_FLIGHT)
        ]
        await asyncio.sleep(0.1)
        extra = {"jsonrpc": "2.0", "id": "one-more", "method": "ping"}
        refused = await session.receive(extra)
        assert refused is not None and "still being answered" in refused["error"]["message"]
        session.close("test over")
        await asyncio.wait(calls)


async def test_stdio_calls_are_rate_limited_per_caller(state_env: dict[str, str], tmp_path: Path) -> None:
    (tmp_path / "edgeclaw.toml").write_text('board = "sim"\n[tools]\nrate_limit = 2\nrate_per_minute = 1\n')
    async with stdio_client(_serve(state_env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        first, second, third = [await session.call_tool("i2c", TMP102_READ) for _ in range(3)]
        assert not first.is_error and not second.is_error
        assert third.is_error and "rate limit" in _text(third).lower()


async def test_stdio_passes_an_mcp_servers_progress_on_to_the_client(
    state_env: dict[str, str], tmp_path: Path
) -> None:
    # MCP server (the SDK's demo) → edgeclaw → MCP client (the SDK's), as notifications/progress.
    (tmp_path / "edgeclaw.toml").write_text(
        'board = "sim"\n[tools.channels.mcp]\nprofile = "full"\n'
        f"[mcp.servers.demo]\ncommand = {json.dumps(sys.executable)}\nargs = [{json.dumps(DEMO)}]\n"
        "sandbox = false\n"
    )
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    async with stdio_client(_serve(state_env)) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        # One step each 0.5 s: slower than the pace at which edgeclaw passes progress on.
        result = await session.call_tool("mcp_demo_slow", {"seconds": 5}, progress_callback=on_progress)
        assert not result.is_error and _text(result) == "done", _text(result)
        assert seen == [(float(i), 10.0, f"step {i}") for i in range(10)]
        # A call without a callback sends no token, and gets no progress.
        seen.clear()
        quiet = await session.call_tool("mcp_demo_slow", {"seconds": 0.3})
        assert not quiet.is_error and seen == []


def test_the_daemon_serves_mcp_over_http_only_when_listen_is_set(tmp_path: Path) -> None:
    from edgeclaw.daemon.lifecycle import configured_services

    token = tmp_path / "t.token"
    token.write_text(TOKEN)
    on = {"board": "sim", "mcp": {"server": {"listen": "127.0.0.1:8765", "token_file": str(token)}}}
    assert mcp_http_service in configured_services(config_from_dict(on, "on.toml"))
    assert mcp_http_service not in configured_services(config_from_dict({"board": "sim"}, "off.toml"))
