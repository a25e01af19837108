"""The hardware tools (group `hardware`), one module per tool, all bounded by the board profile.

`hardware_tools()` builds them for the runtime; they share one `BoardBackends`,
which opens buses, pins, regions, the probe and the bridge on first use and
releases them on shutdown.
"""

from __future__ import annotations

from collections.abc import Sequence

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.tools.base import Tool
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.hardware.esp32 import ESP32Tool
from edgeclaw.tools.hardware.gpio import GPIOTool
from edgeclaw.tools.hardware.i2c import I2CTool
from edgeclaw.tools.hardware.info import HardwareInfoTool
from edgeclaw.tools.hardware.mmio import HardwareMemoryTool
from edgeclaw.tools.hardware.probe import ProbeTool
from edgeclaw.tools.hardware.sensor import SensorTool
from edgeclaw.tools.hardware.serial import SerialTool
from edgeclaw.tools.hardware.spi import SPITool

__all__ = [
    "ESP32Tool",
    "GPIOTool",
    "HardwareInfoTool",
    "HardwareMemoryTool",
    "I2CTool",
    "ProbeTool",
    "SPITool",
    "SensorTool",
    "SerialTool",
    "hardware_tools",
]


def hardware_tools(
    profile: BoardProfile,
    config: HardwareConfig,
    backends: BoardBackends,
    workspace: Workspace | None = None,
    console_ports: Sequence[str] = (),
) -> list[Tool]:
    """Every hardware tool. Tools for things the profile does not grant are still registered: they
    refuse with a message naming the profile, which tells a model more than a missing tool does.
    `console_ports` are the console's devices, which the serial tool never opens."""
    return [
        HardwareInfoTool(profile, config, backends),
        I2CTool(profile, config, backends),
        SPITool(profile, config, backends),
        GPIOTool(profile, config, backends),
        HardwareMemoryTool(profile, config, backends),
        ProbeTool(profile, config, backends, workspace),
        ESP32Tool(profile, config, backends),
        SerialTool(profile, config, backends, console_ports),
        SensorTool(profile, config, backends),
    ]
