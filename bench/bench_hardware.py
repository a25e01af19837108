"""Hardware benchmark: an I2C register read through the registry vs the raw backend call (same sim bus, run).

  * raw: `await I2CBus.read_byte_data(0x48, 0)` — the backend call the `i2c`
    tool makes (bus lock, deadline, the TMP102 model);
  * registry: `Registry.execute("i2c", {"action": "read_byte", ...})` — schema,
    policy, rate limit, the tool's profile check, the same backend call,
    scrub, cap, audit;
  * also shown, for scale: the device model's synchronous call alone.

Target: registry median <= 2 x raw median + 30 µs. Exit status 1 when missed.
Run: python bench/bench_hardware.py [--calls N] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_FACTOR = 2.0
TARGET_SLACK_US = 30.0


async def measure(calls: int, runs: int) -> tuple[float, float, float]:
    from edgeclaw.config.schema import Config
    from edgeclaw.config.typed import build_dataclass
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.tools.base import ToolContext

    with tempfile.TemporaryDirectory() as tmp:
        config, errors = build_dataclass(
            Config, {"board": "sim", "state_dir": tmp, "tools": {"rate_limit": 0}}, "bench.toml"
        )
        assert config is not None, errors
        runtime = build_runtime(config, environ={})
        try:
            registry = runtime.registry
            backends = registry.get("i2c").backends  # type: ignore[union-attr]
            bus = backends.i2c(1)  # the same bus object the tool uses
            driver = bus.driver
            ctx = ToolContext(session_key="bench")
            args = {"action": "read_byte", "bus": 1, "address": 0x48, "register": 0}
            outcome = await registry.execute("i2c", args, ctx)
            assert outcome.ok, outcome.error

            raw_runs, registry_runs, model_runs = [], [], []
            for _ in range(runs):
                t0 = time.perf_counter()
                for _ in range(calls):
                    await bus.read_byte_data(0x48, 0)
                raw_runs.append((time.perf_counter() - t0) / calls * 1e6)

                t0 = time.perf_counter()
                for _ in range(calls):
                    await registry.execute("i2c", args, ctx)
                registry_runs.append((time.perf_counter() - t0) / calls * 1e6)

                t0 = time.perf_counter()
                for _ in range(calls):
                    driver.read_byte_data(0x48, 0)
                model_runs.append((time.perf_counter() - t0) / calls * 1e6)
        finally:
            await runtime.aclose()
    return statistics.median(raw_runs), statistics.median(registry_runs), statistics.median(model_runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls per run")
    parser.add_argument("--runs", type=int, default=7, help="runs (the median is reported)")
    opts = parser.parse_args()
    raw, through_registry, model = asyncio.run(measure(opts.calls, opts.runs))
    target = TARGET_FACTOR * raw + TARGET_SLACK_US
    ok = through_registry <= target
    print(f"i2c read_byte, sim TMP102, {opts.runs} runs x {opts.calls} calls (median per call):")
    print(f"  device model alone (sync)        {model:8.1f} µs")
    print(f"  raw backend call (I2CBus)        {raw:8.1f} µs")
    overhead = through_registry - raw
    print(f"  through Registry.execute         {through_registry:8.1f} µs   (overhead {overhead:.1f} µs)")
    print(f"  target <= 2 x raw + 30 µs        {target:8.1f} µs   {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
