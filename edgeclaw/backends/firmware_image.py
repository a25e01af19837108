"""Firmware image files as the target sees them: (address, bytes) segments.

Three formats, told apart by their content (the file name only breaks a tie):

* ELF (`\\x7fELF`): the loadable (`PT_LOAD`) program headers with file bytes, each at its
  physical (load) address — where the bytes live in flash, even for `.data` that is copied to
  RAM at start-up — read with `pyelftools`;
* Intel HEX (text records starting with `:`): its contiguous runs of data, read with `intelhex`;
* raw binary: the whole file at a base address the caller gives.

HEX and ELF carry their own addresses, so a base address given for them is refused rather than
silently ignored or applied. Both libraries are pyocd's own dependencies (the `probe` extra), and
are imported only when such an image is read. Nothing here decides where an image may go: the
caller checks every segment against what the board profile grants.
"""

from __future__ import annotations

import io
import itertools
from types import ModuleType
from typing import Literal, cast

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

ImageFormat = Literal["bin", "hex", "elf"]
FORMATS: tuple[str, ...] = ("auto", "bin", "hex", "elf")
ELF_MAGIC = b"\x7fELF"
PT_LOAD = "PT_LOAD"
ADDRESS_LIMIT = 1 << 32  # the probe's targets are 32-bit microcontrollers


class ImageError(BackendError):
    """The file is not a valid image of the format it claims (or was taken for)."""


@dataclass(frozen=True, slots=True)
class Segment:
    address: int
    data: bytes

    @property
    def end(self) -> int:
        return self.address + len(self.data)


@dataclass(frozen=True, slots=True)
class FirmwareImage:
    format: ImageFormat
    segments: tuple[Segment, ...]
    entry: int | None = None  # the ELF entry point, for the record

    @property
    def size(self) -> int:
        return sum(len(s.data) for s in self.segments)


def detect_format(data: bytes, name: str = "") -> ImageFormat:
    """ELF by its magic number; Intel HEX when the text is HEX records (or the name says .hex and
    the text starts like one); raw binary otherwise."""
    if data.startswith(ELF_MAGIC):
        return "elf"
    head = data.lstrip()[:64]
    if head.startswith(b":") and _looks_like_hex_records(data):
        return "hex"
    if name.lower().endswith((".hex", ".ihex", ".ihx")) and head.startswith(b":"):
        return "hex"  # parsed as HEX, so a damaged one is reported as such rather than flashed raw
    return "bin"


def _looks_like_hex_records(data: bytes) -> bool:
    allowed = set(b"0123456789abcdefABCDEF:\r\n \t")
    return all(b in allowed for b in data[:4096])


def parse_image(data: bytes, name: str = "", *, fmt: str = "auto", base: int | None = None) -> FirmwareImage:
    """The segments of `data` (the file's bytes; `name` is only for messages and detection).

    `base` is where a raw binary goes, required for one; for HEX and ELF it must be None.
    """
    if fmt not in FORMATS:
        raise ImageError(f"unknown image format {fmt!r} (expected one of {', '.join(FORMATS)})")
    kind = detect_format(data, name) if fmt == "auto" else cast(ImageFormat, fmt)
    shown = name or "the image"
    if not data:
        raise ImageError(f"{shown} is empty")
    if kind != "bin" and base is not None:
        raise ImageError(
            f"{shown} is an {'ELF' if kind == 'elf' else 'Intel HEX'} image, which carries its own "
            "addresses: 'base' applies only to raw binary images"
        )
    if kind == "bin":
        if base is None:
            raise ImageError(f"{shown} is a raw binary image: it needs a base address")
        image = FirmwareImage("bin", (Segment(base, data),))
    elif kind == "hex":
        image = _parse_hex(data, shown)
    else:
        image = _parse_elf(data, shown)
    for segment in image.segments:
        if segment.address < 0 or segment.end > ADDRESS_LIMIT:
            raise ImageError(
                f"{shown} has a segment at 0x{segment.address:x} (+{len(segment.data)} bytes) "
                "outside the target's 32-bit address space"
            )
    return image


def _parse_hex(data: bytes, shown: str) -> FirmwareImage:
    intelhex = _library("intelhex", "intelhex")
    hexfile = intelhex.IntelHex()
    try:
        hexfile.loadhex(io.StringIO(data.decode("ascii")))
    except UnicodeDecodeError:
        raise ImageError(f"{shown} is not an Intel HEX file: it holds bytes that are not ASCII") from None
    except intelhex.IntelHexError as e:
        # intelhex names the record: "Record at line 3 has invalid checksum" and the like.
        raise ImageError(f"{shown} is not a valid Intel HEX file: {e}") from None
    runs = hexfile.segments()
    if not runs:
        raise ImageError(f"{shown} is an Intel HEX file without data records")
    start = hexfile.start_addr or {}
    entry = start.get("EIP") if "EIP" in start else None
    segments = tuple(Segment(lo, hexfile.tobinstr(start=lo, end=hi - 1)) for lo, hi in runs)
    return FirmwareImage("hex", segments, entry)


def _parse_elf(data: bytes, shown: str) -> FirmwareImage:
    _library("elftools", "pyelftools")
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    if data[4:5] != b"\x01":  # EI_CLASS: ELFCLASS32; read before parsing, the layouts differ
        bits = {b"\x02": "a 64-bit"}.get(data[4:5], "an unknown-class")
        raise ImageError(f"{shown} is {bits} ELF file; the probe's targets take 32-bit images")
    try:
        elf = ELFFile(io.BytesIO(data))
        segments = []
        for header in elf.iter_segments():
            if header["p_type"] != PT_LOAD or header["p_filesz"] == 0:
                continue  # not loaded, or .bss-like: nothing to write (the start-up code zeroes it)
            body = header.data()[: header["p_filesz"]]
            if len(body) != header["p_filesz"]:
                raise ImageError(
                    f"{shown} is truncated: a segment at 0x{header['p_paddr']:x} claims "
                    f"{header['p_filesz']} bytes, the file holds {len(body)}"
                )
            segments.append(Segment(header["p_paddr"], body))
        entry = elf.header["e_entry"]
    except ImageError:
        raise
    except (ELFError, ValueError, KeyError, OSError) as e:
        raise ImageError(f"{shown} is not a valid ELF file: {e}") from None
    if not segments:
        raise ImageError(f"{shown} is an ELF file without loadable segments (nothing to program)")
    segments.sort(key=lambda s: s.address)
    for a, b in itertools.pairwise(segments):
        if b.address < a.end:
            raise ImageError(f"{shown} has overlapping segments at 0x{a.address:x} and 0x{b.address:x}")
    return FirmwareImage("elf", tuple(segments), entry)


def _library(module: str, package: str) -> ModuleType:
    """An optional library, imported when an image needs it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImageError(
            f"reading this image needs '{package}', which is not installed (pip install 'edgeclaw[probe]')"
        ) from None
