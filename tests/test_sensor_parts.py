"""BH1750, ADS1115, MCP3008, INA219 and DS18B20: datasheet values, then each driver against its sim part
through the parts registry, and the ways a part fails (no acknowledgement, a damaged transfer, no answer
in time) named as the part's own errors."""

from __future__ import annotations

import threading

import pytest

from edgeclaw.backends.hub import BoardBackends
from edgeclaw.backends.i2c import I2CBus
from edgeclaw.backends.sensors import ads1115, bh1750, ds18b20, ina219, mcp3008
from edgeclaw.backends.sensors.base import SensorError
from edgeclaw.backends.sensors.registry import Sensors
from edgeclaw.backends.sim.ads1115 import ADS1115
from edgeclaw.backends.sim.bh1750 import BH1750, CONTINUOUS_H, ONE_TIME_H, POWER_ON
from edgeclaw.backends.sim.board import ADS1115_VOLTAGES, MCP3008_VOLTAGES
from edgeclaw.backends.sim.ds18b20 import DS18B20
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.ina219 import INA219
from edgeclaw.backends.sim.mcp3008 import MCP3008
from edgeclaw.backends.sim.onewire import w1_slave_text
from edgeclaw.backends.spi import SPIDevice
from edgeclaw.board import DeviceSpec, load_profile
from edgeclaw.config.schema import HardwareConfig


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def sim(tmp_path):
    """The sim board's declared devices through the registry, and its parts to change or break."""
    profile = load_profile("sim")
    backends = BoardBackends(profile, HardwareConfig(op_timeout_s=0.5), tmp_path)
    sensors = Sensors(profile, backends)
    yield sensors, backends
    await backends.aclose()


def i2c_sim_bus(backends: BoardBackends) -> SimI2CBus:
    driver = backends.i2c(1).driver
    assert isinstance(driver, SimI2CBus)
    return driver


async def failure(sensors: Sensors, name: str) -> SensorError:
    with pytest.raises(SensorError) as caught:
        await sensors.read(name)
    return caught.value


# -- BH1750 ----------------------------------------------------------------------------------------
def test_bh1750_datasheet_example_count_to_lux():
    # Datasheet "Measurement sequence example": high byte 1000_0011, low byte 1001_0000 -> 28067 lx.
    assert round(bh1750.lux_from_count(0b1000_0011_1001_0000)) == 28067
    # MTreg scales the sensitivity; H-resolution mode 2 halves the lux per count.
    assert bh1750.lux_from_count(1200, mtreg=138) == pytest.approx(500.0)
    assert bh1750.lux_from_count(1200, mode2=True) == pytest.approx(500.0)


def test_bh1750_sim_measures_after_its_measurement_time_and_powers_down_after_one_time():
    clock = Clock()
    part = BH1750(illuminance_lx=100.0, clock=clock)
    bus = SimI2CBus(1, {0x23: part})
    bus.write_block(0x23, bytes((POWER_ON,)))
    bus.write_block(0x23, bytes((ONE_TIME_H,)))
    clock.now += 0.05
    assert bus.read_bytes(0x23, 2) == b"\x00\x00"  # still measuring: the reset value
    clock.now += 0.1
    assert bus.read_bytes(0x23, 2) == (120).to_bytes(2, "big")  # 100 lx * 1.2
    assert not part.powered  # one-time mode drops back to power down
    # Measurement time high bits 01000_010, low bits 011_11110: MTreg = 0b010_11110 = 94.
    bus.write_block(0x23, bytes((0b01000_010,)))
    bus.write_block(0x23, bytes((0b011_11110,)))
    assert part.mtreg == 94
    bus.write_block(0x23, bytes((CONTINUOUS_H,)))
    clock.now += 0.120 * 94 / 69
    assert int.from_bytes(bus.read_bytes(0x23, 2), "big") == int(100 * 1.2 * 94 / 69)


async def test_bh1750_reads_lux_through_the_registry(sim):
    sensors, backends = sim
    backends.sim.bh1750.illuminance_lx = 28067
    reading = await sensors.read("light")
    assert reading.raw == bytes((0b1000_0011, 0b1001_0000))
    assert reading.value("illuminance").unit == "lx"
    assert reading.value("illuminance").value == pytest.approx(28066.67, abs=0.01)


