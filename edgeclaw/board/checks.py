"""The profile's checks across keys, which the types alone cannot express.

Each table (`[[i2c]]`, `[[spi]]`, `[[gpio]]`, `[[memory]]`, `[probe]`, `[camera]`, `[[serial]]`,
`[esp32]`, `[[displays]]`, `[[devices]]`) has its own small check; every problem names the file,
the key and what was expected.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgeclaw.board.schema import (
    DEVICE_FORM_KEYS,
    DEVICE_NAME_MAX,
    DISPLAY_FORMATS,
    DISPLAY_NAME_MAX,
    FORM_MARKERS,
    MAX_ACCESS_BYTES,
    OLED_KINDS,
    TFT_KINDS,
    W1_ID_PATTERN,
    AddressRange,
    DeviceSpec,
    DisplayGrant,
    I2CBusGrant,
    ProfileSchema,
    format_ranges,
)
from edgeclaw.errors import ConfigError
from edgeclaw.firmware.esp32 import protocol as esp32_fw

if TYPE_CHECKING:
    from edgeclaw.board.parts import PartInfo


# A check reports each problem as (key, what was expected); the caller adds the file.
Fail = Callable[[str, str], None]


def _check_ranges(fail: Fail, key: str, ranges: list[AddressRange | int]) -> None:
    for i, r in enumerate(ranges):
        first, last = (r, r) if isinstance(r, int) else (r.first, r.last)
        if not (0 <= first <= 0x7F and 0 <= last <= 0x7F):
            fail(f"{key}[{i}]", f"expected 7-bit I2C addresses 0x00-0x7f, got 0x{first:x}-0x{last:x}")
        elif first > last:
            fail(f"{key}[{i}]", f"expected first <= last, got 0x{first:02x} > 0x{last:02x}")


def _check_i2c(fail: Fail, prefix: str, grants: list[I2CBusGrant]) -> None:
    seen: set[int] = set()
    for i, g in enumerate(grants):
        key = f"{prefix}[{i}]"
        if g.bus < 0:
            fail(f"{key}.bus", f"expected a bus number >= 0, got {g.bus}")
        if g.bus in seen:
            fail(f"{key}.bus", f"bus {g.bus} is granted twice")
        seen.add(g.bus)
        _check_ranges(fail, f"{key}.read", g.read)
        _check_ranges(fail, f"{key}.write", g.write)


def _check_spi(fail: Fail, spec: ProfileSchema) -> None:
    seen: set[tuple[int, int]] = set()
    for i, s in enumerate(spec.spi):
        key = f"spi[{i}]"
        if (s.bus, s.chip_select) in seen:
            fail(key, f"SPI {s.bus}.{s.chip_select} is granted twice")
        seen.add((s.bus, s.chip_select))
        if s.max_speed_hz <= 0:
            fail(f"{key}.max_speed_hz", f"expected a clock in Hz > 0, got {s.max_speed_hz}")
        if not s.modes or any(m not in (0, 1, 2, 3) for m in s.modes):
            fail(f"{key}.modes", f"expected SPI modes from 0, 1, 2, 3, got {s.modes}")
        if not s.bits_per_word or any(not 1 <= b <= 32 for b in s.bits_per_word):
            fail(f"{key}.bits_per_word", f"expected word sizes 1-32, got {s.bits_per_word}")
        if any(not 0 <= c <= 0xFF for c in s.read_commands):
            fail(f"{key}.read_commands", "expected bytes 0x00-0xff")


def _check_gpio(fail: Fail, spec: ProfileSchema) -> None:
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


def _check_regions(fail: Fail, prefix: str, regions: list[Any], address_bits: int = 64) -> None:
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


def _check_memory(fail: Fail, spec: ProfileSchema) -> None:
    _check_regions(fail, "memory", spec.memory)
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


def _check_probe(fail: Fail, spec: ProfileSchema) -> None:
    p = spec.probe
    if p is None:
        return
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
    _check_regions(fail, "probe.regions", p.regions, address_bits=32)


def _check_camera(fail: Fail, spec: ProfileSchema) -> None:
    c = spec.camera
    if c is not None and not (16 <= c.max_width <= 8192 and 16 <= c.max_height <= 8192):
        fail("camera", f"expected max_width and max_height in 16-8192, got {c.max_width}x{c.max_height}")


def _check_serial(fail: Fail, spec: ProfileSchema) -> None:
    paths: set[str] = set()
    for i, s in enumerate(spec.serial):
        key = f"serial[{i}].path"
        if not s.path:
            fail(key, "expected a serial device path (or sim:NAME on a simulated board)")
        elif s.path in paths:
            fail(key, f"{s.path} is granted twice")
        elif s.path.startswith("sim:") and not spec.board.simulated:
            fail(key, f"{s.path!r} is a sim part: only a simulated board (simulated = true) has one")
        paths.add(s.path)


def _check_esp32(fail: Fail, spec: ProfileSchema) -> None:
    e = spec.esp32
    if e is None:
        return
    if not e.port:
        fail("esp32.port", "expected a serial device path or 'sim'")
    if e.baud <= 0:
        fail("esp32.baud", f"expected a baud rate > 0, got {e.baud}")
    _check_i2c(fail, "esp32.i2c", e.i2c)
    esp_pins = [g.pin for g in e.gpio] + [a.pin for a in e.adc]
    if len(set(esp_pins)) != len(esp_pins):
        fail("esp32", "a pin is granted twice (gpio and adc pins must be distinct)")
    # The chip's own limits, as the bridge firmware enforces them: refused here, at load,
    # rather than granted in the profile and then refused by the chip on every call.
    for i, g in enumerate(e.gpio):
        if g.pin not in esp32_fw.GPIO_PINS or g.pin in esp32_fw.FLASH_PINS:
            fail(f"esp32.gpio[{i}].pin", f"expected a usable ESP32 GPIO (not 6-11, the flash), got {g.pin}")
        elif g.direction == "out" and g.pin in esp32_fw.INPUT_ONLY:
            fail(f"esp32.gpio[{i}].direction", f"GPIO {g.pin} is input-only on the ESP32 (34-39)")
    for i, a in enumerate(e.adc):
        if a.pin not in esp32_fw.ADC1_PINS:
            fail(f"esp32.adc[{i}].pin", f"expected an ADC1 pin (32-39), got {a.pin}")


# The controllers' own RAM: an SSD1306 drives 128x64, an SH1106 132x64 (shown through a 128-wide window);
# an ST7735 holds 132x162, an ST7789 240x320. A framebuffer is bounded only by sanity.
_DISPLAY_RAM = {"ssd1306": (128, 64), "sh1106": (132, 64), "st7735": (132, 162), "st7789": (240, 320)}
_FRAMEBUFFER_MAX = 8192


def _check_display_wiring(fail: Fail, key: str, d: DisplayGrant, spec: ProfileSchema) -> None:
    """An OLED on a writable I2C address, a TFT on a writable SPI device with its D/C pin, a
    framebuffer at a device: each where the profile grants it."""
    if d.kind in OLED_KINDS:
        bus = next((g for g in spec.i2c if g.bus == d.bus), None)
        if d.bus is None or d.address is None:
            fail(key, f"a {d.kind} is reached over I2C: expected bus and address")
        elif bus is None:
            fail(f"{key}.bus", f"I2C bus {d.bus} is not granted by this profile (add an [[i2c]] entry)")
        elif not bus.may_write(d.address):
            fail(
                f"{key}.address",
                f"0x{d.address:02x} is not in I2C bus {d.bus}'s write list ({format_ranges(bus.write)}): "
                "a display is driven by writing to it",
            )
    elif d.kind in TFT_KINDS:
        spi = next((s for s in spec.spi if (s.bus, s.chip_select) == (d.bus, d.chip_select)), None)
        pin = next((p for p in spec.gpio if p.name == d.dc_pin), None)
        if d.bus is None or d.chip_select is None:
            fail(key, f"a {d.kind} is reached over SPI: expected bus and chip_select")
        elif spi is None:
            fail(key, f"SPI {d.bus}.{d.chip_select} is not granted by this profile (add an [[spi]] entry)")
        elif spi.access != "rw":
            fail(key, f"SPI {d.bus}.{d.chip_select} is granted read-only: a display needs access = 'rw'")
        if pin is None or pin.direction != "out":
            fail(f"{key}.dc_pin", f"expected the name of a granted GPIO output pin, got {d.dc_pin!r}")
    elif not d.device:
        fail(
            f"{key}.device",
            "expected a framebuffer device such as /dev/fb0 (or sim:NAME on a simulated board)",
        )
    elif d.device.startswith("sim:") and not spec.board.simulated:
        fail(
            f"{key}.device", f"{d.device!r} is a sim part: only a simulated board (simulated = true) has one"
        )
    if d.kind != "framebuffer" and d.access != "rw":
        fail(f"{key}.access", f"a {d.kind} cannot be read back: expected access = 'rw'")


def _check_displays(fail: Fail, spec: ProfileSchema) -> None:
    names: set[str] = set()
    for i, d in enumerate(spec.displays):
        key = f"displays[{i}]"
        if (
            not d.name
            or len(d.name) > DISPLAY_NAME_MAX
            or not d.name.replace("-", "").replace("_", "").isalnum()
        ):
            fail(f"{key}.name", f"expected 1-{DISPLAY_NAME_MAX} letters, digits, '-' or '_', got {d.name!r}")
        elif d.name in names:
            fail(f"{key}.name", f"display name {d.name!r} is used twice")
        names.add(d.name)
        most_w, most_h = _DISPLAY_RAM.get(d.kind, (_FRAMEBUFFER_MAX, _FRAMEBUFFER_MAX))
        if not (1 <= d.width <= most_w and 1 <= d.height <= most_h):
            fail(key, f"expected a {d.kind} of at most {most_w}x{most_h} pixels, got {d.width}x{d.height}")
        elif d.kind in OLED_KINDS and d.height % 8:
            fail(
                f"{key}.height",
                f"an OLED's rows come in pages of 8: expected 16, 32, 48 or 64, got {d.height}",
            )
        if d.pixel_format not in DISPLAY_FORMATS[d.kind]:
            fail(f"{key}.format", f"a {d.kind} takes {', '.join(DISPLAY_FORMATS[d.kind])}, got {d.format!r}")
        if not (0 <= d.column_offset < 256 and 0 <= d.row_offset < 256):
            fail(key, "expected column_offset and row_offset in 0-255")
        _check_display_wiring(fail, key, d, spec)


def _check_i2c_grants(fail: Fail, spec: ProfileSchema) -> None:
    _check_i2c(fail, "i2c", spec.i2c)


# Each table's check, in the order their problems are reported.
TABLE_CHECKS: tuple[Callable[[Fail, ProfileSchema], None], ...] = (
    _check_i2c_grants,
    _check_spi,
    _check_gpio,
    _check_memory,
    _check_probe,
    _check_camera,
    _check_serial,
    _check_esp32,
    _check_displays,
)


def check_profile(spec: ProfileSchema, source: str) -> list[ConfigError]:
    """Checks across keys that the types alone cannot express."""
    errors: list[ConfigError] = []

    def fail(key: str, problem: str) -> None:
        errors.append(ConfigError(source, key, problem))

    for check in TABLE_CHECKS:
        check(fail, spec)
    if spec.devices:
        _check_devices(fail, spec)
    return errors


def _device_name_problem(d: DeviceSpec, names: dict[str, DeviceSpec]) -> str | None:
    if not d.name or len(d.name) > DEVICE_NAME_MAX or not d.name.isprintable() or d.name != d.name.strip():
        return f"expected a name of 1-{DEVICE_NAME_MAX} printable characters, got {d.name!r}"
    if d.name in names:
        return f"device name {d.name!r} is used twice"
    return None


def _check_device_form(fail: Fail, key: str, d: DeviceSpec, info: PartInfo) -> bool:
    """The keys the part's form takes, and its options; False when the wiring cannot be checked."""
    given = [k for k in FORM_MARKERS if getattr(d, k) not in (None, "")]
    needed = DEVICE_FORM_KEYS[info.interface]
    if len(given) > 1:
        fail(key, f"expected one of address, chip_select, w1_id or adc, got {' and '.join(given)}")
        return False
    if not given or FORM_MARKERS[given[0]] != info.interface:
        fail(key, f"part {d.part!r} is reached over {info.interface}: expected {' and '.join(needed)}")
        return False
    ok = True
    allowed = {*needed, "part", "name", "options"}
    for extra in ("bus", "channel"):
        if getattr(d, extra) is not None and extra not in allowed:
            fail(f"{key}.{extra}", f"not used by the {info.interface} form (expected {', '.join(needed)})")
            ok = False
    for k in needed:
        if getattr(d, k) in (None, ""):
            fail(f"{key}.{k}", f"required for part {d.part!r}")
            ok = False
    for option, value in d.options.items():
        known = info.option(option)
        if known is None:
            offered = ", ".join(o.name for o in info.options) or "none"
            fail(f"{key}.options.{option}", f"part {d.part!r} has no such option (its options: {offered})")
            ok = False
        elif (problem := known.problem(value)) is not None:
            fail(f"{key}.options.{option}", problem)
            ok = False
    return ok


