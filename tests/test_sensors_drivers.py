"""The drivers (TMP102, BME280/BMP280, SHT3x/SHT4x, AHT20, HTU21D) against their sim parts.

Datasheet example values where the datasheet gives them (the BMP280/BME280 compensation
example, the Sensirion and TE CRC vectors), and for each part a NACK, a CRC failure and a
timeout, through the real `I2CBus` (its lock and deadline) and the sim's fault injection.
"""

from __future__ import annotations

import pytest

from edgeclaw.backends.i2c import I2CBus
from edgeclaw.backends.sensors import bme280 as bme
from edgeclaw.backends.sensors.aht20 import AHT20Driver
from edgeclaw.backends.sensors.analog import AnalogDriver
from edgeclaw.backends.sensors.base import ADCDriver, SensorError, crc8
from edgeclaw.backends.sensors.bme280 import BME280Driver, BMP280Driver
from edgeclaw.backends.sensors.htu21d import HTU21DDriver
from edgeclaw.backends.sensors.sht import SHT3xDriver, SHT4xDriver
from edgeclaw.backends.sensors.tmp102 import TMP102Driver
from edgeclaw.backends.sim.aht20 import AHT20
from edgeclaw.backends.sim.bme280 import BME280, CALIBRATION, calibration_bytes
from edgeclaw.backends.sim.bmp280 import BMP280
from edgeclaw.backends.sim.htu21d import HTU21D
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.sht import SHT3x, SHT4x
from edgeclaw.backends.sim.tmp102 import TMP102
from edgeclaw.board import DeviceSpec


def on_bus(
    part_name: str, address: int, model, driver_cls, *, timeout_s: float = 1.0, threaded: bool = False
):
    sim = SimI2CBus(1, {address: model})
    bus = I2CBus(sim, timeout_s=timeout_s, threaded=threaded)
    device = DeviceSpec(part=part_name, name=f"my {part_name}", bus=1, address=address)
    return sim, bus, driver_cls(device, bus)


PARTS = [
    ("tmp102", 0x48, lambda: TMP102(23.0), TMP102Driver, {"temperature": 23.0}),
    ("bme280", 0x76, lambda: BME280(19.5, 98_765.0, 40.0), BME280Driver,
     {"temperature": 19.5, "pressure": 987.65, "humidity": 40.0}),
    ("bmp280", 0x77, lambda: BMP280(26.0, 101_000.0), BMP280Driver,
     {"temperature": 26.0, "pressure": 1010.0}),
    ("sht3x", 0x44, lambda: SHT3x(18.0, 62.0), SHT3xDriver, {"temperature": 18.0, "humidity": 62.0}),
    ("sht4x", 0x44, lambda: SHT4x(12.0, 80.0), SHT4xDriver, {"temperature": 12.0, "humidity": 80.0}),
    ("aht20", 0x38, lambda: AHT20(16.0, 55.0), AHT20Driver, {"temperature": 16.0, "humidity": 55.0}),
    ("htu21d", 0x40, lambda: HTU21D(14.0, 70.0), HTU21DDriver, {"temperature": 14.0, "humidity": 70.0}),
]  # fmt: skip
# How close a reading must come to what the sim part holds: each part's resolution.
TOLERANCE = {"temperature": 0.02, "pressure": 0.02, "humidity": 0.03}
UNITS = {"temperature": "°C", "pressure": "hPa", "humidity": "%RH"}
CRC_CHECKED = {"sht3x", "sht4x", "aht20", "htu21d"}


@pytest.mark.parametrize(
    ("part", "address", "make", "driver_cls", "expected"), PARTS, ids=[p[0] for p in PARTS]
)
async def test_the_driver_reads_what_the_part_holds(part, address, make, driver_cls, expected):
    _, bus, driver = on_bus(part, address, make(), driver_cls)
    reading = await driver.read()
    got = {v.quantity: v.value for v in reading.values}
    assert got.keys() == expected.keys()
    for quantity, value in expected.items():
        assert got[quantity] == pytest.approx(value, abs=TOLERANCE[quantity]), quantity
    assert {v.quantity: v.unit for v in reading.values} == {q: UNITS[q] for q in expected}
    assert reading.raw  # the bytes read, for audit
    bus.close()


