"""I2C: the driver protocol, the smbus2 driver for /dev/i2c-N, and the async bus the tools use.

The driver protocol is the set of SMBus/I2C transactions the `i2c` tool
needs. `SMBus2Driver` maps them onto the kernel's i2c-dev interface through
smbus2 (SMBus ioctls where the adapter has them, combined I2C_RDWR messages
for 16-bit register addresses and long blocks); the sim board's `SimI2CBus`
serves the same protocol from device models. Errors keep the kernel's errno
(`OSError`), and `I2CBus` words them: errno 121 becomes "no device
acknowledged at 0x48 on bus 1".
"""

from __future__ import annotations

import errno
from collections.abc import Iterable
from typing import Protocol

from edgeclaw.backends.base import BusGate, BusTimeout, missing_library, open_error
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

# The 7-bit addresses a device may have. The I2C specification (UM10204 table 4) reserves 0000xxx
# (general call, CBUS, other bus formats, future use, Hs-mode master codes) and 1111xxx (10-bit
# addressing, device ID); i2cdetect (i2c-tools 4.x) scans and i2cget/i2cset accept 0x08-0x77 only.
ADDRESS_FIRST = 0x08
ADDRESS_LAST = 0x77
SMBUS_BLOCK_MAX = 32


def probe_with_read(address: int) -> bool:
    """i2cdetect's rule: a quick write can corrupt EEPROMs (0x50-0x5f) and lock up some chips at
    0x30-0x37, so those ranges are probed with a receive-byte instead."""
    return 0x30 <= address <= 0x37 or 0x50 <= address <= 0x5F


class I2CDriver(Protocol):
    """The blocking transactions of one I2C bus. Errors are `OSError` with the kernel's errno."""

    number: int

    def supports_quick(self) -> bool: ...
    def quick_write(self, address: int) -> None: ...
    def read_byte(self, address: int) -> int: ...
    def read_byte_data(self, address: int, register: int) -> int: ...
    def read_word_data(self, address: int, register: int) -> int: ...
    def read_block(self, address: int, register: bytes, length: int) -> bytes: ...
    def read_bytes(self, address: int, length: int) -> bytes: ...  # one read message, no register
    def write_byte_data(self, address: int, register: int, value: int) -> None: ...
    def write_word_data(self, address: int, register: int, value: int) -> None: ...
    def write_block(self, address: int, data: bytes) -> None: ...
    def close(self) -> None: ...


@dataclass(frozen=True)
class ScanResult:
    """The addresses that answered a scan, and those a kernel driver holds."""

    found: tuple[int, ...]
    busy: tuple[int, ...]  # claimed by a kernel driver (i2cdetect's "UU")


def scan_bus(driver: I2CDriver, addresses: Iterable[int]) -> ScanResult:
    """Probe each address the way i2cdetect does; only addresses that acknowledge are reported.

    A probe that is not acknowledged raises (EREMOTEIO / ENXIO / EIO, by
    adapter); that is the normal "nobody there" answer, not an error.
    """
    found: list[int] = []
    busy: list[int] = []
    quick = driver.supports_quick()
    for address in addresses:
        if not ADDRESS_FIRST <= address <= ADDRESS_LAST:
            continue  # reserved: never probed
        try:
            if probe_with_read(address) or not quick:
                driver.read_byte(address)
            else:
                driver.quick_write(address)
        except OSError as e:
            if e.errno == errno.EBUSY:
                busy.append(address)
            elif e.errno in (errno.EREMOTEIO, errno.ENXIO, errno.EIO, errno.ETIMEDOUT):
                continue
            else:
                raise
        else:
            found.append(address)
    return ScanResult(tuple(found), tuple(busy))


