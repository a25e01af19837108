"""What a profile grants, in words: for `edgeclaw board show`, the log and the hardware info tool."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from edgeclaw.board.schema import BoardProfile, DeviceSpec, ProfileSchema, format_ranges


def describe_device(device: DeviceSpec) -> str:
    """`tmp102 at 0x48 on I2C bus 1, measures temperature (°C)`."""
    measures = device.info.measures_text
    if device.part == "analog":
        measures = f"{device.option('quantity')} ({device.option('unit')})"
    options = "".join(f", {k} = {v!r}" for k, v in device.options.items())
    return f"{device.part} {device.location}, measures {measures}{options}"


def _i2c(spec: ProfileSchema) -> Iterator[str]:
    for g in spec.i2c:
        labels = ", ".join(f"0x{d.address:02x} {d.name}" for d in g.devices)
        yield (
            f"i2c bus {g.bus} ({'sim' if spec.board.simulated else g.device_path}): "
            f"read {format_ranges(g.read)}; write {format_ranges(g.write)}; scan {'yes' if g.scan else 'no'}"
            + (f"; devices {labels}" if labels else "")
        )


def _spi(spec: ProfileSchema) -> Iterator[str]:
    for s in spec.spi:
        access = (
            "any transfer"
            if s.access == "rw"
            else "read-only: commands " + (", ".join(f"0x{c:02x}" for c in s.read_commands) or "none")
        )
        name = f" {s.name}" if s.name else ""
        yield (
            f"spi {s.bus}.{s.chip_select}{name}: up to {s.max_speed_hz} Hz, modes "
            f"{', '.join(map(str, s.modes))}, {access}"
        )


def _gpio(spec: ProfileSchema) -> Iterator[str]:
    for p in spec.gpio:
        extra = " with PWM" if p.pwm else ""
        pull = f", pull-{p.pull}" if p.pull != "none" else ""
        verb = "output (may be written)" if p.direction == "out" else "input (read only)"
        yield f"gpio {p.pin} {p.name!r}: {verb}{extra}{pull}"


def _memory(spec: ProfileSchema) -> Iterator[str]:
    for m in spec.memory:
        where = "sim file" if spec.board.simulated else m.device
        yield (
            f"memory {m.name!r}: 0x{m.base:08x}-0x{m.end - 1:08x} ({m.size} bytes) "
            f"{'read-write' if m.access == 'rw' else 'read-only'} via {where}"
        )


def _probe(spec: ProfileSchema) -> Iterator[str]:
    p = spec.probe
    if p is None:
        return
    via = f"GDB remote at {p.gdb_address}" if p.transport == "gdb" else "pyocd"
    yield (
        f"probe: target {p.target} via {via}; halt/resume/reset {'yes' if p.control else 'no'}; "
        f"flash {'yes' if p.flash else 'no'}"
        + (f" (0x{p.flash_base:08x}, {p.flash_size} bytes)" if p.flash else "")
    )
    for r in p.regions:
        yield (
            f"probe memory {r.name!r}: 0x{r.base:08x}-0x{r.end - 1:08x} "
            f"{'read-write' if r.access == 'rw' else 'read-only'}"
        )


def _esp32(spec: ProfileSchema) -> Iterator[str]:
    e = spec.esp32
    if e is None:
        return
    yield f"esp32 bridge on {e.port} at {e.baud} baud"
    for pin in e.gpio:
        yield f"esp32 gpio {pin.pin} {pin.name!r}: {'output' if pin.direction == 'out' else 'input'}"
    for a in e.adc:
        yield f"esp32 adc {a.pin} {a.name!r}"
    for g in e.i2c:
        yield f"esp32 i2c bus {g.bus}: read {format_ranges(g.read)}; write {format_ranges(g.write)}"


def _serial(spec: ProfileSchema) -> Iterator[str]:
    for s in spec.serial:
        yield f"serial {s.path}" + (f" ({s.name})" if s.name else "")


def _camera(spec: ProfileSchema) -> Iterator[str]:
    c = spec.camera
    if c is not None:
        where = f" {c.device}" if c.device else ""
        yield f"camera {c.kind}{where}, up to {c.max_width}x{c.max_height}"


def _displays(spec: ProfileSchema) -> Iterator[str]:
    for d in spec.displays:
        drawn = "" if d.access == "rw" else ", read only"
        yield f"display {d.name!r}: {d.kind} {d.width}x{d.height} {d.location}{drawn}"


def _devices(spec: ProfileSchema) -> Iterator[str]:
    for d in spec.devices:
        yield f"device {d.name!r}: {describe_device(d)}"


# Each table's lines, in the order `board show` lists them.
_TABLES: tuple[Callable[[ProfileSchema], Iterator[str]], ...] = (
    _i2c,
    _spi,
    _gpio,
    _memory,
    _probe,
    _esp32,
    _serial,
    _camera,
    _displays,
    _devices,
)


def describe_grants(profile: BoardProfile) -> list[str]:
    """What a profile lets the tools touch, one line per grant, in plain words."""
    spec = profile._spec
    lines = [line for table in _TABLES for line in table(spec)]
    return lines or ["nothing: no buses, pins, memory regions, probe or bridge"]
