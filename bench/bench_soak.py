"""Soak benchmark: does the daemon's memory stay flat under steady MQTT traffic?

A board runs for months, so memory must not creep. One mosquitto on loopback and two
`edgeclaw run --board sim` subprocesses started alike:
  * `soak`: a steady stream of MQTT 5 QoS 1 tool calls (default ~37/s) from five session names,
    mixed as a fleet backend sends them: an i2c read of the TMP102, read_file, hardware_info, a
    gpio read, session_status, and a tool that does not exist; each answer is checked;
  * `idle`: no calls at all, the baseline from the same run (telemetry, keepalives, timers).
Both daemons' resident memory (VmRSS) is sampled every --sample-s seconds. The figure is the
least-squares slope of each daemon's RSS over the second half of the run (the first half lets
caches, the SQLite page cache and the allocator's arenas reach their working size).

Target: the soak daemon's second-half slope <= 0.5 MiB/h; every call answered exactly once.

Run: python bench/bench_soak.py [--minutes 30] [--rate 37] [--sample-s 10]
Exit status 1 when the target is missed (2 when mosquitto is missing).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import aiomqtt

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness

TARGET_MB_PER_H = 0.5
SESSIONS = 5
# What a backend sends, in turn. The unknown tool is answered `unknown_tool` (an expected refusal).
MIX: list[tuple[str, dict[str, object], bool]] = [
    ("i2c", {"action": "read_word", "bus": 1, "address": 0x48, "register": 0}, True),
    ("read_file", {"path": "readings.csv"}, True),
    ("hardware_info", {}, True),
    ("gpio", {"action": "read", "pin": "button"}, True),
    ("session_status", {}, True),
    ("no_such_tool", {}, False),
]
# The limiter stays in the path, with limits this load never meets.
HIGH_LIMITS = {
    "rate_limit": 10**9,
    "rate_per_minute": 10.0**9,
    "channel_rate_limit": 10**9,
    "channel_rate_per_minute": 10.0**9,
}


class Load:
    def __init__(self) -> None:
        self.sent = 0
        self.answered = 0
        self.unexpected: Counter[str] = Counter()
        self.lost = 0


async def drive(req: harness.Requester, device: str, rate: float, until: float, load: Load) -> None:
    """Calls at `rate` per second until `until` (monotonic), each awaited in its own task."""
    topic = f"edgeclaw/{device}/tool/call"
    interval = 1.0 / rate
    pending: set[asyncio.Task[None]] = set()
    run_id = os.getpid()

    async def one(i: int) -> None:
        tool, args, should_work = MIX[i % len(MIX)]
        payload = {"id": f"soak-{run_id}-{i}", "tool": tool, "args": args, "session": f"line-{i % SESSIONS}"}
        try:
            answer = await req.request(topic, payload, timeout_s=60.0)
        except (TimeoutError, aiomqtt.MqttError):
            load.lost += 1
            return
        load.answered += 1
        if bool(answer.get("ok")) != should_work:
            load.unexpected[f"{tool}: {answer.get('code')}"] += 1

    next_at = time.monotonic()
    i = 0
    while next_at < until:
        delay = next_at - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        task = asyncio.create_task(one(i))
        pending.add(task)
        task.add_done_callback(pending.discard)
        load.sent += 1
        i += 1
        next_at += interval
    if pending:
        await asyncio.wait(pending)


async def sample(
    daemons: list[harness.Daemon],
    every_s: float,
    until: float,
    started: float,
    series: dict[str, list[tuple[float, float]]],
) -> None:
    while True:
        now = time.monotonic()
        for d in daemons:
            if d.proc.poll() is not None:
                raise SystemExit(f"daemon {d.device} exited ({d.proc.returncode}):\n{d.log[-2000:]}")
            series[d.device].append((now - started, d.rss_mb()))
        if now >= until:
            return
        await asyncio.sleep(min(every_s, max(0.0, until - now)))


async def soak(args: argparse.Namespace, workdir: Path) -> int:
    broker, port = harness.start_broker(workdir)
    config = harness.tools_config(**HIGH_LIMITS)
    daemons = [harness.start_daemon(workdir / name, port, name, config) for name in ("soak", "idle")]
    soaked = daemons[0]
    workspace = soaked.workdir / "state" / "workspace"
    try:
        async with harness.requester(port, "soak", [d.device for d in daemons]) as req:
            workspace.mkdir(parents=True, exist_ok=True)
            (workspace / "readings.csv").write_text(
                "".join(f"2024-05-01T{h:02d}:00:00Z,{20 + h / 10:.1f}\n" for h in range(24))
            )
            duration = args.minutes * 60.0
            started = time.monotonic()
            until = started + duration
            series: dict[str, list[tuple[float, float]]] = {d.device: [] for d in daemons}
            load = Load()
            await asyncio.gather(
                drive(req, soaked.device, args.rate, until, load),
                sample(daemons, args.sample_s, until, started, series),
            )
            elapsed = time.monotonic() - started
    finally:
        for d in daemons:
            d.stop()
        broker.terminate()
        broker.wait(10)

    half = duration / 2.0
    print(
        f"soak: {args.minutes:g} min, {load.sent} calls at ~{load.sent / elapsed:.1f}/s over MQTT 5 QoS 1, "
        f"{SESSIONS} session names; RSS sampled every {args.sample_s:g} s"
    )
    print(
        f"  answered {load.answered}, lost {load.lost}, unexpected answers {sum(load.unexpected.values())}"
        + (f" {dict(load.unexpected.most_common(3))}" if load.unexpected else "")
    )
    figures: dict[str, float] = {}
    for d in daemons:
        points = series[d.device]
        second = [p for p in points if p[0] >= half]
        first = [p for p in points if p[0] < half]
        figures[d.device] = slope = harness.slope_mb_per_h(second)
        label = "loaded" if d is soaked else "idle baseline"
        print(
            f"  {d.device:<5} ({label:<13}) RSS {points[0][1]:6.1f} -> {points[-1][1]:6.1f} MiB; slope "
            f"first half {harness.slope_mb_per_h(first):+6.2f} MiB/h, second half {slope:+6.2f} MiB/h"
        )
    ok = figures["soak"] <= TARGET_MB_PER_H and load.lost == 0 and load.answered == load.sent
    print(
        f"  target: loaded second-half slope <= {TARGET_MB_PER_H} MiB/h, none lost: "
        + ("met" if ok else "MISSED")
    )
    return 0 if ok else 1


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the run (default 30)")
    parser.add_argument("--rate", type=float, default=37.0, help="tool calls per second (default 37)")
    parser.add_argument("--sample-s", type=float, default=10.0, help="seconds between RSS samples")
    args = parser.parse_args()
    if args.minutes <= 0 or args.rate <= 0 or args.sample_s <= 0:
        parser.error("--minutes, --rate and --sample-s must be > 0")
    with tempfile.TemporaryDirectory(prefix="bench-soak-") as tmp:
        return asyncio.run(soak(args, Path(tmp)))


if __name__ == "__main__":
    raise SystemExit(main())
