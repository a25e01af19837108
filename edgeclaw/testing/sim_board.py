"""`SimBoard`: the sim board's backends for a test, its device models and its faults at hand.

The backends are the daemon's own (`BoardBackends` over `SimDrivers`): the same
bus locks, deadlines, error words and sensor drivers a tool call goes through,
so code tested here runs the same way on the daemon's sim board, and on a board
whose parts follow the same datasheets.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.backends.sensors.registry import Sensors
from edgeclaw.backends.sim.board import SimParts
from edgeclaw.backends.sim.drivers import SimDrivers
from edgeclaw.backends.sim.i2c import Fault, SimI2CBus
from edgeclaw.board import BoardProfile, DeviceSpec, load_profile
from edgeclaw.config.schema import HardwareConfig


class SimBoard:
    """The sim board under a profile's grants.

    `profile` is a profile, its name or its file (default: the shipped `sim`); its grants bound
    what the backends open, as on the daemon. `devices` are the `[[devices]]` the sim builds its
    parts from: by default the sim board's own wiring (the sim profile's, as the daemon uses);
    pass `profile.devices` to have the sim answer for the parts your own profile declares (the
    sim's fixed TMP102, BME280, 24C32 and MCP3008 are there too, where nothing else sits).
    `threaded` runs the I2C and SPI buses on worker threads, as on a board, so an injected "hang"
    is cut off by the deadline (`config.op_timeout_s`) instead of stopping the event loop.

        async with SimBoard(tmp_path) as board:
            board.parts.device("board temperature").temperature_c = 30.0
            board.inject(0x48, "nack")
            await board.sensors().read("board temperature")  # SensorError, kind "nack"
    """

    def __init__(
        self,
        state_dir: Path,
        profile: BoardProfile | str | Path = "sim",
        *,
        devices: Sequence[DeviceSpec] | None = None,
        config: HardwareConfig | None = None,
        threaded: bool = False,
    ) -> None:
        if not isinstance(profile, BoardProfile):
            profile = load_profile(str(profile))
        self.profile = profile
        config = config if config is not None else HardwareConfig()
        self.drivers = SimDrivers(
            state_dir,
            timeout_s=config.op_timeout_s,
            flash_timeout_s=config.flash_timeout_s,
            wiring=devices,
            threaded=threaded,
        )
        self.backends = BoardBackends(profile, config, state_dir, drivers=self.drivers)

    @property
    def parts(self) -> SimParts:
        """The device models: `parts.device(NAME)` by the `[[devices]]` entry's name, `parts.PART`
        for the first of a part (`parts.tmp102`, `parts.eeprom`), `parts.onewire` for the 1-Wire tree."""
        parts: SimParts = self.backends.sim
        return parts

    def i2c_bus(self, bus: int = 1) -> SimI2CBus:
        """The sim bus behind the backends' I2C bus `bus` (opened if it is not yet)."""
        driver = self.backends.i2c(bus).driver
        assert isinstance(driver, SimI2CBus)
        return driver

    def inject(self, address: int, fault: Fault | None, *, bus: int = 1) -> None:
        """Make transfers to `address` fail from now on: "nack" (it stops acknowledging),
        "timeout" (the adapter gives up, ETIMEDOUT), "hang" (a transfer never returns until
        `release()`; only on a `threaded` board) or "corrupt" (one bit of every read flipped);
        None heals it."""
        self.i2c_bus(bus).inject(address, fault)

    def release(self, *, bus: int = 1) -> None:
        """Let hung transfers on `bus` return (as a NACK, as an adapter's bus recovery would)."""
        self.i2c_bus(bus).release()

    def sensors(self) -> Sensors:
        """The profile's declared devices, read through their drivers over these backends."""
        return self.backends.sensors()

    async def aclose(self) -> None:
        await self.backends.aclose()

    async def __aenter__(self) -> SimBoard:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


__all__ = ["SimBoard"]
