"""MCP servers' tools in the registry, against real servers: mcp-server-time over stdio (in the
sandbox), the official SDK's servers over stdio, SSE and streamable HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from edgeclaw.admin.tools_reload import reload_custom_tools
from edgeclaw.channels.mqtt.telemetry import TelemetryCollector
from edgeclaw.cli.doctor import mcp_findings
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.errors import ConfigErrors
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.mcp.names import MAX_NAME_CHARS, tool_name
from edgeclaw.tools.mcp.setup import McpBridge
from edgeclaw.tools.progress import MIN_INTERVAL_S as PACE_S
from tests.llm_server import ScriptedLLM, openai_text, openai_tools
from tests.mcp_servers.demo_server import PNG

DEMO = str(Path(__file__).resolve().parent / "mcp_servers" / "demo_server.py")
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")
CTX = ToolContext(channel="cli", session_key="cli:mcp-test")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen[bytes], what: str, seconds: float = 30) -> None:
    """Until a server process just started accepts connections on its loopback port."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and proc.poll() is None:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start listening on port {port} (exit status {proc.poll()})")


class HttpDemo:
    """The demo server over SSE or streamable HTTP on a loopback port; stop and start it again."""

    def __init__(self, transport: str) -> None:
        self.transport = transport
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        path = "/sse" if self.transport == "sse" else "/mcp"
        return f"http://127.0.0.1:{self.port}{path}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, DEMO, "--transport", self.transport, "--port", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_listening(self.port, self.proc, "the demo server")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture(params=["sse", "streamable-http"])
def http_demo(request: pytest.FixtureRequest) -> Iterator[HttpDemo]:
    demo = HttpDemo(request.param)
    demo.start()
    yield demo
    demo.kill()


def runtime_with(tmp_path: Path, servers: dict[str, dict[str, Any]], **mcp: Any) -> Runtime:
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "mcp": {"servers": servers, **mcp},
        },
        "test.toml",
    )
    return build_runtime(config, require_secrets=False)


def demo_stdio(**extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [DEMO, *extra.pop("flags", [])], "sandbox": False, **extra}


def http_server(demo: HttpDemo, **extra: Any) -> dict[str, Any]:
    return {"transport": "sse" if demo.transport == "sse" else "http", "url": demo.url, **extra}


async def wait_for(predicate: Any, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.05)


# -- names -------------------------------------------------------------------------------------------


def test_names_are_safe_and_capped():
    assert tool_name("time", "get_current_time") == "mcp_time_get_current_time"
    assert tool_name("fs", "read.file/v2") == "mcp_fs_read_file_v2"
    long = tool_name("server", "x" * 100)
    assert len(long) == MAX_NAME_CHARS and long.startswith("mcp_server_xxx")
    assert tool_name("server", "x" * 100) == long  # the same tool always gets the same name
    assert tool_name("server", "x" * 101) != long
    taken = {"mcp_fs_read_file"}
    assert tool_name("fs", "read.file", taken) not in taken


# -- stdio -------------------------------------------------------------------------------------------


async def test_time_server_in_the_sandbox(tmp_path):
    runtime = runtime_with(tmp_path, {"time": {"command": TIME_SERVER}})
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["time"]
        assert status["state"] == "connected", status
        assert "firejail" in status["where"] or "bubblewrap" in status["where"]
        infos = {i.name: i for i in runtime.registry.infos(CTX)}
        assert infos["mcp_time_get_current_time"].group == "mcp:time"
        assert "mcp_time_convert_time" in infos
        out = await runtime.registry.execute("mcp_time_get_current_time", {"timezone": "Europe/Berlin"}, CTX)
        assert out.ok, out.for_llm
        assert "Europe/Berlin" in out.for_llm and "datetime" in out.for_llm
        assert out.data is not None and out.data["timezone"] == "Europe/Berlin"
        # The server's schema is enforced by the registry before anything reaches the server.
        bad = await runtime.registry.execute("mcp_time_get_current_time", {"tz": "UTC"}, CTX)
        assert bad.refused and "timezone" in (bad.error or "")
    finally:
        await runtime.aclose()
    assert "mcp_time_get_current_time" not in runtime.registry.names()


