"""`camera`: a still from the board's camera, saved to the workspace (group hardware: the board
profile's `[camera]` grants it and bounds its resolution)."""

from __future__ import annotations

import asyncio
import shutil
from typing import Any

from edgeclaw.backends.media.camera import Camera
from edgeclaw.backends.media.image_info import read_image_info
from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.media.files import output_path, save, size_text

_SUFFIX = {"png": "png", "jpeg": "jpg"}


class CameraTool(Tool):
    name = "camera"
    group = "hardware"
    description = (
        "Take a still picture with the board's camera; it is saved to the workspace (path in the "
        "answer). Follow with image describe to know what it shows."
    )

    def __init__(
        self, camera: Camera | None, ws: Workspace, *, max_width: int, max_height: int, board: str
    ) -> None:
        self.camera = camera
        self.ws = ws
        self.max_width = max_width
        self.max_height = max_height
        self.board = board
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "width": {
                    "type": "integer",
                    "minimum": 16,
                    "maximum": max(max_width, 16),
                    "description": f"Pixels (default and most: {max_width}).",
                },
                "height": {
                    "type": "integer",
                    "minimum": 16,
                    "maximum": max(max_height, 16),
                    "description": f"Pixels (default and most: {max_height}).",
                },
                "format": {
                    "type": "string",
                    "enum": ["png", "jpeg"],
                    "description": "Default png (sim), jpeg.",
                },
                "path": {"type": "string", "maxLength": 512, "description": "Workspace path to write."},
            },
            "additionalProperties": False,
        }

    def _size(self, args: Args) -> tuple[int, int]:
        width = int(args.get("width") or self.max_width)
        height = int(args.get("height") or self.max_height)
        if width > self.max_width or height > self.max_height:
            raise ToolRefused(
                f"refused: {width}x{height} is over the board profile's camera bound "
                f"{self.max_width}x{self.max_height}"
            )
        return width, height

    def _format(self, args: Args) -> str:
        assert self.camera is not None
        return args.get("format") or ("png" if self.camera.kind == "sim" else "jpeg")

    async def check(self, args: Args, ctx: ToolContext) -> None:
        if self.camera is None:
            raise ToolRefused(f"refused: board profile {self.board!r} grants no camera ([camera])")
        self._size(args)
        output_path(self.ws, args.get("path"), "photo", _SUFFIX[self._format(args)])

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        assert self.camera is not None  # check() refused otherwise
        width, height = self._size(args)
        fmt = self._format(args)
        try:
            still = await self.camera.capture(width, height, fmt)
        except BackendError as e:
            raise ToolError(f"camera: {e}") from None
        try:
            data = await asyncio.to_thread(still.path.read_bytes)
            with still.path.open("rb") as f:
                info = read_image_info(f)
        except (OSError, ValueError) as e:
            raise ToolError(f"camera: the picture {still.source} wrote cannot be read: {e}") from None
        finally:
            shutil.rmtree(still.path.parent, ignore_errors=True)
        path, shown = output_path(self.ws, args.get("path"), "photo", _SUFFIX[fmt])
        await asyncio.to_thread(save, self.ws, path, data, shown)
        return ToolResult(
            for_llm=f"Took a {info.width}x{info.height} {info.format.upper()} picture: {shown} "
            f"({size_text(len(data))}, by {still.source})",
            data={
                "path": shown,
                "media_type": info.media_type,
                "width": info.width,
                "height": info.height,
                "bytes": len(data),
                "source": still.source,
            },
        )
