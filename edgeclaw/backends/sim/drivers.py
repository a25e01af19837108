"""`SimDrivers`: the sim board's implementation of the driver factory (`backends.drivers.BoardDrivers`).

I2C buses and SPI devices are the sim parts' models (`SimParts`, built from the
wiring on first use), GPIO pins are gpiozero's MockFactory pins, a memory
region is a file in the state directory, the 1-Wire tree is written there too,
and `sim:NAME` serial ports are sim parts behind ptys. Sim drivers answer in
microseconds, so every bus runs inline rather than on a worker thread — unless
`threaded`, which runs the I2C and SPI buses on worker threads as a board's do,
so a test's "hang" fault is cut off by the deadline rather than stopping the loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.base import DeviceUnavailable
from edgeclaw.backends.drivers import BoardDrivers
from edgeclaw.backends.i2c import I2CBus
from edgeclaw.board import (
    DeviceSpec,
    DisplayGrant,
    GPIOPinGrant,
    I2CBusGrant,
    MemoryRegionGrant,
    SPIDeviceGrant,
)

if TYPE_CHECKING:
    from edgeclaw.backends.gpio import GPIOController
    from edgeclaw.backends.mmio import MemoryAccess
    from edgeclaw.backends.sim.board import SimParts
    from edgeclaw.backends.spi import SPIDevice


class SimDrivers(BoardDrivers):
    """The sim board's drivers. `wiring` is the `[[devices]]` its parts are built from (by default the
    shipped sim profile's: the sim board as every simulated profile sees it) and `displays` the
    `[[displays]]` (by default the shipped sim profile's when `wiring` is too, else none); `threaded`
    puts the I2C and SPI buses on worker threads (see the module docstring)."""

    simulated = True

    def __init__(
        self,
        state_dir: Path,
        *,
        timeout_s: float,
        flash_timeout_s: float,
        wiring: Sequence[DeviceSpec] | None = None,
        displays: Sequence[DisplayGrant] | None = None,
        threaded: bool = False,
    ) -> None:
        super().__init__(state_dir, timeout_s=timeout_s, flash_timeout_s=flash_timeout_s)
        self._wiring = wiring
        self._displays = displays
        self.threaded = threaded
        self._parts: SimParts | None = None
        self._serial_parts: dict[str, Any] = {}  # sim serial parts by name, each behind a pty

    def sim_parts(self) -> SimParts:
        if self._parts is None:
            from edgeclaw.backends.sim.board import SimParts, sim_displays, sim_wiring

            wiring = self._wiring if self._wiring is not None else sim_wiring()
            displays = self._displays
            if displays is None:
                displays = sim_displays() if self._wiring is None else []
            self._parts = SimParts(self.state_dir, wiring, displays)
        return self._parts

    def i2c_bus(self, grant: I2CBusGrant) -> I2CBus:
        return I2CBus(self.sim_parts().i2c_bus(grant.bus), timeout_s=self.timeout_s, threaded=self.threaded)

    def spi_device(self, grant: SPIDeviceGrant) -> SPIDevice:
        from edgeclaw.backends.spi import SPIDevice

        part = self.sim_parts().spi_device(grant.bus, grant.chip_select)
        if part is None:
            raise DeviceUnavailable(
                f"nothing is attached to the sim board's SPI {grant.bus}.{grant.chip_select}"
            )
        return SPIDevice(part, timeout_s=self.timeout_s, threaded=self.threaded)

    def gpio(self, grants: Sequence[GPIOPinGrant]) -> GPIOController:
        from edgeclaw.backends.gpio import GPIOController, GpiozeroDriver

        driver = GpiozeroDriver(list(grants), mock=True)
        return GPIOController(driver, timeout_s=self.timeout_s, threaded=False)

    def memory_region(self, region: MemoryRegionGrant) -> MemoryAccess:
        from edgeclaw.backends.mmio import MemoryAccess, MemoryWindow, sim_region_file

        path = str(sim_region_file(self.state_dir, region))
        return MemoryAccess(MemoryWindow(region, path, 0, region.access == "rw"), timeout_s=self.timeout_s)

    def onewire_root(self) -> Path:
        return self.sim_parts().onewire_root  # written when the parts are built

    def serial_device(self, path: str) -> str:
        if not path.startswith("sim:"):
            return path  # a simulated board may grant a real port too
        name = path.removeprefix("sim:")
        part = self._serial_parts.get(name)
        if part is None:
            from edgeclaw.backends.sim.modem import SIM_SERIAL_PARTS

            make = SIM_SERIAL_PARTS.get(name)
            if make is None:
                known = ", ".join(f"sim:{n}" for n in sorted(SIM_SERIAL_PARTS))
                raise DeviceUnavailable(f"the sim board has no serial part {path!r} (it has {known})")
            part = self._serial_parts[name] = make()
        return str(part.port)

    def framebuffer_path(self, device: str) -> str:
        if not device.startswith("sim:"):
            return device  # a simulated board may grant a real framebuffer too
        name = device.removeprefix("sim:")
        if not name.replace("-", "").replace("_", "").isalnum():
            raise DeviceUnavailable(f"the sim board has no framebuffer {device!r}")
        return str(self.state_dir / "sim" / f"{name}.fb")  # made, all black, when first opened

    def close(self) -> None:
        super().close()
        for part in self._serial_parts.values():
            part.close()
        self._serial_parts.clear()
        if self._parts is not None:
            self._parts.close()  # kept: a test may still look at what the models hold


__all__ = ["SimDrivers"]