async def test_a_sandboxed_server_sees_neither_the_state_nor_its_secret_files(tmp_path, monkeypatch):
    monkeypatch.setenv("DAEMON_ONLY_SETTING", "visible")
    secret_file = tmp_path / "token"
    secret_file.write_text("s3cret-token-value-123\n")
    # The server's script in its own directory: the one place of the state directory it sees.
    own = tmp_path / "state" / "mcp" / "boxed"
    own.mkdir(parents=True)
    script = own / "demo_server.py"
    shutil.copy(DEMO, script)
    servers = {
        "boxed": {
            "command": sys.executable,
            "args": [str(script)],
            "env_files": {"TOKEN": str(secret_file)},
        },
        "host": demo_stdio(),
    }
    runtime = runtime_with(tmp_path, servers)
    state_file = tmp_path / "state" / "private.txt"
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text("daemon-only")
    try:
        await runtime.mcp.start()
        assert runtime.mcp.status()["boxed"]["state"] == "connected", runtime.mcp.status()
        boxed = await runtime.registry.execute("mcp_boxed_read", {"path": str(state_file)}, CTX)
        assert boxed.ok and "daemon-only" not in boxed.for_llm
        on_host = await runtime.registry.execute("mcp_host_read", {"path": str(state_file)}, CTX)
        assert "daemon-only" in on_host.for_llm
        leaked = await runtime.registry.execute("mcp_boxed_read", {"path": str(secret_file)}, CTX)
        assert "s3cret" not in leaked.for_llm
        # The secret reaches the program as configured, and is scrubbed from what it answers.
        echoed = await runtime.registry.execute("mcp_boxed_env", {"name": "TOKEN"}, CTX)
        assert echoed.ok and "s3cret" not in echoed.for_llm and "REDACTED" in echoed.for_llm
        # Nothing of the daemon's own environment is passed on, in the sandbox or not.
        for name in ("boxed", "host"):
            plain = await runtime.registry.execute(f"mcp_{name}_env", {"name": "DAEMON_ONLY_SETTING"}, CTX)
            assert plain.for_llm == "(unset)"
    finally:
        await runtime.aclose()


async def test_a_script_beside_the_state_directory_does_not_uncover_it(tmp_path):
    # The directory of a server's script is made visible so the server can read it, but never one
    # that holds the state directory (or lies in it): that would show the daemon's own files.
    script = tmp_path / "demo_server.py"
    shutil.copy(DEMO, script)
    runtime = runtime_with(tmp_path, {"beside": {"command": sys.executable, "args": [str(script)]}})
    state_file = tmp_path / "state" / "private.txt"
    state_file.parent.mkdir(parents=True, exist_ok=True)
    state_file.write_text("daemon-only")
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["beside"]
        # Its script stays hidden with the state beside it, so the server cannot start, and says so.
        assert status["state"] != "connected", status
        assert "mcp_beside_read" not in runtime.registry.names()
    finally:
        await runtime.aclose()


