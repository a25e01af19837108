"""`hardware_info`: the board, its SoC and health, what the profile grants, and which backends are live."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Any, ClassVar

from edgeclaw.board import describe_grants
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import HardwareTool, result
from edgeclaw.wording import plural


def _read_text(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def cpu_temperature_c(path: str) -> float | None:
    """The SoC temperature from the thermal zone (millidegrees), if the machine has one."""
    text = _read_text(path)
    try:
        return None if text is None else int(text) / 1000
    except ValueError:
        return None


def memory_kib() -> dict[str, int]:
    out: dict[str, int] = {}
    text = _read_text("/proc/meminfo") or ""
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            out[key] = int(rest.split()[0])
    return out


def uptime_s() -> float | None:
    text = _read_text("/proc/uptime")
    return float(text.split()[0]) if text else None


def _qemu_available() -> bool:
    from edgeclaw.backends.qemu import qemu_available  # ctypes and the launcher only when asked

    return qemu_available()


class HardwareInfoTool(HardwareTool):
    name = "hardware_info"
    observes_only = True
    description = (
        "The board: name, SoC, CPU temperature, memory, uptime, what the board profile grants (buses, "
        "pins, memory regions, probe, ESP32 bridge) and which hardware backends are open."
    )
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        spec = self.profile._spec
        temperature = cpu_temperature_c(spec.board.cpu_temp_path)
        memory = memory_kib()
        uptime = uptime_s()
        libraries = {
            name: importlib.util.find_spec(module) is not None
            for name, module in (
                ("smbus2", "smbus2"),
                ("spidev", "spidev"),
                ("gpiozero", "gpiozero"),
                ("pyserial", "serial"),
                ("pyocd", "pyocd"),
            )
        }
        payload = {
            "board": self.profile.name,
            "description": self.profile.description,
            "soc": self.profile.soc,
            "simulated": self.profile.simulated,
            "cpu_temperature_c": temperature,
            "memory_total_kib": memory.get("MemTotal"),
            "memory_available_kib": memory.get("MemAvailable"),
            "uptime_s": uptime,
            "cpus": os.cpu_count(),
            "grants": describe_grants(self.profile),
            "live_backends": self.backends.live(),
            "libraries": libraries,
            "qemu_available": _qemu_available() if spec.probe and spec.probe.gdb_address == "qemu" else None,
        }
        lines = [
            f"board {self.profile.name}: {self.profile.description}",
            f"SoC {self.profile.soc}; {plural(os.cpu_count() or 1, 'CPU')}"
            + (f"; CPU {temperature:.1f} °C" if temperature is not None else "; no CPU temperature sensor"),
        ]
        if memory:
            free, total = memory.get("MemAvailable", 0) // 1024, memory.get("MemTotal", 0) // 1024
            lines.append(f"memory {free} MiB free of {total} MiB")
        if uptime is not None:
            lines.append(f"up {uptime / 3600:.1f} h")
        lines.append("grants:")
        lines += [f"  {g}" for g in payload["grants"]]
        lines.append(
            "live backends: " + (", ".join(payload["live_backends"]) or "none yet (opened on first use)")
        )
        lines.append("libraries: " + ", ".join(f"{k} {'yes' if v else 'no'}" for k, v in libraries.items()))
        return result(payload, "\n".join(lines))
