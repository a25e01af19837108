"""The board's backends, chosen by its profile and opened on first use.

`BoardBackends` is what the hardware tools hold: it hands out the bus, pin
controller, memory window, probe or bridge a call needs — real drivers on a
board, the sim parts on `simulated = true` profiles — creating each once, on
the first call that needs it (a `tool call` that touches only I2C never
starts QEMU), and releasing all of them in `aclose()`, which the daemon
registers as a shutdown step. Only what the profile grants can be opened.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.base import DeviceUnavailable
from edgeclaw.backends.i2c import I2CBus, SMBus2Driver
from edgeclaw.board import BoardProfile, MemoryRegionGrant

# Everything but I2C is imported when first opened: a daemon that never touches the
# probe never loads the GDB client, QEMU launcher or ctypes.
if TYPE_CHECKING:
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


class BoardBackends:
    def __init__(self, profile: BoardProfile, config: HardwareConfig, state_dir: Path) -> None:
        if profile.spec is None:
            raise ValueError("the board profile has no schema")
        self.profile = profile
        self.spec = profile.spec
        self.config = config
        self.state_dir = state_dir
        self.simulated = profile.simulated
        self._sim: Any = None
        self._sim_esp32: Any = None
        self._i2c: dict[int, I2CBus] = {}
        self._spi: dict[tuple[int, int], SPIDevice] = {}
        self._gpio: GPIOController | None = None
        self._memory: dict[str, MemoryAccess] = {}
        self._probe: DebugProbe | None = None
        self._esp32: Esp32Bridge | None = None
        self._sensors: Sensors | None = None
        self._serial: SerialPorts | None = None
        self._sim_serial: dict[str, Any] = {}  # sim serial parts by name, each behind a pty

    @property
    def sim(self) -> Any:
        """The sim parts (`backends.sim.board.SimParts`); only on a simulated board."""
        if not self.simulated:
            raise DeviceUnavailable("this board is not simulated")
        if self._sim is None:
            from edgeclaw.backends.sim.board import SimParts

            self._sim = SimParts(self.state_dir)
        return self._sim

    def i2c(self, bus: int) -> I2CBus:
        found = self._i2c.get(bus)
        if found is not None:
            return found
        grant = self.profile.i2c_bus(bus)
        if grant is None:
            raise DeviceUnavailable(f"I2C bus {bus} is not granted by the board profile")
        if self.simulated:
            handle = I2CBus(self.sim.i2c_bus(bus), timeout_s=self.config.op_timeout_s, threaded=False)
        else:
            driver = SMBus2Driver(bus, grant.device_path)
            handle = I2CBus(driver, timeout_s=self.config.op_timeout_s, threaded=True)
        self._i2c[bus] = handle
        return handle

    def spi(self, bus: int, chip_select: int) -> SPIDevice:
        key = (bus, chip_select)
        found = self._spi.get(key)
        if found is not None:
            return found
        from edgeclaw.backends.spi import SpidevDriver, SPIDevice

        if self.profile.spi_device(bus, chip_select) is None:
            raise DeviceUnavailable(f"SPI {bus}.{chip_select} is not granted by the board profile")
        if self.simulated:
            part = self.sim.spi_device(bus, chip_select)
            if part is None:
                raise DeviceUnavailable(f"nothing is attached to the sim board's SPI {bus}.{chip_select}")
            handle = SPIDevice(part, timeout_s=self.config.op_timeout_s, threaded=False)
        else:
            handle = SPIDevice(
                SpidevDriver(bus, chip_select), timeout_s=self.config.op_timeout_s, threaded=True
            )
        self._spi[key] = handle
        return handle

    def gpio(self) -> GPIOController:
        if self._gpio is None:
            from edgeclaw.backends.gpio import GPIOController, GpiozeroDriver

            if not self.spec.gpio:
                raise DeviceUnavailable("the board profile grants no GPIO pins")
            driver = GpiozeroDriver(self.spec.gpio, mock=self.simulated)
            self._gpio = GPIOController(
                driver, timeout_s=self.config.op_timeout_s, threaded=not self.simulated
            )
        return self._gpio

    def memory(self, region: MemoryRegionGrant) -> MemoryAccess:
        found = self._memory.get(region.name)
        if found is not None:
            return found
        from edgeclaw.backends.mmio import MemoryAccess, MemoryWindow, sim_region_file

        writable = region.access == "rw"
        if self.simulated:
            window = MemoryWindow(region, str(sim_region_file(self.state_dir, region)), 0, writable)
        else:
            window = MemoryWindow(region, region.device, region.file_offset(), writable)
        handle = MemoryAccess(window, timeout_s=self.config.op_timeout_s)
        self._memory[region.name] = handle
        return handle

    def probe(self) -> DebugProbe:
        if self._probe is not None:
            return self._probe
        grant = self.spec.probe
        if grant is None:
            raise DeviceUnavailable("the board profile names no probe target")
        from edgeclaw.backends.probe import GdbProbe, PyocdProbe, sim_probe

        timeouts = {"timeout_s": self.config.op_timeout_s, "flash_timeout_s": self.config.flash_timeout_s}
        probe: DebugProbe
        if grant.transport == "pyocd":
            probe = PyocdProbe(grant.target, grant.probe_id, **timeouts)
        elif grant.gdb_address == "qemu":
            probe = sim_probe(self.state_dir, grant.qemu_machine, **timeouts)
            if grant.reset_command:
                probe.reset_command = grant.reset_command
        else:
            probe = GdbProbe(grant.gdb_address, reset_command=grant.reset_command, **timeouts)
        self._probe = probe
        return probe

    def sensors(self) -> Sensors:
        """The profile's declared devices, read through their parts' drivers over these backends."""
        if self._sensors is None:
            from edgeclaw.backends.sensors.registry import Sensors

            self._sensors = Sensors(self.profile, self)
        return self._sensors

    def esp32(self) -> Esp32Bridge:
        if self._esp32 is not None:
            return self._esp32
        grant = self.spec.esp32
        if grant is None:
            raise DeviceUnavailable("the board profile names no ESP32 bridge")
        from edgeclaw.backends.esp32 import Esp32Bridge

        port = grant.port
        if port == "sim":
            from edgeclaw.backends.sim.esp32 import SimEsp32

            self._sim_esp32 = SimEsp32()
            port = self._sim_esp32.port
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
        if not path.startswith("sim:"):
            return path
        if not self.simulated:
            raise DeviceUnavailable(f"serial port {path!r} is a sim part: only a simulated board has one")
        name = path.removeprefix("sim:")
        part = self._sim_serial.get(name)
        if part is None:
            from edgeclaw.backends.sim.modem import SIM_SERIAL_PARTS

            make = SIM_SERIAL_PARTS.get(name)
            if make is None:
                known = ", ".join(f"sim:{n}" for n in sorted(SIM_SERIAL_PARTS))
                raise DeviceUnavailable(f"the sim board has no serial part {path!r} (it has {known})")
            part = self._sim_serial[name] = make()
        return str(part.port)

    def bridge_port(self) -> str | None:
        """The device the ESP32 bridge talks over (the sim bridge's pty once it runs), else None."""
        if self._sim_esp32 is not None:
            return str(self._sim_esp32.port)
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
        if self._sim_esp32 is not None:
            self._sim_esp32.close()
        for part in self._sim_serial.values():
            part.close()
        self._sim_serial.clear()
        if self._sim is not None:
            self._sim.close()
        self._i2c.clear()
        self._spi.clear()
        self._memory.clear()
        self._gpio = self._probe = self._esp32 = self._sim_esp32 = None
        self._sensors = None  # its drivers hold the buses just closed
        self._serial = None


__all__ = ["BackendError", "BoardBackends"]
