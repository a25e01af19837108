"""The sensor driver interface and the parts registry: readings, and errors that name part, bus and cause."""

from __future__ import annotations

import asyncio
import dataclasses
import importlib

import pytest

from edgeclaw import board
from edgeclaw.backends.hub import BoardBackends
from edgeclaw.backends.i2c import I2CBus
from edgeclaw.backends.sensors.base import I2CSensor, SensorError, Value, crc8
from edgeclaw.backends.sensors.registry import DRIVERS, Sensors
from edgeclaw.backends.sensors.tmp102 import TMP102Driver, temperature_c
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.tmp102 import TMP102, encode_temperature
from edgeclaw.board import parts as sensor_parts
from edgeclaw.config.schema import HardwareConfig


def device(part: str, address: int, name: str = "dev", bus: int = 1) -> board.DeviceSpec:
    return board.DeviceSpec(part=part, name=name, bus=bus, address=address)


@pytest.fixture
async def sim(tmp_path):
    profile = board.load_profile("sim")
    backends = BoardBackends(profile, HardwareConfig(op_timeout_s=0.5), tmp_path)
    yield backends
    await backends.aclose()


def test_every_catalogued_part_has_a_driver_entry_and_back():
    assert set(DRIVERS) == set(sensor_parts.PARTS)


def test_every_driver_entry_names_a_class_of_the_parts_interface():
    # The base class decides how the registry wires a driver: it must match the part's interface.
    bases = {"i2c": "I2CSensor", "spi": "SPISensor", "onewire": "OneWireSensor", "adc": "ADCChannelSensor"}
    for part, target in DRIVERS.items():
        module_name, _, class_name = target.partition(":")
        cls = getattr(importlib.import_module(f"edgeclaw.backends.sensors.{module_name}"), class_name)
        wanted = bases[sensor_parts.PARTS[part].interface]
        assert wanted in [c.__name__ for c in cls.__mro__], f"{part}: {cls.__name__} is not a {wanted}"


@pytest.mark.parametrize(
    ("celsius", "extended"), [(21.5, False), (-25.0, False), (127.9375, False), (150.0, True), (-55.0, True)]
)
def test_tmp102_decodes_the_datasheet_formats(celsius, extended):
    register = encode_temperature(celsius, extended)
    assert temperature_c(register >> 8, register & 0xFF) == celsius


def test_tmp102_datasheet_table_values():
    # SBOS397 table 5 (12-bit): 0x7FF -> 127.9375; 0x190 -> 25; 0xFFC -> -0.25; 0xE70 -> -25
    assert temperature_c(0x7F, 0xF0) == 127.9375
    assert temperature_c(0x19, 0x00) == 25.0
    assert temperature_c(0xFF, 0xC0) == -0.25
    assert temperature_c(0xE7, 0x00) == -25.0


async def test_a_reading_carries_units_a_timestamp_and_the_raw_bytes(sim):
    before = asyncio.get_running_loop().time()
    reading = await sim.sensors().read("board temperature")
    assert reading.part == "tmp102" and reading.device == "board temperature"
    assert [(v.quantity, v.value, v.unit) for v in reading.values] == [("temperature", 21.5, "°C")]
    assert reading.raw == bytes((0x15, 0x80))
    data = reading.as_dict()
    assert data["raw"] == "15 80" and data["values"][0] == {
        "quantity": "temperature",
        "value": 21.5,
        "unit": "°C",
    }
    assert data["time"].endswith("Z") and reading.timestamp > 1.6e9
    assert reading.text() == "board temperature: temperature 21.50 °C"
    assert asyncio.get_running_loop().time() >= before


async def test_the_reading_follows_the_part(sim):
    sim.sim.tmp102.temperature_c = -12.25
    reading = await sim.sensors().read("board temperature")
    assert reading.value("temperature").value == -12.25


async def test_an_unknown_device_name_lists_the_known_ones(sim):
    with pytest.raises(
        Exception, match=r"no device named 'attic' in the sim profile \(devices: 'board temperature', "
    ):
        await sim.sensors().read("attic")


async def test_a_device_that_does_not_acknowledge_says_nack_naming_part_and_bus(sim):
    bus = sim.i2c(1)
    bus.driver.inject(0x48, "nack")
    with pytest.raises(SensorError) as caught:
        await sim.sensors().read("board temperature")
    e = caught.value
    assert e.kind == "nack" and e.part == "tmp102"
    assert str(e).startswith("'board temperature' (tmp102 at 0x48 on I2C bus 1): no acknowledgement")
    bus.driver.inject(0x48, None)
    assert (await sim.sensors().read("board temperature")).value("temperature").value == 21.5


async def test_an_adapter_timeout_says_timeout(sim):
    sim.i2c(1).driver.inject(0x48, "timeout")
    with pytest.raises(SensorError) as caught:
        await sim.sensors().read("board temperature")
    assert caught.value.kind == "timeout"
    assert "bus 1 timed out at 0x48 (is SDA or SCL held low?)" in str(caught.value)


