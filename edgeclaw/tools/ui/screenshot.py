"""`screenshot`: what the board's display shows, read from its framebuffer, or a tab of the caller's own
browser (`source = "browser"`), as a PNG in the workspace (group ui).

Only a framebuffer the board profile declares (`[[displays]]`, `kind = "framebuffer"`) is read: its
pixels are what the screen shows, whoever drew them (the console, a kiosk program, `canvas`). An
OLED or TFT cannot be read back over its bus; `canvas` writes their frames to `canvas/NAME.png`.
DRM/KMS planes and X11/Wayland sessions are not read (docs/display.md says why).
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile
from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.media.files import output_path, save, size_text
from edgeclaw.tools.ui.displays import display_grant

if TYPE_CHECKING:
    from edgeclaw.tools.ui.browser import BrowserTool

SCREENSHOT_DIR = "screenshots"
SOURCES = ("display", "browser")


class ScreenshotTool(Tool):
    name = "screenshot"
    group = "ui"
    description = (
        "Save what the board's display shows (its framebuffer), or a tab of your browser (source "
        "browser), as a PNG in the workspace (path in the answer). Follow with image describe to know "
        "what it shows."
    )

    def __init__(
        self,
        profile: BoardProfile,
        backends: BoardBackends,
        ws: Workspace,
        browser: BrowserTool | None = None,
    ) -> None:
        self.profile = profile
        self.backends = backends
        self.ws = ws
        self.browser = browser
        framebuffers = [d.name for d in profile.displays if d.kind == "framebuffer"]
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "source": {
                    "type": "string",
                    "enum": list(SOURCES),
                    "description": "display (default) or browser: a tab of the caller's own browser.",
                },
                "tab": {
                    "type": "string",
                    "maxLength": 16,
                    "description": "browser: tab id (default newest).",
                },
                "display": {
                    "type": "string",
                    "maxLength": 64,
                    "description": f"Default {framebuffers[0]!r}."
                    if framebuffers
                    else "A declared framebuffer.",
                },
                "path": {
                    "type": "string",
                    "maxLength": 512,
                    "description": "Workspace path (.png) to write.",
                },
            },
            "additionalProperties": False,
        }

    def _grant_and_path(self, args: Args) -> tuple[Any, Any, str]:
        grant = display_grant(self.profile, args.get("display"), drawing=False)
        if grant.kind != "framebuffer":
            raise ToolRefused(
                f"refused: display {grant.name!r} is an {grant.kind}, whose memory cannot be read back; "
                f"canvas keeps its frame in canvas/{grant.name}.png"
            )
        asked = args.get("path") or f"{SCREENSHOT_DIR}/{grant.name}-{time.strftime('%Y%m%d-%H%M%S')}.png"
        path, shown = output_path(self.ws, asked, "screenshot", "png")
        return grant, path, shown

    def _from_browser(self, args: Args) -> bool:
        source = args.get("source") or "display"
        if source not in SOURCES:
            raise ToolError(f"screenshot: unknown source {source!r} (one of {', '.join(SOURCES)})")
        if source == "browser":
            if args.get("display"):
                raise ToolError("screenshot: display is for source display; a browser tab is named by tab")
            if self.browser is None:
                raise ToolRefused("refused: there is no browser tool here")
            if args.get("path"):
                output_path(self.ws, args["path"], "screenshot", "png")  # checked before the browser is asked
            return True
        if args.get("tab"):
            raise ToolError("screenshot: tab is for source browser")
        return False

    async def check(self, args: Args, ctx: ToolContext) -> None:
        if not self._from_browser(args):
            self._grant_and_path(args)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        if self._from_browser(args):
            assert self.browser is not None
            return await self.browser.capture(args, ctx)
        grant, path, shown = self._grant_and_path(args)
        try:
            image = await self.backends.display(grant.name).capture()
        except BackendError as e:
            raise ToolError(f"screenshot: {e}") from None

        def encode() -> bytes:
            out = io.BytesIO()
            image.save(out, "PNG")
            return out.getvalue()

        data = await asyncio.to_thread(encode)
        await asyncio.to_thread(save, self.ws, path, data, shown)
        return ToolResult(
            for_llm=f"Saved what {grant.name!r} shows ({grant.width}x{grant.height}, {grant.pixel_format} "
            f"at {grant.device}) as {shown} ({size_text(len(data))})",
            data={
                "path": shown,
                "display": grant.name,
                "media_type": "image/png",
                "width": grant.width,
                "height": grant.height,
                "bytes": len(data),
            },
        )
