"""Memory against invented names: does the daemon grow with the number of session and sender
names its callers make up?

Every name a caller chooses (an MQTT `session`, a `sender`) can key a table somewhere: rate
limits, statistics, locks, caches. A caller inventing a new name per request must not be able to
grow the daemon without bound. Two measurements, each against a baseline from the same run:

  registry  in this process: N tool calls (session_status, an i2c read) and N `/status` turns
            through the agent loop, first all under one name (the baseline), then each under a
            new invented session name and sender; resident memory growth of each phase.
  mqtt      a real mosquitto and an `edgeclaw run --board sim` subprocess: N tool calls over
            MQTT 5 under one session name, then N under invented session and sender names;
            the daemon's resident memory growth of each phase.

Target: the invented-names phase grows the daemon by at most 5 MiB more than the baseline phase
(the tables are bounded, so the difference must not scale with N).

Run: python bench/bench_names.py [--names N] [--only registry|mqtt]
Exit status 1 when the target is missed (2 when mosquitto is missing for the mqtt part).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import harness

TARGET_EXTRA_MB = 5.0
I2C_READ = {"action": "read_word", "bus": 1, "address": 0x48, "register": 0}
# Limits high enough that no call of this benchmark is refused (their tables are still kept).
NO_REFUSALS = {"rate_limit": 10**9, "rate_per_minute": 10**9, "channel_rate_limit": 0}


def self_rss_mb() -> float:
    gc.collect()
    return harness.rss_mb(os.getpid())


async def registry_phase(runtime, names: list[str]) -> float:
    """RSS growth (MiB) of one pass: a session_status call, an i2c read and a /status turn per name."""
    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.tools.base import ToolContext

    agent = runtime.agent
    before = self_rss_mb()
    for name in names:
        ctx = ToolContext(
            channel="mqtt",
            peer_kind="device",
            session_key=f"mqtt:{name}",
            sender=name,
            caller=f"mqtt:sender:{name}",
        )
        for tool, args in (("session_status", {}), ("i2c", I2C_READ)):
            outcome = await runtime.registry.execute(tool, args, ctx)
            if not outcome.ok:
                raise SystemExit(f"{tool} failed: {outcome.error}")
        reply = await agent.handle(
            InboundMessage("mqtt", "/status", chat_id=name, sender=name, session=f"mqtt:{name}")
        )
        if not reply.ok:
            raise SystemExit(f"/status failed: {reply.text}")
    return self_rss_mb() - before


async def measure_registry(n: int) -> tuple[float, float]:
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.runtime import build_runtime

    with tempfile.TemporaryDirectory(prefix="bench-names-") as tmp:
        tools = {k: v for k, v in NO_REFUSALS.items() if k in _tools_fields()}
        config = config_from_dict({"board": "sim", "state_dir": tmp, "tools": tools}, "bench.toml")
        runtime = build_runtime(config)
        try:
            await registry_phase(runtime, ["warm-up"] * 200 + [f"warm-{i}" for i in range(200)])
            same = await registry_phase(runtime, ["backend"] * n)
            invented = await registry_phase(runtime, [f"invented-{i:06d}" for i in range(n)])
        finally:
            await runtime.aclose()
    return same, invented


def _tools_fields() -> set[str]:
    from edgeclaw.config.schema import ToolsConfig

    return set(ToolsConfig.__dataclass_fields__)


async def mqtt_phase(req: harness.Requester, daemon: harness.Daemon, names: list[str], window: int) -> float:
    topic = f"edgeclaw/{daemon.device}/tool/call"
    slots = asyncio.Semaphore(window)
    failures: list[str] = []
    before = daemon.rss_mb()

    async def one(i: int, name: str) -> None:
        try:
            tool, args = ("session_status", {}) if i % 2 else ("i2c", I2C_READ)
            answer = await req.request(
                topic,
                {
                    "id": f"{name}-{i}-{os.getpid()}",
                    "tool": tool,
                    "args": args,
                    "session": name,
                    "sender": name,
                },
            )
            if not answer.get("ok"):
                failures.append(str(answer.get("error")))
        finally:
            slots.release()

    tasks = []
    for i, name in enumerate(names):
        await slots.acquire()
        tasks.append(asyncio.create_task(one(i, name)))
    await asyncio.gather(*tasks)
    if failures:
        raise SystemExit(f"{len(failures)} calls failed, e.g. {failures[0]}")
    await asyncio.sleep(2.0)  # let the answers' bookkeeping (ledger, outbox) settle
    return daemon.rss_mb() - before


async def measure_mqtt(n: int) -> tuple[float, float]:
    with tempfile.TemporaryDirectory(prefix="bench-names-mqtt-") as tmp:
        workdir = Path(tmp)
        broker, port = harness.start_broker(workdir)
        daemon = harness.start_daemon(
            workdir / "daemon", port, "names", harness.tools_config(**NO_REFUSALS) + _mqtt_widen()
        )
        try:
            async with harness.requester(port, "names", [daemon.device]) as req:
                await mqtt_phase(req, daemon, [f"warm-{i % 50}" for i in range(1000)], 32)
                same = await mqtt_phase(req, daemon, ["backend"] * n, 32)
                invented = await mqtt_phase(req, daemon, [f"invented-{i:06d}" for i in range(n)], 32)
        finally:
            daemon.stop()
            broker.terminate()
            broker.wait(10)
    return same, invented


def _mqtt_widen() -> str:
    return ""


def report(label: str, n: int, same: float, invented: float) -> bool:
    extra = invented - same
    ok = extra <= TARGET_EXTRA_MB
    print(f"{label}: {n} calls under one name      RSS {same:+7.2f} MiB")
    print(f"{label}: {n} calls under invented names RSS {invented:+7.2f} MiB")
    print(
        f"{label}: invented names cost {extra:+7.2f} MiB more (target <= {TARGET_EXTRA_MB:g})"
        + ("" if ok else "  MISSED")
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--names", type=int, default=10_000, help="invented names (and calls per phase)")
    parser.add_argument("--only", choices=("registry", "mqtt"), help="run one of the two measurements")
    args = parser.parse_args()
    good = True
    if args.only in (None, "registry"):
        same, invented = asyncio.run(measure_registry(args.names))
        good &= report("registry", args.names, same, invented)
    if args.only in (None, "mqtt"):
        same, invented = asyncio.run(measure_mqtt(args.names))
        good &= report("mqtt    ", args.names, same, invented)
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
