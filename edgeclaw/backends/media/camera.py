"""Stills from the board's camera: the Pi camera (`rpicam-still`, formerly `libcamera-still`), a V4L2
device (`fswebcam`, else `ffmpeg`), or the sim board's test pattern.

Each capture is one run of a distribution's program with a deadline, writing into a fresh private
directory; the caller moves the file into the workspace. The resolution asked is bounded by the
profile's grant before anything runs.

The sim camera draws eight colour bars (white, yellow, cyan, green, magenta, red, blue, black, as a
test card does) above a lamp: the sim board's LED, bright when it is on, dark when off, so "take a
photo and tell me whether the light is on" can be asked of the sim board too.
"""

from __future__ import annotations

import asyncio
import shutil
import struct
import tempfile
import zlib
from collections.abc import Awaitable, Callable
from pathlib import Path

from edgeclaw.backends.media.programs import run_program
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

BARS = (
    (255, 255, 255),
    (255, 255, 0),
    (0, 255, 255),
    (0, 255, 0),
    (255, 0, 255),
    (255, 0, 0),
    (0, 0, 255),
    (0, 0, 0),
)
LAMP_ON = (255, 236, 160)
LAMP_OFF = (40, 40, 40)
BACKGROUND = (128, 128, 128)
CAPTURE_TIMEOUT_S = 20.0

LampState = Callable[[], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class Still:
    path: Path  # in a private temporary directory, for the caller to move
    width: int
    height: int
    source: str  # what took it: "sim", "rpicam-still", "fswebcam", "ffmpeg"


def test_pattern(width: int, height: int, lamp_on: bool) -> bytes:
    """The sim camera's picture as PNG bytes: colour bars in the top two thirds, the lamp below."""
    bar_rows = height * 2 // 3
    bar_line = bytearray()
    for x in range(width):
        bar_line += bytes(BARS[x * len(BARS) // width])
    lamp = LAMP_ON if lamp_on else LAMP_OFF
    # The lamp: a square in the middle of the bottom third, on grey.
    side = max(1, min(width, height - bar_rows) // 2)
    left = (width - side) // 2
    lamp_line = bytearray(
        bytes(BACKGROUND) * left + bytes(lamp) * side + bytes(BACKGROUND) * (width - left - side)
    )
    grey_line = bytearray(bytes(BACKGROUND) * width)
    top = bar_rows + (height - bar_rows - side) // 2
    raw = bytearray()
    for y in range(height):
        line = bar_line if y < bar_rows else lamp_line if top <= y < top + side else grey_line
        raw += b"\0" + line  # filter type 0 per scan line
    return _png(width, height, bytes(raw))


def _png(width: int, height: int, raw: bytes) -> bytes:
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )


class Camera:
    """One camera as the board profile grants it (`kind` = "sim" | "rpicam" | "v4l2")."""

    def __init__(self, kind: str, device: str = "", *, lamp: LampState | None = None) -> None:
        self.kind = kind
        self.device = device
        self._lamp = lamp

    def program(self) -> str:
        """The program a capture runs, "" when none is installed (the answer says which to install)."""
        if self.kind == "sim":
            return "sim"
        names = ("rpicam-still", "libcamera-still") if self.kind == "rpicam" else ("fswebcam", "ffmpeg")
        return next((found for name in names if (found := shutil.which(name))), "")

    async def capture(self, width: int, height: int, fmt: str) -> Still:
        tmp = Path(tempfile.mkdtemp(prefix="edgeclaw-camera-"))
        out = tmp / f"still.{fmt}"
        try:
            source = await self._capture(out, width, height, fmt)
            if not out.is_file() or out.stat().st_size == 0:
                raise BackendError(f"{source} wrote no picture")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return Still(out, width, height, source)

    async def _capture(self, out: Path, width: int, height: int, fmt: str) -> str:
        if self.kind == "sim":
            if fmt != "png":
                raise BackendError("the sim camera takes PNG pictures only")
            lamp_on = await self._lamp() if self._lamp is not None else False
            data = await asyncio.to_thread(test_pattern, width, height, lamp_on)
            await asyncio.to_thread(out.write_bytes, data)
            return "sim"
        program = self.program()
        if not program:
            wanted = "rpicam-apps (rpicam-still)" if self.kind == "rpicam" else "fswebcam or ffmpeg"
            raise BackendError(f"no camera program installed: install {wanted}")
        argv = capture_command(program, out, width, height, fmt, self.device)
        await run_program(argv, None, CAPTURE_TIMEOUT_S)
        return Path(program).name


def capture_command(program: str, out: Path, width: int, height: int, fmt: str, device: str) -> list[str]:
    """The command line that takes one still with `program` (rpicam-still, fswebcam or ffmpeg)."""
    size = f"{width}x{height}"
    name = Path(program).name
    if name in ("rpicam-still", "libcamera-still"):
        shot = ["-n", "--immediate", "-t", "1", "--width", str(width), "--height", str(height)]
        which = ["--camera", device] if device else []
        return [program, *shot, *which, "-e", "jpg" if fmt == "jpeg" else "png", "-o", str(out)]
    video = device or "/dev/video0"
    if name == "fswebcam":
        encoding = ["--png", "-1"] if fmt == "png" else ["--jpeg", "90"]
        return [program, "-q", "--no-banner", "-d", video, "-r", size, *encoding, str(out)]
    quiet = ["-hide_banner", "-loglevel", "error", "-y"]
    return [program, *quiet, "-f", "v4l2", "-video_size", size, "-i", video, "-frames:v", "1", str(out)]
