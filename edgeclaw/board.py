"""Which board profile the daemon runs with: by name, by file, or detected; and what it grants.

A profile (`board_profiles/NAME.toml`) names the board, says how to recognise
it from the device tree, and grants what the hardware tools may touch: I2C
buses and the addresses that may be read or written, SPI devices and their
clock cap, GPIO pins by name, memory regions, the debug-probe target and an
ESP32 bridge. Anything it does not grant, the tools refuse; writes are off
unless granted.

Profiles are validated on load exactly like the config: the TOML is turned
into the dataclasses below by `config.typed.build_dataclass`, then checked
across keys, and every problem names the file, the key and what was expected.
`board = "auto"` matches the device tree against each profile's `[detect]`
strings; when nothing matches it uses `generic-linux`, which grants no
hardware, and says so in the log. The simulated board is used only when asked
for (`board = "sim"`, `--board sim`): served as a fallback, its fabricated
readings would pass for real ones.
"""

from __future__ import annotations

import itertools
import logging
import re
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from edgeclaw.config.typed import build_dataclass
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.firmware.esp32 import protocol as esp32_fw

if TYPE_CHECKING:
    from edgeclaw.sensor_parts import PartInfo

log = logging.getLogger("edgeclaw.board")

# What `auto` picks when no profile matches: grants nothing, so nothing simulated passes for real.
FALLBACK_BOARD = "generic-linux"
DEVICE_TREE_MODEL = Path("/proc/device-tree/model")
DEVICE_TREE_COMPATIBLE = Path("/proc/device-tree/compatible")

# The profile's records, like the config's (edgeclaw.config.schema), have no generated __repr__ or
# __eq__: nothing compares or prints them, and generating those methods was a good part of every start.
Access = Literal["ro", "rw"]
MAX_ACCESS_BYTES = 4  # the widest single load or store hardware_memory makes (32 bits)


def profile_dirs() -> list[Path]:
    """Where profiles are looked up, first match wins: local overrides, then the ones shipped."""
    here = Path(__file__).resolve().parent
    return [
        Path("/etc/edgeclaw/board_profiles"),
        here / "board_profiles",  # inside an installed wheel
        here.parent / "board_profiles",  # a source checkout / editable install
    ]


# -- the profile schema: one dataclass per TOML table ---------------------------------------------


@dataclass(repr=False, eq=False)
class BoardSection:
    """[board] of a profile: its name, description, SoC and whether it is simulated."""

    name: str
    description: str = ""
    soc: str = ""
    # true: every bus, pin and region of this profile is served by the simulated backends.
    simulated: bool = False
    cpu_temp_path: str = "/sys/class/thermal/thermal_zone0/temp"


@dataclass(repr=False, eq=False)
class DetectSection:
    """[detect] of a profile: how `board detect` recognises the board from its device tree."""

    # Device-tree model prefixes ("Raspberry Pi 4 Model B") and exact compatible strings.
    models: list[str] = field(default_factory=list)
    compatible: list[str] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class AddressRange:
    """An inclusive range of I2C addresses a grant admits."""

    first: int
    last: int

    def __contains__(self, address: int) -> bool:
        return self.first <= address <= self.last


@dataclass(repr=False, eq=False)
class I2CDeviceLabel:
    """A name shown beside an address in an I2C scan."""

    address: int
    name: str


@dataclass(repr=False, eq=False)
class I2CBusGrant:
    """[[i2c]] of a profile: one bus and the addresses that may be read and written."""

    bus: int
    device: str = ""  # empty = /dev/i2c-BUS
    scan: bool = True
    # Addresses that may be read / written: single addresses or {first, last} ranges. Empty = none.
    read: list[AddressRange | int] = field(default_factory=list)
    write: list[AddressRange | int] = field(default_factory=list)
    devices: list[I2CDeviceLabel] = field(default_factory=list)  # names shown by hardware_info

    @property
    def device_path(self) -> str:
        return self.device or f"/dev/i2c-{self.bus}"

    def may_read(self, address: int) -> bool:
        return _in_ranges(address, self.read)

    def may_write(self, address: int) -> bool:
        return _in_ranges(address, self.write)


@dataclass(repr=False, eq=False)
class SPIDeviceGrant:
    """[[spi]] of a profile: one bus and chip select, with its speed and modes."""

    bus: int
    chip_select: int
    max_speed_hz: int
    name: str = ""
    device: str = ""  # empty = /dev/spidevBUS.CS
    modes: list[int] = field(default_factory=lambda: [0, 1, 2, 3])
    bits_per_word: list[int] = field(default_factory=lambda: [8])
    # Every SPI transfer clocks bytes out, so "read-only" is defined by the command byte:
    # on an "ro" device only transfers whose first byte is in read_commands are allowed.
    access: Access = "ro"
    read_commands: list[int] = field(default_factory=list)

    @property
    def device_path(self) -> str:
        return self.device or f"/dev/spidev{self.bus}.{self.chip_select}"


