"""A Linux framebuffer (/dev/fbN), or a file laid out as one: frames written and read back whole.

The device holds `height` rows of `width` pixels in the declared format (RGB565 or XRGB8888,
little-endian words, as fbdev drivers such as the Pi's vc4 and fbtft expose them). A row may be
padded past `width` on some drivers; the kernel says how long a row is in
/sys/class/graphics/fbN/stride, which is read when it is there. The sim board's framebuffer is a
file in its state directory, made all black when first opened.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from edgeclaw.backends.base import DeviceUnavailable, open_error
from edgeclaw.backends.display.frame import decode_framebuffer, encode_framebuffer
from edgeclaw.board import DisplayGrant
from edgeclaw.errors import BackendError

BYTES_PER_PIXEL = {"rgb565": 2, "xrgb8888": 4}


class FramebufferDisplay:
    """A framebuffer device or file: frames are RGB images; `capture` reads what it shows."""

    mode = "RGB"

    def __init__(self, grant: DisplayGrant, path: str, timeout_s: float) -> None:
        self.grant = grant
        self.path = path
        self.timeout_s = timeout_s
        self.pixel_bytes = BYTES_PER_PIXEL[grant.pixel_format]
        self.sim = grant.device.startswith("sim:")

    def _stride(self) -> int:
        """Bytes a row takes: the kernel's stride for /dev/fbN where it says, else width x pixel."""
        name = Path(self.path).name
        if self.path.startswith("/dev/fb") and name[2:].isdigit():
            try:
                return int(Path(f"/sys/class/graphics/{name}/stride").read_text().strip())
            except (OSError, ValueError):
                pass
        return self.grant.width * self.pixel_bytes

    def _open_error(self, e: OSError) -> BackendError:
        return open_error(
            f"framebuffer {self.grant.name!r}",
            self.path,
            e,
            missing="is a display attached and its driver loaded?",
            denied="add the daemon's user to the video group",
        )

    def _ensure_sim_file(self) -> None:
        size = self.grant.width * self.grant.height * self.pixel_bytes
        path = Path(self.path)
        if not path.exists() or path.stat().st_size < size:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("ab") as f:
                f.truncate(size)

    def _open(self, flags: int) -> int:
        try:
            if self.sim:
                self._ensure_sim_file()
            return os.open(self.path, flags)
        except OSError as e:
            raise self._open_error(e) from None

    def _read(self) -> bytes:
        g = self.grant
        row, stride = g.width * self.pixel_bytes, self._stride()
        fd = self._open(os.O_RDONLY)
        try:
            data = os.pread(fd, stride * g.height, 0)
        except OSError as e:
            raise self._open_error(e) from None
        finally:
            os.close(fd)
        if len(data) < stride * (g.height - 1) + row:
            raise BackendError(
                f"framebuffer {g.name!r}: {self.path} holds {len(data)} bytes, less than a "
                f"{g.width}x{g.height} {g.pixel_format} frame (is the profile's size right?)"
            )
        if stride == row:
            return data[: row * g.height]
        return b"".join(data[y * stride : y * stride + row] for y in range(g.height))

    def _write(self, pixels: bytes) -> None:
        g = self.grant
        row, stride = g.width * self.pixel_bytes, self._stride()
        fd = self._open(os.O_WRONLY)
        try:
            for y in range(g.height):
                os.pwrite(fd, pixels[y * row : (y + 1) * row], y * stride)
        except OSError as e:
            raise self._open_error(e) from None
        finally:
            os.close(fd)

    async def present(self, image: Any) -> None:
        if self.grant.access != "rw":
            raise DeviceUnavailable(f"display {self.grant.name!r} is granted read-only (access = 'ro')")
        pixels = encode_framebuffer(image, self.grant.pixel_format)
        await asyncio.wait_for(asyncio.to_thread(self._write, pixels), self.timeout_s)

    async def capture(self) -> Any:
        data = await asyncio.wait_for(asyncio.to_thread(self._read), self.timeout_s)
        g = self.grant
        return decode_framebuffer(data, g.width, g.height, g.pixel_format)