class SMBus2Driver:
    """An i2c-dev bus through smbus2 (a real kernel bus: /dev/i2c-N)."""

    def __init__(self, number: int, device_path: str) -> None:
        try:
            import smbus2
        except ImportError:
            raise missing_library("smbus2", "hw") from None
        self._smbus2 = smbus2
        self.number = number
        self.device_path = device_path
        try:
            self._bus = smbus2.SMBus(device_path)
        except OSError as e:
            raise open_error(
                f"I2C bus {number}",
                device_path,
                e,
                missing="is the I2C interface enabled?",
                denied="add the daemon's user to the i2c group",
            ) from None

    def supports_quick(self) -> bool:
        return bool(self._bus.funcs & self._smbus2.I2cFunc.SMBUS_QUICK)

    def quick_write(self, address: int) -> None:
        self._bus.write_quick(address)

    def read_byte(self, address: int) -> int:
        return int(self._bus.read_byte(address))

    def read_byte_data(self, address: int, register: int) -> int:
        return int(self._bus.read_byte_data(address, register))

    def read_word_data(self, address: int, register: int) -> int:
        return int(self._bus.read_word_data(address, register))

    def read_block(self, address: int, register: bytes, length: int) -> bytes:
        if len(register) == 1 and length <= SMBUS_BLOCK_MAX:
            return bytes(self._bus.read_i2c_block_data(address, register[0], length))
        # A 16-bit register address or a long block: one combined transaction (repeated start).
        msg = self._smbus2.i2c_msg
        write, read = msg.write(address, register), msg.read(address, length)
        self._bus.i2c_rdwr(write, read)
        return bytes(read)

    def read_bytes(self, address: int, length: int) -> bytes:
        read = self._smbus2.i2c_msg.read(address, length)
        self._bus.i2c_rdwr(read)
        return bytes(read)

    def write_byte_data(self, address: int, register: int, value: int) -> None:
        self._bus.write_byte_data(address, register, value)

    def write_word_data(self, address: int, register: int, value: int) -> None:
        self._bus.write_word_data(address, register, value)

    def write_block(self, address: int, data: bytes) -> None:
        if 1 <= len(data) <= SMBUS_BLOCK_MAX + 1:
            self._bus.write_i2c_block_data(address, data[0], list(data[1:]))
        else:
            self._bus.i2c_rdwr(self._smbus2.i2c_msg.write(address, data))

    def close(self) -> None:
        self._bus.close()


class I2CNoAcknowledge(BackendError):
    """Nobody acknowledged the address (or a byte): the device is absent, unpowered or busy."""


def describe_i2c_error(number: int, e: OSError, address: int | None) -> BackendError:
    """The kernel's errno in plain words, naming the bus and the address (the errno kept as `.errno`)."""
    at = f" at 0x{address:02x}" if address is not None else ""
    code = e.errno
    if code in (errno.EREMOTEIO, errno.ENXIO):
        return I2CNoAcknowledge(f"no device acknowledged{at} on bus {number}", errno=code)
    if code == errno.EIO:
        return I2CNoAcknowledge(
            f"I/O error{at} on bus {number} (no acknowledgement, or a noisy bus)", errno=code
        )
    if code == errno.ETIMEDOUT:
        return BusTimeout(f"bus {number} timed out{at} (is SDA or SCL held low?)", errno=code)
    if code == errno.EBUSY:
        what = f"0x{address:02x}" if address is not None else "the address"
        return BackendError(f"{what} on bus {number} is in use by a kernel driver", errno=code)
    if code == errno.EAGAIN:
        return BackendError(f"bus {number} lost arbitration{at}; try again", errno=code)
    if code == errno.EOPNOTSUPP:
        return BackendError(f"the bus {number} adapter does not support this transfer", errno=code)
    if code == errno.EINVAL:
        return BackendError(f"the bus {number} driver rejected the transfer{at} as invalid", errno=code)
    return BackendError(f"bus {number}{at}: {e.strerror or e}", errno=code)