@dataclass(repr=False, eq=False)
class GPIOPinGrant:
    """[[gpio]] of a profile: one pin, its direction and what may be done with it."""

    pin: int
    name: str
    direction: Literal["in", "out"]
    pull: Literal["up", "down", "none"] = "none"
    active_high: bool = True
    pwm: bool = False  # an output pin that may be driven with a PWM duty cycle


@dataclass(repr=False, eq=False)
class TargetRegion:
    """A named address range the tools may read (and write, when `access = "rw"`)."""

    name: str
    base: int
    size: int
    access: Access = "ro"

    @property
    def end(self) -> int:
        return self.base + self.size


@dataclass(repr=False, eq=False)
class MemoryRegionGrant(TargetRegion):
    """A region of this board's own physical memory, reached through a device file."""

    device: str = "/dev/mem"  # or /dev/gpiomem; ignored on a simulated board (a file in the state dir)
    # Offset of `base` inside `device`; unset = `base` itself (right for /dev/mem; /dev/gpiomem maps at 0).
    device_offset: int | None = None

    def file_offset(self) -> int:
        return self.base if self.device_offset is None else self.device_offset


RegionT = TypeVar("RegionT", bound=TargetRegion)


def region_holding(regions: list[RegionT], address: int, length: int) -> RegionT | None:
    """The region holding all of [address, address + length), if one does."""
    for region in regions:
        if region.base <= address and address + length <= region.end:
            return region
    return None


@dataclass(repr=False, eq=False)
class ProbeGrant:
    """[probe] of a profile: the debug probe into the STM32 and what it may touch."""

    transport: Literal["gdb", "pyocd"]
    target: str  # e.g. "stm32f401retx" (a pyocd target type) or a description for a GDB server
    # gdb: "HOST:PORT" of a GDB server (OpenOCD, pyocd gdbserver, probe-rs, QEMU),
    # or "qemu" to have the daemon start qemu-system-arm itself (the sim board).
    gdb_address: str = ""
    probe_id: str = ""  # pyocd: the probe's unique id; empty = the only probe attached
    qemu_machine: str = "stm32vldiscovery"
    # gdb: a monitor command that resets the target ("reset halt" for OpenOCD, "system_reset" for
    # QEMU); empty = a Cortex-M system reset request through AIRCR, which any stub can pass on.
    reset_command: str = ""
    control: bool = False  # halt / resume / reset allowed
    flash: bool = False  # flashing a firmware image allowed
    flash_base: int = 0x0800_0000
    flash_size: int = 0
    regions: list[TargetRegion] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class ESP32PinGrant:
    """A pin of the ESP32 behind the serial bridge, and its direction."""

    pin: int
    name: str
    direction: Literal["in", "out"]


@dataclass(repr=False, eq=False)
class ESP32AdcGrant:
    """An ADC input of the ESP32 behind the serial bridge."""

    pin: int
    name: str


@dataclass(repr=False, eq=False)
class ESP32Grant:
    """[esp32] of a profile: the serial bridge and the ESP32's pins, ADC inputs and I2C buses."""

    port: str  # a serial device, or "sim" for the reference firmware run in-process behind a pty
    baud: int = 115200
    gpio: list[ESP32PinGrant] = field(default_factory=list)
    adc: list[ESP32AdcGrant] = field(default_factory=list)
    i2c: list[I2CBusGrant] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class SerialPortGrant:
    """[[serial]] of a profile: a serial device the serial tool may open."""

    path: str
    name: str = ""


DeviceForm = Literal["i2c", "spi", "onewire", "adc"]
# The key that says which form a [[devices]] entry takes, and the keys that form needs.
DEVICE_FORM_KEYS: dict[str, tuple[str, ...]] = {
    "i2c": ("bus", "address"),
    "spi": ("bus", "chip_select"),
    "onewire": ("w1_id",),
    "adc": ("adc", "channel"),
}
_FORM_MARKERS = {"address": "i2c", "chip_select": "spi", "w1_id": "onewire", "adc": "adc"}
DEVICE_NAME_MAX = 64
W1_ID_PATTERN = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{12}$")


