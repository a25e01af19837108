"""The hardware tools end to end through Registry.execute on the sim board, and every profile refusal."""

from __future__ import annotations

import json

import pytest

from edgeclaw.backends.sim.bme280 import compensate_temperature
from edgeclaw.backends.sim.board import I2C_BUS1_PARTS
from edgeclaw.backends.sim.tmp102 import decode_temperature
from tests.hw_support import call, make_runtime, ok, write_profile

SIM_BUS1_SCAN = [f"0x{a:02x}" for a in sorted(I2C_BUS1_PARTS)]  # every sim part on bus 1, in address order


@pytest.fixture
async def sim(tmp_path):
    runtime = make_runtime(tmp_path)
    yield runtime
    await runtime.aclose()


def parts(runtime):
    return runtime.registry.get("i2c").backends.sim


# -- I2C ------------------------------------------------------------------------------------------
async def test_scan_finds_exactly_the_sim_devices(sim):
    result = await ok(sim, "i2c", action="scan", bus=1)
    assert result["addresses"] == SIM_BUS1_SCAN
    assert result["probed"] == 0x77 - 0x08 + 1  # 0x00-0x07 and 0x78-0x7f are reserved


async def test_a_device_at_a_reserved_address_is_never_probed_or_addressed(sim):
    from edgeclaw.backends.sim.tmp102 import TMP102

    # A (misbehaving) device that answers at a reserved address.
    sim.registry.get("i2c").backends.i2c(1).driver.devices[0x05] = TMP102()
    assert (await ok(sim, "i2c", action="scan", bus=1))["addresses"] == SIM_BUS1_SCAN
    outcome = await call(sim, "i2c", action="read_byte", bus=1, address=0x05, register=0)
    assert outcome.refused and "must be in 8..0x77" in outcome.error


async def test_tmp102_temperature_decodes_to_the_sim_value(sim):
    parts(sim).tmp102.temperature_c = -12.375
    result = await ok(sim, "i2c", action="read_block", bus=1, address="0x48", register=0, length=2)
    assert decode_temperature(int.from_bytes(bytes.fromhex(result["data"]), "big")) == -12.375
    word = await ok(sim, "i2c", action="read_word", bus=1, address=0x48, register=0)
    swapped = ((word["value"] & 0xFF) << 8) | (word["value"] >> 8)  # SMBus words are low byte first
    assert decode_temperature(swapped) == -12.375


async def test_bme280_chip_id_and_a_forced_measurement(sim):
    assert (await ok(sim, "i2c", action="read_byte", bus=1, address=0x76, register=0xD0))["value"] == 0x60
    await ok(sim, "i2c", action="write_byte", bus=1, address=0x76, register=0xF4, value=0b001_001_01)
    raw = bytes.fromhex(
        (await ok(sim, "i2c", action="read_block", bus=1, address=0x76, register=0xFA, length=3))["data"]
    )
    adc_t = raw[0] << 12 | raw[1] << 4 | raw[2] >> 4
    bme = parts(sim).bme280
    assert compensate_temperature(adc_t, bme.calibration)[0] / 100 == pytest.approx(
        bme.temperature_c, abs=0.01
    )


async def test_eeprom_write_then_read(sim):
    data = bytes(range(0xA0, 0xB0)).hex()
    await ok(
        sim,
        "i2c",
        action="write_block",
        bus=1,
        address=0x50,
        register=0x0123,
        register_width=2,
        data=data,
        settle_ms=6,
    )
    read = await ok(
        sim, "i2c", action="read_block", bus=1, address=0x50, register=0x0123, register_width=2, length=16
    )
    assert bytes.fromhex(read["data"]).hex() == data


async def test_settle_ms_keeps_the_bus_through_the_eeprom_write_cycle(sim):
    """Another session's read right after a write must wait out the settle time, not hit the
    EEPROM mid write cycle (when it does not acknowledge)."""
    import asyncio

    from edgeclaw.tools.base import ToolContext

    write = {
        "action": "write_block",
        "bus": 1,
        "address": 0x50,
        "register": 0x0200,
        "register_width": 2,
        "data": "5a a5",
        "settle_ms": 20,  # well past the 5 ms write cycle, however slow the machine
    }
    read = {"action": "read_block", "bus": 1, "address": 0x50, "register": 0x0200, "register_width": 2}
    wrote, got = await asyncio.gather(
        sim.registry.execute("i2c", write, ToolContext(session_key="writer")),
        sim.registry.execute("i2c", {**read, "length": 2}, ToolContext(session_key="reader")),
    )
    assert wrote.ok, wrote.error
    assert got.ok, got.error
    assert got.data is not None and got.data["data"] == "5a a5"


