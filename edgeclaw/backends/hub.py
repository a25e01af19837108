"""The board's backends, chosen by its profile and opened on first use.

`BoardBackends` is what the hardware tools hold: it hands out the bus, pin
controller, memory window, probe or bridge a call needs, creating each once,
on the first call that needs it (a `tool call` that touches only I2C never
starts QEMU), and releasing all of them in `aclose()`, which the daemon
registers as a shutdown step. Only what the profile grants can be opened.
Where each comes from is the driver factory's to say (`backends.drivers`):
`RealDrivers` on a board, `SimDrivers` on a `simulated = true` profile,
chosen once here.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.base import DeviceUnavailable
from edgeclaw.backends.drivers import BoardDrivers, RealDrivers
from edgeclaw.backends.i2c import I2CBus
from edgeclaw.board import BoardProfile, MemoryRegionGrant

# Everything but I2C is imported when first opened: a daemon that never touches the
# probe never loads the GDB client, QEMU launcher or ctypes.
if TYPE_CHECKING:
    from edgeclaw.backends.display import Display
    from edgeclaw.backends.esp32 import Esp32Bridge
    from edgeclaw.backends.gpio import GPIOController
    from edgeclaw.backends.mmio import MemoryAccess
    from edgeclaw.backends.probe import DebugProbe
    from edgeclaw.backends.sensors.registry import Sensors
    from edgeclaw.backends.serial import SerialPorts
    from edgeclaw.backends.spi import SPIDevice
from edgeclaw.config.schema import HardwareConfig
from edgeclaw.errors import BackendError

log = logging.getLogger("edgeclaw.backends")


def drivers_for(profile: BoardProfile, config: HardwareConfig, state_dir: Path) -> BoardDrivers:
    """The driver factory for a board: the sim board's on a simulated profile, else the kernel's."""
    timeouts = {"timeout_s": config.op_timeout_s, "flash_timeout_s": config.flash_timeout_s}
    if profile.simulated:
        from edgeclaw.backends.sim.drivers import SimDrivers

        return SimDrivers(state_dir, **timeouts)
    assert profile.spec is not None
    return RealDrivers(state_dir, profile.spec.onewire.root, **timeouts)


class BoardBackends:
    def __init__(
        self,
        profile: BoardProfile,
        config: HardwareConfig,
        state_dir: Path,
        drivers: BoardDrivers | None = None,
    ) -> None:
        if profile.spec is None:
            raise ValueError("the board profile has no schema")
        self.profile = profile
        self.spec = profile.spec
        self.config = config
        self.state_dir = state_dir
        # Given: a test's own factory (edgeclaw.testing.SimBoard passes the sim's with its wiring).
        self.drivers = drivers if drivers is not None else drivers_for(profile, config, state_dir)
        self._i2c: dict[int, I2CBus] = {}
        self._spi: dict[tuple[int, int], SPIDevice] = {}
        self._gpio: GPIOController | None = None
        self._memory: dict[str, MemoryAccess] = {}
        self._probe: DebugProbe | None = None
        self._esp32: Esp32Bridge | None = None
        self._sensors: Sensors | None = None
        self._serial: SerialPorts | None = None
        self._displays: dict[str, Display] = {}

    @property
    def sim(self) -> Any:
        """The sim parts (`backends.sim.board.SimParts`); only on a simulated board."""
        return self.drivers.sim_parts()

    @property
    def timeout_s(self) -> float:
        """Every operation's deadline (the config's `hardware.op_timeout_s`)."""
        return self.config.op_timeout_s

    def i2c(self, bus: int) -> I2CBus:
        found = self._i2c.get(bus)
        if found is not None:
            return found
        grant = self.profile.i2c_bus(bus)
        if grant is None:
            raise DeviceUnavailable(f"I2C bus {bus} is not granted by the board profile")
        handle = self._i2c[bus] = self.drivers.i2c_bus(grant)
        return handle

    def spi(self, bus: int, chip_select: int) -> SPIDevice:
        key = (bus, chip_select)
        found = self._spi.get(key)
        if found is not None:
            return found
        grant = self.profile.spi_device(bus, chip_select)
        if grant is None:
            raise DeviceUnavailable(f"SPI {bus}.{chip_select} is not granted by the board profile")
        handle = self._spi[key] = self.drivers.spi_device(grant)
        return handle

    def gpio(self) -> GPIOController:
        if self._gpio is None:
            if not self.spec.gpio:
                raise DeviceUnavailable("the board profile grants no GPIO pins")
            self._gpio = self.drivers.gpio(self.spec.gpio)
        return self._gpio

    def memory(self, region: MemoryRegionGrant) -> MemoryAccess:
        found = self._memory.get(region.name)
        if found is not None:
            return found
        handle = self._memory[region.name] = self.drivers.memory_region(region)
        return handle

    def probe(self) -> DebugProbe:
        if self._probe is None:
            grant = self.spec.probe
            if grant is None:
                raise DeviceUnavailable("the board profile names no probe target")
            self._probe = self.drivers.probe(grant)
        return self._probe

    def onewire_root(self) -> Path:
        """Where the 1-Wire devices appear (the kernel's sysfs tree, or the sim's copy of it)."""
        return self.drivers.onewire_root()

    def sensors(self) -> Sensors:
        """The profile's declared devices, read through their parts' drivers over these backends."""
        if self._sensors is None:
            from edgeclaw.backends.sensors.registry import Sensors

            self._sensors = Sensors(self.profile, self)
        return self._sensors

    def display(self, name: str) -> Display:
        """A `[[displays]]` screen by name, its driver over the buses that reach it."""
        found = self._displays.get(name)
        if found is not None:
            return found
        grant = self.profile.display(name)
        if grant is None:
            raise DeviceUnavailable(f"display {name!r} is not declared by the board profile")
        from edgeclaw.backends.display import open_display

        handle = self._displays[name] = open_display(grant, self)
        return handle

    def esp32(self) -> Esp32Bridge:
        if self._esp32 is not None:
            return self._esp32
        grant = self.spec.esp32
        if grant is None:
            raise DeviceUnavailable("the board profile names no ESP32 bridge")
        from edgeclaw.backends.esp32 import Esp32Bridge

        port = self.drivers.esp32_port(grant)
        self._esp32 = Esp32Bridge(port, grant.baud, timeout_s=self.config.op_timeout_s)
        return self._esp32

    def serial(self) -> SerialPorts:
        """The serial ports the `serial` tool opens (which ones it may is the tool's to check)."""
        if self._serial is None:
            from edgeclaw.backends.serial import SerialPorts

            self._serial = SerialPorts()
        return self._serial

    def serial_device(self, path: str) -> str:
        """The device behind a `[[serial]]` grant: its path, or on a simulated board for `sim:NAME`
        the pty of that sim part, started on first use."""
        return self.drivers.serial_device(path)

    def bridge_port(self) -> str | None:
        """The device the ESP32 bridge talks over (the sim bridge's pty once it runs), else None."""
        running = self.drivers.sim_bridge_port()
        if running is not None:
            return running
        grant = self.spec.esp32
        return grant.port if grant is not None and grant.port != "sim" else None

    def firmware(self) -> dict[str, Any]:
        """What is attached, as far as it is known without touching it (for the fleet's status): the
        ESP32 bridge (its firmware version once it has shaken hands, else null) and the probe's
        target. None for what the board profile does not name."""
        spec = self.spec
        esp32: dict[str, Any] | None = None
        if spec.esp32 is not None:
            peer = self._esp32.peer if self._esp32 is not None else {}
            esp32 = {"port": spec.esp32.port, "firmware": peer.get("firmware")}
        probe: dict[str, Any] | None = None
        if spec.probe is not None:
            probe = {"target": spec.probe.target, "transport": spec.probe.transport}
        return {"esp32": esp32, "probe": probe}

    def live(self) -> list[str]:
        """Which backends are open right now, for hardware_info."""
        out = [f"i2c bus {n}" for n in sorted(self._i2c)]
        out += [f"spi {b}.{c}" for b, c in sorted(self._spi)]
        if self._gpio is not None:
            out.append("gpio")
        out += [f"memory {name}" for name in sorted(self._memory)]
        if self._probe is not None:
            out.append(f"probe ({self._probe.description})")
        if self._esp32 is not None and self._esp32.is_open:
            out.append(f"esp32 ({self._esp32.port})")
        if self._serial is not None:
            out += [f"serial {path}" for path in self._serial.open_paths()]
        return out

    async def aclose(self) -> None:
        """Release every device, each independently: one failing must not keep the others open."""
        steps: list[Any] = [*self._i2c.values(), *self._spi.values(), *self._memory.values()]
        if self._gpio is not None:
            steps.append(self._gpio)
        if self._serial is not None:
            steps.append(self._serial)
        for handle in steps:
            try:
                handle.close()
            except Exception:
                log.exception("error closing %r", handle)
        for closer in (self._probe, self._esp32):
            if closer is not None:
                try:
                    await asyncio.wait_for(closer.close(), 5.0)
                except (Exception, TimeoutError):
                    log.exception("error closing %r", closer)
        self.drivers.close()
        self._i2c.clear()
        self._spi.clear()
        self._memory.clear()
        self._gpio = self._probe = self._esp32 = None
        self._sensors = None  # its drivers hold the buses just closed
        self._displays.clear()  # likewise
        self._serial = None


__all__ = ["BackendError", "BoardBackends"]
