"""The board profile's records: one dataclass per TOML table, and the checked profile the tools ask.

A profile (`board_profiles/NAME.toml`) names the board, says how to recognise
it from the device tree, and grants what the hardware tools may touch: I2C
buses and the addresses that may be read or written, SPI devices and their
clock cap, GPIO pins by name, memory regions, the debug-probe target and an
ESP32 bridge. Anything it does not grant, the tools refuse; writes are off
unless granted. The TOML is turned into these records by
`config.typed.build_dataclass` (`board.load`), then checked across keys (`board.checks`).
"""

from __future__ import annotations

import re
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from edgeclaw.records import dataclass

if TYPE_CHECKING:
    from edgeclaw.board.parts import PartInfo

# The profile's records, like the config's (edgeclaw.config.schema), have no generated __repr__ or
# __eq__: nothing compares or prints them, and generating those methods was a good part of every start.
Access = Literal["ro", "rw"]
MAX_ACCESS_BYTES = 4  # the widest single load or store hardware_memory makes (32 bits)


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
FORM_MARKERS = {"address": "i2c", "chip_select": "spi", "w1_id": "onewire", "adc": "adc"}
DEVICE_NAME_MAX = 64
W1_ID_PATTERN = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{12}$")


@dataclass(repr=False, eq=False)
class DeviceSpec:
    """One `[[devices]]` entry: a sensor part, where it is wired, and the name people call it.

    The form follows from the keys given: `address` (I2C, with `bus`), `chip_select` (SPI, with
    `bus`), `w1_id` (1-Wire, the kernel's device id) or `adc` (a channel of another declared
    device that is an ADC, with `channel`). The part decides which form it takes
    (`edgeclaw.board.parts`). A declared device is reached only through its part's driver, which
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
        from edgeclaw.board.parts import part_info  # the parts catalogue: only for profiles with devices

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
    def values(self) -> tuple[DeclaredValue, ...]:
        """What each reading of it carries, known before any is taken (Home Assistant entities and
        Sparkplug metrics are announced from this): a value per quantity of its part, one per channel
        of an ADC (labelled `ch0`, `ch1`, ... as its readings are), an analog channel's own quantity
        and unit."""
        info = self.info
        if info.name == "analog":
            return (DeclaredValue(str(self.option("quantity")), str(self.option("unit"))),)
        labels = [f"ch{n}" for n in range(info.channels)] if info.channels else [""]
        return tuple(DeclaredValue(m.quantity, m.unit, label) for label in labels for m in info.measures)

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


@dataclass(frozen=True)
class DeclaredValue:
    """One value a declared device's readings carry: its quantity, unit and label (`ch0`; else "")."""

    quantity: str
    unit: str
    label: str = ""


@dataclass(repr=False, eq=False)
class CameraGrant:
    """`[camera]`: the board's camera and the largest picture it may take."""

    kind: Literal["sim", "rpicam", "v4l2"]  # the Pi camera (rpicam-still), a V4L2 device, the sim's
    device: str = ""  # V4L2: /dev/videoN (default /dev/video0); rpicam: the camera's index
    max_width: int = 1920
    max_height: int = 1080


DisplayKind = Literal["ssd1306", "sh1106", "st7735", "st7789", "framebuffer"]
# The kinds by how they are reached: an OLED over I2C, a TFT over SPI, a framebuffer device (or file).
OLED_KINDS: tuple[str, ...] = ("ssd1306", "sh1106")
TFT_KINDS: tuple[str, ...] = ("st7735", "st7789")
DISPLAY_FORMATS: dict[str, tuple[str, ...]] = {  # the pixel formats each kind takes; the first is its default
    "ssd1306": ("mono",),
    "sh1106": ("mono",),
    "st7735": ("rgb565",),
    "st7789": ("rgb565",),
    "framebuffer": ("rgb565", "xrgb8888"),
}
DISPLAY_NAME_MAX = 32


@dataclass(repr=False, eq=False)
class DisplayGrant:
    """`[[displays]]`: a screen the `canvas` tool may draw on and `screenshot` may read.

    An OLED (`ssd1306`, `sh1106`) sits on a granted I2C bus at an address that bus grants for
    writing; a TFT (`st7735`, `st7789`) on a granted SPI device with `access = "rw"`, its data/command
    line a GPIO output pin named by `dc_pin`; a `framebuffer` is a device such as /dev/fb0 (on a
    simulated board `sim:NAME`, a file in the state directory) holding `format` pixels. Only a
    framebuffer can be read back (`screenshot`); `access = "ro"` lets it be read but not drawn on.
    """

    name: str
    kind: DisplayKind
    width: int
    height: int
    bus: int | None = None  # OLED: the I2C bus; TFT: the SPI bus
    address: int | None = None  # OLED: its I2C address (0x3c or 0x3d)
    chip_select: int | None = None  # TFT
    dc_pin: str = ""  # TFT: the granted GPIO output pin wired to D/C
    column_offset: int = 0  # TFT/SH1106: where the panel's first column sits in the controller's RAM
    row_offset: int = 0
    device: str = ""  # framebuffer: /dev/fbN, or sim:NAME on a simulated board
    format: str = ""  # empty: the kind's default (DISPLAY_FORMATS)
    access: Access = "rw"

    @property
    def pixel_format(self) -> str:
        return self.format or DISPLAY_FORMATS[self.kind][0]

    @property
    def location(self) -> str:
        """Where it is wired, in words."""
        if self.kind in OLED_KINDS:
            return f"at 0x{self.address or 0:02x} on I2C bus {self.bus}"
        if self.kind in TFT_KINDS:
            return f"on SPI {self.bus}.{self.chip_select} (D/C on {self.dc_pin!r})"
        return f"at {self.device} ({self.pixel_format})"


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
    displays: list[DisplayGrant] = field(default_factory=list)


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

    @property
    def displays(self) -> list[DisplayGrant]:
        return self._spec.displays

    def display(self, name: str) -> DisplayGrant | None:
        return next((d for d in self._spec.displays if d.name == name), None)

    def i2c_devices_at(self, bus: int, address: int) -> list[DeviceSpec]:
        return [d for d in self._spec.devices if d.form == "i2c" and (d.bus, d.address) == (bus, address)]

    @property
    def _spec(self) -> ProfileSchema:
        if self.spec is None:
            raise RuntimeError(f"board profile {self.name!r} was built without its schema")
        return self.spec