async def test_i2c_nack_is_worded(sim):
    outcome = await call(sim, "i2c", action="read_byte", bus=1, address=0x4B, register=0)
    assert not outcome.ok and not outcome.refused
    assert outcome.error == "i2c: no device acknowledged at 0x4b on bus 1"


# -- SPI ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("channel", range(8))
async def test_mcp3008_channel_reads(sim, channel):
    result = await ok(sim, "spi", bus=0, chip_select=0, data=[1, 0x80 | channel << 4, 0])
    rx = bytes.fromhex(result["received"])
    expected = min(1023, int(1024 * parts(sim).mcp3008.voltages[channel] / 3.3))
    assert (rx[1] & 0x03) << 8 | rx[2] == expected


# -- GPIO -----------------------------------------------------------------------------------------
async def test_gpio_write_and_read_through_mock_factory(sim):
    on = await ok(sim, "gpio", action="write", pin="led", value=True)
    assert on["active"] is True and on["level"] == 1
    assert (await ok(sim, "gpio", action="read", pin=17))["active"] is True
    factory = sim.registry.get("gpio").backends.gpio().driver.factory
    assert factory.pin(17).state == 1
    assert (await ok(sim, "gpio", action="read", pin="button"))["active"] is False  # pulled up, released
    factory.pin(27).drive_low()  # someone presses the button
    pressed = await ok(sim, "gpio", action="read", pin="button")
    assert pressed["active"] is True and pressed["level"] == 0
    pulsed = await ok(sim, "gpio", action="pulse", pin="led", duration_ms=5)
    assert pulsed["active"] is False
    duty = await ok(sim, "gpio", action="pwm", pin="led", duty=0.25, frequency_hz=200)
    assert duty["value"] == pytest.approx(0.25)
    listed = await ok(sim, "gpio", action="list")
    assert [p["name"] for p in listed["pins"]] == ["led", "button"]


# -- memory ---------------------------------------------------------------------------------------
async def test_memory_read_write_rw_region(sim):
    await ok(sim, "hardware_memory", action="write", address="0x3F200010", width=32, value="0xDEADBEEF")
    assert (await ok(sim, "hardware_memory", action="read", address=0x3F200010, width=32))["values"] == [
        0xDEADBEEF
    ]
    halves = await ok(sim, "hardware_memory", action="read", address=0x3F200010, width=16, count=2)
    assert halves["values"] == [0xBEEF, 0xDEAD]  # little-endian host, aligned 16-bit loads
    await ok(sim, "hardware_memory", action="write_block", address=0x3F200100, data="01 02 03")
    block = await ok(sim, "hardware_memory", action="read_block", address=0x3F2000FF, length=5)
    assert block["data"] == "00 01 02 03 00"


async def test_memory_ro_region_reads_and_refuses_writes(sim):
    ident = await ok(sim, "hardware_memory", action="read_block", address=0x3F000000, length=18)
    assert bytes.fromhex(ident["data"]).startswith(b"edgeclaw sim board")
    outcome = await call(sim, "hardware_memory", action="write", address=0x3F000000, value=1)
    assert outcome.refused and "read-only" in outcome.error


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"action": "read", "address": 0x3F201000}, "not inside a memory region"),  # one past the end
        ({"action": "read", "address": 0x3F200FFC, "count": 2}, "not inside a memory region"),  # straddles
        ({"action": "read", "address": 0x3F200002, "width": 32}, "not aligned"),
        ({"action": "read_block", "address": 0xFFFF_FFFF_FFFF_FFF0, "length": 32}, "overflows"),
        ({"action": "read_block", "address": 0x3F200000, "length": 5000}, "limit per call"),
        ({"action": "write", "address": 0x3F200000, "width": 8, "value": 256}, "must be in 0..0xff"),
    ],
)
async def test_memory_bounds_are_refused(sim, args, words):
    outcome = await call(sim, "hardware_memory", **args)
    assert outcome.refused and words in outcome.error, outcome.error


# -- hardware_info --------------------------------------------------------------------------------
async def test_hardware_info_reports_board_grants_and_live_backends(sim):
    await ok(sim, "i2c", action="scan", bus=1)
    info = await ok(sim, "hardware_info")
    assert info["board"] == "sim" and info["simulated"] is True
    assert any(g.startswith("i2c bus 1") for g in info["grants"])
    assert "i2c bus 1" in info["live_backends"]
    assert info["memory_total_kib"] and info["uptime_s"] is not None