@pytest.mark.parametrize(
    ("part", "address", "make", "driver_cls", "expected"), PARTS, ids=[p[0] for p in PARTS]
)
async def test_a_part_that_does_not_answer_is_a_nack_naming_part_and_bus(
    part, address, make, driver_cls, expected
):
    sim, _, driver = on_bus(part, address, make(), driver_cls)
    sim.inject(address, "nack")
    with pytest.raises(SensorError) as caught:
        await driver.read()
    assert caught.value.kind == "nack"
    assert str(caught.value).startswith(
        f"'my {part}' ({part} at 0x{address:02x} on I2C bus 1): no acknowledgement"
    )


@pytest.mark.parametrize(
    ("part", "address", "make", "driver_cls", "expected"), PARTS, ids=[p[0] for p in PARTS]
)
async def test_a_hung_bus_is_a_timeout(part, address, make, driver_cls, expected):
    sim, bus, driver = on_bus(part, address, make(), driver_cls, timeout_s=0.3, threaded=True)
    sim.inject(address, "hang")
    try:
        with pytest.raises(SensorError) as caught:
            await driver.read()
        assert caught.value.kind == "timeout"
        assert "no answer within 0.3 s" in str(caught.value)
    finally:
        sim.release()
        bus.close()


@pytest.mark.parametrize(
    ("part", "address", "make", "driver_cls", "expected"),
    [p for p in PARTS if p[0] in CRC_CHECKED],
    ids=sorted(CRC_CHECKED, key=[p[0] for p in PARTS].index),
)
async def test_a_bit_flipped_on_the_wire_is_a_crc_failure(part, address, make, driver_cls, expected):
    sim, _, driver = on_bus(part, address, make(), driver_cls)
    sim.inject(address, "corrupt")
    with pytest.raises(SensorError) as caught:
        await driver.read()
    assert caught.value.kind == "crc"
    assert "CRC mismatch in the" in str(caught.value) and f"({part} at 0x{address:02x} on I2C bus 1)" in str(
        caught.value
    )
    sim.inject(address, None)
    assert (await driver.read()).values  # the next clean read is fine again


# -- datasheet figures ------------------------------------------------------------------------------
def test_bme280_compensation_matches_the_datasheet_example():
    # BMP280 datasheet 3.12 (the same trimming and formulas as the BME280): adc_T = 519888 gives
    # t_fine = 128422 and T = 25.08 °C; adc_P = 415148 gives p = 100653.27 Pa (the floating-point
    # code's figure; the 64-bit integer code resolves 1/256 Pa and lands within 0.02 Pa of it).
    block_a, block_b = calibration_bytes(CALIBRATION)
    trimming = bme.parse_trimming(block_a, block_b)
    assert (trimming.T1, trimming.T2, trimming.T3) == (27504, 26435, -1000)
    assert (trimming.P1, trimming.P9) == (36477, 6000)
    centi, t_fine = bme.temperature(519888, trimming)
    assert (centi, t_fine) == (2508, 128422)
    assert bme.pressure_q24_8(415148, t_fine, trimming) / 256 == pytest.approx(100653.27, abs=0.02)


def test_bme280_humidity_trimming_unpacks_the_shared_nibble():
    # H4 = 0xE4[7:0] << 4 | 0xE5[3:0]; H5 = 0xE6[7:0] << 4 | 0xE5[7:4] (datasheet table 16), signed.
    trimming = bme.parse_trimming(bytes(26), bytes((0x6A, 0x01, 0x00, 0x13, 0x2D, 0x03, 0x1E)))
    assert (trimming.H2, trimming.H3, trimming.H4, trimming.H5, trimming.H6) == (362, 0, 0x13D, 0x32, 30)
    negative = bme.parse_trimming(bytes(26), bytes((0, 0, 0, 0xFF, 0xFF, 0xFF, 0xF0)))
    assert (negative.H4, negative.H5, negative.H6) == (-1, -1, -16)


async def test_a_bme280_driver_refuses_a_bmp280():
    _, _, driver = on_bus("bme280", 0x76, BMP280(), BME280Driver)
    with pytest.raises(SensorError) as caught:
        await driver.read()
    assert caught.value.kind == "bad_data"
    assert "chip id 0x58 is not a bme280's (0x60)" in str(caught.value)


