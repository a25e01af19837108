"""Fleet benchmark: one broadcast answered by N devices, beside one device's round trip.

  * A real mosquitto on loopback and N real `edgeclaw run` daemons on the sim board (default 20).
    Start-up: from launching them all until every retained status says online.
  * Each round publishes one `hardware_info` call on `{prefix}/_all/tool/call` with a Response
    Topic and times it until all N answers are in; the baseline, in the same run, is the same call
    to one device's own `tool/call` (one answer). p50 (and p90) of the rounds.
  * The retained `health` and `status` payload sizes (bytes), as a late dashboard receives them.

Run: python bench/bench_fleet.py [--devices N] [--rounds R]
(2 cores shared with other work make the figures noisy: compare the two timings of one run.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fleet_support import Fleet  # noqa: E402
from tests.mqtt_support import Caller, Mosquitto  # noqa: E402


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p * (len(ordered) - 1)))]


async def round_trip(c: Caller, topic: str, reply: str, request_id: str, expect: int) -> float:
    start = time.monotonic()
    await c.publish(topic, {"id": request_id, "tool": "hardware_info", "args": {}}, response_topic=reply)
    await c.answers(reply, expect, within=60)
    return (time.monotonic() - start) * 1000


async def bench(devices: int, rounds: int, root: Path) -> None:
    broker = Mosquitto(root / "broker").start()
    # Telemetry every 5 s: health is retained and refreshed, without 20 daemons busy reporting.
    fleet = Fleet(root / "fleet", broker.port, devices, telemetry_interval_s=5.0)
    try:
        async with Caller(broker.port, ["edgeclaw/+/status", "edgeclaw/+/health", "reply/bench/#"]) as c:
            started = time.monotonic()
            fleet.start()

            def online() -> bool:
                seen = {m.topic.split("/")[1] for m in c.received if m.topic.endswith("/status")
                        and m.json.get("state") == "online"}  # fmt: skip
                return seen >= set(fleet.devices)

            await c.wait_for(online, 300, "every device online")
            startup_s = time.monotonic() - started
            await c.wait_for(
                lambda: (
                    {m.topic.split("/")[1] for m in c.received if m.topic.endswith("/health")}
                    >= set(fleet.devices)
                ),
                60,
                "health from every device",
            )
            await round_trip(c, "edgeclaw/_all/tool/call", "reply/bench/warm", "warm", devices)
            broadcast: list[float] = []
            single: list[float] = []
            for i in range(rounds):
                broadcast.append(
                    await round_trip(c, "edgeclaw/_all/tool/call", f"reply/bench/b{i}", f"b{i}", devices)
                )
                single.append(
                    await round_trip(
                        c, f"edgeclaw/{fleet.devices[0]}/tool/call", f"reply/bench/s{i}", f"s{i}", 1
                    )
                )
            await asyncio.sleep(1.0)
            extra = [
                m for i in range(rounds) for m in c.on(f"reply/bench/b{i}")
            ]  # every answer of every round
            per_round = len(extra) / rounds
        async with Caller(broker.port, ["edgeclaw/+/health", "edgeclaw/+/status"]) as late:
            await late.wait_for(lambda: len(late.received) >= 2 * devices, 20, "retained messages")
            health = [len(m.payload) for m in late.received if m.topic.endswith("/health")]
            status = [len(m.payload) for m in late.received if m.topic.endswith("/status")]
            sample = next(m for m in late.received if m.topic.endswith("/status")).json
    finally:
        fleet.stop()
        broker.kill()
    print(f"fleet of {devices} daemons (sim board), {rounds} rounds")
    print(f"  start-up until all online: {startup_s:.1f} s")
    print(
        f"  broadcast, all {devices} answers: p50 {pct(broadcast, 0.5):.1f} ms,"
        f" p90 {pct(broadcast, 0.9):.1f} ms ({per_round:.1f} answers per round)"
    )
    print(
        f"  one device's round trip (baseline): p50 {pct(single, 0.5):.1f} ms, p90 {pct(single, 0.9):.1f} ms"
    )
    print(
        f"  retained health payload: median {statistics.median(health):.0f} B, max {max(health)} B;"
        f" status: median {statistics.median(status):.0f} B, max {max(status)} B"
    )
    print(f"  status fields: {', '.join(sample)}")
    if per_round != devices:
        print(f"  WARNING: {per_round} answers per round, expected {devices}")
        print(json.dumps(extra[:3]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--devices", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgeclaw-fleet-") as tmp:
        asyncio.run(bench(args.devices, args.rounds, Path(tmp)))


if __name__ == "__main__":
    main()
