"""The canvas's frames and what can be drawn on them: wrapped text, lines, rectangles, bitmaps, charts.

A frame is a Pillow image of the display's size and mode ("1" for an OLED, where a pixel is lit or
not; "RGB" for the others). Text uses Pillow's built-in bitmap font (6 pixels a character, 11
high): crisp on a 1-bit panel, where an anti-aliased font turns to noise. Every problem with a
request (off-screen coordinates, text that does not fit, an unreadable bitmap) is a `DrawError`
saying what was wrong; nothing is drawn then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from edgeclaw.backends.display.frame import pillow

MONO_OFF = ("black", "off", "#000", "#000000")
BITMAP_PIXELS_MAX = 4096 * 4096  # a picture to scale down to a small screen; larger ones are refused


class DrawError(ValueError):
    """A request the frame cannot take, in words naming what was wrong."""


class Frame:
    """One display's picture being drawn, and the font it writes with."""

    def __init__(self, width: int, height: int, mode: str) -> None:
        Image = pillow()
        from PIL import ImageDraw, ImageFont

        self.width, self.height, self.mode = width, height, mode
        self.image = Image.new(mode, (width, height), 0)
        self._draw = ImageDraw.Draw(self.image)
        self._draw.fontmode = "1"  # no anti-aliasing: a pixel is on or off
        load = getattr(ImageFont, "load_default_imagefont", ImageFont.load_default)  # Pillow >= 10.1
        self.font = load()
        self.line_height = self.font.getbbox("Ag")[3] + 1

    # -- checks --------------------------------------------------------------------------------
    def color(self, name: str | None, default: str = "white") -> Any:
        """A colour by name or #rrggbb; on a 1-bit frame anything but black lights the pixel."""
        name = (name or default).strip().lower()
        if self.mode == "1":
            return 0 if name in MONO_OFF else 1
        from PIL import ImageColor

        try:
            return ImageColor.getrgb(
                name if name not in ("on", "off") else {"on": "white", "off": "black"}[name]
            )
        except ValueError:
            raise DrawError(f"unknown colour {name!r} (expected a name such as 'red' or '#rrggbb')") from None

    def point(self, x: int, y: int, what: str = "point") -> tuple[int, int]:
        if not (0 <= x < self.width and 0 <= y < self.height):
            raise DrawError(
                f"{what} ({x}, {y}) is off the {self.width}x{self.height} screen "
                f"(x 0-{self.width - 1}, y 0-{self.height - 1})"
            )
        return x, y

    def area(self, x: int, y: int, width: int | None, height: int | None) -> tuple[int, int, int, int]:
        """A box from (x, y): its size, by default to the screen's edge; all of it on the screen."""
        self.point(x, y, "corner")
        width = self.width - x if width is None else width
        height = self.height - y if height is None else height
        if width < 1 or height < 1 or x + width > self.width or y + height > self.height:
            raise DrawError(
                f"a {width}x{height} box at ({x}, {y}) does not fit the {self.width}x{self.height} screen"
            )
        return x, y, width, height

    # -- drawing --------------------------------------------------------------------------------
    def clear(self, color: str | None = None) -> None:
        self._draw.rectangle((0, 0, self.width - 1, self.height - 1), fill=self.color(color, "black"))

    def wrap(self, text: str, width: int) -> list[str]:
        """Lines of at most `width` pixels: broken at spaces, a word longer than a line cut."""
        lines: list[str] = []
        for paragraph in text.split("\n"):
            line = ""
            for word in paragraph.split(" "):
                candidate = f"{line} {word}" if line else word
                if self.font.getlength(candidate) <= width:
                    line = candidate
                    continue
                if line:
                    lines.append(line)
                while len(word) > 1 and self.font.getlength(word) > width:  # wider than a line: cut it
                    fitting = (n for n in range(len(word), 0, -1) if self.font.getlength(word[:n]) <= width)
                    cut = next(fitting, 1)  # a box narrower than one character still takes one a line
                    lines.append(word[:cut])
                    word = word[cut:]
                line = word
            lines.append(line)
        return lines

    def text(self, x: int, y: int, text: str, color: str | None, width: int | None) -> int:
        """Wrapped text from (x, y); the number of lines. Refused when it runs off the bottom."""
        if not text.isprintable() and not all(c.isprintable() or c == "\n" for c in text):
            raise DrawError("text may hold printable characters and newlines only")
        x, y, width, height = self.area(x, y, width, None)
        lines = self.wrap(text, width)
        fits = max(0, height // self.line_height)
        if len(lines) > fits:
            raise DrawError(
                f"the text wraps to {len(lines)} lines; {fits} fit below y={y} on this "
                f"{self.width}x{self.height} screen (about {width // 6} characters a line): shorten it"
            )
        fill = self.color(color)
        for i, line in enumerate(lines):
            self._draw.text((x, y + i * self.line_height), line, fill=fill, font=self.font)
        return len(lines)

    def line(self, start: tuple[int, int], end: tuple[int, int], color: str | None) -> None:
        self.point(*start, "start")
        self.point(*end, "end")
        self._draw.line((start, end), fill=self.color(color))

    def rect(
        self, x: int, y: int, width: int | None, height: int | None, color: str | None, fill: bool
    ) -> None:
        x, y, width, height = self.area(x, y, width, height)
        ink = self.color(color)
        box = (x, y, x + width - 1, y + height - 1)
        self._draw.rectangle(box, outline=ink, fill=ink if fill else None)

    def bitmap(
        self, path: Path, shown: str, x: int, y: int, width: int | None, height: int | None
    ) -> tuple[int, int]:
        """A picture from the workspace, scaled to fit the box (keeping its shape) and, on a 1-bit
        frame, dithered (Floyd-Steinberg); the size it was drawn at."""
        Image = pillow()
        x, y, width, height = self.area(x, y, width, height)
        try:
            with Image.open(path) as picture:  # reads the header only: the size is known before decoding
                if picture.width * picture.height > BITMAP_PIXELS_MAX:
                    raise DrawError(f"{shown} is {picture.width}x{picture.height}: too large to draw")
                picture = picture.convert("RGBA")
        except (OSError, Image.DecompressionBombError, SyntaxError) as e:
            raise DrawError(f"cannot read {shown} as a picture: {e}") from None
        picture.thumbnail((width, height))
        flat = Image.new("RGB", picture.size, (0, 0, 0))
        flat.paste(picture, mask=picture.getchannel("A"))  # transparent = black (unlit)
        self.image.paste(flat.convert("1") if self.mode == "1" else flat, (x, y))
        return picture.size

    def chart(
        self,
        values: Sequence[float],
        style: str,
        box: tuple[int, int, int | None, int | None],
        color: str | None,
    ) -> tuple[float, float]:
        """The series as a line or bars, scaled between its minimum and maximum, which are written at
        the left (top and bottom); the minimum and maximum."""
        if not values:
            raise DrawError("a chart needs at least one value")
        if not all(math.isfinite(v) for v in values):
            raise DrawError("chart values must be finite numbers")
        x, y, width, height = self.area(*box)
        low, high = min(values), max(values)
        labels = [_number(high), _number(low)]
        label_w = int(max(self.font.getlength(s) for s in labels)) + 2
        if width - label_w < 8 or height < 2 * self.line_height:
            raise DrawError(f"a {width}x{height} box is too small for a chart with labels")
        ink = self.color(color)
        self._draw.text((x, y), labels[0], fill=ink, font=self.font)
        self._draw.text((x, y + height - self.line_height), labels[1], fill=ink, font=self.font)
        left, right, top, bottom = x + label_w, x + width - 1, y, y + height - 1
        self._draw.line(((left, top), (left, bottom)), fill=ink)  # the axis
        span = high - low or 1.0
        plot_w = right - left  # pixels right of the axis

        def row(v: float) -> int:
            return bottom - round((v - low) / span * (bottom - top))

        if style == "bar":
            step = plot_w / len(values)
            for i, v in enumerate(values):
                x0 = left + 1 + int(i * step)
                x1 = max(x0, left + int((i + 1) * step) - (1 if step >= 3 else 0))
                self._draw.rectangle((x0, row(v), x1, bottom), fill=ink)
        else:
            n = len(values)
            points = [
                (left + 1 + round(i * (plot_w - 1) / max(1, n - 1)), row(v)) for i, v in enumerate(values)
            ]
            if n == 1:
                self._draw.point(points, fill=ink)
            else:
                self._draw.line(points, fill=ink)
        return low, high

    def png(self) -> bytes:
        import io

        out = io.BytesIO()
        self.image.save(out, "PNG")
        return out.getvalue()


def _number(v: float) -> str:
    """A label: whole numbers as such, others to 3 significant digits."""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e9 else f"{v:.3g}"