def test_script_folders_made_visible_never_hold_or_lie_in_what_is_hidden(tmp_path):
    state = tmp_path / "state"
    secrets = tmp_path / "secrets"
    for folder in (state / "mcp", secrets, tmp_path / "opt" / "srv"):
        folder.mkdir(parents=True)
    scripts = {
        "in_state": state / "mcp" / "a.py",
        "holds_state": tmp_path / "b.py",
        "in_hidden": secrets / "c.py",
        "elsewhere": tmp_path / "opt" / "srv" / "d.py",
    }
    for path in scripts.values():
        path.write_text("")
    runtime = runtime_with(tmp_path, {})
    bridge = McpBridge(runtime.config, runtime.registry, state_dir=state, secrets={}, hidden=[secrets])
    args = ["-u", "relative.py", *(str(p) for p in scripts.values())]
    assert bridge._scripts_of(args) == [scripts["elsewhere"].parent]
    # A Node package's script: its whole node_modules (its dependencies), unless that holds what is hidden.
    package = tmp_path / "opt" / "mcp" / "node_modules" / "@scope" / "server" / "dist"
    in_state = state / "npm" / "node_modules" / "server" / "index.js"
    for script in (package / "index.js", in_state):
        script.parent.mkdir(parents=True)
        script.write_text("")
    found = bridge._scripts_of([str(package / "index.js"), str(in_state)])
    assert found == [tmp_path / "opt" / "mcp" / "node_modules"]


