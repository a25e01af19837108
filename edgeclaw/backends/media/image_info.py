"""What an image file is, read from its headers: format, size, and the EXIF a camera wrote.

Nothing is decoded: a 12-megapixel JPEG is read marker by marker up to its frame header (and its
EXIF block, at most 64 KiB), so the memory a call takes does not grow with the picture. Every
offset and count inside the file is checked against what was read: a damaged or hostile file is
reported as such, never followed out of its bounds.
"""

from __future__ import annotations

import struct
from dataclasses import field
from typing import Any, BinaryIO

from edgeclaw.records import dataclass

HEAD_BYTES = 64 * 1024
MAX_JPEG_MARKERS = 256
MAX_IFD_ENTRIES = 512
MAX_TEXT_CHARS = 200

# EXIF tags worth a person's attention, by IFD: (tag, name).
_IFD0 = {0x010F: "Make", 0x0110: "Model", 0x0112: "Orientation", 0x0131: "Software", 0x0132: "DateTime"}
_EXIF = {
    0x829A: "ExposureTime",
    0x829D: "FNumber",
    0x8827: "ISOSpeedRatings",
    0x9003: "DateTimeOriginal",
    0x920A: "FocalLength",
    0xA002: "PixelXDimension",
    0xA003: "PixelYDimension",
}
_GPS = {1: "GPSLatitudeRef", 2: "GPSLatitude", 3: "GPSLongitudeRef", 4: "GPSLongitude", 6: "GPSAltitude"}
_EXIF_POINTER, _GPS_POINTER = 0x8769, 0x8825
# TIFF field types: size of one value.
_TYPE_SIZES = {1: 1, 2: 1, 3: 2, 4: 4, 5: 8, 7: 1, 9: 4, 10: 8}
_SOF_MARKERS = frozenset({0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF})


class ImageFormatError(ValueError):
    """The file is not an image this reader knows, or its headers are damaged."""


@dataclass
class ImageInfo:
    format: str  # "png" | "jpeg" | "gif" | "webp" | "bmp"
    width: int
    height: int
    media_type: str
    exif: dict[str, Any] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)  # bit depth, colour type, progressive …