@dataclass(repr=False, eq=False)
class DeviceSpec:
    """One `[[devices]]` entry: a sensor part, where it is wired, and the name people call it.

    The form follows from the keys given: `address` (I2C, with `bus`), `chip_select` (SPI, with
    `bus`), `w1_id` (1-Wire, the kernel's device id) or `adc` (a channel of another declared
    device that is an ADC, with `channel`). The part decides which form it takes
    (`edgeclaw.sensor_parts`). A declared device is reached only through its part's driver, which
    sends the datasheet's own commands; raw `i2c`/`spi` access to the same address still needs
    the bus grant's read and write lists.
    """

    part: str
    name: str
    bus: int | None = None
    address: int | None = None
    chip_select: int | None = None
    w1_id: str = ""
    adc: str = ""
    channel: int | None = None
    options: dict[str, int | float | bool | str] = field(default_factory=dict)

    @property
    def form(self) -> DeviceForm:
        if self.address is not None:
            return "i2c"
        if self.chip_select is not None:
            return "spi"
        return "onewire" if self.w1_id else "adc"

    @property
    def info(self) -> PartInfo:
        from edgeclaw.sensor_parts import part_info  # the parts catalogue: only for profiles with devices

        found = part_info(self.part)
        if found is None:  # refused when the profile is loaded
            raise KeyError(f"unknown sensor part {self.part!r}")
        return found

    def option(self, name: str) -> int | float | bool | str:
        """The device's setting, else the part's default."""
        if name in self.options:
            return self.options[name]
        found = self.info.option(name)
        if found is None:
            raise KeyError(f"part {self.part!r} has no option {name!r}")
        return found.default

    @property
    def location(self) -> str:
        """Where it is wired, in words: `at 0x48 on I2C bus 1`."""
        if self.form == "i2c":
            return f"at 0x{self.address or 0:02x} on I2C bus {self.bus}"
        if self.form == "spi":
            return f"on SPI {self.bus}.{self.chip_select}"
        if self.form == "onewire":
            return f"on 1-Wire as {self.w1_id}"
        return f"on channel {self.channel} of {self.adc!r}"


@dataclass(repr=False, eq=False)
class CameraGrant:
    """`[camera]`: the board's camera and the largest picture it may take."""

    kind: Literal["sim", "rpicam", "v4l2"]  # the Pi camera (rpicam-still), a V4L2 device, the sim's
    device: str = ""  # V4L2: /dev/videoN (default /dev/video0); rpicam: the camera's index
    max_width: int = 1920
    max_height: int = 1080


@dataclass(repr=False, eq=False)
class OneWireSection:
    """[onewire] of a profile: where 1-Wire devices are listed."""

    # Where the kernel's w1 driver lists its devices; a simulated board uses a tree in its state dir.
    root: str = "/sys/bus/w1/devices"


@dataclass(repr=False, eq=False)
class ProfileSchema:
    """A board profile file, as its schema reads it (checked further by `_check_profile`)."""

    board: BoardSection
    detect: DetectSection = field(default_factory=DetectSection)
    i2c: list[I2CBusGrant] = field(default_factory=list)
    spi: list[SPIDeviceGrant] = field(default_factory=list)
    gpio: list[GPIOPinGrant] = field(default_factory=list)
    memory: list[MemoryRegionGrant] = field(default_factory=list)
    probe: ProbeGrant | None = None
    esp32: ESP32Grant | None = None
    serial: list[SerialPortGrant] = field(default_factory=list)
    devices: list[DeviceSpec] = field(default_factory=list)
    onewire: OneWireSection = field(default_factory=OneWireSection)
    camera: CameraGrant | None = None


def _in_ranges(address: int, ranges: list[AddressRange | int]) -> bool:
    for r in ranges:
        if isinstance(r, int):
            if r == address:
                return True
        elif r.first <= address <= r.last:
            return True
    return False


def format_ranges(ranges: list[AddressRange | int]) -> str:
    """`0x08-0x77, 0x48` for people; "none" when empty."""
    if not ranges:
        return "none"
    parts = []
    for r in ranges:
        if isinstance(r, int):
            parts.append(f"0x{r:02x}")
        elif r.first == r.last:
            parts.append(f"0x{r.first:02x}")
        else:
            parts.append(f"0x{r.first:02x}-0x{r.last:02x}")
    return ", ".join(parts)


# -- the loaded profile ---------------------------------------------------------------------------


