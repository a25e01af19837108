"""Local-model benchmark against a real llama.cpp server (the one scripts/llama-server builds).

All figures in one run, against one llama-server with SmolLM2-135M-Instruct, a 2048-token context
and greedy sampling (`--temp 0`, so the same request gets the same answer):

  * Turn latency: an edgeclaw turn ("hello", the sim board, every tool allowed) beside a direct HTTP
    POST of the very request edgeclaw sent (recorded by a proxy). Both are split into the server's
    own time (its `timings`: prompt evaluation + generation) and the rest, which is the client's
    overhead: for edgeclaw that is the loop, prompt, policy, budget, persistence, the proxy hop.
  * Tool definitions: the tokens they take in the request for "hello" and for "read the
    temperature" -- as edgeclaw estimates them (agent.context_budget) and as the server counts them
    (the request's prompt tokens with its tools less the same request without) -- and whether the
    whole prompt plus the room for the answer fits the 2048-token context.
  * Second-turn prompt re-evaluation: a two-turn conversation as edgeclaw sends it (stable parts
    first, the time last) beside the same two requests with the time moved to the top of the system
    prompt (the layout before the change), each pair starting from a cold cache; the second turn's
    evaluated prompt tokens and `timings.prompt_ms`.

Run: python bench/bench_local_model.py   (builds the server first if needed: scripts/llama-server build)
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llama_support import CONTEXT, SCRIPT, LlamaServer, RecordingProxy, llama_paths  # noqa: E402

MAX_TOKENS = 64
NOTE = re.compile(r"\n*\[current time \(UTC\): [^\]]*\]\s*$")


def server_ms(timings: dict[str, Any]) -> float:
    return float(timings.get("prompt_ms", 0.0)) + float(timings.get("predicted_ms", 0.0))


def prompt_tokens(timings: dict[str, Any]) -> int:
    return int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0))


async def post(client: Any, url: str, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    """Wall milliseconds and the server's answer for one direct, non-streamed request."""
    body = {**body, "stream": False}
    body.pop("stream_options", None)
    t0 = time.perf_counter()
    response = await client.post(url + "/v1/chat/completions", json=body, timeout=600)
    wall = (time.perf_counter() - t0) * 1000
    response.raise_for_status()
    return wall, response.json()


async def cold(client: Any, url: str) -> None:
    """Push the conversation out of the server's one slot: an unrelated prompt takes it."""
    body = {
        "messages": [{"role": "user", "content": f"Unrelated {time.time()}: name a colour."}],
        "max_tokens": 1,
    }
    await post(client, url, body)


