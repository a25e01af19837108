"""`canvas`: the board's own small screen as the agent's canvas (group ui).

Each call draws one thing on a display's frame (text, a line, a rectangle, a bitmap from the
workspace, a chart) or clears it; `present` (an action, or `"present": true` on any draw) pushes the
frame to the panel. Every call also writes the frame to `canvas/<display>.png` in the workspace,
atomically, so a person or the model can see what the screen shows; the answer names it. Only the
displays the board profile declares (`[[displays]]`) can be drawn on; one frame per display, shared
by every session (there is one screen), each drawn under its own lock.
"""

from __future__ import annotations

import asyncio
from typing import Any

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile, DisplayGrant
from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.file_io import write_atomically
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.ui.displays import display_grant, displays_text
from edgeclaw.tools.ui.drawing import DrawError, Frame

CANVAS_DIR = "canvas"
TEXT_MAX = 1000
VALUES_MAX = 512
ACTIONS = ("text", "line", "rect", "bitmap", "chart", "clear", "present")
_COORD = {"type": "integer", "minimum": 0, "maximum": 8191}


class CanvasTool(Tool):
    name = "canvas"
    group = "ui"
    description = (
        "Draw on the board's own screen: text (wrapped), line, rect, bitmap (a workspace picture), chart "
        "(numbers as a line or bars), clear; present pushes the frame to the screen. Each call also "
        "writes canvas/<display>.png."
    )

    def __init__(self, profile: BoardProfile, backends: BoardBackends, ws: Workspace) -> None:
        self.profile = profile
        self.backends = backends
        self.ws = ws
        self._frames: dict[str, Frame] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        drawable = [d.name for d in profile.displays if d.access == "rw"]
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "action": {"type": "string", "enum": list(ACTIONS)},
                "display": {
                    "type": "string",
                    "maxLength": 64,
                    "description": f"{displays_text(profile)}; default {drawable[0]!r}."
                    if drawable
                    else "A declared display.",
                },
                "x": _COORD,
                "y": _COORD,
                "x2": _COORD,
                "y2": _COORD,
                "width": {**_COORD, "minimum": 1},
                "height": {**_COORD, "minimum": 1},
                "text": {"type": "string", "maxLength": TEXT_MAX},
                "color": {"type": "string", "maxLength": 32, "description": "white/black, name or #rrggbb."},
                "fill": {"type": "boolean"},
                "path": {"type": "string", "maxLength": 512, "description": "bitmap: a workspace picture."},
                "values": {"type": "array", "items": {"type": "number"}, "maxItems": VALUES_MAX},
                "style": {"type": "string", "enum": ["line", "bar"]},
                "present": {"type": "boolean", "description": "Also push the frame to the screen."},
            },
            "required": ["action"],
            "additionalProperties": False,
        }

    def _grant(self, args: Args) -> DisplayGrant:
        grant = display_grant(self.profile, args.get("display"), drawing=True)
        if grant.access != "rw":
            raise ToolRefused(
                f"refused: display {grant.name!r} is granted read-only by board profile {self.profile.name!r}"
            )
        return grant

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self._grant(args)
        if args.get("action") == "bitmap":
            if not args.get("path"):
                raise ToolError("bitmap needs path: a picture in the workspace")
            self.ws.resolve(str(args["path"]), must_exist=True)

    def _frame(self, grant: DisplayGrant) -> Frame:
        frame = self._frames.get(grant.name)
        if frame is None:
            mode = "1" if grant.kind in ("ssd1306", "sh1106") else "RGB"
            frame = self._frames[grant.name] = Frame(grant.width, grant.height, mode)
        return frame

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        grant = self._grant(args)
        action = args["action"]
        lock = self._locks.setdefault(grant.name, asyncio.Lock())
        async with lock:
            try:
                frame = self._frame(grant)
                done = await asyncio.to_thread(self._draw, frame, action, args)
            except DrawError as e:
                raise ToolError(f"canvas {action} on {grant.name!r}: {e}") from None
            except BackendError as e:  # Pillow missing
                raise ToolError(f"canvas: {e}") from None
            png = await asyncio.to_thread(self._save, grant, frame)
            presented = action == "present" or bool(args.get("present"))
            if presented:
                try:
                    await self.backends.display(grant.name).present(frame.image)
                except BackendError as e:
                    raise ToolError(f"canvas: display {grant.name!r}: {e}") from None
        where = f"{grant.kind} {grant.width}x{grant.height}"
        shown = "shown on the screen" if presented else "not on the screen until present"
        return ToolResult(
            for_llm=f"{done} on {grant.name!r} ({where}); the frame is {png} ({shown}).",
            data={"display": grant.name, "png": png, "presented": presented, "action": action},
        )

    def _draw(self, frame: Frame, action: str, args: Args) -> str:
        x, y = int(args.get("x", 0)), int(args.get("y", 0))
        width, height = args.get("width"), args.get("height")
        color = args.get("color")
        if action == "text":
            text = args.get("text")
            if not text:
                raise DrawError("text needs text")
            lines = frame.text(x, y, str(text), color, width)
            return f"Wrote {len(text)} characters in {lines} line{'s' if lines != 1 else ''}"
        if action == "line":
            end = (int(args.get("x2", x)), int(args.get("y2", y)))
            frame.line((x, y), end, color)
            return f"Drew a line from ({x}, {y}) to {end}"
        if action == "rect":
            frame.rect(x, y, width, height, color, bool(args.get("fill")))
            return f"Drew a {'filled' if args.get('fill') else 'outlined'} rectangle at ({x}, {y})"
        if action == "bitmap":
            path = self.ws.resolve(str(args.get("path") or ""), must_exist=True)
            shown = self.ws.display(path)
            w, h = frame.bitmap(path, shown, x, y, width, height)
            dithered = ", dithered to 1 bit" if frame.mode == "1" else ""
            return f"Drew {shown} at ({x}, {y}), {w}x{h}{dithered}"
        if action == "chart":
            values = [float(v) for v in args.get("values") or []]
            low, high = frame.chart(values, args.get("style") or "line", (x, y, width, height), color)
            return f"Charted {len(values)} values ({args.get('style') or 'line'}, {low:g} to {high:g})"
        if action == "clear":
            frame.clear(color)
            return "Cleared the frame"
        return "Presented the frame"

    def _save(self, grant: DisplayGrant, frame: Frame) -> str:
        path = self.ws.resolve(f"{CANVAS_DIR}/{grant.name}.png", for_write=True)
        shown = self.ws.display(path)
        write_atomically(self.ws, path, frame.png(), shown)
        return shown
