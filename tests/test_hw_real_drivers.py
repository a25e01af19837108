"""The real drivers with their kernel or library boundary faked.

smbus2: as smbus2's own tests do, the `ioctl` it calls is replaced — here by a
fake i2c-dev that decodes the real ctypes structures smbus2 builds and serves
them from the sim device models, so the whole smbus2 path runs. spidev and
pyocd are optional extras: fake modules stand in for them at their API.
"""

from __future__ import annotations

import ctypes
import errno
import itertools
import os
import sys
import types

import pytest
import smbus2.smbus2 as smbus2_impl

from edgeclaw.backends.base import DeviceReplyError, DeviceUnavailable
from edgeclaw.backends.i2c import I2CBus, SMBus2Driver
from edgeclaw.backends.probe import PyocdProbe
from edgeclaw.backends.sim.eeprom import EEPROM24C32
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.mcp3008 import MCP3008
from edgeclaw.backends.sim.tmp102 import TMP102, decode_temperature
from edgeclaw.backends.spi import SpidevDriver, SPIDevice
from edgeclaw.errors import BackendError
from tests.hw_support import make_runtime, ok, write_profile


class FakeI2CDev:
    """The kernel's i2c-dev ioctls, decoded from smbus2's ctypes structures, answered by sim devices."""

    def __init__(self, sim: SimI2CBus, busy: tuple[int, ...] = ()) -> None:
        self.sim = sim
        self.busy = set(busy)
        self.address: int | None = None
        self.calls: list[tuple[str, int]] = []

    def ioctl(self, fd: int, request: int, arg: object) -> int:
        if request == smbus2_impl.I2C_FUNCS:
            arg.value = int(smbus2_impl.I2cFunc.I2C | smbus2_impl.I2cFunc.SMBUS_EMUL)  # type: ignore[attr-defined]
            return 0
        if request in (smbus2_impl.I2C_SLAVE, smbus2_impl.I2C_SLAVE_FORCE):
            if arg in self.busy:
                raise OSError(errno.EBUSY, os.strerror(errno.EBUSY))
            self.address = int(arg)  # type: ignore[call-overload]
            return 0
        if request == smbus2_impl.I2C_SMBUS:
            return self._smbus(arg)
        if request == smbus2_impl.I2C_RDWR:
            for i in range(arg.nmsgs):  # type: ignore[attr-defined]
                msg = arg.msgs[i]  # type: ignore[attr-defined]
                if msg.flags & smbus2_impl.I2C_M_RD:
                    data = self.sim.read_message(msg.addr, msg.len)
                    ctypes.memmove(msg.buf, data, msg.len)
                else:
                    self.sim.write_message(msg.addr, ctypes.string_at(msg.buf, msg.len))
            return 0
        raise OSError(errno.ENOTTY, "unexpected ioctl")

    def _smbus(self, arg: object) -> int:
        a = self.address
        assert a is not None
        rw, cmd, size = arg.read_write, arg.command, arg.size  # type: ignore[attr-defined]
        data = arg.data.contents  # type: ignore[attr-defined]
        reading = rw == smbus2_impl.I2C_SMBUS_READ
        if size == smbus2_impl.I2C_SMBUS_QUICK:
            self.calls.append(("quick", a))
            self.sim.quick_write(a)
        elif size == smbus2_impl.I2C_SMBUS_BYTE:
            self.calls.append(("read_byte" if reading else "write_byte", a))
            if reading:
                data.byte = self.sim.read_byte(a)
            else:
                self.sim.write_message(a, bytes((cmd,)))
        elif size == smbus2_impl.I2C_SMBUS_BYTE_DATA:
            if reading:
                data.byte = self.sim.read_byte_data(a, cmd)
            else:
                self.sim.write_byte_data(a, cmd, data.byte)
        elif size == smbus2_impl.I2C_SMBUS_WORD_DATA:
            if reading:
                data.word = self.sim.read_word_data(a, cmd)
            else:
                self.sim.write_word_data(a, cmd, data.word)
        elif size == smbus2_impl.I2C_SMBUS_I2C_BLOCK_DATA:
            n = data.block[0]
            if reading:
                data.block[1 : n + 1] = list(self.sim.read_block(a, bytes((cmd,)), n))
            else:
                self.sim.write_block(a, bytes((cmd,)) + bytes(data.block[1 : n + 1]))
        else:
            raise OSError(errno.EOPNOTSUPP, "unsupported")
        return 0


