"""The ui tools (group `ui`): the board's own screen, drawn on (`canvas`) and read back (`screenshot`).

Both reach the displays the board profile declares (`[[displays]]`) through the board's backends
(`BoardBackends.display`), which drive them over the granted I2C, SPI and GPIO or the framebuffer
device. Registered as a deferred family: Pillow and the display drivers load on first use.
"""

from __future__ import annotations

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile
from edgeclaw.tools.base import Tool
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.ui.canvas import CanvasTool
from edgeclaw.tools.ui.screenshot import ScreenshotTool

__all__ = ["CanvasTool", "ScreenshotTool", "ui_tools"]


def ui_tools(profile: BoardProfile, backends: BoardBackends, ws: Workspace) -> list[Tool]:
    """canvas and screenshot. Registered on every board: on one that declares no display they refuse,
    naming the profile, which tells a model more than a missing tool does."""
    return [CanvasTool(profile, backends, ws), ScreenshotTool(profile, backends, ws)]
