"""Board health and tool statistics, as one flat JSON object for `{prefix}/{dev}/telemetry`.

Flat on purpose: Home Assistant's sensors pick values with templates such as
``{{ value_json.cpu_temp_c }}``, and a dashboard can plot any top-level key.
Values that this machine cannot tell (no thermal zone on a laptop VM) are
null rather than missing, so the shape is the same on every board.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import field
from pathlib import Path
from typing import Any

from edgeclaw.records import dataclass
from edgeclaw.tools.audit import ToolStats

# Thermal zone types that are the CPU/SoC on common boards (Pi: cpu-thermal; x86: x86_pkg_temp).
_CPU_ZONE_HINTS = ("cpu", "soc", "x86_pkg_temp", "coretemp", "package")


@dataclass(frozen=True)
class HealthSources:
    """Where health is read from; tests point these at fake trees."""

    thermal: Path = Path("/sys/class/thermal")
    proc: Path = Path("/proc")
    disk: Path = Path("/")


def cpu_temperature_c(thermal: Path) -> float | None:
    """The CPU's thermal zone in °C (the first zone when none is named like a CPU); None when absent."""
    try:
        zones = sorted(p for p in thermal.glob("thermal_zone*") if p.is_dir())
    except OSError:
        return None
    readings: list[tuple[str, float]] = []
    for zone in zones:
        try:
            kind = (zone / "type").read_text().strip().lower()
            milli = int((zone / "temp").read_text().strip())
        except (OSError, ValueError):
            continue
        readings.append((kind, milli / 1000.0))
    for kind, celsius in readings:
        if any(hint in kind for hint in _CPU_ZONE_HINTS):
            return round(celsius, 1)
    return round(readings[0][1], 1) if readings else None


def load_average(proc: Path) -> tuple[float, float, float] | None:
    try:
        parts = (proc / "loadavg").read_text().split()
        return float(parts[0]), float(parts[1]), float(parts[2])
    except (OSError, ValueError, IndexError):
        return None


def memory_kb(proc: Path) -> tuple[int, int] | None:
    """(total, available) in kB from meminfo."""
    values: dict[str, int] = {}
    try:
        for line in (proc / "meminfo").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("MemTotal", "MemAvailable"):
                values[name] = int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if "MemTotal" not in values or "MemAvailable" not in values:
        return None
    return values["MemTotal"], values["MemAvailable"]


def system_uptime_s(proc: Path) -> float | None:
    try:
        return float((proc / "uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def disk_bytes(path: Path) -> tuple[int, int] | None:
    """(total, free for unprivileged users) of the file system holding `path`."""
    try:
        st = os.statvfs(path)
    except OSError:
        return None
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


def _pct(used: float, total: float) -> float | None:
    return round(100.0 * used / total, 1) if total > 0 else None


@dataclass
class TelemetryCollector:
    board: str
    version: str
    stats: ToolStats
    sources: HealthSources = field(default_factory=HealthSources)
    started: float = field(default_factory=time.monotonic)
    # More figures for each message, asked for each time: name -> a callable giving them (mcp).
    extra_sources: dict[str, Callable[[], Any]] = field(default_factory=dict)

    def snapshot(self, **extra: Any) -> dict[str, Any]:
        """One telemetry message; `extra` adds channel figures (outbox depth, reconnects, ...)."""
        src = self.sources
        load = load_average(src.proc)
        mem = memory_kb(src.proc)
        disk = disk_bytes(src.disk)
        totals = self.stats.totals()
        per_tool = {
            name: {
                "calls": c.calls,
                "errors": c.errors,
                "refused": c.refused,
                "avg_ms": round(c.total_ms / c.calls, 3) if c.calls else 0.0,
            }
            for name, c in sorted(self.stats.tools.items())
        }
        snap: dict[str, Any] = {
            "ts": round(time.time(), 3),
            "board": self.board,
            "version": self.version,
            "uptime_s": round(time.monotonic() - self.started, 1),
            "system_uptime_s": system_uptime_s(src.proc),
            "cpu_temp_c": cpu_temperature_c(src.thermal),
            "load_1m": load[0] if load else None,
            "load_5m": load[1] if load else None,
            "load_15m": load[2] if load else None,
            "mem_total_kb": mem[0] if mem else None,
            "mem_available_kb": mem[1] if mem else None,
            "mem_used_pct": _pct(mem[0] - mem[1], mem[0]) if mem else None,
            "disk_total_bytes": disk[0] if disk else None,
            "disk_free_bytes": disk[1] if disk else None,
            "disk_used_pct": _pct(disk[0] - disk[1], disk[0]) if disk else None,
            "tool_calls": totals["calls"],
            "tool_errors": totals["errors"],
            "tool_refused": totals["refused"],
            "tools": per_tool,
        }
        for name, source in self.extra_sources.items():
            snap[name] = source()
        snap.update(extra)
        return snap