async def run(rounds: int, state: str) -> None:
    import httpx

    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.agent.context_budget import Limits, tool_definition_tokens
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.agent import build_agent
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    paths = llama_paths()
    log = Path(state) / "llama-server.log"
    with (
        LlamaServer(paths, extra=["--temp", "0", "--seed", "1"], log_path=log) as server,
        RecordingProxy(server.url) as proxy,
    ):
        config = config_from_dict(
            {
                "board": "sim",
                "state_dir": state,
                "agent": {"providers": ["local"], "provider_attempts": 1},
                "providers": {
                    "local": {
                        "kind": "openai",
                        "model": "smollm2-135m",
                        "base_url": proxy.url + "/v1",
                        "timeout_s": 600,
                        "max_tokens": MAX_TOKENS,
                    }
                },
            },
            "bench",
        )
        runtime = build_runtime(config, environ={})
        agent = build_agent(runtime)
        async with httpx.AsyncClient() as client:
            # -- turn latency ---------------------------------------------------------------
            turns: list[tuple[float, float]] = []
            directs: list[tuple[float, float]] = []
            for i in range(rounds + 1):
                before = len(proxy.chats())
                t0 = time.perf_counter()
                reply = await agent.handle(InboundMessage("cli", "hello", chat_id=f"latency-{i}"))
                wall = (time.perf_counter() - t0) * 1000
                exchanges = proxy.chats()[before:]
                if not reply.ok or not exchanges:
                    raise SystemExit(f"the edgeclaw turn failed: {reply.text}")
                edge_server = sum(server_ms(e.timings) for e in exchanges)
                direct_wall, answer = await post(client, server.url, exchanges[-1].body)
                if i == 0:
                    continue  # warm-up: the first request evaluates the whole prompt cold
                turns.append((wall, edge_server))
                directs.append((direct_wall, server_ms(answer.get("timings") or {})))
            turn_wall = statistics.median(w for w, _ in turns)
            turn_overhead = statistics.median(w - s for w, s in turns)
            direct_wall = statistics.median(w for w, _ in directs)
            direct_overhead = statistics.median(w - s for w, s in directs)
            print(f"turn latency, 'hello', median of {rounds} ({CONTEXT}-token context):")
            rows = [
                ("direct HTTP POST of the same request", direct_wall, direct_overhead),
                ("edgeclaw turn", turn_wall, turn_overhead),
            ]
            for label, wall_ms, beyond_ms in rows:
                print(f"  {label:38} {wall_ms:9.1f} ms  (beyond the server's time: {beyond_ms:6.1f} ms)")
            print(f"  {'edgeclaw own cost per turn':38} {turn_overhead - direct_overhead:9.1f} ms")

            # -- tool definitions ---------------------------------------------------------------
            ctx = ToolContext(channel="cli", provider="local")
            definitions = agent.registry.definitions(ctx, "openai")
            system = agent.prompt.build("main", "cli:bench")
            limits = Limits(CONTEXT, MAX_TOKENS)
            print(f"tool definitions ({len(definitions)} tools registered on the sim board):")
            all_tokens, _ = tool_definition_tokens("hello", definitions)
            print(f"  without fitting: {len(definitions)} tools, ~{all_tokens} tokens estimated")
            for message in ("hello", "read the temperature"):
                before = len(proxy.chats())
                reply = await agent.handle(InboundMessage("cli", message, chat_id=f"tools-{message}"))
                sent = proxy.chats()[before:][0]
                if not sent.timings:
                    head = sent.answer[:300].decode("utf-8", "replace")
                    print(
                        f"  {message!r:24} the server's answer had no timings (HTTP {sent.status}): {head!r}"
                    )
                    continue
                estimated, count = tool_definition_tokens(
                    message, definitions, limits, system, agent.tool_vocabulary
                )
                total = prompt_tokens(sent.timings)
                bare = copy.deepcopy(sent.body)
                bare.pop("tools", None)
                bare.pop("tool_choice", None)
                bare["max_tokens"] = 1
                _, without = await post(client, server.url, bare)
                counted = total - prompt_tokens(without.get("timings") or {})
                names = [d["function"]["name"] for d in sent.body.get("tools") or []]
                fits = "fits" if total + MAX_TOKENS <= CONTEXT else "DOES NOT FIT"
                print(
                    f"  {message!r:24} {len(names)} tools sent ({count} by the estimate): "
                    f"~{estimated} tokens estimated, {counted} counted by the server; "
                    f"prompt {total} + answer {MAX_TOKENS} {fits} in {CONTEXT}"
                )
                print(f"  {'':24} {', '.join(names) or '(none)'}")

            # -- second-turn prompt re-evaluation --------------------------------------------
            before = len(proxy.chats())
            await agent.handle(InboundMessage("cli", "hello", chat_id="cache"))
            middle = len(proxy.chats())
            await asyncio.sleep(1.1)  # the clock in the request moves on
            await agent.handle(InboundMessage("cli", "What can you do?", chat_id="cache"))
            first, second = proxy.chats()[before].body, proxy.chats()[middle].body
            same_tools = first.get("tools") == second.get("tools")
            same_system = first["messages"][0] == second["messages"][0]
            print(
                f"two-turn conversation: the second request's system prompt is "
                f"{'the same' if same_system else 'DIFFERENT'}, its tools are "
                f"{'the same' if same_tools else 'DIFFERENT'} ({len(first.get('tools') or [])} and "
                f"{len(second.get('tools') or [])} tools)"
            )
            results = {}
            for layout, pair in (
                ("as sent (time last)", (first, second)),
                ("time at the top", old_layout(first, second)),
            ):
                await cold(client, server.url)
                await post(client, server.url, pair[0])
                _, answer = await post(client, server.url, pair[1])
                results[layout] = answer.get("timings") or {}
            print("second turn's prompt (after a cold first turn):")
            for layout, t in results.items():
                print(
                    f"  {layout:22} {int(t.get('prompt_n', 0)):5d} tokens evaluated, "
                    f"{int(t.get('cache_n', 0)):5d} from the cache, {float(t.get('prompt_ms', 0)):9.1f} ms"
                )
        await runtime.aclose()


def old_layout(first: dict[str, Any], second: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two requests with the time moved from the newest user message to the top of the system
    prompt, where it was before (and where it changes the prompt's first tokens every turn)."""
    out = []
    for body, stamp in ((first, "2026-01-01T10:00:00Z"), (second, "2026-01-01T10:00:07Z")):
        body = copy.deepcopy(body)
        for m in body["messages"]:
            if m["role"] == "user" and isinstance(m.get("content"), str):
                m["content"] = NOTE.sub("", m["content"])
        system = body["messages"][0]
        if system["role"] == "system":
            system["content"] = f"Current time (UTC): {stamp}\n\n" + system["content"]
        out.append(body)
    return out[0], out[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    subprocess.run([str(SCRIPT), "build"], check=True, stdout=subprocess.DEVNULL)
    with tempfile.TemporaryDirectory() as state:
        asyncio.run(run(args.rounds, state))


if __name__ == "__main__":
    main()