@pytest.fixture
def fake_kernel(tmp_path, monkeypatch):
    ticks = itertools.count(0.0, 1.0)  # a second passes between accesses: write cycles are always over
    rom = EEPROM24C32(None, clock=lambda: next(ticks))
    sim = SimI2CBus(1, {0x48: TMP102(23.25), 0x50: rom, 0x76: TMP102(0.0)})
    kernel = FakeI2CDev(sim, busy=(0x3C,))
    monkeypatch.setattr(smbus2_impl, "ioctl", kernel.ioctl)
    node = tmp_path / "i2c-1"
    node.write_bytes(b"")
    return kernel, str(node)


async def test_smbus2_scan_follows_i2cdetect_conventions(fake_kernel):
    kernel, node = fake_kernel
    bus = I2CBus(SMBus2Driver(1, node), timeout_s=2, threaded=True)
    try:
        found = await bus.scan(range(0x00, 0x80))
    finally:
        bus.close()
    assert found.found == (0x48, 0x50, 0x76)
    assert found.busy == (0x3C,)
    probes = dict((a, kind) for kind, a in kernel.calls)
    assert probes[0x48] == "quick" and probes[0x76] == "quick"
    assert probes[0x50] == "read_byte" and probes[0x33] == "read_byte"  # EEPROM and 0x30-0x37 ranges
    # Reserved addresses (0000xxx, 1111xxx) are never probed, as i2cdetect skips them.
    assert not any(a in probes for a in (*range(0x00, 0x08), *range(0x78, 0x80)))
    assert 0x08 in probes and 0x77 in probes


async def test_smbus2_reads_writes_and_16bit_register_blocks(fake_kernel):
    _, node = fake_kernel
    bus = I2CBus(SMBus2Driver(1, node), timeout_s=2, threaded=True)
    try:
        raw = await bus.read_block(0x48, b"\x00", 2)
        assert decode_temperature(int.from_bytes(raw, "big")) == 23.25
        word = await bus.read_word_data(0x48, 0x01)
        assert word == 0xA060  # 0x60A0 on the wire, low byte first as SMBus words are
        await bus.write_block(0x50, b"\x01\x00" + b"hello")  # SMBus I2C-block write
        assert await bus.read_block(0x50, b"\x01\x00", 5) == b"hello"  # 16-bit address: I2C_RDWR
        long_data = bytes(range(40))
        await bus.write_block(0x50, b"\x02\x00" + long_data[:32])
        assert await bus.read_block(0x50, b"\x02\x00", 32) == long_data[:32]
    finally:
        bus.close()


async def test_smbus2_errno_121_in_plain_words(fake_kernel):
    _, node = fake_kernel
    bus = I2CBus(SMBus2Driver(1, node), timeout_s=2, threaded=True)
    try:
        with pytest.raises(BackendError, match=r"^no device acknowledged at 0x49 on bus 1$"):
            await bus.read_byte_data(0x49, 0)
        with pytest.raises(BackendError, match=r"^0x3c on bus 1 is in use by a kernel driver$"):
            await bus.read_byte_data(0x3C, 0)
    finally:
        bus.close()


def test_smbus2_missing_bus_says_so(tmp_path):
    with pytest.raises(DeviceUnavailable, match=r"I2C bus 7 does not exist .*is the I2C interface enabled"):
        SMBus2Driver(7, str(tmp_path / "i2c-7"))


async def test_i2c_tool_on_a_real_profile_goes_through_smbus2(fake_kernel, tmp_path):
    _, node = fake_kernel
    profile = write_profile(
        tmp_path,
        "real-i2c",
        f'[[i2c]]\nbus = 1\ndevice = "{node}"\nread = [{{ first = 0x08, last = 0x77 }}]\nwrite = [0x50]\n',
    )
    runtime = make_runtime(tmp_path, board=profile)
    try:
        scan = await ok(runtime, "i2c", action="scan", bus=1)
        assert scan["addresses"] == ["0x48", "0x50", "0x76"] and scan["in_use_by_kernel"] == ["0x3c"]
        await ok(
            runtime,
            "i2c",
            action="write_block",
            bus=1,
            address="0x50",
            register=0x10,
            register_width=2,
            data="cafe",
        )
        read = await ok(
            runtime,
            "i2c",
            action="read_block",
            bus=1,
            address=0x50,
            register=0x10,
            register_width=2,
            length=2,
        )
        assert read["data"] == "ca fe"
    finally:
        await runtime.aclose()


