"""MCP serving benchmark: an `i2c` read of the sim TMP102 through `edgeclaw mcp serve`, beside the
registry call alone (same board model, same run).

  * registry: `Registry.execute("i2c", ...)` in this process, on the channel `mcp` (schema, policy,
    rate limit off, the profile check, the sim bus, scrub, cap, audit);
  * stdio, raw: a `tools/call` written to `edgeclaw mcp serve` as one JSON line and its answer read
    back: the registry call plus what serving adds (JSON-RPC, the session, the pipes, two processes'
    turns of their event loops);
  * stdio, SDK: the same call from the official `mcp` client (`ClientSession.call_tool`), when the
    package is installed: what an MCP host on the board sees.

Figures are medians (p50) and 90th percentiles of round trips, in microseconds.
Run: python bench/bench_mcp_serve.py [--calls N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

READ = {"action": "read_word", "bus": 1, "address": 0x48, "register": 0}


def figures(samples: list[float]) -> str:
    ordered = sorted(samples)
    p90 = ordered[int(len(ordered) * 0.9) - 1]
    return f"p50 {statistics.median(ordered) * 1e6:8.1f} µs   p90 {p90 * 1e6:8.1f} µs"


async def registry_alone(state: Path, calls: int) -> list[float]:
    from edgeclaw.config.schema import Config
    from edgeclaw.config.typed import build_dataclass
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    config, errors = build_dataclass(
        Config, {"board": "sim", "state_dir": str(state), "tools": {"rate_limit": 0}}, "bench.toml"
    )
    assert config is not None, errors
    runtime = build_runtime(config, require_secrets=False)
    ctx = ToolContext(channel="mcp", session_key="mcp:bench", caller="mcp:stdio:bench")
    try:
        samples = []
        for i in range(calls + 20):
            started = time.perf_counter()
            outcome = await runtime.registry.execute("i2c", READ, ctx)
            if i >= 20:  # the first calls open the sim bus
                samples.append(time.perf_counter() - started)
            assert outcome.ok, outcome.error
        return samples
    finally:
        await runtime.aclose()


def serve_command() -> list[str]:
    return [sys.executable, "-m", "edgeclaw", "mcp", "serve", "--board", "sim"]


async def stdio_raw(env: dict[str, str], calls: int) -> list[float]:
    proc = await asyncio.create_subprocess_exec(
        *serve_command(), stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, env=env, cwd=ROOT
    )
    assert proc.stdin is not None and proc.stdout is not None

    async def ask(n: int, method: str, params: dict[str, object]) -> dict[str, object]:
        proc.stdin.write(json.dumps({"jsonrpc": "2.0", "id": n, "method": method, "params": params}).encode())  # type: ignore[union-attr]
        proc.stdin.write(b"\n")  # type: ignore[union-attr]
        return json.loads(await proc.stdout.readline())  # type: ignore[union-attr]

    try:
        hello = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "bench"}}
        await ask(0, "initialize", hello)
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        samples = []
        call = {"name": "i2c", "arguments": READ}
        for i in range(1, calls + 21):
            started = time.perf_counter()
            answer = await ask(i, "tools/call", call)
            if i > 20:
                samples.append(time.perf_counter() - started)
            assert not answer["result"]["isError"], answer  # type: ignore[index]
        return samples
    finally:
        proc.stdin.close()
        await proc.wait()


async def stdio_sdk(env: dict[str, str], calls: int) -> list[float] | None:
    try:
        from mcp import ClientSession
        from mcp.client.stdio import StdioServerParameters, stdio_client
    except ImportError:
        return None
    params = StdioServerParameters(
        command=serve_command()[0], args=serve_command()[1:], env=env, cwd=str(ROOT)
    )
    samples = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for i in range(calls + 20):
            started = time.perf_counter()
            result = await session.call_tool("i2c", READ)
            if i >= 20:
                samples.append(time.perf_counter() - started)
            assert not result.is_error
    return samples


async def main(calls: int) -> int:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        config = base / "edgeclaw.toml"
        config.write_text('board = "sim"\n[tools]\nrate_limit = 0\n')
        env = {**os.environ, "EDGECLAW_CONFIG": str(config), "EDGECLAW_STATE_DIR": str(base / "serve")}
        registry = await registry_alone(base / "registry", calls)
        raw = await stdio_raw(env, calls)
        sdk = await stdio_sdk(env, calls)
    print(f"i2c read of the sim TMP102, {calls} calls each")
    print(f"  registry call alone            {figures(registry)}")
    print(f"  edgeclaw mcp serve, raw client {figures(raw)}")
    if sdk is not None:
        print(f"  edgeclaw mcp serve, mcp SDK    {figures(sdk)}")
    else:
        print("  edgeclaw mcp serve, mcp SDK    (the mcp package is not installed)")
    added = (statistics.median(raw) - statistics.median(registry)) * 1e6
    print(f"serving adds {added:.1f} µs at p50 (raw client round trip minus the registry call)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    raise SystemExit(asyncio.run(main(parser.parse_args().calls)))