# -- refusals: every tool, on a board that grants nothing, and on the bounds of one that does --------
GENERIC_REFUSALS = [
    ("i2c", {"action": "scan", "bus": 1}, "I2C bus 1 is not granted by the generic-linux profile"),
    ("spi", {"bus": 0, "chip_select": 0, "data": [1, 128, 0]}, "SPI 0.0 is not granted"),
    ("gpio", {"action": "read", "pin": 17}, "GPIO 17 is not granted"),
    ("hardware_memory", {"action": "read", "address": 0x3F200000}, "not inside a memory region"),
    ("probe", {"action": "read_memory", "address": 0x08000000, "length": 4}, "names no probe target"),
    ("esp32", {"action": "info"}, "names no ESP32 bridge"),
]


@pytest.mark.parametrize(("tool", "args", "words"), GENERIC_REFUSALS)
@pytest.mark.parametrize("dry_run", [False, True])
async def test_every_tool_refuses_what_the_profile_does_not_grant(tmp_path, tool, args, words, dry_run):
    runtime = make_runtime(tmp_path, board="generic-linux")
    try:
        outcome = await call(runtime, tool, dry_run=dry_run, **args)
    finally:
        await runtime.aclose()
    assert not outcome.ok and outcome.refused and outcome.stage == "bounds"
    assert words in outcome.error


SIM_BOUNDS = [
    (
        "i2c",
        {"action": "write_byte", "bus": 1, "address": 0x49, "register": 0, "value": 1},
        "writing to 0x49",
    ),
    ("i2c", {"action": "read_byte", "bus": 1, "address": 0x7C, "register": 0}, "must be in 8..0x77"),
    ("i2c", {"action": "scan", "bus": 0}, "I2C bus 0 is not granted"),
    ("spi", {"bus": 0, "chip_select": 0, "data": [3, 0, 0]}, "read-only"),
    ("spi", {"bus": 0, "chip_select": 0, "data": [1, 128, 0], "speed_hz": 2_000_000}, "over SPI 0.0's cap"),
    ("spi", {"bus": 0, "chip_select": 0, "data": [1, 128, 0], "mode": 1}, "SPI mode 1 is not allowed"),
    ("gpio", {"action": "write", "pin": "button", "value": 1}, "is an input"),
    ("gpio", {"action": "read", "pin": 4}, "GPIO 4 is not granted"),
    ("gpio", {"action": "pulse", "pin": "led", "duration_ms": 60_000}, "pulse limit"),
    ("probe", {"action": "write_memory", "address": 0x08000000, "data": "00"}, "region 'flash' is read-only"),
    ("probe", {"action": "read_memory", "address": 0x60000000, "length": 4}, "not inside a target region"),
    ("probe", {"action": "flash", "path": "../fw.bin"}, "'..' components are not allowed"),
    ("esp32", {"action": "gpio_write", "pin": "boot-button", "value": 1}, "is an input"),
    ("esp32", {"action": "adc_read", "pin": 35}, "ADC pin 35 is not granted"),
    (
        "esp32",
        {"action": "i2c_write", "bus": 0, "address": 0x48, "register": 1, "data": "00"},
        "writing to 0x48",
    ),
]


@pytest.mark.parametrize(("tool", "args", "words"), SIM_BOUNDS)
async def test_sim_profile_bounds_are_enforced_in_check(sim, tool, args, words):
    # A dry run performs every check, so it refuses exactly what a real call would.
    for dry_run in (True, False):
        outcome = await call(sim, tool, dry_run=dry_run, **args)
        assert outcome.refused and words in outcome.error, outcome.error


async def test_writes_are_off_unless_granted(tmp_path):
    profile = write_profile(
        tmp_path,
        "read-only-board",
        "simulated = true\n[[i2c]]\nbus = 1\nread = [{ first = 0x08, last = 0x77 }]\n"
        '[[gpio]]\npin = 17\nname = "led"\ndirection = "in"\n'
        '[[memory]]\nname = "regs"\nbase = 0x1000\nsize = 0x100\n',
    )
    runtime = make_runtime(tmp_path, board=profile)
    try:
        assert (await ok(runtime, "i2c", action="read_byte", bus=1, address=0x48, register=1))[
            "value"
        ] == 0x60
        refusals = [
            await call(runtime, "i2c", action="write_byte", bus=1, address=0x48, register=1, value=0),
            await call(runtime, "gpio", action="write", pin="led", value=1),
            await call(runtime, "hardware_memory", action="write", address=0x1000, value=0),
        ]
    finally:
        await runtime.aclose()
    assert all(o.refused for o in refusals), [o.error for o in refusals]


