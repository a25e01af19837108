"""MCP client benchmark: a call to a stdio MCP server through edgeclaw beside the official SDK's
client calling the same server in the same run, and the daemon's memory with three servers connected.

Latency (the demo server of tests/mcp_servers, its `echo` tool, on the host, one server process each):
  * SDK: `ClientSession.call_tool("echo")` from the official `mcp` package (the baseline);
  * edgeclaw client: `McpSession.call_tool` (our client alone: JSON-RPC, the pipes);
  * edgeclaw registry: `Registry.execute("mcp_demo_echo")`, what the agent's call costs (schema, policy,
    the client, result mapping, scrub, cap, audit).
  The added latency is edgeclaw registry p50 minus SDK p50 (target: at most 1 ms).

Memory: the resident set of a process that builds the runtime and waits for its servers, without
[mcp] (idle) and with three servers connected (mcp-server-time and the demo over stdio, the demo
over streamable HTTP); the servers' own processes are not counted (target: at most 6 MB more).

Run: python bench/bench_mcp.py [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEMO = str(ROOT / "tests" / "mcp_servers" / "demo_server.py")
TIME_SERVER = str(Path(sys.executable).parent / "mcp-server-time")
WARMUP = 20


def figures(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.9) - 1)]


def show(label: str, samples: list[float]) -> float:
    p50, p90 = figures(samples)
    print(f"  {label:<20} p50 {p50 * 1e6:8.1f} µs   p90 {p90 * 1e6:8.1f} µs")
    return p50


async def sdk(calls: int) -> list[float]:
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[DEMO])
    samples = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for i in range(calls + WARMUP):
            started = time.perf_counter()
            result = await session.call_tool("echo", {"text": "ping"})
            if i >= WARMUP:
                samples.append(time.perf_counter() - started)
            assert not result.is_error
    return samples


async def edgeclaw_client(calls: int) -> list[float]:
    from edgeclaw.backends.mcp.session import McpSession
    from edgeclaw.backends.mcp.stdio import StdioTransport
    from edgeclaw.sandbox.process import ChildProcess, Launch

    async def spawn() -> ChildProcess:
        launch = Launch(argv=[sys.executable, DEMO], env=dict(os.environ), cwd=ROOT, backend="host")
        return await ChildProcess.start(launch, stdin=True, separate_stderr=True, read_limit=1 << 22)

    session = McpSession(StdioTransport("demo", spawn, sys.executable))
    await session.start(30)
    samples = []
    try:
        for i in range(calls + WARMUP):
            started = time.perf_counter()
            answer = await session.call_tool("echo", {"text": "ping"}, timeout_s=10)
            if i >= WARMUP:
                samples.append(time.perf_counter() - started)
            assert not answer.get("isError")
    finally:
        await session.close()
    return samples


async def edgeclaw_registry(state: Path, calls: int) -> list[float]:
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(state),
            "tools": {"rate_limit": 0},
            "mcp": {"servers": {"demo": {"command": sys.executable, "args": [DEMO], "sandbox": False}}},
        },
        "bench.toml",
    )
    runtime = build_runtime(config, require_secrets=False)
    ctx = ToolContext(channel="cli", session_key="cli:bench")
    samples = []
    try:
        assert runtime.mcp is not None
        await runtime.mcp.start()
        for i in range(calls + WARMUP):
            started = time.perf_counter()
            out = await runtime.registry.execute("mcp_demo_echo", {"text": "ping"}, ctx)
            if i >= WARMUP:
                samples.append(time.perf_counter() - started)
            assert out.ok, out.for_llm
    finally:
        await runtime.aclose()
    return samples


# -- memory -------------------------------------------------------------------------------------------

RSS_PROBE = r"""
import asyncio, json, sys
sys.path.insert(0, sys.argv[1])
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime

def rss_kb():
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])

async def main():
    config = config_from_dict(json.loads(sys.argv[2]), "bench.toml")
    runtime = build_runtime(config, require_secrets=False)
    try:
        if runtime.mcp is not None:
            await runtime.mcp.start()
            states = {n: s["state"] for n, s in runtime.mcp.status().items()}
            assert all(s == "connected" for s in states.values()), states
            ctx_calls = ["mcp_time_get_current_time", "mcp_local_echo", "mcp_remote_echo"]
            from edgeclaw.tools.base import ToolContext
            for name in ctx_calls:
                args = {"timezone": "UTC"} if "time" in name else {"text": "x"}
                out = await runtime.registry.execute(name, args, ToolContext())
                assert out.ok, out.for_llm
        await asyncio.sleep(0.5)
        print(rss_kb())
    finally:
        await runtime.aclose()

asyncio.run(main())
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_of(config: dict[str, object]) -> int:
    out = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(ROOT), json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"the memory probe failed:\n{out.stderr[-2000:]}")
    return int(out.stdout.strip().splitlines()[-1])


def memory(base: Path) -> tuple[int, int]:
    port = free_port()
    http = subprocess.Popen(
        [sys.executable, DEMO, "--transport", "streamable-http", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), 0.2).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise SystemExit("the HTTP demo server did not start") from None
                time.sleep(0.05)
        plain = {"board": "sim", "state_dir": str(base / "idle")}
        servers = {
            "time": {"command": TIME_SERVER},  # in the sandbox, as configured by default
            "local": {"command": sys.executable, "args": [DEMO], "sandbox": False},
            "remote": {"transport": "http", "url": f"http://127.0.0.1:{port}/mcp"},
        }
        with_three = {"board": "sim", "state_dir": str(base / "three"), "mcp": {"servers": servers}}
        idle = min(rss_of(plain) for _ in range(3))
        three = min(rss_of(with_three) for _ in range(3))
        return idle, three
    finally:
        http.kill()
        http.wait()


async def main(calls: int) -> int:
    print(f"MCP client: {calls} calls of `echo` to the demo server over stdio (after {WARMUP} to warm up)")
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        baseline = show("SDK ClientSession", await sdk(calls))
        show("edgeclaw client", await edgeclaw_client(calls))
        ours = show("edgeclaw registry", await edgeclaw_registry(base / "registry", calls))
        added_ms = (ours - baseline) * 1e3
        verdict = "ok" if added_ms <= 1.0 else "OVER"
        print(f"  added by edgeclaw (registry p50 - SDK p50): {added_ms:+.3f} ms (target <= 1 ms: {verdict})")
        idle, three = memory(base)
        extra_mb = (three - idle) / 1024
        verdict = "ok" if extra_mb <= 6.0 else "OVER"
        print(
            f"memory: idle {idle / 1024:.1f} MiB, three servers connected {three / 1024:.1f} MiB: "
            f"{extra_mb:+.2f} MiB (target <= 6 MB: {verdict})"
        )
    return 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=500)
    raise SystemExit(asyncio.run(main(ap.parse_args().calls)))
