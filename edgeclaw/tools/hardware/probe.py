"""`probe`: the debug-probe target the profile names — memory, core registers, run control, flashing.

Memory accesses must lie inside the profile's target regions (writes only to
`rw` ones); halt / resume / reset need `control = true`; flashing needs
`flash = true`, an image file inside the workspace, and the image must fit
the profile's flash area. Flashing reports its progress (erase, write,
verify) in the result and in the log as it goes.

An image is a raw binary (at `base`, the flash start by default), an Intel HEX
or an ELF file (`edgeclaw.backends.firmware_image`): each of its segments must
lie inside the flash area (written by the probe's flash path) or inside a `rw`
target region (loaded into RAM with memory writes), or nothing is written.
Every segment is read back and compared; `reset = true` (which needs
`control`) resets the target afterwards. The caller sees the progress while it
runs when its channel can show it (`ToolContext.progress`: a progress line on
the console, progress messages on MQTT, a bar in `edgeclaw tool call`).
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, ClassVar

from edgeclaw.backends.firmware_image import (
    FORMATS,
    FirmwareImage,
    Segment,
    detect_format,
    parse_image,
)
from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile, ProbeGrant, TargetRegion, region_holding
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.fs.workspace import FileTooLarge, Workspace
from edgeclaw.tools.hardware.common import bytes_schema, data_bytes, hex_dump, int_or_hex, number, result
from edgeclaw.tools.progress import PacedProgress

log = logging.getLogger("edgeclaw.tools.probe")

CONTROL = ("halt", "resume", "reset")
# A HEX file is ~2.8 bytes of text per byte of data, an ELF holds symbols and debug sections beside
# the code: the file may be this many times the room it is programmed into (and never more).
IMAGE_FILE_FACTOR = 4
IMAGE_FILE_SLACK = 1 << 20
ACTIONS = ("info", "read_memory", "write_memory", "read_registers", *CONTROL, "flash")


class ProbeTool(Tool):
    name = "probe"
    observing_actions = frozenset({"info", "read_memory", "read_registers"})
    group = "hardware"
    description = (
        "The microcontroller behind the debug probe, such as an attached STM32. "
        "Actions: info (target and state), "
        "read_memory (address, length), write_memory (address, data), read_registers (core registers), "
        "halt, resume, reset, flash (path: a .bin, Intel .hex or .elf image in the workspace; base, for a "
        ".bin only, defaults to the flash start; reset: true resets the target after the verify). "
        "Only addresses inside the profile's target regions."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "address": int_or_hex('target address, e.g. 134217728 or "0x08000000"', 0, 0xFFFF_FFFF),
            "length": {"type": "integer", "minimum": 1, "maximum": 1 << 20},
            "data": bytes_schema("bytes for write_memory", 1 << 16),
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "base": int_or_hex("address to program a raw binary at", 0, 0xFFFF_FFFF),
            "format": {
                "type": "string",
                "enum": list(FORMATS),
                "description": "image format; auto by content",
            },
            "reset": {"type": "boolean", "description": "reset the target after flashing and verifying"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(
        self,
        profile: BoardProfile,
        config: HardwareConfig,
        backends: BoardBackends,
        workspace: Workspace | None = None,
    ) -> None:
        self.profile = profile
        self.config = config
        self.backends = backends
        self.workspace = workspace

    def _grant(self) -> ProbeGrant:
        grant = self.profile._spec.probe
        if grant is None:
            raise ToolRefused(f"the {self.profile.name} profile names no probe target")
        return grant

    def _region(self, grant: ProbeGrant, address: int, length: int, write: bool) -> TargetRegion:
        region = region_holding(grant.regions, address, length)
        if region is not None:
            if write and region.access != "rw":
                raise ToolRefused(
                    f"target region {region.name!r} is read-only in the {self.profile.name} profile"
                )
            return region
        granted = ", ".join(f"{r.name} 0x{r.base:08x}-0x{r.end - 1:08x}" for r in grant.regions) or "none"
        raise ToolRefused(
            f"0x{address:08x}..0x{address + length - 1:08x} is not inside a target region of the "
            f"{self.profile.name} profile (granted: {granted})"
        )

    def _flash_target(self, grant: ProbeGrant, args: Args) -> Path:
        """The resolved image path; the image itself is judged on what is read."""
        if self.workspace is None:
            raise ToolRefused("flashing needs a workspace to read the image from")
        if "path" not in args:
            raise ToolRefused("argument 'path' (the image file, in the workspace) is required for flash")
        if args.get("reset") and not grant.control:
            raise ToolRefused(
                f"reset after flashing is not granted by the {self.profile.name} profile (control = false)"
            )
        return self.workspace.resolve(args["path"], must_exist=True)

    def _flash_area(self, grant: ProbeGrant) -> str:
        end = grant.flash_base + grant.flash_size - 1
        return f"the flash area 0x{grant.flash_base:08x}-0x{end:08x} of the {self.profile.name} profile"

    def _room(self, grant: ProbeGrant) -> int:
        """The most bytes an image may hold: the flash area plus every rw region."""
        return grant.flash_size + sum(r.end - r.base for r in grant.regions if r.access == "rw")

    def _load_image(self, grant: ProbeGrant, path: Path, args: Args) -> FirmwareImage:
        """The image, read through one safe open (`Workspace.read_file`) and never more than fits,
        with every segment placed where the profile lets it go.

        Size and type are checked on the descriptor the bytes come from, so a
        symlink or a bigger file swapped in after `check` cannot change what is
        flashed: the daemon's environment, its config or key files never reach
        the target, and nothing is written past the end of the flash area.
        """
        assert self.workspace is not None  # _flash_target refused otherwise
        shown = args["path"]
        base = number(args, "base", lo=0, hi=0xFFFF_FFFF) if "base" in args else None
        limit = self._room(grant) * IMAGE_FILE_FACTOR + IMAGE_FILE_SLACK
        try:
            data = self.workspace.read_file(path, limit=limit, shown=shown).data
        except FileTooLarge as e:
            raise ToolRefused(
                f"{shown!r} ({e.size} bytes) is larger than any image the {self.profile.name} profile "
                f"has room for"
            ) from None
        except OSError as e:
            raise ToolError(f"cannot read {shown!r}: {e.strerror or e}") from None
        if not data:
            raise ToolRefused(f"{shown!r} is empty")
        fmt = str(args.get("format", "auto"))
        if base is None and (detect_format(data, shown) if fmt == "auto" else fmt) == "bin":
            base = grant.flash_base  # a raw binary goes to the start of flash unless told otherwise
        image = parse_image(data, shown, fmt=fmt, base=base)  # ImageError: the call's error, not a refusal
        for segment in image.segments:
            self._place(grant, segment, image)
        return image

    def _place(self, grant: ProbeGrant, segment: Segment, image: FirmwareImage) -> str:
        """Where a segment goes: "flash" (inside the flash area) or "ram" (inside a rw region)."""
        flash_end = grant.flash_base + grant.flash_size
        where = f"0x{segment.address:08x}"
        if grant.flash_size and grant.flash_base <= segment.address < flash_end:
            if not grant.flash:
                raise ToolRefused(f"flashing the target is not granted by the {self.profile.name} profile")
            if segment.end > flash_end:
                raise ToolRefused(
                    f"a {len(segment.data)}-byte {'image' if image.format == 'bin' else 'segment'} at "
                    f"{where} does not fit {self._flash_area(grant)}"
                )
            return "flash"
        region = region_holding(grant.regions, segment.address, len(segment.data))
        if region is not None and region.access == "rw":
            return "ram"
        rw = ", ".join(
            f"{r.name} 0x{r.base:08x}-0x{r.end - 1:08x}" for r in grant.regions if r.access == "rw"
        )
        flash_area = self._flash_area(grant) if grant.flash else "the flash area (flash = false)"
        raise ToolRefused(
            f"a {len(segment.data)}-byte segment at {where} lies neither in {flash_area} "
            f"nor inside a rw target region of the {self.profile.name} profile (rw: {rw or 'none'})"
        )

    async def check(self, args: Args, ctx: ToolContext) -> None:
        grant = self._grant()
        action = args["action"]
        if action == "read_memory":
            length = number(args, "length", lo=1, hi=self.config.max_read_bytes)
            self._region(grant, number(args, "address", lo=0, hi=0xFFFF_FFFF), length, write=False)
        elif action == "write_memory":
            data = data_bytes(args, "data", max_len=self.config.max_read_bytes)
            self._region(grant, number(args, "address", lo=0, hi=0xFFFF_FFFF), len(data), write=True)
        elif action in CONTROL and not grant.control:
            raise ToolRefused(f"{action} is not granted by the {self.profile.name} profile (control = false)")
        elif action == "flash":
            path = self._flash_target(grant, args)
            await asyncio.to_thread(self._load_image, grant, path, args)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        grant = self._grant()
        action = args["action"]
        probe = self.backends.probe()
        if action == "info":
            state = await probe.state()
            payload = {
                "target": grant.target,
                "transport": grant.transport,
                "via": probe.description,
                "state": state,
            }
            return result(payload, f"target {grant.target} via {probe.description}: {state}")
        if action == "read_memory":
            address, length = number(args, "address", hi=0xFFFF_FFFF), number(args, "length", lo=1)
            data = await probe.read_memory(address, length)
            words = [
                int.from_bytes(data[i : i + 4], "little") for i in range(0, len(data) - len(data) % 4, 4)
            ]
            payload = {
                "address": f"0x{address:08x}",
                "length": len(data),
                "data": data.hex(" "),
                "words_le": words,
            }
            return result(payload, hex_dump(address, data))
        if action == "write_memory":
            address = number(args, "address", hi=0xFFFF_FFFF)
            data = data_bytes(args, "data", max_len=self.config.max_read_bytes)
            await probe.write_memory(address, data)
            return result(
                {"address": f"0x{address:08x}", "written": len(data)},
                f"wrote {len(data)} bytes at 0x{address:08x}",
            )
        if action == "read_registers":
            registers = await probe.read_registers()
            text = "  ".join(f"{name}=0x{value:08x}" for name, value in registers.items())
            return result({"registers": registers}, text)
        if action == "halt":
            how = await probe.halt()
            return result({"state": "halted", "detail": how}, f"target {how}")
        if action == "resume":
            await probe.resume()
            return result({"state": "running"}, "target running")
        if action == "reset":
            await probe.reset()
            return result(
                {"state": "reset"}, "target reset (halted at the reset vector where the probe supports it)"
            )
        return await self._flash(grant, args, ctx)

    async def _flash(self, grant: ProbeGrant, args: Args, ctx: ToolContext) -> ToolResult:
        path = self._flash_target(grant, args)
        image = await asyncio.to_thread(self._load_image, grant, path, args)
        tracker = FlashProgress(image, path.name, PacedProgress(ctx.progress) if ctx.progress else None)
        probe = self.backends.probe()
        try:
            method = await probe.program(list(image.segments), tracker.report)
        finally:
            tracker.close()
        segments = [
            {"address": f"0x{s.address:08x}", "bytes": len(s.data), "to": self._place(grant, s, image)}
            for s in image.segments
        ]
        first = image.segments[0].address
        payload: dict[str, Any] = {
            "base": f"0x{first:08x}",
            "bytes": image.size,
            "format": image.format,
            "segments": segments,
            "method": method,
            "progress": tracker.steps,
        }
        where = (
            f"at 0x{first:08x}" if len(segments) == 1 else f"in {len(segments)} segments from 0x{first:08x}"
        )
        lines = [*tracker.steps, f"flashed {image.size} bytes {where} ({image.format}, {method})"]
        if args.get("reset"):
            await probe.reset()
            payload["reset"] = True
            lines.append("target reset")
        return result(payload, "\n".join(lines))


class FlashProgress:
    """One flash call's progress: quarter steps per phase for the answer and the log, and every
    update to the caller's sink (held to a pace) as work done of work to do.

    The backend reports (segment index, phase, done, total) per segment; the phases' figures are
    summed over all segments, so "write 100%" means every segment is written. The work is the
    image written once and read back once, so the caller's figure only grows.
    """

    def __init__(self, image: FirmwareImage, name: str, sink: PacedProgress | None) -> None:
        self.name = name
        self.size = image.size
        self.segments = image.segments
        self.sink = sink
        self.steps: list[str] = []
        self._done: dict[tuple[str, int], int] = {}
        self._quarter: dict[str, int] = {}

    def report(self, index: int, phase: str, done: int, total: int) -> None:
        if phase == "erase":
            if done >= total > 0:
                line = f"erase {total} bytes at 0x{self.segments[index].address:08x}"
                self.steps.append(line)
                log.info("flashing %s: %s", self.name, line)
            return
        self._done[(phase, index)] = min(done, len(self.segments[index].data))
        phase_done = sum(v for (p, _), v in self._done.items() if p == phase)
        pct = 100 * phase_done // max(self.size, 1)
        quarter = pct // 25
        line = f"{phase} {pct}% ({phase_done}/{self.size} bytes)"
        if self._quarter.get(phase, -1) < quarter:
            # Each phase in quarter steps: enough to follow, few enough to read.
            self._quarter[phase] = quarter
            self.steps.append(line)
            log.info("flashing %s: %s", self.name, line)
        if self.sink is not None:
            work = sum(self._done.values())
            self.sink(float(work), float(2 * self.size), f"flashing {self.name}: {line}")

    def close(self) -> None:
        if self.sink is not None:
            self.sink.close()
