"""Sensor benchmark: every sim device read through the sensor registry vs the same bus transfers made raw.

  * registry: `Sensors.read_all()` — each device's driver (commands, CRC checks,
    compensation, units), the per-bus grouping, the readings with their raw bytes;
  * raw: exactly the bus transfers those drivers made, recorded once and replayed on
    the same backends — each through `BusGate.run` (lock and deadline) as the `i2c` /
    `spi` tools' backend calls are, the SPI transfers through `SPIDevice.transfer`, the
    1-Wire files through `OneWireBus.read`.

Both run in the same process on the same sim parts. The parts' conversion times are not
what is measured: the sim parts are given a clock that has always moved on, and the
drivers' waits (`I2CPartTransaction.wait`) yield to the loop once, as the raw replay does
at the same points.

Target: registry median <= 1.5 x raw median + 50 µs per device. Exit status 1 when missed.
Run: python bench/bench_sensors.py [--calls N] [--runs N]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TARGET_FACTOR = 1.5
TARGET_SLACK_US_PER_DEVICE = 50.0
I2C_OPS = ("read_byte_data", "read_word_data", "read_block", "read_bytes", "write_block", "write_byte_data")


def _op(driver: Any, name: str, *args: Any) -> Any:
    return getattr(driver, name)(*args)


async def measure(calls: int, runs: int) -> tuple[float, float, int]:
    from edgeclaw.backends.hub import BoardBackends
    from edgeclaw.backends.sensors import base
    from edgeclaw.backends.sensors.base import SensorError
    from edgeclaw.board import load_profile
    from edgeclaw.config.schema import HardwareConfig

    async def no_wait(self: Any, seconds: float) -> None:
        await asyncio.sleep(0)

    base.I2CPartTransaction.wait = no_wait  # type: ignore[method-assign]

    with tempfile.TemporaryDirectory() as tmp:
        profile = load_profile("sim")
        backends = BoardBackends(profile, HardwareConfig(), Path(tmp))
        try:
            later = itertools.count(0.0, 10.0)  # every measurement is over by the next look at the clock
            for part in backends.sim.models:
                if hasattr(part, "_clock"):
                    part._clock = lambda: next(later)
            sensors = backends.sensors()
            warm = await sensors.read_all()  # drivers built, trimming read, parts started
            failed = [r for r in warm if isinstance(r, SensorError)]
            assert not failed, failed

            # Record the transfers one read of every device makes.
            ops: list[tuple[str, tuple[Any, ...]]] = []
            i2c = backends.i2c(1)
            sim_bus = i2c.driver
            spi = backends.spi(0, 0)
            spi_part = backends.sim.spi_device(0, 0)
            onewire = sensors.onewire_bus()

            def recording(kind: str, target: Any, name: str) -> None:
                original = getattr(target, name)

                def record(*args: Any) -> Any:
                    ops.append((kind if kind != "i2c" else name, args))
                    return original(*args)

                setattr(target, name, record)

            for name in I2C_OPS:
                recording("i2c", sim_bus, name)
            recording("spi", spi_part, "transfer")
            original_w1 = onewire.read

            async def w1_read(w1_id: str, name: str = "w1_slave") -> bytes:
                ops.append(("w1", (w1_id, name)))
                return await original_w1(w1_id, name)

            onewire.read = w1_read  # type: ignore[method-assign]
            original_wait = base.I2CPartTransaction.wait

            async def wait_recorded(self: Any, seconds: float) -> None:
                ops.append(("wait", ()))
                await asyncio.sleep(0)

            base.I2CPartTransaction.wait = wait_recorded  # type: ignore[method-assign]
            await sensors.read_all()
            base.I2CPartTransaction.wait = original_wait  # type: ignore[method-assign]
            for name in (*I2C_OPS,):
                delattr(sim_bus, name)
            delattr(spi_part, "transfer")
            del onewire.read

            gate = i2c._gate
            spi_grant = profile.spi_device(0, 0)
            assert spi_grant is not None

            async def raw_once() -> None:
                for kind, args in ops:
                    if kind == "wait":
                        await asyncio.sleep(0)
                    elif kind == "spi":
                        await spi.transfer(*args)
                    elif kind == "w1":
                        await onewire.read(*args)
                    else:
                        await gate.run(_op, kind, *args)

            registry_runs, raw_runs = [], []
            for _ in range(runs):
                t0 = time.perf_counter()
                for _ in range(calls):
                    await sensors.read_all()
                registry_runs.append((time.perf_counter() - t0) / calls * 1e6)
                t0 = time.perf_counter()
                for _ in range(calls):
                    await raw_once()
                raw_runs.append((time.perf_counter() - t0) / calls * 1e6)
            devices = len(profile.devices)
        finally:
            await backends.aclose()
    return statistics.median(raw_runs), statistics.median(registry_runs), devices


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=50, help="reads of every device per run")
    parser.add_argument("--runs", type=int, default=7, help="runs (the median is reported)")
    opts = parser.parse_args()
    raw, registry, devices = asyncio.run(measure(opts.calls, opts.runs))
    target = TARGET_FACTOR * raw + TARGET_SLACK_US_PER_DEVICE * devices
    ok = registry <= target
    print(
        f"sensor read of all {devices} sim devices, {opts.runs} runs x {opts.calls} reads (median per read):"
    )
    print(f"  the same bus transfers, raw      {raw:9.1f} µs")
    overhead = (registry - raw) / devices
    print(f"  through the sensor registry      {registry:9.1f} µs   (overhead {overhead:.1f} µs per device)")
    print(f"  target <= 1.5 x raw + 50 µs x {devices}  {target:9.1f} µs   {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
