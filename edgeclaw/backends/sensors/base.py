"""The sensor driver interface: a part's datasheet turned into readings in engineering units.

A driver is one small class per part (`tmp102.py`, `bme280.py`, ...). It is given
the profile's `DeviceSpec` and the way to its part — an `I2CBus`, an `SPIDevice`
with its grant, the 1-Wire bus, or the ADC a channel belongs to — and `read()`
returns a `Reading`: the values with their units, when the part answered, and the
bytes it sent (kept for audit: a reading can always be checked against the wire).

Every transfer goes through the bus backends, so the bus lock and the operation
deadline hold for sensors exactly as for the raw tools; a part that needs a
command, a conversion time and a read does all three inside one
`I2CBus.transaction`, so no other caller's transfer lands in between.

A failure is a `SensorError` naming the device, the part, where it is wired and
what went wrong, with a `kind` a program can act on: `nack` (nobody
acknowledged), `timeout` (no answer in time, or the adapter gave up), `crc` (the
data arrived damaged), `bad_data` (a value the part cannot produce, a status
saying the measurement is not valid), `unavailable` (the bus, file or driver is
not there), `bus` (any other bus error).
"""

from __future__ import annotations

import asyncio
import errno
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from edgeclaw.backends.base import BusTimeout, DeviceUnavailable
from edgeclaw.backends.i2c import I2CBus, I2CNoAcknowledge, I2CTransaction
from edgeclaw.board import DeviceSpec
from edgeclaw.board.parts import Measure
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

if TYPE_CHECKING:
    from edgeclaw.backends.spi import SPIDevice
    from edgeclaw.board import SPIDeviceGrant

ErrorKind = Literal["nack", "timeout", "crc", "bad_data", "unavailable", "bus"]


@dataclass(frozen=True, slots=True)
class Value:
    quantity: str  # "temperature"
    value: float
    unit: str  # "°C"
    label: str = ""  # which of several values of one quantity ("ch0"), else empty

    def text(self) -> str:
        """`temperature 21.50 °C`; below 1, three significant digits (`current 0.00213 A`), so a small
        value does not read as zero."""
        name = f"{self.quantity} {self.label}" if self.label else self.quantity
        v = self.value
        number = f"{v:#.3g}" if 0 < abs(v) < 1 else f"{v:.2f}"
        return f"{name} {number} {self.unit}"


@dataclass(frozen=True, slots=True)
class Reading:
    device: str  # the profile's name for it
    part: str
    values: tuple[Value, ...]
    timestamp: float  # seconds since the epoch, taken when the part's answer arrived
    raw: bytes  # what the part sent, in the order read

    def value(self, quantity: str, label: str = "") -> Value | None:
        return next((v for v in self.values if v.quantity == quantity and v.label == label), None)

    def text(self) -> str:
        """`greenhouse air: temperature 21.50 °C` (one line)."""
        return f"{self.device}: " + ", ".join(v.text() for v in self.values)

    def as_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "part": self.part,
            "values": [
                {
                    "quantity": v.quantity,
                    "value": v.value,
                    "unit": v.unit,
                    **({"label": v.label} if v.label else {}),
                }
                for v in self.values
            ],
            "timestamp": self.timestamp,
            "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.timestamp)),
            # Spaced hex: an unbroken run of hex digits reads as a credential to the scrubber.
            "raw": self.raw.hex(" "),
        }


class SensorError(BackendError):
    """A device could not be read; the message names it, its part, where it is wired and why."""

    def __init__(
        self, device: DeviceSpec, kind: ErrorKind, problem: str, *, errno: int | None = None
    ) -> None:
        self.device = device.name
        self.part = device.part
        self.location = device.location
        self.kind: ErrorKind = kind
        self.problem = problem
        super().__init__(f"{device.name!r} ({device.part} {device.location}): {problem}", errno=errno)


def crc8(data: bytes, polynomial: int = 0x31, init: int = 0xFF, final_xor: int = 0x00) -> int:
    """CRC-8, MSB first, no reflection (Sensirion and Aosong: polynomial 0x31, init 0xFF)."""
    crc = init
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = ((crc << 1) ^ polynomial) & 0xFF if crc & 0x80 else (crc << 1) & 0xFF
    return crc ^ final_xor


