"""Sparkplug B benchmark: resident memory of a daemon with the edge node on beside one with it off.

  * A real mosquitto on loopback and two real `edgeclaw run` daemons on the sim board, identical but
    for `[sparkplug] enabled`. Each is measured once it is up (its retained status online; the
    Sparkplug one also after its NBIRTH) and has run for a few seconds: VmRSS and VmHWM from
    /proc/PID/status, in MiB. The difference is what the edge node costs (protobuf, its connection,
    its metrics); the baseline is the daemon without it, measured in the same run.
  * The NBIRTH and an NDATA payload size (bytes).

Run: python bench/bench_sparkplug.py [--settle S]
(2 cores shared with other work make the figures noisy; RSS is steadier than time.)
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fleet_support import FleetDaemon  # noqa: E402
from tests.mqtt_support import Caller, Mosquitto  # noqa: E402


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) of a process in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(rest.split()[0]) / 1024
    return fields["VmRSS"], fields["VmHWM"]


async def measure(workdir: Path, port: int, name: str, sparkplug: bool, settle_s: float) -> dict[str, float]:
    extra = '[sparkplug]\nenabled = true\ngroup_id = "bench"\ndata_interval_s = 1.0\n' if sparkplug else ""
    daemon = FleetDaemon(workdir / name, name, port, extra=extra).start()
    try:
        async with Caller(port, [f"edgeclaw/{name}/status", f"spBv1.0/bench/+/{name}"]) as c:
            await c.wait_for(
                lambda: any(r.json.get("state") == "online" for r in c.on(f"edgeclaw/{name}/status")), 60
            )
            figures: dict[str, float] = {}
            if sparkplug:
                births = await c.answers(f"spBv1.0/bench/NBIRTH/{name}", 1, within=60)
                data = await c.answers(f"spBv1.0/bench/NDATA/{name}", 1, within=60)
                figures["nbirth_bytes"] = len(births[0].payload)
                figures["ndata_bytes"] = len(data[0].payload)
            await asyncio.sleep(settle_s)
            assert daemon.proc is not None
            figures["rss_mib"], figures["hwm_mib"] = memory_mib(daemon.proc.pid)
            return figures
    finally:
        daemon.stop()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--settle", type=float, default=5.0, help="seconds each daemon runs before measuring")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="edgeclaw-bench-spb-") as tmp:
        broker = Mosquitto(Path(tmp) / "broker").start()
        try:
            off = await measure(Path(tmp), broker.port, "spb-off", False, args.settle)
            on = await measure(Path(tmp), broker.port, "spb-on", True, args.settle)
        finally:
            broker.stop()
    print(f"daemon RSS, Sparkplug off: {off['rss_mib']:.1f} MiB (peak {off['hwm_mib']:.1f} MiB)  [baseline]")
    print(f"daemon RSS, Sparkplug on:  {on['rss_mib']:.1f} MiB (peak {on['hwm_mib']:.1f} MiB)")
    rss, peak = on["rss_mib"] - off["rss_mib"], on["hwm_mib"] - off["hwm_mib"]
    print(f"edge node costs: {rss:+.1f} MiB RSS, {peak:+.1f} MiB peak")
    print(f"NBIRTH {on['nbirth_bytes']:.0f} bytes, NDATA (every metric) {on['ndata_bytes']:.0f} bytes")


if __name__ == "__main__":
    asyncio.run(main())
