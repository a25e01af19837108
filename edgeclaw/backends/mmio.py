"""Memory-mapped registers: a window onto /dev/mem, /dev/gpiomem or (on the sim board) a file.

The window maps whole pages around the region and reads or writes 8/16/32-bit
values with single loads and stores of that width (a `memoryview` cast), as
device registers need: a byte-wise copy of a 32-bit register can read it
torn or trigger side effects four times. Bounds, alignment and the access
grant are checked by the tool before anything here runs; the window checks
its own bounds again, because an mmap out of range is a crash, not an error.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from edgeclaw.backends.base import BusGate, DeviceUnavailable, errno_of, open_error
from edgeclaw.board import MemoryRegionGrant
from edgeclaw.errors import BackendError

_FORMATS = {1: "B", 2: "H", 4: "I"}


class MemoryWindow:
    """One granted region, mapped. Offsets are relative to the region's base."""

    def __init__(self, region: MemoryRegionGrant, path: str, file_offset: int, writable: bool) -> None:
        self.region = region
        self.label = f"memory region {region.name!r}"
        page = mmap.PAGESIZE
        start = file_offset - file_offset % page
        self._delta = file_offset - start
        length = self._delta + region.size
        length += -length % page
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
        if path.startswith("/dev/"):
            flags |= os.O_SYNC  # uncached mapping: register reads must reach the device
        try:
            fd = os.open(path, flags)
        except OSError as e:
            raise open_error(
                self.label,
                path,
                e,
                missing="check the profile's device for this board",
                denied="/dev/mem needs root or CAP_SYS_RAWIO; /dev/gpiomem needs the gpio group",
            ) from None
        try:
            prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
            self._map = mmap.mmap(fd, length, mmap.MAP_SHARED, prot, offset=start)
        except (OSError, ValueError) as e:
            why = e.strerror if isinstance(e, OSError) else str(e)
            raise DeviceUnavailable(
                f"cannot map {path} at 0x{start:x} for {self.label}: {why}", errno=errno_of(e)
            ) from None
        finally:
            os.close(fd)
        self._view = memoryview(self._map)

    def _check(self, offset: int, length: int) -> int:
        if offset < 0 or length < 0 or offset + length > self.region.size:
            raise BackendError(f"{self.label}: offset 0x{offset:x}+{length} is outside the region")
        return self._delta + offset

    def read_value(self, offset: int, width: int) -> int:
        at = self._check(offset, width)
        return int(self._view[at : at + width].cast(_FORMATS[width])[0])

    def write_value(self, offset: int, width: int, value: int) -> None:
        at = self._check(offset, width)
        self._view[at : at + width].cast(_FORMATS[width])[0] = value

    def read_bytes(self, offset: int, length: int) -> bytes:
        at = self._check(offset, length)
        return bytes(self._view[at : at + length])

    def write_bytes(self, offset: int, data: bytes) -> None:
        at = self._check(offset, len(data))
        self._view[at : at + len(data)] = data

    def close(self) -> None:
        self._view.release()
        self._map.close()


def sim_region_file(state_dir: Path, region: MemoryRegionGrant) -> Path:
    """The file that stands in for a region on the sim board, created (zero-filled) on first use.

    A read-only region gets a recognisable identification block, so reading it shows something.
    """
    path = state_dir / "sim" / f"memory-{region.name}.bin"
    # Whole pages: a file mapping may not extend past the end of the file.
    file_size = region.size + -region.size % mmap.PAGESIZE
    if not path.exists() or path.stat().st_size != file_size:
        path.parent.mkdir(parents=True, exist_ok=True)
        content = bytearray(file_size)
        if region.access == "ro":
            ident = f"edgeclaw sim board: region {region.name} @ 0x{region.base:08x}\0".encode()
            content[: len(ident)] = ident[: region.size]
        path.write_bytes(bytes(content))
    return path


class MemoryAccess:
    """A mapped region as the tools see it: async, locked, bounded."""

    def __init__(self, window: MemoryWindow, *, timeout_s: float) -> None:
        self.window = window
        # Loads and stores take nanoseconds: run inline (a thread hop would cost more than the work).
        self._gate: BusGate[MemoryWindow] = BusGate(
            window, label=window.label, timeout_s=timeout_s, threaded=False
        )

    async def read_values(self, offset: int, width: int, count: int) -> list[int]:
        return await self._gate.run(_read_values, offset, width, count)

    async def write_value(self, offset: int, width: int, value: int) -> None:
        await self._gate.run(MemoryWindow.write_value, offset, width, value)

    async def read_bytes(self, offset: int, length: int) -> bytes:
        return await self._gate.run(MemoryWindow.read_bytes, offset, length)

    async def write_bytes(self, offset: int, data: bytes) -> None:
        await self._gate.run(MemoryWindow.write_bytes, offset, data)

    def close(self) -> None:
        self._gate.close()


def _read_values(w: MemoryWindow, offset: int, width: int, count: int) -> list[int]:
    return [w.read_value(offset + i * width, width) for i in range(count)]
