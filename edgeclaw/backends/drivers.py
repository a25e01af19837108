"""Where a board's drivers come from: one factory protocol, a real and a simulated implementation.

As gpiozero's devices take their pins from a pin factory, `BoardBackends` takes
its buses, pins, memory windows and links from a `BoardDrivers`: `RealDrivers`
opens the kernel's interfaces (smbus2 on /dev/i2c-N, spidev, gpiozero's default
pin library, mmap of the profile's device), `backends.sim.drivers.SimDrivers`
serves the sim board's device models. The hub chooses one from the profile, once;
nothing else asks whether the board is simulated.

Each method makes one handle the tools use (already gated: locked, bounded,
errors in words); the hub caches it and checks the profile's grant first.
Everything but I2C is imported when first made: a daemon that never touches
the probe never loads the GDB client, QEMU launcher or ctypes.

The debug probe and the ESP32 link are chosen by their grants rather than by the
board (`gdb_address = "qemu"`, `port = "sim"` may be named by any profile), so
both implementations make them the same way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.base import DeviceUnavailable
from edgeclaw.backends.i2c import I2CBus, SMBus2Driver
from edgeclaw.board import (
    ESP32Grant,
    GPIOPinGrant,
    I2CBusGrant,
    MemoryRegionGrant,
    ProbeGrant,
    SPIDeviceGrant,
)

if TYPE_CHECKING:
    from edgeclaw.backends.gpio import GPIOController
    from edgeclaw.backends.mmio import MemoryAccess
    from edgeclaw.backends.probe import DebugProbe
    from edgeclaw.backends.spi import SPIDevice


class BoardDrivers(ABC):
    """Makes the handles a board's backends hand out; `close()` releases what it started itself."""

    simulated: bool

    def __init__(self, state_dir: Path, *, timeout_s: float, flash_timeout_s: float) -> None:
        self.state_dir = state_dir
        self.timeout_s = timeout_s
        self.flash_timeout_s = flash_timeout_s
        self._sim_esp32: Any = None  # the reference firmware in-process, for `port = "sim"`

    @abstractmethod
    def i2c_bus(self, grant: I2CBusGrant) -> I2CBus: ...

    @abstractmethod
    def spi_device(self, grant: SPIDeviceGrant) -> SPIDevice: ...

    @abstractmethod
    def gpio(self, grants: Sequence[GPIOPinGrant]) -> GPIOController: ...

    @abstractmethod
    def memory_region(self, region: MemoryRegionGrant) -> MemoryAccess: ...

    @abstractmethod
    def onewire_root(self) -> Path:
        """The directory the kernel's 1-Wire devices appear under (`/sys/bus/w1/devices` on a board)."""

    @abstractmethod
    def serial_device(self, path: str) -> str:
        """The device behind a `[[serial]]` grant's path (`sim:NAME` names a sim part)."""

    def framebuffer_path(self, device: str) -> str:
        """The file behind a framebuffer display's `device` (`sim:NAME` names a file of the sim board)."""
        if device.startswith("sim:"):
            raise DeviceUnavailable(f"framebuffer {device!r} is a sim part: only a simulated board has one")
        return device

    def sim_parts(self) -> Any:
        """The sim board's device models (`backends.sim.board.SimParts`); only a simulated board has them."""
        raise DeviceUnavailable("this board is not simulated")

    def probe(self, grant: ProbeGrant) -> DebugProbe:
        from edgeclaw.backends.probe import GdbProbe, PyocdProbe, sim_probe

        timeouts = {"timeout_s": self.timeout_s, "flash_timeout_s": self.flash_timeout_s}
        if grant.transport == "pyocd":
            return PyocdProbe(grant.target, grant.probe_id, **timeouts)
        if grant.gdb_address == "qemu":
            probe = sim_probe(self.state_dir, grant.qemu_machine, **timeouts)
            if grant.reset_command:
                probe.reset_command = grant.reset_command
            return probe
        return GdbProbe(grant.gdb_address, reset_command=grant.reset_command, **timeouts)

    def esp32_port(self, grant: ESP32Grant) -> str:
        """The serial device the ESP32 bridge talks over: the grant's, or for `sim` the pty of the
        reference firmware's handler, started here."""
        if grant.port != "sim":
            return grant.port
        if self._sim_esp32 is None:
            from edgeclaw.backends.sim.esp32 import SimEsp32

            self._sim_esp32 = SimEsp32()
        return str(self._sim_esp32.port)

    def sim_bridge_port(self) -> str | None:
        """The pty of the in-process ESP32 once it runs, else None."""
        return str(self._sim_esp32.port) if self._sim_esp32 is not None else None

    def close(self) -> None:
        if self._sim_esp32 is not None:
            self._sim_esp32.close()
            self._sim_esp32 = None


class RealDrivers(BoardDrivers):
    """The kernel's interfaces: each blocks in the kernel, so each bus gets its own worker thread."""

    simulated = False

    def __init__(
        self, state_dir: Path, onewire_root: str, *, timeout_s: float, flash_timeout_s: float
    ) -> None:
        super().__init__(state_dir, timeout_s=timeout_s, flash_timeout_s=flash_timeout_s)
        self._onewire_root = Path(onewire_root)

    def i2c_bus(self, grant: I2CBusGrant) -> I2CBus:
        return I2CBus(SMBus2Driver(grant.bus, grant.device_path), timeout_s=self.timeout_s, threaded=True)

    def spi_device(self, grant: SPIDeviceGrant) -> SPIDevice:
        from edgeclaw.backends.spi import SpidevDriver, SPIDevice

        driver = SpidevDriver(grant.bus, grant.chip_select)
        return SPIDevice(driver, timeout_s=self.timeout_s, threaded=True)

    def gpio(self, grants: Sequence[GPIOPinGrant]) -> GPIOController:
        from edgeclaw.backends.gpio import GPIOController, GpiozeroDriver

        driver = GpiozeroDriver(list(grants), mock=False)
        return GPIOController(driver, timeout_s=self.timeout_s, threaded=True)

    def memory_region(self, region: MemoryRegionGrant) -> MemoryAccess:
        from edgeclaw.backends.mmio import MemoryAccess, MemoryWindow

        window = MemoryWindow(region, region.device, region.file_offset(), region.access == "rw")
        return MemoryAccess(window, timeout_s=self.timeout_s)

    def onewire_root(self) -> Path:
        return self._onewire_root

    def serial_device(self, path: str) -> str:
        if path.startswith("sim:"):
            raise DeviceUnavailable(f"serial port {path!r} is a sim part: only a simulated board has one")
        return path


__all__ = ["BoardDrivers", "RealDrivers"]
