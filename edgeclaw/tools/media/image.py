"""`image`: what a workspace image is (info), a new image from a prompt (generate), and what a
picture shows, asked of a vision-capable model of the chat chain (describe)."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw.backends.media.image_info import ImageFormatError, ImageInfo, media_type_of, read_image_info
from edgeclaw.backends.media.images import ImageGenerator
from edgeclaw.errors import BackendError, ToolError
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.media.files import output_path, save, size_text

# (image bytes, media type, question) -> the model's description; raises an EdgeclawError.
Describe = Callable[[bytes, str, str], Awaitable[str]]
SIZES = ("256x256", "512x512", "1024x1024", "1024x1536", "1536x1024")
MAX_DESCRIBE_BYTES = 8 * 1024 * 1024  # what one request may carry, base64 making it a third bigger
DEFAULT_QUESTION = "Describe this picture in a few sentences: what it shows, any text, anything unusual."
_SUFFIX = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


class ImageTool(Tool):
    name = "image"
    group = "media"
    observing_actions = frozenset({"info", "describe"})
    description = (
        "Images in the workspace: action=info (format, size, EXIF, without decoding), "
        "generate (from a prompt, saved to the workspace), describe (ask a vision model what it shows)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["info", "generate", "describe"]},
            "path": {
                "type": "string",
                "maxLength": 512,
                "description": "Workspace image (info, describe); where to write (generate, optional).",
            },
            "prompt": {"type": "string", "maxLength": 4000, "description": "generate: what to draw."},
            "size": {"type": "string", "enum": list(SIZES), "description": "generate: default 1024x1024."},
            "question": {"type": "string", "maxLength": 1000, "description": "describe: what to ask."},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(
        self, ws: Workspace, *, generator: ImageGenerator | None = None, describe: Describe | None = None
    ) -> None:
        self.ws = ws
        self.generator = generator
        self.describe = describe

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action = args["action"]
        if action in ("info", "describe"):
            if not args.get("path"):
                raise ToolError(f"action {action} needs path (a workspace image)")
            self.ws.resolve(args["path"], must_exist=True)
        elif not args.get("prompt"):
            raise ToolError("action generate needs prompt")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        if action == "info":
            return await self._info(args)
        if action == "describe":
            return await self._describe(args)
        return await self._generate(args)

    def _read_info(self, shown_path: str) -> tuple[ImageInfo, int, str]:
        path = self.ws.resolve(shown_path, must_exist=True)
        shown = self.ws.display(path)
        # O_NONBLOCK: a FIFO planted at the path must not hang the call; it is refused below.
        fd = self.ws.open(path, os.O_RDONLY | os.O_NONBLOCK, shown=shown)
        with open(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{shown} is not a regular file")
            size = st.st_size
            try:
                return read_image_info(f), size, shown
            except ImageFormatError as e:
                raise ToolError(f"{shown}: {e}") from None

    async def _info(self, args: Args) -> ToolResult:
        info, size, shown = await asyncio.to_thread(self._read_info, args["path"])
        parts = [f"{shown}: {info.format.upper()} {info.width}x{info.height}, {size_text(size)}"]
        parts += [f"{k}: {v}" for k, v in info.details.items() if k != "text"]
        if info.exif:
            parts.append("EXIF: " + ", ".join(f"{k}={v}" for k, v in info.exif.items()))
        else:
            parts.append("no EXIF")
        return ToolResult(
            for_llm="\n".join(parts),
            data={
                "path": shown,
                "format": info.format,
                "media_type": info.media_type,
                "width": info.width,
                "height": info.height,
                "bytes": size,
                "exif": info.exif,
                "details": info.details,
            },
        )

    async def _describe(self, args: Args) -> ToolResult:
        if self.describe is None:
            raise ToolError("describe needs a chat provider; none is configured ([agent] providers)")
        path = self.ws.resolve(args["path"], must_exist=True)
        shown = self.ws.display(path)
        content = await asyncio.to_thread(self.ws.read_file, path, limit=MAX_DESCRIBE_BYTES, shown=shown)
        kind = media_type_of(content.data[:32])
        if kind not in _SUFFIX:
            raise ToolError(f"{shown} is not a PNG, JPEG, GIF or WebP image a model can be shown")
        try:
            text = await self.describe(content.data, kind, args.get("question") or DEFAULT_QUESTION)
        except (BackendError, ToolError) as e:
            raise ToolError(f"describe {shown}: {e}") from None
        return ToolResult(for_llm=f"{shown}: {text}", data={"path": shown, "description": text})

    async def _generate(self, args: Args) -> ToolResult:
        if self.generator is None:
            raise ToolError("generate needs an images service: [tools.media.image] is not configured")
        size = args.get("size") or "1024x1024"
        try:
            data, kind = await self.generator.generate(args["prompt"], size)
        except BackendError as e:
            raise ToolError(str(e)) from None
        path, shown = output_path(self.ws, args.get("path"), "image", _SUFFIX[kind])
        await asyncio.to_thread(save, self.ws, path, data, shown)
        return ToolResult(
            for_llm=f"Wrote the image to {shown} ({kind}, {size_text(len(data))})",
            data={"path": shown, "media_type": kind, "bytes": len(data), "size": size},
        )