async def test_network_in_the_sandbox_only_when_configured(tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    servers = {}
    for name, network in (("closed", False), ("open", True)):
        own = tmp_path / "state" / "mcp" / name
        own.mkdir(parents=True)
        shutil.copy(DEMO, own / "demo_server.py")
        servers[name] = {"command": sys.executable, "args": [str(own / "demo_server.py")], "network": network}
    runtime = runtime_with(tmp_path, servers)
    try:
        await runtime.mcp.start()
        closed = await runtime.registry.execute("mcp_closed_connect", {"port": port}, CTX)
        opened = await runtime.registry.execute("mcp_open_connect", {"port": port}, CTX)
        assert closed.for_llm.startswith("no connection"), closed.for_llm
        assert opened.for_llm == "connected", opened.for_llm
    finally:
        await runtime.aclose()
        listener.close()


async def test_results_map_images_and_timeouts_cancel(tmp_path):
    marker = tmp_path / "cancelled"
    # A call's timeout a busy machine's ordinary answers fit in, far short of the slow call's 30 s.
    runtime = runtime_with(tmp_path, {"demo": demo_stdio(timeout_s=3)})
    try:
        await runtime.mcp.start()
        picture = await runtime.registry.execute("mcp_demo_picture", {}, CTX)
        assert picture.ok and picture.for_llm.startswith(f"[image: image/png, {len(PNG)} bytes")
        slow = await runtime.registry.execute("mcp_demo_slow", {"seconds": 30, "marker": str(marker)}, CTX)
        assert not slow.ok and "did not answer within 3 s" in slow.for_llm and "cancelled" in slow.for_llm
        # notifications/cancelled reached the server: it stopped the work.
        await wait_for(marker.exists)
        # The session is still good after a cancelled call.
        again = await runtime.registry.execute("mcp_demo_echo", {"text": "still here"}, CTX)
        assert again.ok and again.for_llm == "still here"
    finally:
        await runtime.aclose()


async def test_a_servers_progress_reaches_the_calls_sink_in_order_and_at_a_pace(tmp_path):
    runtime = runtime_with(tmp_path, {"demo": demo_stdio()})
    try:
        await runtime.mcp.start()
        seen: list[tuple[float, float | None, str]] = []
        ctx = dataclasses.replace(CTX, progress=lambda *update: seen.append(update))
        # One step each 0.5 s: slower than the pace, so every figure gets through, in order.
        steady = await runtime.registry.execute("mcp_demo_slow", {"seconds": 5}, ctx)
        assert steady.ok and steady.for_llm == "done", steady.for_llm
        assert seen == [(float(i), 10.0, f"step {i}") for i in range(10)]

        # One step each 0.05 s: the sink gets at most ~4 a second, still in order, the first at once.
        seen.clear()
        started = time.monotonic()
        chatty = await runtime.registry.execute("mcp_demo_slow", {"seconds": 0.5}, ctx)
        took = time.monotonic() - started
        assert chatty.ok, chatty.for_llm
        assert seen[0] == (0.0, 10.0, "step 0")
        figures = [done for done, _, _ in seen]
        assert figures == sorted(set(figures)), seen
        assert 2 <= len(seen) <= 2 + took / PACE_S, (seen, took)

        # A call without a sink asks for no progress: the server sends none, nothing fails.
        seen.clear()
        quiet = await runtime.registry.execute("mcp_demo_slow", {"seconds": 0.3}, CTX)
        assert quiet.ok and seen == []
    finally:
        await runtime.aclose()


async def test_a_changed_tool_list_is_taken_in(tmp_path):
    runtime = runtime_with(tmp_path, {"demo": demo_stdio()})
    try:
        await runtime.mcp.start()
        out = await runtime.registry.execute("mcp_demo_grow", {"name": "sprout"}, CTX)
        assert out.ok, out.for_llm
        await wait_for(lambda: "mcp_demo_sprout" in runtime.registry.names())
        said = await runtime.registry.execute("mcp_demo_sprout", {}, CTX)
        assert said.ok and said.for_llm == "sprout"
        assert "mcp_demo_echo" in runtime.registry.names()
    finally:
        await runtime.aclose()


async def test_a_changed_tool_list_over_http_is_taken_in(tmp_path, http_demo):
    runtime = runtime_with(tmp_path, {"demo": http_server(http_demo)})
    try:
        await runtime.mcp.start()
        assert (await runtime.registry.execute("mcp_demo_grow", {"name": "sprout"}, CTX)).ok
        await wait_for(lambda: "mcp_demo_sprout" in runtime.registry.names())
    finally:
        await runtime.aclose()


async def test_tool_allow_and_deny_deny_wins(tmp_path):
    servers = {"demo": demo_stdio(tool_allow=["echo", "add", "pid"], tool_deny=["add"])}
    runtime = runtime_with(tmp_path, servers)
    try:
        await runtime.mcp.start()
        names = [n for n in runtime.registry.names() if n.startswith("mcp_")]
        assert names == ["mcp_demo_echo", "mcp_demo_pid"]
    finally:
        await runtime.aclose()


async def test_a_broken_schema_is_reported_and_the_other_tools_work(tmp_path):
    runtime = runtime_with(tmp_path, {"demo": demo_stdio(flags=["--broken"])})
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["demo"]
        assert status["state"] == "connected"
        assert list(status["broken"]) == ["add"] and "integr" in status["broken"]["add"]
        assert "mcp_demo_add" not in runtime.registry.names()
        out = await runtime.registry.execute("mcp_demo_echo", {"text": "hi"}, CTX)
        assert out.ok and out.for_llm == "hi"
    finally:
        await runtime.aclose()


async def test_agents_see_the_servers_their_policy_grants(tmp_path):
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "agents": {"bench": {}, "ops": {}},
            "tools": {
                "agents": {"bench": {"deny": ["group:mcp:demo"]}, "ops": {"allow": ["group:mcp"]}},
            },
            "mcp": {"servers": {"demo": demo_stdio(), "other": demo_stdio(tool_allow=["echo"])}},
        },
        "test.toml",
    )
    runtime = build_runtime(config, require_secrets=False)
    try:
        await runtime.mcp.start()
        bench = {i.name for i in runtime.registry.infos(ToolContext(agent_id="bench"))}
        ops = {i.name for i in runtime.registry.infos(ToolContext(agent_id="ops"))}
        assert "mcp_other_echo" in bench and not any(n.startswith("mcp_demo_") for n in bench)
        assert {n for n in ops if n.startswith("mcp_")} == ops and "mcp_demo_echo" in ops
        refused = await runtime.registry.execute(
            "mcp_demo_echo", {"text": "x"}, ToolContext(agent_id="bench")
        )
        assert refused.refused
    finally:
        await runtime.aclose()