async def test_bh1750_that_lost_power_is_started_again_instead_of_reading_darkness(sim):
    sensors, backends = sim
    await sensors.read("light")
    part = backends.sim.bh1750
    part.powered, part.mode, part.data = False, None, 0  # a power cycle: powered down, result 0
    part.illuminance_lx = 500.0
    reading = await sensors.read("light")
    assert reading.value("illuminance").value == pytest.approx(500.0, abs=1)


async def test_bh1750_nack_names_the_device(sim):
    sensors, backends = sim
    i2c_sim_bus(backends).inject(0x23, "nack")
    error = await failure(sensors, "light")
    assert error.kind == "nack"
    assert "'light' (bh1750 at 0x23 on I2C bus 1)" in str(error)
    assert "no device acknowledged at 0x23 on bus 1" in str(error)


# -- ADS1115 ---------------------------------------------------------------------------------------
def test_ads1115_config_word_and_codes_follow_the_datasheet():
    # OS=1, MUX=100 (AIN0-GND), PGA=010 (±2.048 V), MODE=1, DR=111 (860 SPS), comparator off (11).
    assert ads1115.config_word(0, 2.048) == 0b1_100_010_1_111_0_0_0_11
    assert ads1115.config_word(3, 6.144) >> 12 & 0b111 == 0b111
    # Table 3: LSB = FS / 2^15; +FS - 1 LSB is 0x7FFF, -FS is 0x8000.
    assert ads1115.volts_from_code(0x7FFF, 2.048) == pytest.approx(2.048 - 62.5e-6)
    assert ads1115.volts_from_code(0x8000, 2.048) == -2.048
    assert ads1115.volts_from_code(0x3E80, 2.048) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="gain must be one of"):
        ads1115.config_word(0, 3.3)


def test_ads1115_sim_single_shot_converts_in_one_data_period():
    clock = Clock()
    part = ADS1115([1.0, 0, 0, 0], clock=clock)
    bus = SimI2CBus(1, {0x49: part})
    assert bus.read_block(0x49, b"\x01", 2) == b"\x85\x83"  # the config register's reset value
    assert bus.read_block(0x49, b"\x02", 2) + bus.read_block(0x49, b"\x03", 2) == b"\x80\x00\x7f\xff"
    config = ads1115.config_word(0, 2.048)
    bus.write_block(0x49, bytes((1, config >> 8, config & 0xFF)))
    assert not bus.read_block(0x49, b"\x01", 2)[0] & 0x80  # OS = 0: converting
    assert bus.read_block(0x49, b"\x00", 2) == b"\x00\x00"  # the previous result, until it is done
    clock.now += 1 / 860
    assert bus.read_block(0x49, b"\x01", 2)[0] & 0x80
    assert bus.read_block(0x49, b"\x00", 2) == (16000).to_bytes(2, "big")  # 1 V at ±2.048 V


async def test_ads1115_reads_each_channel_in_volts_through_the_registry(sim):
    sensors, _ = sim
    reading = await sensors.read("adc")  # gain 4.096 in the sim profile: 125 µV per count
    volts = [reading.value("voltage", f"ch{i}").value for i in range(4)]
    assert volts == pytest.approx(ADS1115_VOLTAGES, abs=125e-6)
    assert len(reading.raw) == 4 * 4  # config and conversion registers per channel


async def test_ads1115_input_beyond_full_scale_reads_full_scale(tmp_path):
    device = DeviceSpec(part="ads1115", name="adc", bus=1, address=0x49, options={"gain": 2.048})
    bus = I2CBus(SimI2CBus(1, {0x49: ADS1115([3.3, 0, 0, 0])}), timeout_s=1, threaded=False)
    volts, _ = await ads1115.ADS1115Driver(device, bus).read_channel(0)
    assert volts == pytest.approx(2.048 - 62.5e-6)


class MeddledADS1115(ADS1115):
    """Another program switching the multiplexer while our conversion runs."""

    def write(self, data: bytes) -> None:
        super().write(data)
        if len(data) == 3 and data[0] == 1:
            self.config ^= 1 << 12