@dataclass(frozen=True)
class BoardProfile:
    """A checked board profile: what this board grants, with the file it came from."""

    name: str
    description: str
    soc: str
    path: Path
    models: tuple[str, ...] = ()
    compatible: tuple[str, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False)
    spec: ProfileSchema | None = field(default=None, compare=False)

    @property
    def simulated(self) -> bool:
        return self.spec is not None and self.spec.board.simulated

    # Lookups the tools use; None = not granted.
    def i2c_bus(self, bus: int) -> I2CBusGrant | None:
        return next((g for g in self._spec.i2c if g.bus == bus), None)

    def spi_device(self, bus: int, chip_select: int) -> SPIDeviceGrant | None:
        return next((g for g in self._spec.spi if g.bus == bus and g.chip_select == chip_select), None)

    def gpio_pin(self, pin_or_name: int | str) -> GPIOPinGrant | None:
        for g in self._spec.gpio:
            if g.pin == pin_or_name or g.name == pin_or_name:
                return g
        return None

    def memory_region_at(self, address: int, length: int) -> MemoryRegionGrant | None:
        """The region holding all of [address, address+length), if one does."""
        return region_holding(self._spec.memory, address, length)

    @property
    def devices(self) -> list[DeviceSpec]:
        return self._spec.devices

    def device(self, name: str) -> DeviceSpec | None:
        return next((d for d in self._spec.devices if d.name == name), None)

    def i2c_devices_at(self, bus: int, address: int) -> list[DeviceSpec]:
        return [d for d in self._spec.devices if d.form == "i2c" and (d.bus, d.address) == (bus, address)]

    @property
    def _spec(self) -> ProfileSchema:
        if self.spec is None:
            raise RuntimeError(f"board profile {self.name!r} was built without its schema")
        return self.spec