def media_type_of(head: bytes) -> str:
    """The image media type from the first bytes, "" when it is none of ours."""
    if head.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if head.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if head[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP":
        return "image/webp"
    if head[:2] == b"BM":
        return "image/bmp"
    return ""


def read_image_info(f: BinaryIO) -> ImageInfo:
    head = f.read(32)
    kind = media_type_of(head)
    if not kind:
        raise ImageFormatError("not a PNG, JPEG, GIF, WebP or BMP image")
    f.seek(0)
    reader = {
        "image/png": _png,
        "image/jpeg": _jpeg,
        "image/gif": _gif,
        "image/webp": _webp,
        "image/bmp": _bmp,
    }[kind]
    try:
        return reader(f)
    except struct.error:
        raise ImageFormatError(f"the {kind} headers are cut short") from None


def _png(f: BinaryIO) -> ImageInfo:
    f.seek(8)
    length, kind = struct.unpack(">I4s", f.read(8))
    if kind != b"IHDR" or length != 13:
        raise ImageFormatError("PNG without its IHDR header first")
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", f.read(13))
    info = ImageInfo("png", width, height, "image/png")
    colours = {0: "grey", 2: "RGB", 3: "palette", 4: "grey+alpha", 6: "RGBA"}
    info.details = {
        "bit_depth": depth,
        "colour": colours.get(colour, str(colour)),
        "interlaced": bool(interlace),
    }
    f.seek(4, 1)  # IHDR's CRC
    # Later chunks up to the image data: an eXIf chunk carries EXIF, tEXt chunks short notes.
    for _ in range(64):
        header = f.read(8)
        if len(header) < 8:
            break
        length, kind = struct.unpack(">I4s", header)
        if kind in (b"IDAT", b"IEND"):
            break
        if kind == b"eXIf" and length <= HEAD_BYTES:
            info.exif = parse_exif(f.read(length))
            f.seek(4, 1)
            continue
        if kind == b"tEXt" and length <= 4096:
            key, _, value = f.read(length).partition(b"\0")
            info.details.setdefault("text", {})[key.decode("latin-1")] = _clip(value.decode("latin-1"))
            f.seek(4, 1)
            continue
        f.seek(length + 4, 1)
    return info


def _jpeg(f: BinaryIO) -> ImageInfo:
    f.seek(2)
    exif: dict[str, Any] = {}
    for _ in range(MAX_JPEG_MARKERS):
        byte = f.read(1)
        while byte == b"\xff":  # fill bytes before a marker
            marker = f.read(1)
            if marker != b"\xff":
                break
        else:
            raise ImageFormatError("JPEG marker expected, found image data or the end of the file")
        if not marker:
            raise ImageFormatError("JPEG cut short before its frame header")
        code = marker[0]
        if code in (0xD8, 0x01) or 0xD0 <= code <= 0xD7:
            continue  # markers without a length
        if code in (0xD9, 0xDA):
            break  # end of image, start of scan: no frame header before it
        (length,) = struct.unpack(">H", f.read(2))
        if length < 2:
            raise ImageFormatError(f"JPEG segment 0x{code:02x} with length {length}")
        if code in _SOF_MARKERS:
            _, height, width = struct.unpack(">BHH", f.read(5))
            info = ImageInfo("jpeg", width, height, "image/jpeg", exif)
            info.details = {"progressive": code in (0xC2, 0xC6, 0xCA, 0xCE)}
            return info
        if code == 0xE1 and not exif:
            body = f.read(length - 2)
            if body.startswith(b"Exif\0\0"):
                exif = parse_exif(body[6:])
            continue
        f.seek(length - 2, 1)
    raise ImageFormatError("JPEG without a frame header (SOF) before its image data")


def _gif(f: BinaryIO) -> ImageInfo:
    f.seek(6)
    width, height = struct.unpack("<HH", f.read(4))
    return ImageInfo("gif", width, height, "image/gif")


def _webp(f: BinaryIO) -> ImageInfo:
    f.seek(12)
    kind = f.read(4)
    f.seek(4, 1)  # chunk size
    if kind == b"VP8 ":
        f.seek(6, 1)  # frame tag and start code
        w, h = struct.unpack("<HH", f.read(4))
        return ImageInfo("webp", w & 0x3FFF, h & 0x3FFF, "image/webp")
    if kind == b"VP8L":
        f.seek(1, 1)  # signature byte
        bits = int.from_bytes(f.read(4), "little")
        return ImageInfo("webp", (bits & 0x3FFF) + 1, (bits >> 14 & 0x3FFF) + 1, "image/webp")
    if kind == b"VP8X":
        f.seek(4, 1)  # flags and reserved bytes
        raw = f.read(6)
        width = int.from_bytes(raw[:3], "little") + 1
        height = int.from_bytes(raw[3:], "little") + 1
        return ImageInfo("webp", width, height, "image/webp")
    raise ImageFormatError(f"WebP with an unknown first chunk {kind!r}")


def _bmp(f: BinaryIO) -> ImageInfo:
    f.seek(18)
    width, height = struct.unpack("<ii", f.read(8))
    return ImageInfo("bmp", width, abs(height), "image/bmp")


def _clip(text: str) -> str:
    text = text.strip("\0 ").replace("\0", " ")
    return text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + "…"


# -- EXIF ----------------------------------------------------------------------------------------
def parse_exif(data: bytes) -> dict[str, Any]:
    """The tags of interest from a TIFF-structured EXIF block; {} when it is not one."""
    if data[:2] == b"II":
        order = "<"
    elif data[:2] == b"MM":
        order = ">"
    else:
        return {}
    try:
        if struct.unpack(order + "H", data[2:4])[0] != 42:
            return {}
        (first,) = struct.unpack(order + "I", data[4:8])
        out: dict[str, Any] = {}
        pointers = _ifd(data, order, first, _IFD0, out)
        if _EXIF_POINTER in pointers:
            _ifd(data, order, pointers[_EXIF_POINTER], _EXIF, out)
        if _GPS_POINTER in pointers:
            gps: dict[str, Any] = {}
            _ifd(data, order, pointers[_GPS_POINTER], _GPS, gps)
            out.update(_gps_decimal(gps))
        return out
    except struct.error:
        return {}


def _ifd(data: bytes, order: str, offset: int, names: dict[int, str], out: dict[str, Any]) -> dict[int, int]:
    """Read one IFD's named tags into `out`; returns the sub-IFD pointers it holds."""
    pointers: dict[int, int] = {}
    if offset <= 0 or offset + 2 > len(data):
        return pointers
    (count,) = struct.unpack_from(order + "H", data, offset)
    for i in range(min(count, MAX_IFD_ENTRIES)):
        at = offset + 2 + 12 * i
        if at + 12 > len(data):
            break
        tag, kind, n = struct.unpack_from(order + "HHI", data, at)
        if tag in (_EXIF_POINTER, _GPS_POINTER) and kind == 4:
            pointers[tag] = struct.unpack_from(order + "I", data, at + 8)[0]
            continue
        if tag not in names or kind not in _TYPE_SIZES:
            continue
        size = _TYPE_SIZES[kind] * n
        if size <= 4:
            raw = data[at + 8 : at + 8 + size]
        else:
            (where,) = struct.unpack_from(order + "I", data, at + 8)
            if where + size > len(data):
                continue  # points outside the block: ignored, never read past it
            raw = data[where : where + size]
        value = _value(raw, kind, n, order)
        if value is not None:
            out[names[tag]] = value
    return pointers


def _value(raw: bytes, kind: int, n: int, order: str) -> Any:
    if kind == 2:
        return _clip(raw.decode("utf-8", "replace"))
    if kind in (1, 7):
        return list(raw[:16]) if n > 1 else raw[0]
    fmt = {3: "H", 4: "I", 9: "i"}.get(kind)
    if fmt:
        values = struct.unpack(order + fmt * n, raw)
        return values[0] if n == 1 else list(values[:16])
    pairs = struct.unpack(order + ("II" if kind == 5 else "ii") * n, raw)
    ratios = [round(a / b, 6) if b else None for a, b in zip(pairs[::2], pairs[1::2], strict=True)]
    return ratios[0] if n == 1 else ratios[:16]


def _gps_decimal(gps: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for axis, negative in (("Latitude", "S"), ("Longitude", "W")):
        dms = gps.get(f"GPS{axis}")
        if isinstance(dms, list) and len(dms) == 3 and all(isinstance(x, float) for x in dms):
            degrees = dms[0] + dms[1] / 60 + dms[2] / 3600
            if gps.get(f"GPS{axis}Ref") == negative:
                degrees = -degrees
            out[f"GPS{axis}"] = round(degrees, 6)
    if isinstance(gps.get("GPSAltitude"), float):
        out["GPSAltitude"] = gps["GPSAltitude"]
    return out
