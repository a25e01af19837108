"""The ui tools (group `ui`): the board's own screen, drawn on (`canvas`) and read back (`screenshot`),
and a headless web browser (`browser`, whose backend loads on its first call).

Both reach the displays the board profile declares (`[[displays]]`) through the board's backends
(`BoardBackends.display`), which drive them over the granted I2C, SPI and GPIO or the framebuffer
device. Registered as a deferred family: Pillow and the display drivers load on first use.
"""

from __future__ import annotations

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile
from edgeclaw.config.schema import Config
from edgeclaw.tools.base import Tool
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.ui.browser import BrowserTool, browser_policy
from edgeclaw.tools.ui.canvas import CanvasTool
from edgeclaw.tools.ui.screenshot import ScreenshotTool

__all__ = ["BrowserTool", "CanvasTool", "ScreenshotTool", "ui_tools"]


def ui_tools(profile: BoardProfile, backends: BoardBackends, ws: Workspace, config: Config) -> list[Tool]:
    """canvas, screenshot and browser. Registered on every board: on one that declares no display
    canvas and screenshot refuse, naming the profile, which tells a model more than a missing tool
    does; browser refuses, naming the package, where chromium is not installed."""
    from edgeclaw.config.paths import state_dir
    from edgeclaw.tools.ui.browser_sandbox import browser_sandbox

    confinement = browser_sandbox(config, state_dir(config.state_dir), ws.root)
    browser = BrowserTool(config.tools.browser, browser_policy(config.tools.web), ws, confinement)
    return [CanvasTool(profile, backends, ws), ScreenshotTool(profile, backends, ws, browser), browser]
