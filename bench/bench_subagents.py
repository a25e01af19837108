"""Subagent benchmarks, each beside a baseline measured in the same run:

  * spawn-to-first-model-request latency: from `spawn` returning in the parent's tool call to the
    child's first request reaching a scripted model on loopback, beside a plain turn's
    message-to-first-request latency (the loop's own cost of starting a model turn);
  * resident memory with 8 idle children (each waiting on its model's answer) and with 8 running
    children (each calling tools in a loop), above the parent alone (target: <= 1 MiB per child);
  * announce batching: 50 children ending within 100 ms reach their parent as how many notices
    (target: 1), and how long after the last one ended the parent's answer was delivered.

Run: python bench/bench_subagents.py [--samples N]
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools, task_is  # noqa: E402

PER_CHILD_TARGET_MIB = 1.0
BATCH_TARGET = 1
SESSION = "cli:bench"


class Capture:
    def __init__(self) -> None:
        self.delivered: list[tuple[float, str]] = []

    def has_session(self, session_key: str) -> bool:
        return True

    async def to_session(self, session_key: str, text: str) -> str:
        self.delivered.append((time.perf_counter(), text))
        return "captured"

    async def to_target(self, target: str, message: Any) -> str:
        raise RuntimeError("no targets")


def build(llm: ScriptedLLM, state: str, **subagents: Any) -> Any:
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.agent import build_agent
    from edgeclaw.daemon.runtime import build_runtime

    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": state,
            "agent": {"providers": ["local"], "provider_attempts": 1},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
            "tools": {"rate_limit": 0, "subagents": subagents},
        },
        "bench",
    )
    runtime = build_runtime(config, environ={})
    agent = build_agent(runtime)
    return runtime, agent


def ctx() -> Any:
    from edgeclaw.tools.base import ToolContext

    return ToolContext(channel="cli", session_key=SESSION, caller="cli:bench")


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


# -- latency ------------------------------------------------------------------------------------------
async def latency(samples: int) -> tuple[float, float]:
    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.tools.sessions.subagents import SpawnRequest

    arrivals: dict[str, float] = {}

    def stamp(body: dict[str, Any]) -> Scripted:
        arrivals[body["messages"][-1]["content"]] = time.perf_counter()
        return openai_text("ok")

    with ScriptedLLM() as llm, tempfile.TemporaryDirectory() as state:
        runtime, agent = build(llm, state)
        try:
            turn_ms, spawn_ms = [], []
            for i in range(samples + 5):
                task = f"task {i}"
                llm.route(task_is(task), stamp)
                t0 = time.perf_counter()
                row = runtime.subagents.spawn(SpawnRequest(task, announce=False), ctx())
                await runtime.subagents.wait(row.id, ctx())
                spawned = arrivals[task] - t0
                text = f"turn {i}"
                llm.reply(stamp)
                t0 = time.perf_counter()
                await agent.handle(InboundMessage("cli", text, chat_id="bench", caller="cli:bench"))
                turned = arrivals[text] - t0
                if i >= 5:  # the first few warm the connection pool and the caches
                    spawn_ms.append(spawned * 1000)
                    turn_ms.append(turned * 1000)
        finally:
            await runtime.aclose()
    return statistics.median(spawn_ms), statistics.median(turn_ms)


# -- memory -----------------------------------------------------------------------------------------------
# The scripted model runs in this process and the daemon's side in a process of its own, so the figures
# are edgeclaw's alone.
WARM = 20
BUSY_STEPS = 400


def script_memory(llm: ScriptedLLM, steps: list[int]) -> None:
    def counted(body: dict[str, Any]) -> Scripted:
        steps[0] += 1
        return openai_tools(("list_files", {}))

    llm.record = False
    for i in range(WARM):
        llm.reply(openai_tools(("list_files", {})), openai_text("ok"))
        llm.route(task_is(f"warm child {i}"), openai_tools(("list_files", {})), openai_text("ok"))
    for i in range(8):
        llm.route(task_is(f"idle {i}"), Scripted(hang_s=3, body=openai_text("done").body))
        llm.route(task_is(f"busy {i}"), *[counted] * BUSY_STEPS)


async def memory_child(url: str) -> dict[str, float]:
    """RSS of the parent alone, then with 8 idle children, then with 8 running children."""
    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.tools.sessions.subagents import SpawnRequest

    class Remote:
        pass

    server = Remote()
    server.url = url  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as state:
        runtime, agent = build(server, state, max_iterations=BUSY_STEPS + 10, max_children=8)  # type: ignore[arg-type]
        manager = runtime.subagents
        try:
            for i in range(WARM):  # warm: turns and children, so pools, caches and tables exist
                await agent.handle(InboundMessage("cli", f"warm {i}", chat_id="bench", caller="cli:bench"))
                row = manager.spawn(SpawnRequest(f"warm child {i}", announce=False), ctx())
                await manager.wait(row.id, ctx())
            await asyncio.sleep(0.5)
            base = rss_kib()
            for i in range(8):
                manager.spawn(SpawnRequest(f"idle {i}", announce=False), ctx())
            await asyncio.sleep(1.5)
            idle = rss_kib()
            await manager.cancel(ctx(), "all")
            for i in range(8):
                manager.spawn(SpawnRequest(f"busy {i}", announce=False), ctx())
            peak = 0
            for _ in range(30):
                await asyncio.sleep(0.1)
                peak = max(peak, rss_kib())
            await manager.cancel(ctx(), "all")
        finally:
            await runtime.aclose()
    return {"base_kib": base, "idle_kib": idle, "running_kib": peak}


def memory() -> dict[str, float]:
    steps = [0]
    with ScriptedLLM() as llm:
        script_memory(llm, steps)
        out = subprocess.run(
            [sys.executable, __file__, "--memory-child", llm.url],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    figures["running_steps"] = steps[0]
    return figures


# -- announce batching ----------------------------------------------------------------------------------
async def batching(children: int = 50) -> tuple[int, float, float, int]:
    from edgeclaw.tools.sessions.subagents import SpawnRequest

    with ScriptedLLM() as llm, tempfile.TemporaryDirectory() as state:
        runtime, _agent = build(
            llm, state, max_concurrent=children, max_children=children, announce_debounce_s=0.5
        )
        outlet = Capture()
        runtime.outlets.register("cli", outlet)
        manager = runtime.subagents
        try:
            # All answer at about the same moment: under 2 ms apart, 90 ms from first to last.
            for i in range(children):
                body = openai_text(f"result {i}").body
                llm.route(task_is(f"child {i:02d}"), Scripted(hang_s=1.0 + i * 0.09 / children, body=body))
            llm.reply(
                lambda body: openai_text(f"{body['messages'][-1]['content'].count('completed')} results")
            )
            rows = [manager.spawn(SpawnRequest(f"child {i:02d}"), ctx()) for i in range(children)]
            # Not `settled` (it would flush at once): the debounce runs its course, as in the daemon.
            deadline = time.monotonic() + 60
            while not outlet.delivered and time.monotonic() < deadline:  # noqa: ASYNC110
                await asyncio.sleep(0.005)
            await asyncio.sleep(1.0)  # anything in a second batch would come within this
            ended = [manager.store.get(r.id).ended for r in rows]
            spread_ms = (max(ended) - min(ended)) * 1000
            last_end = max(ended)
            delivered_at = outlet.delivered[-1][0]
            # ended is wall clock; delivered_at perf_counter: convert through now.
            lag_ms = (delivered_at - time.perf_counter() + time.time() - last_end) * 1000
            return manager.announcer.batches, spread_ms, lag_ms, len(outlet.delivered)
        finally:
            await runtime.aclose()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--memory-child", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        print(json.dumps(asyncio.run(memory_child(args.memory_child))))
        return 0
    ok = True
    spawn_ms, turn_ms = asyncio.run(latency(args.samples))
    print(f"spawn to the child's first model request: median {spawn_ms:.2f} ms")
    print(f"  baseline, a message to its turn's first model request: median {turn_ms:.2f} ms")
    m = memory()
    idle = (m["idle_kib"] - m["base_kib"]) / 8 / 1024
    running = (m["running_kib"] - m["base_kib"]) / 8 / 1024
    print(f"RSS, parent alone (baseline): {m['base_kib'] / 1024:.1f} MiB")
    print(f"  with 8 idle children: {m['idle_kib'] / 1024:.1f} MiB, {idle:+.3f} MiB per child")
    print(
        f"  with 8 running children: {m['running_kib'] / 1024:.1f} MiB (peak), {running:+.3f} MiB per child "
        f"({m['running_steps']} model steps in 3 s; target <= {PER_CHILD_TARGET_MIB:g} MiB per child)"
    )
    ok &= max(idle, running) <= PER_CHILD_TARGET_MIB
    batches, spread_ms, lag_ms, turns = asyncio.run(batching())
    print(
        f"announce: 50 children ending within {spread_ms:.0f} ms -> {batches} notice(s), "
        f"{turns} parent turn(s); the parent's answer delivered {lag_ms:.0f} ms after the last ended "
        f"(debounce 500 ms; target {BATCH_TARGET} notice)"
    )
    ok &= batches == BATCH_TARGET
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