def _check_profile(spec: ProfileSchema, source: str) -> list[ConfigError]:
    """Checks across keys that the types alone cannot express."""
    errors: list[ConfigError] = []

    def fail(key: str, problem: str) -> None:
        errors.append(ConfigError(source, key, problem))

    def check_ranges(key: str, ranges: list[AddressRange | int]) -> None:
        for i, r in enumerate(ranges):
            first, last = (r, r) if isinstance(r, int) else (r.first, r.last)
            if not (0 <= first <= 0x7F and 0 <= last <= 0x7F):
                fail(f"{key}[{i}]", f"expected 7-bit I2C addresses 0x00-0x7f, got 0x{first:x}-0x{last:x}")
            elif first > last:
                fail(f"{key}[{i}]", f"expected first <= last, got 0x{first:02x} > 0x{last:02x}")

    def check_i2c(prefix: str, grants: list[I2CBusGrant]) -> None:
        seen: set[int] = set()
        for i, g in enumerate(grants):
            key = f"{prefix}[{i}]"
            if g.bus < 0:
                fail(f"{key}.bus", f"expected a bus number >= 0, got {g.bus}")
            if g.bus in seen:
                fail(f"{key}.bus", f"bus {g.bus} is granted twice")
            seen.add(g.bus)
            check_ranges(f"{key}.read", g.read)
            check_ranges(f"{key}.write", g.write)

    check_i2c("i2c", spec.i2c)
    seen_spi: set[tuple[int, int]] = set()
    for i, s in enumerate(spec.spi):
        key = f"spi[{i}]"
        if (s.bus, s.chip_select) in seen_spi:
            fail(key, f"SPI {s.bus}.{s.chip_select} is granted twice")
        seen_spi.add((s.bus, s.chip_select))
        if s.max_speed_hz <= 0:
            fail(f"{key}.max_speed_hz", f"expected a clock in Hz > 0, got {s.max_speed_hz}")
        if not s.modes or any(m not in (0, 1, 2, 3) for m in s.modes):
            fail(f"{key}.modes", f"expected SPI modes from 0, 1, 2, 3, got {s.modes}")
        if not s.bits_per_word or any(not 1 <= b <= 32 for b in s.bits_per_word):
            fail(f"{key}.bits_per_word", f"expected word sizes 1-32, got {s.bits_per_word}")
        if any(not 0 <= c <= 0xFF for c in s.read_commands):
            fail(f"{key}.read_commands", "expected bytes 0x00-0xff")
    pins: set[int] = set()
    names: set[str] = set()
    for i, p in enumerate(spec.gpio):
        key = f"gpio[{i}]"
        if p.pin < 0:
            fail(f"{key}.pin", f"expected a pin number >= 0, got {p.pin}")
        if p.pin in pins:
            fail(f"{key}.pin", f"pin {p.pin} is granted twice")
        if not p.name or p.name in names or p.name.isdigit():
            fail(f"{key}.name", f"expected a unique, non-numeric pin name, got {p.name!r}")
        if p.pwm and p.direction != "out":
            fail(f"{key}.pwm", "PWM needs direction = 'out'")
        pins.add(p.pin)
        names.add(p.name)

    def check_regions(prefix: str, regions: list[Any], address_bits: int = 64) -> None:
        seen_names: set[str] = set()
        for i, r in enumerate(regions):
            key = f"{prefix}[{i}]"
            if r.name in seen_names or not r.name:
                fail(f"{key}.name", f"expected a unique region name, got {r.name!r}")
            seen_names.add(r.name)
            if r.base < 0 or r.size <= 0 or r.base + r.size > 1 << 64:
                fail(
                    key,
                    f"expected 0 <= base and 0 < size within 64 bits, got base 0x{r.base:x} size {r.size}",
                )
            elif r.base + r.size > 1 << address_bits:
                fail(key, f"expected a region inside the target's {address_bits}-bit address space")
        ordered = sorted(regions, key=lambda r: r.base)
        for a, b in itertools.pairwise(ordered):
            if b.base < a.base + a.size:
                fail(prefix, f"regions {a.name!r} and {b.name!r} overlap")

    check_regions("memory", spec.memory)
    for i, m in enumerate(spec.memory):
        # The tool checks a value's alignment on its physical address; the load is made at the
        # same offset in the mapping, so both must agree (an unaligned device load faults on ARM).
        # A simulated board maps its file from offset 0.
        mapped = 0 if spec.board.simulated else m.file_offset()
        if m.device_offset is not None and m.device_offset < 0:
            fail(f"memory[{i}].device_offset", "expected an offset >= 0")
        elif (m.base - mapped) % MAX_ACCESS_BYTES:
            fail(
                f"memory[{i}]",
                f"expected base (0x{m.base:x}) and its offset in the device (0x{mapped:x}) to agree "
                f"modulo {MAX_ACCESS_BYTES}, so aligned accesses stay aligned",
            )
    if spec.probe is not None:
        p = spec.probe
        if p.transport == "gdb" and not p.gdb_address:
            fail("probe.gdb_address", "required for transport = 'gdb' (expected 'HOST:PORT' or 'qemu')")
        if p.transport == "gdb" and p.gdb_address not in ("", "qemu"):
            host, _, port = p.gdb_address.rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65536:
                fail("probe.gdb_address", f"expected 'HOST:PORT' or 'qemu', got {p.gdb_address!r}")
        if p.flash and p.flash_size <= 0:
            fail("probe.flash_size", "required (> 0) when flash = true")
        elif p.flash and not (p.flash_base >= 0 and p.flash_base + p.flash_size <= 1 << 32):
            fail("probe.flash_base", "expected the flash area inside the target's 32-bit address space")
        # The probe's targets are 32-bit microcontrollers (and the tool takes 32-bit addresses):
        # a region past 4 GiB would wrap around on the target.
        check_regions("probe.regions", p.regions, address_bits=32)
    if spec.camera is not None:
        c = spec.camera
        if not (16 <= c.max_width <= 8192 and 16 <= c.max_height <= 8192):
            fail("camera", f"expected max_width and max_height in 16-8192, got {c.max_width}x{c.max_height}")
    serial_paths: set[str] = set()
    for i, s in enumerate(spec.serial):
        key = f"serial[{i}].path"
        if not s.path:
            fail(key, "expected a serial device path (or sim:NAME on a simulated board)")
        elif s.path in serial_paths:
            fail(key, f"{s.path} is granted twice")
        elif s.path.startswith("sim:") and not spec.board.simulated:
            fail(key, f"{s.path!r} is a sim part: only a simulated board (simulated = true) has one")
        serial_paths.add(s.path)
    if spec.esp32 is not None:
        e = spec.esp32
        if not e.port:
            fail("esp32.port", "expected a serial device path or 'sim'")
        if e.baud <= 0:
            fail("esp32.baud", f"expected a baud rate > 0, got {e.baud}")
        check_i2c("esp32.i2c", e.i2c)
        esp_pins = [g.pin for g in e.gpio] + [a.pin for a in e.adc]
        if len(set(esp_pins)) != len(esp_pins):
            fail("esp32", "a pin is granted twice (gpio and adc pins must be distinct)")
        # The chip's own limits, as the bridge firmware enforces them: refused here, at load,
        # rather than granted in the profile and then refused by the chip on every call.
        for i, g in enumerate(e.gpio):
            if g.pin not in esp32_fw.GPIO_PINS or g.pin in esp32_fw.FLASH_PINS:
                fail(
                    f"esp32.gpio[{i}].pin", f"expected a usable ESP32 GPIO (not 6-11, the flash), got {g.pin}"
                )
            elif g.direction == "out" and g.pin in esp32_fw.INPUT_ONLY:
                fail(f"esp32.gpio[{i}].direction", f"GPIO {g.pin} is input-only on the ESP32 (34-39)")
        for i, a in enumerate(e.adc):
            if a.pin not in esp32_fw.ADC1_PINS:
                fail(f"esp32.adc[{i}].pin", f"expected an ADC1 pin (32-39), got {a.pin}")
    errors.extend(_check_devices(spec, source))
    return errors


