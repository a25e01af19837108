"""Frames in the panels' own pixel formats: OLED pages, RGB565 (either byte order), XRGB8888.

Pillow does the pixel work (in C: a 320x240 frame converts in about a millisecond, where a Python
loop takes tens of them, and a full-HD framebuffer seconds). It is an optional extra, imported here
on first use: a daemon that never draws never loads it.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from edgeclaw.backends.base import missing_library


def pillow() -> ModuleType:
    """`PIL.Image`, or the error saying how to install it."""
    try:
        from PIL import Image
    except ImportError:
        raise missing_library("PIL", "display", "apt install python3-pil") from None
    return Image


def oled_pages(image: Any) -> list[bytes]:
    """A mode-"1" image as an SSD1306's display RAM: one bytes object per page of 8 rows, each byte
    a column with bit 0 the page's top row (datasheet figure 10-2)."""
    width, height = image.size
    bits = image.convert("1").tobytes()  # rows, 1 bit a pixel, most significant bit first, padded
    stride = (width + 7) // 8
    pages = []
    for page in range(height // 8):
        row = bytearray(width)
        for bit in range(8):
            line = bits[(page * 8 + bit) * stride : (page * 8 + bit + 1) * stride]
            mask = 1 << bit
            for x in range(width):
                if line[x >> 3] & (0x80 >> (x & 7)):
                    row[x] |= mask
        pages.append(bytes(row))
    return pages


def rgb565(image: Any, *, big_endian: bool) -> bytes:
    """An RGB image as 16-bit 5-6-5 pixels: big-endian for a TFT controller's RAM (the byte order it
    takes over SPI), little-endian for a Linux framebuffer."""
    Image = pillow()
    r, g, b = image.convert("RGB").split()
    # The high byte is RRRRRGGG, the low byte GGGBBBBB; their bits do not overlap, so adding is or-ing.
    from PIL import ImageChops

    high = ImageChops.add(r.point(lambda v: v & 0xF8), g.point(lambda v: v >> 5))
    low = ImageChops.add(g.point(lambda v: (v << 3) & 0xE0), b.point(lambda v: v >> 3))
    pair = (high, low) if big_endian else (low, high)
    return bytes(Image.merge("LA", pair).tobytes())


def encode_framebuffer(image: Any, pixel_format: str) -> bytes:
    """A frame as a Linux framebuffer holds it (little-endian words)."""
    if pixel_format == "rgb565":
        return rgb565(image, big_endian=False)
    return bytes(image.convert("RGB").tobytes("raw", "BGRX"))  # xrgb8888: B, G, R, X in memory


def decode_framebuffer(data: bytes, width: int, height: int, pixel_format: str) -> Any:
    """A framebuffer's bytes as an RGB image."""
    Image = pillow()
    rawmode = "BGR;16" if pixel_format == "rgb565" else "BGRX"  # Pillow's names for these layouts
    return Image.frombytes("RGB", (width, height), data, "raw", rawmode)