async def test_bme280_trimming_is_read_once():
    model = BME280(20.0, 100_000.0, 50.0)
    reads: list[int] = []
    original = model.read

    def counting(length: int) -> bytes:
        reads.append(model.pointer)
        return original(length)

    model.read = counting  # type: ignore[method-assign]
    _, _, driver = on_bus("bme280", 0x76, model, BME280Driver)
    await driver.read()
    await driver.read()
    assert reads.count(0x88) == 1 and reads.count(0xF7) == 2


def test_crc8_vectors_from_the_datasheets():
    assert crc8(b"\xbe\xef") == 0x92  # Sensirion SHT3x-DIS 4.12 and SHT4x 4.4
    assert crc8(b"\xdc", init=0x00) == 0x79  # TE HTU21D, "CRC checksum" example
    assert crc8(b"\x68\x3a", init=0x00) == 0x7C
    assert crc8(b"\x4e\x85", init=0x00) == 0x6B


async def test_sht3x_waits_for_the_measurement_before_reading():
    """Without clock stretching the part NACKs a read while it measures: the driver must wait."""
    _, _, driver = on_bus("sht3x", 0x44, SHT3x(21.0, 50.0), SHT3xDriver)
    hasty = SHT3xDriver(driver.device, driver.bus)
    hasty.measure_s = 0  # a driver that does not wait for the conversion ...
    with pytest.raises(SensorError) as caught:
        await hasty.read()
    assert caught.value.kind == "nack"  # ... meets the part's refusal, as on the wire
    assert (await driver.read()).value("temperature").value == pytest.approx(21.0, abs=0.01)


async def test_aht20_is_initialised_when_its_calibration_bit_is_clear():
    model = AHT20(20.0, 30.0, calibrated=False)
    _, _, driver = on_bus("aht20", 0x38, model, AHT20Driver)
    reading = await driver.read()
    assert reading.value("humidity").value == pytest.approx(30.0, abs=0.01)
    assert model.status & 0x08


async def test_sht4x_clips_humidity_to_0_100():
    _, _, driver = on_bus("sht4x", 0x44, SHT4x(20.0, 110.0), SHT4xDriver)
    assert (await driver.read()).value("humidity").value == 100.0


# -- a device on an ADC channel ----------------------------------------------------------------------
class RampADC(ADCDriver):
    """An ADC whose channel N reads N / 2 volts (the interface every ADC driver offers)."""

    def __init__(self, fail_with: SensorError | None = None) -> None:
        self.fail_with = fail_with

    async def read_channel(self, channel: int) -> tuple[float, bytes]:
        if self.fail_with is not None:
            raise self.fail_with
        return channel / 2, bytes((channel,))


def analog(channel: int, **options) -> DeviceSpec:
    return DeviceSpec(part="analog", name="probe", adc="adc", channel=channel, options=options)


async def test_an_analog_channel_reads_volts_by_default():
    reading = await AnalogDriver(analog(3), RampADC()).read()
    assert [(v.quantity, v.value, v.unit) for v in reading.values] == [("voltage", 1.5, "V")]
    assert reading.raw == b"\x03"


async def test_an_analog_channel_scales_into_its_quantity():
    tmp36 = analog(2, scale=100.0, offset=-50.0, quantity="temperature", unit="°C")
    reading = await AnalogDriver(tmp36, RampADC()).read()  # 1.0 V on a TMP36: 50 °C
    assert [(v.quantity, v.value, v.unit) for v in reading.values] == [("temperature", 50.0, "°C")]


async def test_an_analog_channel_reports_its_adcs_failure_under_its_own_name():
    adc_device = DeviceSpec(part="ads1115", name="adc", bus=1, address=0x48)
    failing = RampADC(SensorError(adc_device, "nack", "no acknowledgement"))
    with pytest.raises(SensorError) as caught:
        await AnalogDriver(analog(0), failing).read()
    assert caught.value.kind == "nack"
    assert str(caught.value) == (
        "'probe' (analog on channel 0 of 'adc'): "
        "through 'adc' (ads1115 at 0x48 on I2C bus 1): no acknowledgement"
    )