# -- spidev, faked at its module API --------------------------------------------------------------
class FakeSpiDev:
    """spidev.SpiDev's surface, wired to an MCP3008 model; records what the driver set."""

    instances: list[FakeSpiDev] = []

    def __init__(self) -> None:
        self.mode = 0
        self.bits_per_word = 8
        self.max_speed_hz = 500_000
        self.opened: tuple[int, int] | None = None
        self.adc = MCP3008(voltages=[0.0, 3.3, 0, 0, 0, 0, 0, 0])
        self.transfers: list[tuple[list[int], int]] = []
        FakeSpiDev.instances.append(self)

    def open(self, bus: int, device: int) -> None:
        if (bus, device) != (0, 0):
            raise FileNotFoundError(errno.ENOENT, "No such file or directory")
        self.opened = (bus, device)

    def xfer2(self, data: list[int], speed_hz: int = 0) -> list[int]:
        self.transfers.append((data, speed_hz))
        return list(self.adc.transfer(bytes(data), speed_hz, self.mode, self.bits_per_word))

    def close(self) -> None:
        self.opened = None


async def test_spidev_driver_with_a_fake_module(monkeypatch):
    monkeypatch.setitem(sys.modules, "spidev", types.SimpleNamespace(SpiDev=FakeSpiDev))
    device = SPIDevice(SpidevDriver(0, 0), timeout_s=2, threaded=True)
    try:
        rx = await device.transfer(bytes([1, 0x90, 0]), 1_000_000, 3, 8)
        assert (rx[1] & 3) << 8 | rx[2] == 1023
        fake = FakeSpiDev.instances[-1]
        assert fake.mode == 3 and fake.transfers[-1] == ([1, 0x90, 0], 1_000_000)
    finally:
        device.close()
    with pytest.raises(DeviceUnavailable, match=r"SPI 0\.1 does not exist"):
        SpidevDriver(0, 1)


def test_device_files_that_cannot_be_opened_say_what_to_do(monkeypatch, tmp_path):
    from edgeclaw.backends.mmio import MemoryWindow
    from edgeclaw.board import MemoryRegionGrant

    class DeniedSpiDev(FakeSpiDev):
        def open(self, bus: int, device: int) -> None:
            raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setitem(sys.modules, "spidev", types.SimpleNamespace(SpiDev=DeniedSpiDev))
    with pytest.raises(DeviceUnavailable) as denied:
        SpidevDriver(0, 0)
    assert str(denied.value) == (
        "permission denied opening /dev/spidev0.0 for SPI 0.0 (add the daemon's user to the spi group)"
    )
    region = MemoryRegionGrant("gpio", 0x3F20_0000, 0xB4, device=str(tmp_path / "gpiomem"), device_offset=0)
    with pytest.raises(
        DeviceUnavailable, match=r"^memory region 'gpio' does not exist \(.*gpiomem is missing"
    ):
        MemoryWindow(region, region.device, region.file_offset(), writable=False)


def test_spidev_absent_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "spidev", None)  # import fails
    with pytest.raises(DeviceUnavailable, match=r"'spidev' is not installed .*edgeclaw\[hw\]"):
        SpidevDriver(0, 0)


# -- pyocd, faked at its API ----------------------------------------------------------------------
class FakeTarget:
    def __init__(self) -> None:
        self.memory = {0x2000_0000 + i: 0 for i in range(64)}
        self.halted = False

    def read_memory_block8(self, address: int, size: int) -> list[int]:
        if address + size > 0x2000_0040 or address < 0x2000_0000:
            raise RuntimeError("Memory transfer fault @ 0x%08x" % address)  # noqa: UP031 - pyocd's wording
        return [self.memory[address + i] for i in range(size)]

    def write_memory_block8(self, address: int, data: list[int]) -> None:
        for i, b in enumerate(data):
            self.memory[address + i] = b

    def read_core_register(self, name: str) -> int:
        return {"pc": 0x0800_0010, "sp": 0x2000_2000}.get(name, 0)

    def halt(self) -> None:
        self.halted = True

    def resume(self) -> None:
        self.halted = False

    def reset_and_halt(self) -> None:
        self.halted = True

    def get_state(self) -> object:
        return types.SimpleNamespace(name="HALTED" if self.halted else "RUNNING")