class SensorDriver(ABC):
    """One declared device's driver. Subclasses follow their part's datasheet in `read()`."""

    def __init__(self, device: DeviceSpec) -> None:
        self.device = device
        self.measures: dict[str, Measure] = {m.quantity: m for m in device.info.measures}

    @abstractmethod
    async def read(self) -> Reading:
        """Measure once; `SensorError` when the part cannot be read."""

    def reading(self, values: Mapping[str, float] | list[Value], raw: bytes) -> Reading:
        """A reading of the part's own quantities (units from `edgeclaw.board.parts`), stamped now."""
        if isinstance(values, Mapping):
            # A quantity the catalogue does not list is a driver bug: KeyError, found by the tests.
            values = [Value(q, float(v), self.measures[q].unit) for q, v in values.items()]
        return Reading(self.device.name, self.device.part, tuple(values), time.time(), bytes(raw))

    def fail(self, kind: ErrorKind, problem: str, *, errno: int | None = None) -> SensorError:
        return SensorError(self.device, kind, problem, errno=errno)

    def check_crc(self, what: str, data: bytes, received: int, **crc_args: int) -> None:
        """Raise a `crc` error unless `received` is the CRC-8 of `data`."""
        expected = crc8(data, **crc_args)
        if received != expected:
            raise self.fail(
                "crc", f"CRC mismatch in the {what} (received 0x{received:02x}, computed 0x{expected:02x})"
            )

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device.name!r} {self.device.location}>"


class I2CPartTransaction:
    """One part's side of an `I2CBus.transaction`: transfers to its address, and waits; bus errors
    (on taking the bus, in a transfer, at the deadline) come out as the device's `SensorError`s."""

    def __init__(self, sensor: I2CSensor, transaction: I2CTransaction) -> None:
        self._sensor = sensor
        self._t = transaction
        self.address = sensor.address

    async def __aenter__(self) -> I2CPartTransaction:
        try:
            await self._t.__aenter__()
        except BackendError as e:
            raise self._sensor.bus_error(e) from None
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            await self._t.__aexit__(kind, exc, tb)
        except SensorError:
            raise
        except BackendError as e:  # the deadline passed while the bus was held
            raise self._sensor.bus_error(e) from None
        if isinstance(exc, BackendError) and not isinstance(exc, SensorError):
            raise self._sensor.bus_error(exc) from None

    async def write(self, data: bytes) -> None:
        await self._t.write(self.address, data)

    async def read(self, length: int) -> bytes:
        return await self._t.read(self.address, length)

    async def read_register(self, register: int, length: int) -> bytes:
        return await self._t.read_register(self.address, bytes((register,)), length)

    async def wait(self, seconds: float) -> None:
        """A conversion time, with the bus still held (counts against the transaction's deadline)."""
        await asyncio.sleep(seconds)


class I2CSensor(SensorDriver):
    """A part on an I2C bus at the device's address."""

    def __init__(self, device: DeviceSpec, bus: I2CBus) -> None:
        super().__init__(device)
        if device.address is None:
            raise ValueError(f"device {device.name!r} has no I2C address")
        self.bus = bus
        self.address = device.address

    def transaction(self) -> I2CPartTransaction:
        """The bus held for this part's transfers: `async with self.transaction() as t: ...`."""
        return I2CPartTransaction(self, self.bus.transaction())

    def bus_error(self, e: BackendError) -> SensorError:
        """A bus backend's error as this device's (its errno kept)."""
        code = e.errno
        if isinstance(e, I2CNoAcknowledge):
            why = f"no acknowledgement (is it wired, powered and at this address?): {e}"
            return self.fail("nack", why, errno=code)
        if isinstance(e, BusTimeout):
            return self.fail("timeout", str(e), errno=code)
        if isinstance(e, DeviceUnavailable):
            return self.fail("unavailable", str(e), errno=code)
        return self.fail("bus", str(e), errno=code)


