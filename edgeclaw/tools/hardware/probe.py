"""`probe`: the debug-probe target the profile names — memory, core registers, run control, flashing.

Memory accesses must lie inside the profile's target regions (writes only to
`rw` ones); halt / resume / reset need `control = true`; flashing needs
`flash = true`, an image file inside the workspace, and the image must fit
the profile's flash area. Flashing reports its progress (erase, write,
verify) in the result and in the log as it goes.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import Any, ClassVar

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.board import BoardProfile, ProbeGrant, TargetRegion, region_holding
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.hardware.common import bytes_schema, data_bytes, hex_dump, int_or_hex, number, result
from edgeclaw.tools.workspace import FileTooLarge, Workspace

log = logging.getLogger("edgeclaw.tools.probe")

CONTROL = ("halt", "resume", "reset")
ACTIONS = ("info", "read_memory", "write_memory", "read_registers", *CONTROL, "flash")


class ProbeTool(Tool):
    name = "probe"
    observing_actions = frozenset({"info", "read_memory", "read_registers"})
    group = "hardware"
    description = (
        "The microcontroller behind the debug probe, such as an attached STM32. "
        "Actions: info (target and state), "
        "read_memory (address, length), write_memory (address, data), read_registers (core registers), "
        "halt, resume, reset, flash (path: a raw .bin image in the workspace; base defaults to the flash "
        "start). Only addresses inside the profile's target regions."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": list(ACTIONS)},
            "address": int_or_hex('target address, e.g. 134217728 or "0x08000000"', 0, 0xFFFF_FFFF),
            "length": {"type": "integer", "minimum": 1, "maximum": 1 << 20},
            "data": bytes_schema("bytes for write_memory", 1 << 16),
            "path": {"type": "string", "minLength": 1, "maxLength": 4096},
            "base": int_or_hex("flash address to program at", 0, 0xFFFF_FFFF),
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

    def _flash_target(self, grant: ProbeGrant, args: Args) -> tuple[int, Path]:
        """Where to program, and the resolved image path; the image itself is judged on what is read."""
        if not grant.flash:
            raise ToolRefused(f"flashing the target is not granted by the {self.profile.name} profile")
        if self.workspace is None:
            raise ToolRefused("flashing needs a workspace to read the image from")
        if "path" not in args:
            raise ToolRefused("argument 'path' (the image file, in the workspace) is required for flash")
        base = number(args, "base", lo=0, hi=0xFFFF_FFFF, default=grant.flash_base)
        if not grant.flash_base <= base < grant.flash_base + grant.flash_size:
            raise ToolRefused(f"0x{base:08x} is outside {self._flash_area(grant)}")
        return base, self.workspace.resolve(args["path"], must_exist=True)

    def _flash_area(self, grant: ProbeGrant) -> str:
        end = grant.flash_base + grant.flash_size - 1
        return f"the flash area 0x{grant.flash_base:08x}-0x{end:08x} of the {self.profile.name} profile"

    def _load_image(self, grant: ProbeGrant, base: int, path: Path, shown: str) -> bytes:
        """The image, read through one safe open (`Workspace.read_file`) and never more than fits.

        Size and type are checked on the descriptor the bytes come from, so a
        symlink or a bigger file swapped in after `check` cannot change what is
        flashed: the daemon's environment, its config or key files never reach
        the target, and nothing is written past the end of the flash area.
        """
        assert self.workspace is not None  # _flash_target refused otherwise
        room = grant.flash_base + grant.flash_size - base
        try:
            image = self.workspace.read_file(path, limit=room, shown=shown).data
        except FileTooLarge as e:
            raise ToolRefused(
                f"a {e.size}-byte image at 0x{base:08x} does not fit {self._flash_area(grant)}"
            ) from None
        except OSError as e:
            raise ToolError(f"cannot read {shown!r}: {e.strerror or e}") from None
        if not image:
            raise ToolRefused(f"{shown!r} is empty")
        return image

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
            base, path = self._flash_target(grant, args)
            await asyncio.to_thread(self._load_image, grant, base, path, args["path"])

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
        return await self._flash(grant, args)

    async def _flash(self, grant: ProbeGrant, args: Args) -> ToolResult:
        base, path = self._flash_target(grant, args)
        image = await asyncio.to_thread(self._load_image, grant, base, path, args["path"])
        steps: list[str] = []
        last: dict[str, int] = {}

        def progress(phase: str, done: int, total: int) -> None:
            # Report each phase in quarter steps: enough to follow, few enough to read.
            pct = 100 * done // max(total, 1)
            quarter = pct // 25
            if last.get(phase, -1) < quarter:
                last[phase] = quarter
                line = f"{phase} {pct}% ({done}/{total} bytes)"
                steps.append(line)
                log.info("flashing %s: %s", path.name, line)

        method = await self.backends.probe().flash(base, image, progress)
        payload = {"base": f"0x{base:08x}", "bytes": len(image), "method": method, "progress": steps}
        text = "\n".join([*steps, f"flashed {len(image)} bytes at 0x{base:08x} ({method})"])
        return result(payload, text)