async def test_a_killed_stdio_server_fails_the_call_in_flight_and_comes_back(tmp_path):
    # The health check's 30 s do not matter: a program that exits is noticed at once.
    runtime = runtime_with(tmp_path, {"demo": demo_stdio()}, reconnect_first_s=0.2)
    try:
        await runtime.mcp.start()
        first_pid = int((await runtime.registry.execute("mcp_demo_pid", {}, CTX)).for_llm)
        call = asyncio.create_task(runtime.registry.execute("mcp_demo_slow", {"seconds": 30}, CTX))
        await asyncio.sleep(0.5)
        started = time.monotonic()
        os.kill(first_pid, signal.SIGKILL)
        out = await call
        # Failed when the server died, not when the 30 s call would have ended.
        assert not out.ok and "ended" in out.for_llm and time.monotonic() - started < 20
        # Its tools leave the registry, and come back with a new server process.
        await wait_for(lambda: "mcp_demo_pid" not in runtime.registry.names())
        await wait_for(lambda: runtime.mcp.status()["demo"]["state"] == "connected")
        second_pid = int((await runtime.registry.execute("mcp_demo_pid", {}, CTX)).for_llm)
        assert second_pid != first_pid
    finally:
        await runtime.aclose()


# -- SSE and streamable HTTP ----------------------------------------------------------------------


async def test_http_transports_call_map_and_cancel(tmp_path, http_demo):
    marker = tmp_path / "cancelled"
    runtime = runtime_with(tmp_path, {"demo": http_server(http_demo, timeout_s=3)})
    try:
        await runtime.mcp.start()
        status = runtime.mcp.status()["demo"]
        assert status["state"] == "connected" and status["protocol_version"], status
        out = await runtime.registry.execute("mcp_demo_add", {"a": 2, "b": 40}, CTX)
        assert out.ok and out.for_llm == "42"
        picture = await runtime.registry.execute("mcp_demo_picture", {}, CTX)
        assert picture.for_llm.startswith("[image: image/png")
        slow = await runtime.registry.execute("mcp_demo_slow", {"seconds": 30, "marker": str(marker)}, CTX)
        assert not slow.ok and "did not answer within 3 s" in slow.for_llm
        await wait_for(marker.exists)
    finally:
        await runtime.aclose()


async def test_a_restarted_http_server_is_reconnected_and_its_tools_return(tmp_path, http_demo):
    servers = {"demo": http_server(http_demo)}
    # Enough attempts to outlast the server's restart on a loaded machine.
    timing = {"reconnect_first_s": 0.2, "reconnect_max_s": 0.4, "reconnect_attempts": 200}
    runtime = runtime_with(tmp_path, servers, health_interval_s=0.3, **timing)
    try:
        await runtime.mcp.start()
        assert "mcp_demo_echo" in runtime.registry.names()
        call = asyncio.create_task(runtime.registry.execute("mcp_demo_slow", {"seconds": 30}, CTX))
        await asyncio.sleep(0.5)
        http_demo.kill()
        out = await asyncio.wait_for(call, 10)
        assert not out.ok
        await wait_for(lambda: "mcp_demo_echo" not in runtime.registry.names())
        assert runtime.mcp.status()["demo"]["state"] in ("reconnecting", "connecting")
        http_demo.start()
        await wait_for(lambda: "mcp_demo_echo" in runtime.registry.names())
        again = await runtime.registry.execute("mcp_demo_echo", {"text": "back"}, CTX)
        assert again.ok and again.for_llm == "back"
    finally:
        await runtime.aclose()


class _OtherOriginSse(BaseHTTPRequestHandler):
    """A legacy SSE server that names a message endpoint on another host."""

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        self.wfile.write(b"event: endpoint\ndata: http://127.0.0.2:9/messages?session=1\n\n")
        self.wfile.flush()
        time.sleep(2)

    def do_POST(self) -> None:  # never reached: nothing may be sent to the other origin
        self.send_response(500)
        self.end_headers()


