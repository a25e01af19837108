"""`read_bytes`: a workspace file's bytes, a bounded chunk at a time, for a caller that fetches a file
the tools made (a photo, a recording) over a channel that carries text.

The chunk travels base64-encoded in the answer's structured data with its SHA-256 and the file's
size and type (the registry adds both after checking the bytes for secrets, like all output), so a
backend reassembles the file chunk by chunk and knows each chunk arrived whole. Reads go through
the workspace's one safe open (no symlinks, no special files).
"""

from __future__ import annotations

import asyncio
import os
import stat
from typing import Any

from edgeclaw.backends.media.audio import audio_format
from edgeclaw.backends.media.image_info import media_type_of
from edgeclaw.errors import ToolError
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import Workspace

# Base64 makes a chunk a third bigger; 16 KiB of file stays inside the registry's default output cap.
DEFAULT_CHUNK = 16 * 1024
MAX_CHUNK = 64 * 1024
_AUDIO_TYPES = {"wav": "audio/wav", "mp3": "audio/mpeg", "ogg": "audio/ogg", "flac": "audio/flac"}


def media_type(head: bytes) -> str:
    """The file's type from its first bytes: an image or audio type, else octet-stream."""
    return media_type_of(head) or _AUDIO_TYPES.get(audio_format(head), "application/octet-stream")


class ReadBytesTool(Tool):
    name = "read_bytes"
    group = "fs"
    observes_only = True
    description = (
        "Read part of a binary workspace file (a photo, a recording) as base64, for a program that "
        "fetches it chunk by chunk: offset and length in bytes; the answer says the file's size and "
        "the next offset."
    )

    def __init__(self, ws: Workspace, max_chunk: int = MAX_CHUNK) -> None:
        self.ws = ws
        self.max_chunk = max_chunk
        self.parameters: dict[str, Any] = {
            "type": "object",
            "properties": {
                "path": {"type": "string", "maxLength": 512, "description": "Workspace path."},
                "offset": {"type": "integer", "minimum": 0, "description": "First byte (default 0)."},
                "length": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": max_chunk,
                    "description": f"Bytes to read (default {min(DEFAULT_CHUNK, max_chunk)}).",
                },
            },
            "required": ["path"],
            "additionalProperties": False,
        }

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self.ws.resolve(args["path"], must_exist=True)

    def _read(self, args: Args) -> tuple[dict[str, Any], bytes]:
        path = self.ws.resolve(args["path"], must_exist=True)
        shown = self.ws.display(path)
        offset = int(args.get("offset") or 0)
        length = int(args.get("length") or min(DEFAULT_CHUNK, self.max_chunk))
        fd = self.ws.open(path, os.O_RDONLY | os.O_NONBLOCK, shown=shown)
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise ToolError(f"{shown} is not a regular file")
            if offset > st.st_size:
                raise ToolError(f"offset {offset} is past the end of {shown} ({st.st_size} bytes)")
            head = os.pread(fd, 16, 0)
            chunk = os.pread(fd, length, offset)
        finally:
            os.close(fd)
        end = offset + len(chunk)
        return {
            "path": shown,
            "size": st.st_size,
            "media_type": media_type(head),
            "offset": offset,
            "length": len(chunk),
            "next_offset": end if end < st.st_size else None,
        }, chunk

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        data, chunk = await asyncio.to_thread(self._read, args)
        more = f"; next offset {data['next_offset']}" if data["next_offset"] is not None else "; the end"
        return ToolResult(
            for_llm=f"{data['path']}: bytes {data['offset']}-{data['offset'] + data['length']} of "
            f"{data['size']} ({data['media_type']}) in data.base64{more}",
            data=data,
            binary=chunk,  # the registry checks it for secrets and adds it as base64 with its sha256
        )