async def test_a_hung_transfer_meets_the_deadline_and_frees_the_bus():
    parts = SimI2CBus(1, {0x48: TMP102(20.0)})
    bus = I2CBus(parts, timeout_s=0.3, threaded=True)  # a real board's bus: the driver on a thread
    driver = TMP102Driver(device("tmp102", 0x48, "t"), bus)
    try:
        parts.inject(0x48, "hang")
        with pytest.raises(SensorError) as caught:
            await driver.read()
        assert caught.value.kind == "timeout"
        assert str(caught.value) == "'t' (tmp102 at 0x48 on I2C bus 1): I2C bus 1: no answer within 0.3 s"
        parts.inject(0x48, None)
        parts.release()
        # The bus is usable again once the stuck transfer returns.
        assert (await driver.read()).value("temperature").value == 20.0
    finally:
        parts.release()
        bus.close()


async def test_a_transaction_holds_the_bus_against_other_callers():
    """Between a part's command and its read no other transfer may reach the bus."""
    log: list[str] = []
    commanded = asyncio.Event()

    class Recording(TMP102):
        def write(self, data: bytes) -> None:
            log.append(f"w{data.hex()}")
            commanded.set()
            super().write(data)

        def read(self, length: int) -> bytes:
            log.append(f"r{self.pointer}")
            return super().read(length)

    bus = I2CBus(SimI2CBus(1, {0x48: Recording(20.0)}), timeout_s=2, threaded=False)

    class Slow(I2CSensor):
        async def read(self):
            async with self.transaction() as t:
                await t.write(b"\x01")
                await t.wait(0.05)
                raw = await t.read(2)
            return self.reading({"temperature": 0.0}, raw)

    slow = Slow(device("tmp102", 0x48, "slow"), bus)
    other = TMP102Driver(device("tmp102", 0x48, "other"), bus)
    first = asyncio.create_task(slow.read())
    await commanded.wait()  # the slow transaction has taken the bus and sent its command
    await other.read()
    await first
    # The other read's pointer write came after the slow transaction's read, which still found
    # the pointer it had set (the configuration register, not the temperature).
    assert log == ["w01", "r1", "w00", "r0"]


def test_sensirion_crc8_vector():
    # Sensirion SHT3x datasheet 4.12: CRC of 0xBEEF is 0x92.
    assert crc8(b"\xbe\xef") == 0x92


async def test_read_all_gives_each_device_its_reading_or_its_error(tmp_path):
    body = """
[board]
name = "two"
simulated = true
[[i2c]]
bus = 1
read = [{ first = 0x08, last = 0x77 }]
[[devices]]
part = "tmp102"
bus = 1
address = 0x48
name = "inside"
[[devices]]
part = "tmp102"
bus = 1
address = 0x4B
name = "outside"
"""
    path = tmp_path / "two.toml"
    path.write_text(body)
    profile = board.read_profile(path)
    backends = BoardBackends(profile, HardwareConfig(), tmp_path)
    try:
        results = await Sensors(profile, backends).read_all()
    finally:
        await backends.aclose()
    assert results[0].value("temperature").value == 21.5
    assert isinstance(results[1], SensorError) and results[1].kind == "nack"
    assert results[1].device == "outside"


def test_device_spec_is_a_plain_dataclass():
    d = device("tmp102", 0x48)
    assert dataclasses.replace(d, address=0x49).location == "at 0x49 on I2C bus 1"


async def test_a_channel_on_an_adc_that_cannot_be_opened_is_reported_for_the_channel(tmp_path):
    path = tmp_path / "adc.toml"
    path.write_text(
        """
[board]
name = "adc"
[[spi]]
bus = 0
chip_select = 0
max_speed_hz = 1_000_000
[[devices]]
part = "mcp3008"
bus = 0
chip_select = 0
name = "adc"
[[devices]]
part = "analog"
adc = "adc"
channel = 1
name = "soil"
"""
    )
    profile = board.read_profile(path)
    backends = BoardBackends(profile, HardwareConfig(), tmp_path)
    try:
        results = await Sensors(profile, backends).read_all()
    finally:
        await backends.aclose()
    # Not simulated, and this machine has no /dev/spidev0.0 (or no spidev module): both fail,
    # each under its own name.
    assert [(r.device, r.kind) for r in results] == [("adc", "unavailable"), ("soil", "unavailable")]
    assert str(results[1]).startswith(
        "'soil' (analog on channel 1 of 'adc'): through 'adc' (mcp3008 on SPI 0.0):"
    )


def test_a_small_value_keeps_its_digits_in_the_text():
    assert Value("temperature", 21.5, "°C").text() == "temperature 21.50 °C"
    assert Value("current", 0.00213, "A").text() == "current 0.00213 A"  # not "0.00 A"
    assert Value("voltage", -0.25, "V", "ch0").text() == "voltage ch0 -0.250 V"
    assert Value("voltage", 0.0, "V").text() == "voltage 0.00 V"


async def test_a_driver_bug_comes_out_as_itself_not_as_a_group(sim, monkeypatch):
    async def broken(self):
        raise KeyError("humidity")

    monkeypatch.setattr(TMP102Driver, "read", broken)
    with pytest.raises(KeyError):
        await sim.sensors().read_all()  # devices on several buses, read at once