class FakeSession:
    def __init__(self) -> None:
        self.board = types.SimpleNamespace(target=FakeTarget())
        self.opened = False

    def open(self) -> None:
        self.opened = True

    def close(self) -> None:
        self.opened = False


def _fake_pyocd(monkeypatch, session: FakeSession | None, calls: list[dict]) -> None:
    def session_with_chosen_probe(**kwargs):
        calls.append(kwargs)
        return session

    helpers = types.ModuleType("pyocd.core.helpers")
    helpers.ConnectHelper = types.SimpleNamespace(session_with_chosen_probe=session_with_chosen_probe)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "pyocd", types.ModuleType("pyocd"))
    monkeypatch.setitem(sys.modules, "pyocd.core", types.ModuleType("pyocd.core"))
    monkeypatch.setitem(sys.modules, "pyocd.core.helpers", helpers)


async def test_pyocd_probe_never_blocks_and_reports_no_probe(monkeypatch):
    calls: list[dict] = []
    _fake_pyocd(monkeypatch, None, calls)
    probe = PyocdProbe("stm32f401retx", "", timeout_s=2, flash_timeout_s=5)
    with pytest.raises(DeviceUnavailable, match="no debug probe is attached"):
        await probe.read_memory(0x2000_0000, 4)
    assert calls[0]["blocking"] is False and calls[0]["target_override"] == "stm32f401retx"
    await probe.close()


async def test_pyocd_probe_memory_registers_and_faults(monkeypatch):
    session = FakeSession()
    _fake_pyocd(monkeypatch, session, [])
    probe = PyocdProbe("stm32f401retx", "0669FF", timeout_s=2, flash_timeout_s=5)
    try:
        await probe.write_memory(0x2000_0000, b"\x01\x02\x03")
        assert await probe.read_memory(0x2000_0000, 3) == b"\x01\x02\x03"
        registers = await probe.read_registers()
        assert registers["pc"] == 0x0800_0010 and len(registers) == 17
        await probe.halt()
        assert await probe.state() == "halted"
        with pytest.raises(DeviceReplyError, match="Memory transfer fault"):
            await probe.read_memory(0x6000_0000, 4)
    finally:
        await probe.close()
    assert session.opened is False


def test_pyocd_absent_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyocd", None)
    monkeypatch.setitem(sys.modules, "pyocd.core.helpers", None)
    probe = PyocdProbe("stm32f401retx", "", timeout_s=2, flash_timeout_s=5)
    with pytest.raises(DeviceUnavailable, match=r"'pyocd' is not installed .*edgeclaw\[probe\]"):
        probe._target()


# -- the gate: deadlines and one lock per bus -----------------------------------------------------
class SlowDriver:
    number = 3

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.active = 0
        self.max_active = 0

    def read_byte_data(self, address: int, register: int) -> int:
        import time

        self.active += 1
        self.max_active = max(self.max_active, self.active)
        time.sleep(self.delay)
        self.active -= 1
        return register

    def close(self) -> None:
        pass


async def test_a_blocked_bus_times_out_in_plain_words():
    bus = I2CBus(SlowDriver(0.5), timeout_s=0.05, threaded=True)  # type: ignore[arg-type]
    try:
        with pytest.raises(BackendError, match=r"^I2C bus 3: no answer within 0.05 s$"):
            await bus.read_byte_data(0x10, 1)
    finally:
        bus.close()


async def test_one_transaction_at_a_time_per_bus():
    import asyncio

    driver = SlowDriver(0.01)
    bus = I2CBus(driver, timeout_s=5, threaded=True)  # type: ignore[arg-type]
    try:
        results = await asyncio.gather(*(bus.read_byte_data(0x10, r) for r in range(8)))
    finally:
        bus.close()
    assert results == list(range(8)) and driver.max_active == 1


async def test_real_gpio_off_a_pi_is_a_clear_error(tmp_path):
    profile = write_profile(tmp_path, "pins", '[[gpio]]\npin = 17\nname = "led"\ndirection = "out"\n')
    runtime = make_runtime(tmp_path, board=profile)
    try:
        from tests.hw_support import call

        outcome = await call(runtime, "gpio", action="read", pin="led")
    finally:
        await runtime.aclose()
    if outcome.ok:  # pragma: no cover - a machine with a working GPIO library
        return
    assert not outcome.refused and "GPIO" in outcome.error and "internal error" not in outcome.error