async def test_ads1115_conversion_of_another_channel_is_refused():
    device = DeviceSpec(part="ads1115", name="adc", bus=1, address=0x49)
    bus = I2CBus(SimI2CBus(1, {0x49: MeddledADS1115([1.0, 2.0, 0, 0])}), timeout_s=1, threaded=False)
    with pytest.raises(SensorError) as caught:
        await ads1115.ADS1115Driver(device, bus).read_channel(0)
    assert caught.value.kind == "bad_data"
    assert "another program may be using the ADC" in str(caught.value)


async def test_ads1115_timeout_names_the_device(sim):
    sensors, backends = sim
    i2c_sim_bus(backends).inject(0x49, "timeout")
    error = await failure(sensors, "adc")
    assert error.kind == "timeout"
    assert "'adc' (ads1115 at 0x49 on I2C bus 1)" in str(error)


# -- MCP3008 ---------------------------------------------------------------------------------------
def test_mcp3008_frame_and_conversion_follow_the_datasheet():
    # Figure 6-1: start bit, SGL/DIFF = 1, D2..D0, then clocks for the null bit and both copies.
    assert mcp3008.request_frame(5) == bytes((0x01, 0b1101_0000, 0, 0, 0))
    # Equation 4-1: code = 1024 * VIN / VREF.
    part = MCP3008(vref=3.3, voltages=[1.65] * 8)
    code = mcp3008.decode_frame(part.transfer(mcp3008.request_frame(0), 1_000_000, 0, 8))
    assert code == 512
    assert mcp3008.volts_from_code(code, 3.3) == pytest.approx(1.65)


async def test_mcp3008_reads_volts_with_its_reference_through_the_registry(sim):
    sensors, _ = sim
    reading = await sensors.read("spi adc")
    volts = [reading.value("voltage", f"ch{i}").value for i in range(8)]
    assert volts == pytest.approx(MCP3008_VOLTAGES, abs=3.3 / 1024 + 1e-9)  # one count
    assert len(reading.raw) == 8 * mcp3008.FRAME_BYTES


class FloatingMiso:
    """No part on the chip select: MISO pulled high reads all ones."""

    label = "SPI 0.0"

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        return b"\xff" * len(data)

    def close(self) -> None:
        pass


class NoisyMCP3008(MCP3008):
    """A glitch on MISO flips one bit of the MSB-first result."""

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        out = bytearray(super().transfer(data, speed_hz, mode, bits_per_word))
        out[2] ^= 0x10
        return bytes(out)