async def test_dry_run_touches_nothing(sim):
    outcome = await call(sim, "i2c", dry_run=True, action="scan", bus=1)
    assert outcome.ok and outcome.for_llm == "dry run: i2c would run"
    assert sim.registry.get("i2c").backends.live() == []


@pytest.mark.parametrize(
    ("tool", "args", "key"),
    [
        ("i2c", {"action": "scan", "bus": 1}, "addresses"),
        ("i2c", {"action": "read_byte", "bus": 1, "address": 0x76, "register": 0xD0}, "value"),
        ("spi", {"bus": 0, "chip_select": 0, "data": [1, 128, 0]}, "received"),
        ("gpio", {"action": "list"}, "pins"),
        ("gpio", {"action": "read", "pin": "button"}, "active"),
        ("hardware_memory", {"action": "regions"}, "regions"),
        ("hardware_info", {}, "grants"),
    ],
)
async def test_results_carry_data_and_one_readable_text(sim, tool, args, key):
    outcome = await call(sim, tool, **args)
    assert outcome.ok, outcome.error
    assert outcome.data is not None and key in outcome.data
    # One text, meant for people and the model alike: not a JSON document inside a string.
    assert outcome.for_user is None
    with pytest.raises(json.JSONDecodeError):
        json.loads(outcome.for_llm)
    # `tool call --json` and MQTT send the same dict.
    assert outcome.as_dict()["data"] == outcome.data
    json.dumps(outcome.as_dict())


async def test_the_scan_text_names_the_devices(sim):
    outcome = await call(sim, "i2c", action="scan", bus=1)
    assert f"I2C bus 1: {len(SIM_BUS1_SCAN)} devices acknowledged" in outcome.for_llm
    assert "0x48  TMP102" in outcome.for_llm
    one = await call(sim, "i2c", action="write_byte", bus=1, address=0x76, register=0xF4, value=0)
    assert one.for_llm.endswith("wrote 1 byte")


async def test_concurrent_sessions_keep_eeprom_transactions_whole(sim):
    import asyncio

    from edgeclaw.tools.base import ToolContext

    rom = parts(sim).eeprom
    rom.memory[0x100:0x110] = bytes(range(16))
    rom.memory[0x200:0x210] = bytes(range(100, 116))

    async def read(session: str, address: int) -> bytes:
        args = {
            "action": "read_block",
            "bus": 1,
            "address": 0x50,
            "register": address,
            "register_width": 2,
            "length": 16,
        }
        outcome = await sim.registry.execute("i2c", args, ToolContext(session_key=session))
        assert outcome.ok, outcome.error
        assert outcome.data is not None
        return bytes.fromhex(outcome.data["data"])

    results = await asyncio.gather(*(read(f"s{i}", 0x100 if i % 2 else 0x200) for i in range(20)))
    assert all(r == (bytes(range(16)) if i % 2 else bytes(range(100, 116))) for i, r in enumerate(results))


async def test_a_pulse_waits_for_its_pin_only_as_long_as_any_operation(tmp_path):
    import asyncio

    runtime = make_runtime(tmp_path, hardware={"op_timeout_s": 0.2})
    try:
        first = asyncio.create_task(call(runtime, "gpio", action="pulse", pin="led", duration_ms=3000))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 20
        while not runtime.hardware.gpio().driver.read(17).active:  # the first pulse holds the pin
            assert loop.time() < deadline, "the first pulse never started"
            await asyncio.sleep(0.01)
        started = loop.time()
        second = await call(runtime, "gpio", action="pulse", pin="led", duration_ms=10)
        waited = loop.time() - started
        assert not second.ok and not second.refused and "busy" in second.error
        assert waited < 2.0  # bounded by the 0.2 s operation deadline, not by the other 3 s pulse
        assert (await first).ok
    finally:
        await runtime.aclose()


async def test_closing_gpio_stops_every_pin_worker_thread():
    import asyncio
    import threading
    import time

    from edgeclaw.backends.gpio import GPIOController, GpiozeroDriver
    from edgeclaw.board import GPIOPinGrant

    grants = [GPIOPinGrant(17, "led", "out"), GPIOPinGrant(27, "button", "in", pull="up")]
    controller = GPIOController(GpiozeroDriver(grants, mock=True), timeout_s=2, threaded=True)
    await controller.write(17, True)
    await controller.read(27)
    assert any(t.name.startswith("bus-GPIO") for t in threading.enumerate())
    controller.close()
    deadline = time.monotonic() + 20  # a busy machine may take a while to schedule the exit
    while any(t.name.startswith("bus-GPIO") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the GPIO worker threads outlived close()"
        await asyncio.sleep(0.02)