async def test_an_sse_endpoint_on_another_origin_is_refused(tmp_path):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OtherOriginSse)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/sse"
    secret = {"Authorization": "Bearer not-for-other-hosts"}
    runtime = runtime_with(tmp_path, {"sse": {"transport": "sse", "url": url, "headers": secret}})
    try:
        await runtime.mcp.start(wait_s=10)
        status = runtime.mcp.status()["sse"]
        assert status["state"] != "connected"
        assert "another origin: http://127.0.0.2:9/messages" in status["error"]
    finally:
        await runtime.aclose()
        server.shutdown()


async def test_backoff_gives_up_then_an_admin_request_retries(tmp_path):
    demo = HttpDemo("streamable-http")
    servers = {"demo": {"transport": "http", "url": demo.url, "timeout_s": 2}}
    runtime = runtime_with(
        tmp_path, servers, reconnect_first_s=0.05, reconnect_max_s=0.1, reconnect_attempts=3
    )
    try:
        await runtime.mcp.start(wait_s=5)
        await wait_for(lambda: runtime.mcp.status()["demo"]["state"] == "failed")
        status = runtime.mcp.status()["demo"]
        assert status["attempts"] == 3 and "cannot reach" in status["error"]
        await asyncio.sleep(0.5)
        assert runtime.mcp.status()["demo"]["state"] == "failed"  # no more attempts by itself
        demo.start()
        # The admin request: the gateway tool's reload_tools in the daemon.
        report = reload_custom_tools(runtime)
        assert report["mcp_retried"] == ["demo"] and "MCP servers tried again: demo" in report["text"]
        await wait_for(lambda: runtime.mcp.status()["demo"]["state"] == "connected")
        assert "mcp_demo_echo" in runtime.registry.names()
    finally:
        await runtime.aclose()
        demo.kill()


# -- what people see -------------------------------------------------------------------------------


async def test_doctor_and_telemetry_show_each_server(tmp_path):
    servers = {
        "demo": demo_stdio(flags=["--broken"]),
        "gone": {"transport": "http", "url": f"http://127.0.0.1:{free_port()}/mcp"},
        "off": {**demo_stdio(), "enabled": False},
    }
    runtime = runtime_with(tmp_path, servers, reconnect_attempts=0)
    try:
        findings = {(f.check, f.level): f.detail for f in await mcp_findings(runtime)}
        ok = findings[("mcp server demo", "ok")]
        assert "(host): edgeclaw-demo" in ok and "8 tools" in ok
        assert "tool 'add' left out" in findings[("mcp server demo", "warn")]
        assert findings[("mcp server gone", "FAIL")].startswith("failed: cannot reach")
        assert findings[("mcp server off", "ok")] == "disabled (enabled = false)"
        collector = TelemetryCollector("sim", "0", runtime.registry.stats)
        collector.extra_sources["mcp"] = runtime.mcp.telemetry
        snap = collector.snapshot()["mcp"]
        assert snap["demo"] == {"state": "connected", "tools": 8, "attempts": 0}
        assert snap["gone"]["state"] == "failed" and snap["off"]["state"] == "disabled"
    finally:
        await runtime.aclose()


# -- config ------------------------------------------------------------------------------------------


def test_config_problems_are_named():
    with pytest.raises(ConfigErrors) as e:
        config_from_dict(
            {
                "mcp": {
                    "servers": {
                        "a b": {"command": "x"},
                        "web": {"transport": "http"},
                        "sse": {"transport": "sse", "url": "ftp://x"},
                        "cmd": {"env": {"T": "1"}, "env_from": {"T": "X"}},
                    }
                }
            },
            "t.toml",
        )
    text = str(e.value)
    assert "mcp.servers.a b: expected a server name" in text
    assert "mcp.servers.web.url: a http server needs its URL" in text
    assert "mcp.servers.sse.url: expected an http:// or https:// URL" in text
    assert "mcp.servers.cmd.command: a stdio server needs the program" in text
    assert "mcp.servers.cmd.env: T is set more than once" in text