def _check_devices(spec: ProfileSchema, source: str) -> list[ConfigError]:
    """Each [[devices]] entry: a known part, in the form that part takes, wired where the profile grants."""
    errors: list[ConfigError] = []
    if not spec.devices:
        return errors
    from edgeclaw import sensor_parts  # the parts catalogue: only for profiles with devices

    names: dict[str, DeviceSpec] = {}
    places: dict[tuple[Any, ...], str] = {}

    def fail(key: str, problem: str) -> None:
        errors.append(ConfigError(source, key, problem))

    for i, d in enumerate(spec.devices):
        key = f"devices[{i}]"
        if (
            not d.name
            or len(d.name) > DEVICE_NAME_MAX
            or not d.name.isprintable()
            or d.name != d.name.strip()
        ):
            fail(
                f"{key}.name", f"expected a name of 1-{DEVICE_NAME_MAX} printable characters, got {d.name!r}"
            )
        elif d.name in names:
            fail(f"{key}.name", f"device name {d.name!r} is used twice")
        names.setdefault(d.name, d)
        before = len(errors)
        info = sensor_parts.part_info(d.part)
        if info is None:
            fail(f"{key}.part", f"unknown part {d.part!r} (known: {', '.join(sorted(sensor_parts.PARTS))})")
            continue
        given = [k for k in _FORM_MARKERS if getattr(d, k) not in (None, "")]
        needed = DEVICE_FORM_KEYS[info.interface]
        if len(given) > 1:
            fail(key, f"expected one of address, chip_select, w1_id or adc, got {' and '.join(given)}")
            continue
        if not given or _FORM_MARKERS[given[0]] != info.interface:
            fail(key, f"part {d.part!r} is reached over {info.interface}: expected {' and '.join(needed)}")
            continue
        allowed = {*needed, "part", "name", "options"}
        for extra in ("bus", "channel"):
            if getattr(d, extra) is not None and extra not in allowed:
                fail(
                    f"{key}.{extra}", f"not used by the {info.interface} form (expected {', '.join(needed)})"
                )
        for k in needed:
            if getattr(d, k) in (None, ""):
                fail(f"{key}.{k}", f"required for part {d.part!r}")
        for option, value in d.options.items():
            known = info.option(option)
            if known is None:
                offered = ", ".join(o.name for o in info.options) or "none"
                fail(
                    f"{key}.options.{option}", f"part {d.part!r} has no such option (its options: {offered})"
                )
            elif (problem := known.problem(value)) is not None:
                fail(f"{key}.options.{option}", problem)
        if len(errors) > before:
            continue  # the wiring checks below assume the form's keys are there and well typed
        place: tuple[Any, ...]
        if info.interface == "i2c":
            assert d.bus is not None and d.address is not None
            if not any(g.bus == d.bus for g in spec.i2c):
                fail(f"{key}.bus", f"I2C bus {d.bus} is not granted by this profile (add an [[i2c]] entry)")
            if d.address not in info.addresses:
                fail(
                    f"{key}.address",
                    f"a {d.part} answers at {format_ranges(list(info.addresses))}, not 0x{d.address:02x}",
                )
            place = ("i2c", d.bus, d.address)
        elif info.interface == "spi":
            if not any((s.bus, s.chip_select) == (d.bus, d.chip_select) for s in spec.spi):
                fail(
                    key, f"SPI {d.bus}.{d.chip_select} is not granted by this profile (add an [[spi]] entry)"
                )
            place = ("spi", d.bus, d.chip_select)
        elif info.interface == "onewire":
            if not W1_ID_PATTERN.match(d.w1_id):
                fail(f"{key}.w1_id", f"expected a 1-Wire id such as '28-00000a1b2c3d', got {d.w1_id!r}")
            elif info.onewire_family is not None and int(d.w1_id[:2], 16) != info.onewire_family:
                fail(
                    f"{key}.w1_id",
                    f"a {d.part}'s ids start with {info.onewire_family:02x}-, got {d.w1_id!r}",
                )
            place = ("onewire", d.w1_id)
        else:
            place = ("adc", d.adc, d.channel)
        if place in places:
            fail(key, f"{d.location} is already declared as {places[place]!r}")
        places.setdefault(place, d.name)
    # ADC channels refer to other devices by name: checked once every name is known.
    for i, d in enumerate(spec.devices):
        info = sensor_parts.part_info(d.part)
        if info is None or info.interface != "adc" or not d.adc or d.channel is None:
            continue
        adc = names.get(d.adc)
        adc_info = sensor_parts.part_info(adc.part) if adc is not None else None
        if adc is None or adc_info is None:
            fail(f"devices[{i}].adc", f"expected the name of a declared ADC device, got {d.adc!r}")
        elif adc_info.channels == 0:
            fail(f"devices[{i}].adc", f"device {d.adc!r} is a {adc.part}, not an ADC")
        elif not 0 <= d.channel < adc_info.channels:
            fail(
                f"devices[{i}].channel",
                f"a {adc.part} has channels 0-{adc_info.channels - 1}, got {d.channel}",
            )
    return errors