class SPISensor(SensorDriver):
    """A part on an SPI chip select; transfers at the part's clock capped by the profile's grant."""

    max_speed_hz = 1_000_000  # the part's own limit; subclasses set theirs
    mode = 0  # the SPI mode the part samples in (it must be one the grant allows)

    def __init__(self, device: DeviceSpec, spi: SPIDevice, grant: SPIDeviceGrant) -> None:
        super().__init__(device)
        self.spi = spi
        self.grant = grant
        self.speed_hz = min(self.max_speed_hz, grant.max_speed_hz)
        modes = [self.mode, *({0: (3,), 3: (0,), 1: (2,), 2: (1,)}[self.mode])]
        usable = [m for m in modes if m in grant.modes]
        if not usable:
            raise self.fail(
                "unavailable", f"the profile grants SPI modes {grant.modes}, the part needs {modes}"
            )
        self.spi_mode = usable[0]

    async def transfer(self, data: bytes) -> bytes:
        try:
            return await self.spi.transfer(data, self.speed_hz, self.spi_mode, 8)
        except BusTimeout as e:
            raise self.fail("timeout", str(e), errno=e.errno) from None
        except DeviceUnavailable as e:
            raise self.fail("unavailable", str(e), errno=e.errno) from None
        except BackendError as e:
            raise self.fail("bus", str(e), errno=e.errno) from None


class OneWireBus:
    """The kernel's 1-Wire devices under one sysfs root, read one at a time under a deadline.

    The w1 master does one conversation at a time; reading `w1_slave` blocks while the
    part converts (up to 750 ms for a DS18B20), so reads run on a worker thread.
    """

    def __init__(self, root: Path, *, timeout_s: float) -> None:
        self.root = root
        self.timeout_s = timeout_s
        self.lock = asyncio.Lock()

    async def read(self, w1_id: str, name: str = "w1_slave") -> bytes:
        path = self.root / w1_id / name
        try:
            async with asyncio.timeout(self.timeout_s):
                async with self.lock:
                    return await asyncio.to_thread(path.read_bytes)
        except TimeoutError:
            raise BusTimeout(f"1-Wire: no answer from {w1_id} within {self.timeout_s:g} s") from None
        except FileNotFoundError:
            raise DeviceUnavailable(
                f"{path} does not exist (is the w1-gpio overlay loaded and the sensor connected?)",
                errno=errno.ENOENT,
            ) from None
        except OSError as e:
            raise BackendError(f"1-Wire: reading {path} failed: {e.strerror or e}", errno=e.errno) from None


class OneWireSensor(SensorDriver):
    """A part on the kernel's 1-Wire bus, by its device id."""

    def __init__(self, device: DeviceSpec, bus: OneWireBus) -> None:
        super().__init__(device)
        self.bus = bus

    async def read_file(self, name: str = "w1_slave") -> bytes:
        try:
            return await self.bus.read(self.device.w1_id, name)
        except BusTimeout as e:
            raise self.fail("timeout", str(e), errno=e.errno) from None
        except DeviceUnavailable as e:
            raise self.fail("unavailable", str(e), errno=e.errno) from None
        except BackendError as e:
            raise self.fail("bus", str(e), errno=e.errno) from None


class ADCDriver(ABC):
    """What an ADC part offers the devices wired to its channels (mixed into its driver class)."""

    @abstractmethod
    async def read_channel(self, channel: int) -> tuple[float, bytes]:
        """One conversion on `channel`: (volts, the raw bytes it came from)."""


class ADCChannelSensor(SensorDriver):
    """A device wired to one channel of a declared ADC; its errors are the ADC's (they name the ADC)."""

    def __init__(self, device: DeviceSpec, adc: ADCDriver) -> None:
        super().__init__(device)
        if device.channel is None:
            raise ValueError(f"device {device.name!r} has no ADC channel")
        self.adc = adc
        self.channel = device.channel


__all__ = [
    "ADCChannelSensor",
    "ADCDriver",
    "ErrorKind",
    "I2CPartTransaction",
    "I2CSensor",
    "OneWireBus",
    "OneWireSensor",
    "Reading",
    "SPISensor",
    "SensorDriver",
    "SensorError",
    "Value",
    "crc8",
]
