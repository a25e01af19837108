"""Agent loop benchmarks: per-iteration overhead beside the raw HTTP round trip, and resident memory.

  * A scripted OpenAI-compatible server on loopback answers instantly. The same
    request is timed twice in one run: as a bare httpx POST (the baseline: the
    provider's latency as the client sees it) and as a full agent turn (session
    load, prompt, policy-filtered tool definitions, request, reply parsing,
    persistence). The difference is the loop's own overhead per iteration.
  * Peak RSS of a process that has built the runtime and the agent loop with
    every tool registered, beside `python -c pass` and nanobot's 79 MB for the
    same state (target: <= 30 MB).

Run: python bench/bench_agent.py [--turns N]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llm_server import ScriptedLLM, openai_text  # noqa: E402

RSS_TARGET_MIB = 30.0
NANOBOT_RSS_MIB = 79.0


async def measure(turns: int, state: str) -> tuple[float, float]:
    import httpx

    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.agent import build_agent
    from edgeclaw.daemon.runtime import build_runtime

    with ScriptedLLM() as llm:
        config = config_from_dict(
            {
                "board": "sim",
                "state_dir": state,
                "agent": {"providers": ["local"]},
                "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
            },
            "bench",
        )
        runtime = build_runtime(config, environ={})
        agent = build_agent(runtime)
        body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        raw: list[float] = []
        loop: list[float] = []
        async with httpx.AsyncClient() as client:
            for i in range(turns + 20):
                llm.reply(openai_text("ok"), openai_text("ok"))
                t0 = time.perf_counter()
                await client.post(llm.url + "/v1/chat/completions", json=body)
                t1 = time.perf_counter()
                # A fresh session each turn: the figure is per iteration, not per history length.
                await agent.handle(InboundMessage(channel="cli", text="hi", chat_id=f"b{i}"))
                t2 = time.perf_counter()
                if i >= 20:  # warm-up excluded
                    raw.append(t1 - t0)
                    loop.append(t2 - t1)
        await runtime.aclose()
    return statistics.median(raw) * 1000, statistics.median(loop) * 1000


def hwm_mib(code: str, env: dict[str, str]) -> float:
    probe = f"{code}\nprint([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0])"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=env)
    return int(out.stdout.split()[-1]) / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=300)
    opts = parser.parse_args()
    with tempfile.TemporaryDirectory() as state:
        raw_ms, turn_ms = asyncio.run(measure(opts.turns, state))
        print(
            f"iteration: raw HTTP round trip {raw_ms:.3f} ms, agent turn {turn_ms:.3f} ms, "
            f"loop overhead {turn_ms - raw_ms:.3f} ms per iteration"
        )
        env = {**os.environ, "EDGECLAW_STATE_DIR": state}
        build = (
            "import asyncio\n"
            "from edgeclaw.config.loader import config_from_dict\n"
            "from edgeclaw.daemon.runtime import build_runtime\n"
            "from edgeclaw.daemon.agent import build_agent\n"
            "p = {'kind': 'openai', 'model': 'm', 'base_url': 'http://127.0.0.1:9/v1'}\n"
            "c = {'board': 'sim', 'agent': {'providers': ['p']}, 'providers': {'p': p}}\n"
            "c = config_from_dict(c, 'b')\n"
            "r = build_runtime(c, environ={})\n"
            "a = build_agent(r)\n"
            "r.sessions.describe('x')\n"
            "from edgeclaw.tools.base import ToolContext\n"
            "r.registry.definitions(ToolContext(), 'openai')\n"
        )
        base = hwm_mib("pass", env)
        built = hwm_mib(build, env)
        # The HTTP client (httpx, TLS context) is created by the first model request.
        talking = hwm_mib(build + "a.chain.providers[0]._client.get()\n", env)
        print(
            f"memory: `python -c pass` {base:.1f} MiB, agent loop built with all tools {built:.1f} MiB "
            f"(nanobot: {NANOBOT_RSS_MIB:.0f} MiB; target <= {RSS_TARGET_MIB:.0f} MiB); "
            f"{talking:.1f} MiB once the first model request has created the HTTP client"
        )
        tools = subprocess.run(
            [sys.executable, "-c", build + "print(len(r.registry.names()))"],
            check=True,
            capture_output=True,
            text=True,
            env=env,
        ).stdout.split()[-1]
        print(f"tools registered in that process: {tools}")
    if built > RSS_TARGET_MIB:
        print("missed: memory")
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