# The last profile read from each file, with the bytes it was read from: the config check and the
# runtime resolve the same profile at each start, and `iter_profiles` reads them all. Compared on
# the bytes, not the mtime (whose clock ticks coarsely), so an edited file is always parsed again.
_READ: dict[str, tuple[bytes, BoardProfile]] = {}


def _read(path: Path) -> BoardProfile:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ConfigErrors([ConfigError(str(path), "", f"cannot read board profile: {e.strerror}")]) from None
    key = str(path.resolve())
    known = _READ.get(key)
    if known is not None and known[0] == data:
        return known[1]
    profile = _parse(path, data.decode("utf-8"))
    _READ[key] = (data, profile)
    return profile


def _parse(path: Path, text: str) -> BoardProfile:
    source = str(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigErrors([ConfigError(source, "", f"not valid TOML: {e}")]) from None
    spec, errors = build_dataclass(ProfileSchema, data, source)
    if spec is not None:
        errors = _check_profile(spec, source)
    if errors or spec is None:
        raise ConfigErrors(errors)
    return BoardProfile(
        name=spec.board.name,
        description=spec.board.description,
        soc=spec.board.soc,
        path=path,
        models=tuple(spec.detect.models),
        compatible=tuple(spec.detect.compatible),
        raw=data,
        spec=spec,
    )


def read_profile(path: Path) -> BoardProfile:
    """Load and validate one profile file (ConfigErrors naming file, key and expectation)."""
    return _read(path)


def iter_profiles() -> Iterator[BoardProfile]:
    seen: set[str] = set()
    for directory in profile_dirs():
        if not directory.is_dir():
            continue
        for path in sorted(directory.glob("*.toml")):
            if path.stem not in seen:
                seen.add(path.stem)
                yield _read(path)


def known_names() -> list[str]:
    return sorted({p.name for p in iter_profiles()})


def load_profile(name: str, source: str = "board") -> BoardProfile:
    """A profile by name or by path. Unknown names are an error: we never guess what a board grants."""
    if "/" in name or name.endswith(".toml"):
        return _read(Path(name))
    for directory in profile_dirs():
        path = directory / f"{name}.toml"
        if path.is_file():
            return _read(path)
    raise ConfigErrors(
        [ConfigError(source, "board", f"unknown board profile {name!r} (known: {', '.join(known_names())})")]
    )


def _read_dt(path: Path) -> list[str]:
    """A device-tree string property: NUL-separated strings (model has one, compatible several)."""
    try:
        return [s for s in path.read_bytes().decode("utf-8", "replace").split("\0") if s]
    except OSError:
        return []


def _match_score(profile: BoardProfile, models: list[str], compatible: list[str]) -> int:
    """How specifically `profile` matches; 0 = not at all.

    A longer model prefix beats a shorter one ("Raspberry Pi Zero 2 W" over
    "Raspberry Pi Zero"); a compatible string earlier in the device's list
    (the board's own, before the SoC's) beats a later one.
    """
    score = 0
    for pattern in profile.models:
        if pattern and any(m.startswith(pattern) for m in models):
            score = max(score, 10_000 + len(pattern))
    for pattern in profile.compatible:
        if pattern in compatible:
            score = max(score, 1_000 - compatible.index(pattern))
    return score


def detect(
    model_path: Path | None = None,
    compatible_path: Path | None = None,
    profiles: list[BoardProfile] | None = None,
) -> BoardProfile | None:
    """The profile whose detect strings best match this machine's device tree, if any.

    The paths default to /proc/device-tree; tests pass files of their own.
    """
    models = _read_dt(model_path or DEVICE_TREE_MODEL)
    compatible = _read_dt(compatible_path or DEVICE_TREE_COMPATIBLE)
    if not models and not compatible:
        return None
    best: BoardProfile | None = None
    best_score = 0
    for profile in profiles if profiles is not None else iter_profiles():
        score = _match_score(profile, models, compatible)
        if score > best_score:
            best, best_score = profile, score
    return best


def resolve(name: str, source: str = "board") -> BoardProfile:
    """Resolve the configured board: a name, a path, or "auto" (detect, else `generic-linux`)."""
    if name != "auto":
        return load_profile(name, source)
    found = detect()
    if found is not None:
        log.info("board detected: %s", found.name)
        return found
    fallback = load_profile(FALLBACK_BOARD, source)
    model = " / ".join(_read_dt(DEVICE_TREE_MODEL)) or "no device-tree model"
    log.warning(
        "no board profile matches this machine (%s); using %r, which grants %s. "
        'Set board = "NAME" (see edgeclaw board show NAME), or board = "sim" for the simulated board',
        model,
        fallback.name,
        "; ".join(describe_grants(fallback)),
    )
    return fallback


def describe_device(device: DeviceSpec) -> str:
    """`tmp102 at 0x48 on I2C bus 1, measures temperature (°C)`."""
    measures = device.info.measures_text
    if device.part == "analog":
        measures = f"{device.option('quantity')} ({device.option('unit')})"
    options = "".join(f", {k} = {v!r}" for k, v in device.options.items())
    return f"{device.part} {device.location}, measures {measures}{options}"


def describe_grants(profile: BoardProfile) -> list[str]:
    """What a profile lets the tools touch, one line per grant, in plain words."""
    spec = profile._spec
    lines: list[str] = []
    for g in spec.i2c:
        labels = ", ".join(f"0x{d.address:02x} {d.name}" for d in g.devices)
        lines.append(
            f"i2c bus {g.bus} ({'sim' if spec.board.simulated else g.device_path}): "
            f"read {format_ranges(g.read)}; write {format_ranges(g.write)}; scan {'yes' if g.scan else 'no'}"
            + (f"; devices {labels}" if labels else "")
        )
    for s in spec.spi:
        access = (
            "any transfer"
            if s.access == "rw"
            else "read-only: commands " + (", ".join(f"0x{c:02x}" for c in s.read_commands) or "none")
        )
        name = f" {s.name}" if s.name else ""
        lines.append(
            f"spi {s.bus}.{s.chip_select}{name}: up to {s.max_speed_hz} Hz, modes "
            f"{', '.join(map(str, s.modes))}, {access}"
        )
    for p in spec.gpio:
        extra = " with PWM" if p.pwm else ""
        pull = f", pull-{p.pull}" if p.pull != "none" else ""
        verb = "output (may be written)" if p.direction == "out" else "input (read only)"
        lines.append(f"gpio {p.pin} {p.name!r}: {verb}{extra}{pull}")
    for m in spec.memory:
        where = "sim file" if spec.board.simulated else m.device
        lines.append(
            f"memory {m.name!r}: 0x{m.base:08x}-0x{m.end - 1:08x} ({m.size} bytes) "
            f"{'read-write' if m.access == 'rw' else 'read-only'} via {where}"
        )
    if spec.probe is not None:
        p = spec.probe
        via = f"GDB remote at {p.gdb_address}" if p.transport == "gdb" else "pyocd"
        lines.append(
            f"probe: target {p.target} via {via}; halt/resume/reset {'yes' if p.control else 'no'}; "
            f"flash {'yes' if p.flash else 'no'}"
            + (f" (0x{p.flash_base:08x}, {p.flash_size} bytes)" if p.flash else "")
        )
        for r in p.regions:
            lines.append(
                f"probe memory {r.name!r}: 0x{r.base:08x}-0x{r.end - 1:08x} "
                f"{'read-write' if r.access == 'rw' else 'read-only'}"
            )
    if spec.esp32 is not None:
        e = spec.esp32
        lines.append(f"esp32 bridge on {e.port} at {e.baud} baud")
        for pin in e.gpio:
            lines.append(
                f"esp32 gpio {pin.pin} {pin.name!r}: {'output' if pin.direction == 'out' else 'input'}"
            )
        for a in e.adc:
            lines.append(f"esp32 adc {a.pin} {a.name!r}")
        for g in e.i2c:
            lines.append(
                f"esp32 i2c bus {g.bus}: read {format_ranges(g.read)}; write {format_ranges(g.write)}"
            )
    for s in spec.serial:
        lines.append(f"serial {s.path}" + (f" ({s.name})" if s.name else ""))
    if spec.camera is not None:
        c = spec.camera
        where = f" {c.device}" if c.device else ""
        lines.append(f"camera {c.kind}{where}, up to {c.max_width}x{c.max_height}")
    for d in spec.devices:
        lines.append(f"device {d.name!r}: {describe_device(d)}")
    if not lines:
        lines.append("nothing: no buses, pins, memory regions, probe or bridge")
    return lines
