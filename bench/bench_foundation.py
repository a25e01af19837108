"""Foundation benchmarks: registry dispatch overhead, CLI start-up time, import memory.

Each figure is printed beside a baseline measured in the same run:
  * a no-op tool through Registry.execute vs awaiting the tool's execute directly, returning "ok" and a
    small sensor reading (target: <= 30 µs of overhead, median; a secret is configured, so scrubbing counts);
  * `edgeclaw --version` wall time vs `python -c pass` (target: <= 80 ms);
  * peak RSS after `import edgeclaw` (and after building the whole runtime) vs `python -c pass`.

Run: python bench/bench_foundation.py [--calls N] [--runs N]
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

DISPATCH_TARGET_US = 30.0
VERSION_TARGET_MS = 80.0


# A small realistic result: what a sensor read returns. Scrubbing it is part of the overhead measured.
SMALL_RESULT = '{"temperature_c": 21.5, "humidity": 40.2, "status": "ok", "sensor": "bme280 at 0x76"}'


def bench_dispatch(calls: int, result: str = "ok") -> tuple[float, float]:
    from edgeclaw.tools.base import Tool, ToolContext, ToolResult
    from edgeclaw.tools.policy import PolicyEngine, PolicyRules
    from edgeclaw.tools.ratelimit import RateLimiter
    from edgeclaw.tools.registry import Registry
    from edgeclaw.tools.scrub import Scrubber

    class Noop(Tool):
        name = "noop"
        group = "messaging"
        description = "Does nothing."
        parameters = {
            "type": "object",
            "properties": {"text": {"type": "string"}, "n": {"type": "integer", "minimum": 0}},
            "required": ["text"],
            "additionalProperties": False,
        }

        async def execute(self, args, ctx):
            return ToolResult(for_llm=result)

    scrubber = Scrubber()
    scrubber.add_secret("a-configured-api-key-1234")
    # A realistic policy (a profile, a deny list) and an unlimited rate so the loop is not cut short.
    registry = Registry(PolicyEngine(PolicyRules(profile="full", deny=("exec",))), scrubber, RateLimiter(0))
    tool = Noop()
    registry.register(tool)
    ctx = ToolContext(session_key="bench")
    args = {"text": "hello", "n": 3}

    async def direct() -> list[float]:
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await tool.execute(args, ctx)
            samples.append(time.perf_counter() - t0)
        return samples

    async def through_registry() -> list[float]:
        samples = []
        for _ in range(calls):
            t0 = time.perf_counter()
            await registry.execute("noop", args, ctx)
            samples.append(time.perf_counter() - t0)
        return samples

    async def both() -> tuple[list[float], list[float]]:
        await through_registry()  # warm caches (policy, definitions) before measuring
        return await direct(), await through_registry()

    d, r = asyncio.run(both())
    return statistics.median(d) * 1e6, statistics.median(r) * 1e6


def _wall_ms(cmd: list[str], runs: int, env: dict[str, str]) -> float:
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
        samples.append((time.perf_counter() - t0) * 1000)
    return statistics.median(samples)


def _rss_kib(code: str, env: dict[str, str]) -> int:
    # VmHWM, not getrusage's ru_maxrss: Linux carries ru_maxrss across exec from the forking parent.
    probe = f"{code}\nprint([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:')][0])"
    out = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True, env=env)
    return int(out.stdout.split()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--runs", type=int, default=20)
    opts = parser.parse_args()
    missed = []

    for label, result in (("dispatch", "ok"), ("dispatch, small result", SMALL_RESULT)):
        direct_us, registry_us = bench_dispatch(opts.calls, result)
        overhead = registry_us - direct_us
        print(
            f"{label}: direct {direct_us:.2f} µs, registry {registry_us:.2f} µs, overhead {overhead:.2f} µs "
            f"(target <= {DISPATCH_TARGET_US:.0f} µs)"
        )
        if overhead > DISPATCH_TARGET_US:
            missed.append(f"{label} overhead")

    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "EDGECLAW_STATE_DIR": tmp, "EDGECLAW_CONFIG": str(Path(tmp) / "none.toml")}
        script = shutil.which("edgeclaw", path=str(Path(sys.executable).parent)) or shutil.which("edgeclaw")
        version_cmd = [script, "--version"] if script else [sys.executable, "-m", "edgeclaw", "--version"]
        baseline_ms = _wall_ms([sys.executable, "-c", "pass"], opts.runs, env)
        version_ms = _wall_ms(version_cmd, opts.runs, env)
        shown = " ".join([Path(version_cmd[0]).name, *version_cmd[1:]])
        print(
            f"start-up: `python -c pass` {baseline_ms:.1f} ms, `{shown}` {version_ms:.1f} ms "
            f"(target <= {VERSION_TARGET_MS:.0f} ms)"
        )
        if version_ms > VERSION_TARGET_MS:
            missed.append("--version time")

        base_rss = _rss_kib("pass", env)
        import_rss = _rss_kib("import edgeclaw", env)
        runtime_rss = _rss_kib(
            "from edgeclaw.config.loader import load_config\n"
            "from edgeclaw.daemon.runtime import build_runtime\n"
            "build_runtime(load_config(None, environ={}), board='sim')",
            env,
        )
        print(
            f"memory: `python -c pass` {base_rss / 1024:.1f} MiB, after `import edgeclaw` "
            f"{import_rss / 1024:.1f} MiB (+{(import_rss - base_rss) / 1024:.2f}), with the runtime built "
            f"{runtime_rss / 1024:.1f} MiB (+{(runtime_rss - base_rss) / 1024:.2f})"
        )

    if missed:
        print("missed: " + ", ".join(missed))
        return 1
    print("all targets met")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