def test_policy_names_of_servers_that_are_not_configured_are_errors():
    with pytest.raises(ConfigErrors) as e:
        config_from_dict(
            {"tools": {"deny": ["group:mcp:tme"]}, "mcp": {"servers": {"time": {"command": "x"}}}}, "t.toml"
        )
    assert "tools.deny[0]: unknown group 'group:mcp:tme': no [mcp.servers.tme] (configured: time)" in str(
        e.value
    )
    with pytest.raises(ConfigErrors) as e:
        config_from_dict({"tools": {"deny": ["mcp_time_convert_time"]}}, "t.toml")
    assert "unknown tool 'mcp_time_convert_time'" in str(e.value)


async def test_one_tool_of_a_server_denied_by_name(tmp_path):
    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "tools": {"deny": ["mcp_demo_add"]},
            "mcp": {"servers": {"demo": demo_stdio()}},
        },
        "test.toml",
    )
    runtime = build_runtime(config, require_secrets=False)
    try:
        await runtime.mcp.start()
        assert (await runtime.registry.execute("mcp_demo_add", {"a": 1, "b": 2}, CTX)).refused
        assert (await runtime.registry.execute("mcp_demo_echo", {"text": "x"}, CTX)).ok
    finally:
        await runtime.aclose()


# -- the command line --------------------------------------------------------------------------------


def _time_config(state_env: dict[str, str], extra: str = "") -> None:
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        f'board = "sim"\n{extra}\n[mcp.servers.time]\ncommand = "{TIME_SERVER}"\n'
    )


def test_tools_list_shows_the_time_servers_tools(run_cli, state_env):
    _time_config(state_env)
    out = run_cli("tools", "list")
    assert out.returncode == 0, out.stderr
    rows = [line.split() for line in out.stdout.splitlines() if line.startswith("mcp_")]
    assert {r[0] for r in rows} == {"mcp_time_get_current_time", "mcp_time_convert_time"}
    assert all(r[1] == "mcp:time" for r in rows)


def _processes_in(directory: Path) -> list[int]:
    """Processes whose working directory is `directory` (an MCP server's own directory)."""
    out = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            if proc.name.isdigit() and Path(os.readlink(proc / "cwd")) == directory:
                out.append(int(proc.name))
    return out


def test_the_daemon_connects_shows_and_stops_its_servers(run_cli, state_env):
    _time_config(state_env)
    own = Path(state_env["EDGECLAW_STATE_DIR"]).resolve() / "mcp" / "time"
    daemon = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run"],
        env=state_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            out = run_cli("status")
            if "mcp server time: connected, 2 tools" in out.stdout:
                break
            assert time.monotonic() < deadline, (out.stdout, out.stderr)
            time.sleep(0.3)
        assert _processes_in(own)  # the server runs, in its own directory
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(30) == 0
    finally:
        with contextlib.suppress(ProcessLookupError):
            daemon.kill()
        daemon.communicate()
    assert _processes_in(own) == []  # and is gone with the daemon


def test_status_in_chat_names_each_server(run_cli, state_env):
    _time_config(state_env)
    out = run_cli("chat", "--message", "/status", timeout=60)
    assert out.returncode == 0, out.stderr
    assert "MCP server time: connected, 2 tools" in out.stdout


def test_chat_calls_a_time_tool(run_cli, state_env):
    with ScriptedLLM() as llm:
        _time_config(
            state_env,
            '[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
            f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 10\n',
        )
        llm.reply(
            openai_tools(("mcp_time_get_current_time", {"timezone": "Asia/Tokyo"})),
            openai_text("It is evening in Tokyo."),
        )
        out = run_cli("chat", "--message", "what time is it in Tokyo?", timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "It is evening in Tokyo."
        offered = [t["function"]["name"] for t in llm.requests[0]["tools"]]
        assert "mcp_time_get_current_time" in offered
        result = next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")
        assert "Asia/Tokyo" in result["content"] and "datetime" in result["content"]