def _device_place(
    fail: Fail, key: str, d: DeviceSpec, info: PartInfo, spec: ProfileSchema
) -> tuple[Any, ...]:
    """Where the device is wired, checked against what the profile grants and the part allows."""
    if info.interface == "i2c":
        assert d.bus is not None and d.address is not None
        if not any(g.bus == d.bus for g in spec.i2c):
            fail(f"{key}.bus", f"I2C bus {d.bus} is not granted by this profile (add an [[i2c]] entry)")
        if d.address not in info.addresses:
            fail(
                f"{key}.address",
                f"a {d.part} answers at {format_ranges(list(info.addresses))}, not 0x{d.address:02x}",
            )
        return ("i2c", d.bus, d.address)
    if info.interface == "spi":
        if not any((s.bus, s.chip_select) == (d.bus, d.chip_select) for s in spec.spi):
            fail(key, f"SPI {d.bus}.{d.chip_select} is not granted by this profile (add an [[spi]] entry)")
        return ("spi", d.bus, d.chip_select)
    if info.interface == "onewire":
        if not W1_ID_PATTERN.match(d.w1_id):
            fail(f"{key}.w1_id", f"expected a 1-Wire id such as '28-00000a1b2c3d', got {d.w1_id!r}")
        elif info.onewire_family is not None and int(d.w1_id[:2], 16) != info.onewire_family:
            fail(f"{key}.w1_id", f"a {d.part}'s ids start with {info.onewire_family:02x}-, got {d.w1_id!r}")
        return ("onewire", d.w1_id)
    return ("adc", d.adc, d.channel)


def _check_devices(fail: Fail, spec: ProfileSchema) -> None:
    """Each [[devices]] entry: a known part, in the form that part takes, wired where the profile grants."""
    from edgeclaw.board import parts as sensor_parts  # the parts catalogue: only for profiles with devices

    names: dict[str, DeviceSpec] = {}
    places: dict[tuple[Any, ...], str] = {}
    for i, d in enumerate(spec.devices):
        key = f"devices[{i}]"
        name_problem = _device_name_problem(d, names)
        if name_problem is not None:
            fail(f"{key}.name", name_problem)
        names.setdefault(d.name, d)
        info = sensor_parts.part_info(d.part)
        if info is None:
            fail(f"{key}.part", f"unknown part {d.part!r} (known: {', '.join(sorted(sensor_parts.PARTS))})")
            continue
        # The wiring checks assume the form's keys are there and well typed.
        if not _check_device_form(fail, key, d, info):
            continue
        place = _device_place(fail, key, d, info, spec)
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