class I2CBus:
    """One bus as the tools see it: async, locked, bounded, with errors in plain words."""

    def __init__(self, driver: I2CDriver, *, timeout_s: float, threaded: bool) -> None:
        self.number = driver.number
        self.driver = driver
        self._gate: BusGate[I2CDriver] = BusGate(
            driver,
            label=f"I2C bus {driver.number}",
            timeout_s=timeout_s,
            threaded=threaded,
            # Every driver call takes the device address as its first argument.
            describe_error=lambda e, args: describe_i2c_error(
                driver.number, e, args[0] if args and isinstance(args[0], int) else None
            ),
        )

    async def scan(self, addresses: Iterable[int]) -> ScanResult:
        return await self._gate.run(scan_bus, list(addresses))

    async def read_byte(self, address: int) -> int:
        return await self._gate.run(_read_byte, address)

    async def read_byte_data(self, address: int, register: int) -> int:
        return await self._gate.run(_read_byte_data, address, register)

    async def read_word_data(self, address: int, register: int) -> int:
        return await self._gate.run(_read_word_data, address, register)

    async def read_block(self, address: int, register: bytes, length: int) -> bytes:
        return await self._gate.run(_read_block, address, register, length)

    # `settle_s` keeps the bus after a write (an EEPROM's write cycle, during which it does not
    # acknowledge), so the next transaction from any session finds the device ready.
    async def write_byte_data(self, address: int, register: int, value: int, *, settle_s: float = 0) -> None:
        await self._gate.run(_write_byte_data, address, register, value, hold_s=settle_s)

    async def write_word_data(self, address: int, register: int, value: int, *, settle_s: float = 0) -> None:
        await self._gate.run(_write_word_data, address, register, value, hold_s=settle_s)

    async def write_block(self, address: int, data: bytes, *, settle_s: float = 0) -> None:
        await self._gate.run(_write_block, address, data, hold_s=settle_s)

    def transaction(self, timeout_s: float | None = None) -> I2CTransaction:
        """Several transfers with the bus held between them (a command, a wait, its answer), all
        under one deadline: `async with bus.transaction() as t: await t.write(...)`."""
        return I2CTransaction(self._gate, timeout_s)

    def close(self) -> None:
        self._gate.close()


class I2CTransaction:
    """One `I2CBus.transaction`: an async context manager holding the bus, and the transfers made inside."""

    def __init__(self, gate: BusGate[I2CDriver], timeout_s: float | None = None) -> None:
        self._gate = gate
        self._held = gate.held(timeout_s)

    async def __aenter__(self) -> I2CTransaction:
        await self._held.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> bool | None:
        return await self._held.__aexit__(*exc)  # type: ignore[arg-type]

    async def write(self, address: int, data: bytes) -> None:
        """One write message: `data` after the address byte (a command, or a register and values)."""
        await self._gate.step(_write_block, address, data)

    async def read(self, address: int, length: int) -> bytes:
        """One read message of `length` bytes, no register sent first."""
        return await self._gate.step(_read_bytes, address, length)

    async def read_register(self, address: int, register: bytes, length: int) -> bytes:
        """Write the register address, then read `length` bytes after a repeated start."""
        return await self._gate.step(_read_block, address, register, length)

    async def read_word_data(self, address: int, register: int) -> int:
        return await self._gate.step(_read_word_data, address, register)


# Module-level functions rather than lambdas: the gate calls fn(driver, *args), and these cost
# nothing to build per call.
def _read_byte(d: I2CDriver, a: int) -> int:
    return d.read_byte(a)


def _read_byte_data(d: I2CDriver, a: int, r: int) -> int:
    return d.read_byte_data(a, r)


def _read_word_data(d: I2CDriver, a: int, r: int) -> int:
    return d.read_word_data(a, r)


def _read_block(d: I2CDriver, a: int, r: bytes, n: int) -> bytes:
    return d.read_block(a, r, n)


def _read_bytes(d: I2CDriver, a: int, n: int) -> bytes:
    return d.read_bytes(a, n)


def _write_byte_data(d: I2CDriver, a: int, r: int, v: int) -> None:
    d.write_byte_data(a, r, v)


def _write_word_data(d: I2CDriver, a: int, r: int, v: int) -> None:
    d.write_word_data(a, r, v)


def _write_block(d: I2CDriver, a: int, data: bytes) -> None:
    d.write_block(a, data)