class StuckSPI(MCP3008):
    """A transfer that never comes back (a wedged controller) until released."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()

    def transfer(self, data: bytes, speed_hz: int, mode: int, bits_per_word: int) -> bytes:
        self.release.wait()
        return super().transfer(data, speed_hz, mode, bits_per_word)


def mcp3008_driver(part, *, threaded: bool = False, timeout_s: float = 1.0) -> mcp3008.MCP3008Driver:
    profile = load_profile("sim")
    grant = profile.spi_device(0, 0)
    device = profile.device("spi adc")
    return mcp3008.MCP3008Driver(device, SPIDevice(part, timeout_s=timeout_s, threaded=threaded), grant)


async def test_mcp3008_without_a_part_is_no_answer():
    with pytest.raises(SensorError) as caught:
        await mcp3008_driver(FloatingMiso()).read_channel(2)
    assert caught.value.kind == "nack"
    assert "'spi adc' (mcp3008 on SPI 0.0): channel 2: no answer" in str(caught.value)


async def test_mcp3008_damaged_result_fails_its_check():
    with pytest.raises(SensorError) as caught:
        await mcp3008_driver(NoisyMCP3008(voltages=[1.0] * 8)).read_channel(1)
    assert caught.value.kind == "crc"
    assert "two copies differ" in str(caught.value)


async def test_mcp3008_transfer_that_never_returns_times_out():
    part = StuckSPI()
    driver = mcp3008_driver(part, threaded=True, timeout_s=0.2)
    try:
        with pytest.raises(SensorError) as caught:
            await driver.read_channel(0)
    finally:
        part.release.set()
        driver.spi.close()
    assert caught.value.kind == "timeout"
    assert "no answer within 0.2 s" in str(caught.value)


# -- INA219 ----------------------------------------------------------------------------------------
def test_ina219_calibration_follows_the_datasheet_example():
    # Section 8.5.1's example: R_shunt 0.1 Ω, Current_LSB 100 µA -> Cal = 4096, Power_LSB 2 mW.
    assert ina219.calibration_for(100e-6, 0.1) == 4096
    p = ina219.programming(shunt_ohms=0.1, max_current_a=3.2)
    # 3.2 A through 0.1 Ω needs the ±320 mV range: the power-on configuration 0x399F (32 V, /8,
    # 12-bit, continuous) is exactly that.
    assert p.config == 0x399F
    assert p.calibration == 4194  # trunc(0.04096 / (3.2 / 32767 * 0.1)), bit 0 void
    assert p.power_lsb_w == pytest.approx(20 * p.current_lsb_a)
    assert ina219.programming(shunt_ohms=0.1, max_current_a=0.3).config >> 11 & 0b11 == 0b00  # ±40 mV
    with pytest.raises(ValueError, match="beyond the INA219's"):
        ina219.programming(shunt_ohms=0.1, max_current_a=4.0)


def test_ina219_sim_registers_follow_the_datasheet():
    part = INA219(bus_voltage_v=12.0, current_a=1.0, shunt_ohms=0.1)
    bus = SimI2CBus(1, {0x40: part})
    assert bus.read_block(0x40, b"\x00", 2) == b"\x39\x9f"
    assert bus.read_block(0x40, b"\x01", 2) == (10000).to_bytes(2, "big")  # 100 mV in 10 µV counts
    assert bus.read_block(0x40, b"\x04", 2) == b"\x00\x00"  # no calibration yet: no current
    bus.write_block(0x40, b"\x05\x10\x00")  # Cal = 4096
    assert bus.read_block(0x40, b"\x04", 2) == (10000).to_bytes(2, "big")  # 10000 * 100 µA = 1 A
    bus_register = int.from_bytes(bus.read_block(0x40, b"\x02", 2), "big")
    assert bus_register >> 3 == 3000 and bus_register & 0b10  # 12 V in 4 mV counts, CNVR set
    assert bus.read_block(0x40, b"\x03", 2) == (6000).to_bytes(2, "big")  # 10000 * 3000 / 5000: 12 W
    bus.write_block(0x40, b"\x00\x80\x00")  # RST
    assert bus.read_block(0x40, b"\x05", 2) == b"\x00\x00"


async def test_ina219_reads_volts_amps_and_watts_through_the_registry(sim):
    sensors, _ = sim  # the sim: 12.6 V, 0.8 A through 0.1 Ω; shunt_ohms 0.1, max_current_a 3.2
    reading = await sensors.read("solar")
    assert reading.value("bus_voltage").value == pytest.approx(12.6, abs=0.004)
    assert reading.value("current").value == pytest.approx(0.8, abs=0.0002)
    assert reading.value("power").value == pytest.approx(12.6 * 0.8, abs=0.005)
    assert [reading.value(q).unit for q in ("bus_voltage", "current", "power")] == ["V", "A", "W"]


async def test_ina219_reset_part_is_calibrated_again(sim):
    sensors, backends = sim
    await sensors.read("solar")
    i2c_sim_bus(backends).write_block(0x41, b"\x00\x80\x00")  # a reset (or a brown-out)
    backends.sim.ina219.current_a = 1.5
    reading = await sensors.read("solar")
    assert reading.value("current").value == pytest.approx(1.5, abs=0.0002)


async def test_ina219_current_beyond_its_range_is_an_error_not_a_number(tmp_path):
    bus = I2CBus(SimI2CBus(1, {0x40: INA219(12.0, current_a=4.0)}), timeout_s=1, threaded=False)
    device = DeviceSpec(part="ina219", name="motor", bus=1, address=0x40)
    with pytest.raises(SensorError, match="end of its range") as caught:
        await ina219.INA219Driver(device, bus).read()
    assert caught.value.kind == "bad_data"
    # Inside the shunt range but above max_current_a: the part's own overflow flag.
    bus = I2CBus(SimI2CBus(1, {0x40: INA219(12.0, current_a=0.35)}), timeout_s=1, threaded=False)
    device = DeviceSpec(part="ina219", name="motor", bus=1, address=0x40, options={"max_current_a": 0.3})
    with pytest.raises(SensorError, match="overflow") as caught:
        await ina219.INA219Driver(device, bus).read()


async def test_ina219_nack_names_the_device(sim):
    sensors, backends = sim
    i2c_sim_bus(backends).inject(0x41, "nack")
    error = await failure(sensors, "solar")
    assert error.kind == "nack"
    assert "'solar' (ina219 at 0x41 on I2C bus 1)" in str(error)


# -- DS18B20 ---------------------------------------------------------------------------------------
KERNEL_EXAMPLE = "72 01 4b 46 7f ff 0e 10 57 : crc=57 YES\n72 01 4b 46 7f ff 0e 10 57 t=23125\n"


def test_maxim_crc8_vectors():
    assert ds18b20.maxim_crc8(bytes.fromhex("02 1c b8 01 00 00 00")) == 0xA2  # application note 27
    assert ds18b20.maxim_crc8(bytes.fromhex("72 01 4b 46 7f ff 0e 10")) == 0x57


@pytest.mark.parametrize(
    ("celsius", "register"),
    # Datasheet table 1 (12-bit).
    [
        (125, 0x07D0),
        (85, 0x0550),
        (25.0625, 0x0191),
        (10.125, 0x00A2),
        (0.5, 0x0008),
        (0, 0x0000),
        (-0.5, 0xFFF8),
        (-10.125, 0xFF5E),
        (-25.0625, 0xFE6F),
        (-55, 0xFC90),
    ],
)
def test_ds18b20_temperature_register_follows_datasheet_table(celsius, register):
    part = DS18B20(temperature_c=celsius)
    assert int.from_bytes(part.scratchpad()[0:2], "little") == register
    assert ds18b20.scratchpad_temperature(part.scratchpad()) == celsius


def test_ds18b20_kernel_text_parses_and_sim_writes_the_kernels_format():
    found = ds18b20.parse_w1_slave(KERNEL_EXAMPLE)
    assert found.temperature_c == 23.125 and found.resolution_bits == 12
    scratchpad = bytes.fromhex("72 01 4b 46 7f ff 0e 10 57")
    assert w1_slave_text(scratchpad, scratchpad, 0x57) == KERNEL_EXAMPLE
    # Negative values: w1_therm's t= truncates count * 1000 / 16 toward zero.
    cold = DS18B20(temperature_c=-10.125).scratchpad()
    assert w1_slave_text(cold, cold, cold[8]).endswith(" t=-10125\n")


def test_ds18b20_undefined_low_bits_of_coarser_resolutions_are_ignored():
    # 9-bit resolution (config 0x1F): bits 2..0 undefined; here set, as a part may leave them.
    body = bytes((0x37, 0x01, 0x4B, 0x46, 0x1F, 0xFF, 0x09, 0x10))  # 0x0137 = 19.4375 -> 19.0 + 7/16
    text = w1_slave_text(body + bytes((ds18b20.maxim_crc8(body),)), bytes(9), ds18b20.maxim_crc8(body))
    found = ds18b20.parse_w1_slave(text)
    assert found.resolution_bits == 9 and found.temperature_c == 19.0


async def test_ds18b20_reads_the_sim_sysfs_tree_through_the_registry(sim):
    sensors, backends = sim
    root = backends.sim.onewire_root
    assert (root / "w1_bus_master1" / "w1_master_slaves").read_text() == "28-00000a1b2c3d\n"
    reading = await sensors.read("water")
    assert reading.value("temperature").value == 19.5
    assert reading.value("temperature").unit == "°C"
    first_line = (root / "28-00000a1b2c3d" / "w1_slave").read_text().split(" :")[0]
    assert reading.raw == bytes.fromhex(first_line)  # the nine scratchpad bytes, for audit
    backends.sim.ds18b20.temperature_c = -3.25
    assert (await sensors.read("water")).value("temperature").value == -3.25


async def test_ds18b20_crc_failure(sim):
    sensors, backends = sim
    backends.sim.onewire.set_fault("28-00000a1b2c3d", "crc")
    text = (backends.sim.onewire_root / "28-00000a1b2c3d" / "w1_slave").read_text()
    assert " NO\n" in text  # the kernel's own verdict
    error = await failure(sensors, "water")
    assert error.kind == "crc"
    assert "'water' (ds18b20 on 1-Wire as 28-00000a1b2c3d): CRC mismatch" in str(error)


def test_ds18b20_crc_is_checked_even_when_the_kernel_says_yes():
    forged = KERNEL_EXAMPLE.replace("72 01", "73 01", 1)
    with pytest.raises(ds18b20.W1SlaveError, match="CRC mismatch") as caught:
        ds18b20.parse_w1_slave(forged)
    assert caught.value.kind == "crc"


async def test_ds18b20_no_answer_and_gone(sim):
    sensors, backends = sim
    backends.sim.onewire.set_fault("28-00000a1b2c3d", "no_answer")
    error = await failure(sensors, "water")
    assert error.kind == "nack" and "did not answer" in str(error)
    backends.sim.onewire.set_fault("28-00000a1b2c3d", "absent")
    assert (backends.sim.onewire_root / "w1_bus_master1" / "w1_master_slaves").read_text() == "not found.\n"
    error = await failure(sensors, "water")
    assert error.kind == "unavailable" and "28-00000a1b2c3d" in str(error)
    # All zeros passes the CRC (0 is the CRC of zeros) but is nobody answering.
    with pytest.raises(ds18b20.W1SlaveError) as caught:
        ds18b20.parse_w1_slave(w1_slave_text(bytes(9), bytes(9), 0))
    assert caught.value.kind == "no_answer"


async def test_ds18b20_power_on_value_is_not_a_temperature(sim):
    sensors, backends = sim
    backends.sim.ds18b20.converted = False
    backends.sim.onewire.refresh()
    error = await failure(sensors, "water")
    assert error.kind == "bad_data" and "power-on value (85 °C)" in str(error)


async def test_ds18b20_read_that_never_returns_times_out(sim):
    sensors, backends = sim
    backends.sim.onewire.set_fault("28-00000a1b2c3d", "hang")
    try:
        error = await failure(sensors, "water")
    finally:
        backends.sim.onewire.release_hang("28-00000a1b2c3d")
    assert error.kind == "timeout"
    assert "'water' (ds18b20 on 1-Wire as 28-00000a1b2c3d)" in str(error) and "0.5 s" in str(error)


async def test_ads1115_that_never_finishes_converting_times_out():
    clock = Clock()  # never advances: the conversion never ends, OS stays 0
    device = DeviceSpec(part="ads1115", name="adc", bus=1, address=0x49)
    bus = I2CBus(SimI2CBus(1, {0x49: ADS1115([1.0, 0, 0, 0], clock=clock)}), timeout_s=0.2, threaded=False)
    with pytest.raises(SensorError) as caught:
        await ads1115.ADS1115Driver(device, bus).read_channel(0)
    assert caught.value.kind == "timeout"
    assert "'adc' (ads1115 at 0x49 on I2C bus 1): I2C bus 1: no answer within 0.2 s" in str(caught.value)


# -- all of them at once ----------------------------------------------------------------------------
async def test_read_all_gives_every_new_part_its_reading_in_its_units(sim):
    sensors, _ = sim
    readings = {r.device: r for r in await sensors.read_all() if not isinstance(r, SensorError)}
    assert readings["light"].value("illuminance").value == pytest.approx(320.0, abs=1)
    assert readings["adc"].value("voltage", "ch3").value == pytest.approx(3.3, abs=125e-6)
    assert readings["spi adc"].value("voltage", "ch1").value == pytest.approx(0.5, abs=3.3 / 1024)
    assert readings["solar"].value("power").value == pytest.approx(12.6 * 0.8, abs=0.005)
    assert readings["water"].value("temperature").value == 19.5
    assert "water: temperature 19.50 °C" in readings["water"].text()


# -- the I2C parts' failures, each named as the device's own ---------------------------------------
@pytest.mark.parametrize(("name", "address"), [("light", 0x23), ("adc", 0x49), ("solar", 0x41)])
@pytest.mark.parametrize(("fault", "kind"), [("nack", "nack"), ("timeout", "timeout")])
async def test_i2c_part_faults_are_reported_for_the_device(sim, name, address, fault, kind):
    sensors, backends = sim
    i2c_sim_bus(backends).inject(address, fault)
    error = await failure(sensors, name)
    assert error.kind == kind
    assert f"{name!r} ({error.part} at 0x{address:02x} on I2C bus 1)" in str(error)
    i2c_sim_bus(backends).inject(address, None)
    assert (await sensors.read(name)).device == name  # healed: it reads again


@pytest.mark.parametrize(
    ("driver_class", "part", "model", "address"),
    [
        (bh1750.BH1750Driver, "bh1750", BH1750, 0x23),
        (ads1115.ADS1115Driver, "ads1115", ADS1115, 0x49),
        (ina219.INA219Driver, "ina219", INA219, 0x41),
    ],
)
async def test_i2c_part_that_hangs_the_bus_is_cut_off_by_the_deadline(driver_class, part, model, address):
    sim_bus = SimI2CBus(1, {address: model()})
    sim_bus.inject(address, "hang")  # SCL held low: the transfer never returns
    bus = I2CBus(sim_bus, timeout_s=0.3, threaded=True)
    device = DeviceSpec(part=part, name="stuck", bus=1, address=address)
    try:
        with pytest.raises(SensorError) as caught:
            await driver_class(device, bus).read()
    finally:
        sim_bus.release()
        bus.close()
    assert caught.value.kind == "timeout"
    assert f"'stuck' ({part} at 0x{address:02x} on I2C bus 1)" in str(caught.value)
    assert "no answer within 0.3 s" in str(caught.value)


async def test_bh1750_in_darkness_is_measured_once_not_restarted_again(sim):
    sensors, backends = sim
    part = backends.sim.bh1750
    part.illuminance_lx = 0.0
    writes: list[bytes] = []
    original = part.write
    part.write = lambda data: (writes.append(bytes(data)), original(data))[1]  # type: ignore[method-assign]
    reading = await sensors.read("light")
    assert reading.value("illuminance").value == 0.0
    assert writes == [bytes((POWER_ON,)), bytes((CONTINUOUS_H,))]  # one start, no second one


async def test_ads1115_gain_the_part_does_not_have_is_refused_for_the_device():
    device = DeviceSpec(part="ads1115", name="adc", bus=1, address=0x49, options={"gain": 5.0})
    bus = I2CBus(SimI2CBus(1, {0x49: ADS1115()}), timeout_s=1, threaded=False)
    with pytest.raises(SensorError, match="gain must be one of") as caught:
        ads1115.ADS1115Driver(device, bus)
    assert caught.value.kind == "bad_data"


async def test_ds18b20_hung_read_is_let_go_when_the_device_changes(sim):
    sensors, backends = sim
    backends.sim.onewire.set_fault("28-00000a1b2c3d", "hang")
    slave = backends.sim.onewire_root / "28-00000a1b2c3d" / "w1_slave"
    stuck = threading.Thread(target=slave.read_bytes, daemon=True)  # a reader blocked on the hung bus
    stuck.start()
    backends.sim.onewire.set_fault("28-00000a1b2c3d", "none")  # rewrites the file
    stuck.join(10)
    assert not stuck.is_alive()  # the reader got an empty read rather than waiting for good
    assert (await sensors.read("water")).value("temperature").value == 19.5


async def test_ina219_current_flowing_back_reads_negative(sim):
    sensors, backends = sim
    backends.sim.ina219.current_a = -0.5  # a battery charging the other way
    reading = await sensors.read("solar")
    assert reading.value("current").value == pytest.approx(-0.5, abs=0.0002)
    assert reading.value("power").value == pytest.approx(
        12.6 * 0.5, abs=0.005
    )  # the power register is a magnitude
