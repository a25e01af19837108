"""The sim board's device models against their datasheets, at the level of I2C messages and SPI bits."""

from __future__ import annotations

import errno

import pytest

from edgeclaw.backends.sim.bme280 import (
    BME280,
    CALIBRATION,
    compensate_humidity,
    compensate_pressure,
    compensate_temperature,
)
from edgeclaw.backends.sim.eeprom import EEPROM24C32
from edgeclaw.backends.sim.i2c import SimI2CBus
from edgeclaw.backends.sim.mcp3008 import MCP3008
from edgeclaw.backends.sim.tmp102 import TMP102, decode_temperature, encode_temperature


# -- TMP102 ---------------------------------------------------------------------------------------
@pytest.mark.arm_smoke
@pytest.mark.parametrize(
    ("celsius", "register"),
    # Datasheet table 5 (12-bit) examples.
    [
        (127.9375, 0x7FF0),
        (100, 0x6400),
        (25, 0x1900),
        (0.0625, 0x0010),
        (0, 0),
        (-0.25, 0xFFC0),
        (-25, 0xE700),
    ],
)
def test_tmp102_encoding_matches_datasheet_table(celsius, register):
    assert encode_temperature(celsius) == register
    assert decode_temperature(register) == celsius


def test_tmp102_registers_after_power_up():
    bus = SimI2CBus(1, {0x48: TMP102(21.5)})
    assert bus.read_block(0x48, b"\x01", 2) == b"\x60\xa0"  # configuration 0x60A0
    assert bus.read_block(0x48, b"\x02", 2) == b"\x4b\x00"  # T_LOW 75 °C
    assert bus.read_block(0x48, b"\x03", 2) == b"\x50\x00"  # T_HIGH 80 °C
    msb, lsb = bus.read_block(0x48, b"\x00", 2)
    assert decode_temperature(msb << 8 | lsb) == 21.5


def test_tmp102_pointer_persists_and_extended_mode():
    sensor = TMP102(150.0)
    bus = SimI2CBus(1, {0x48: sensor})
    assert decode_temperature(int.from_bytes(bus.read_block(0x48, b"\x00", 2), "big")) == 127.9375  # clipped
    bus.write_block(0x48, b"\x01\x60\xb0")  # EM = 1
    raw = int.from_bytes(bus.read_block(0x48, b"\x00", 2), "big")
    assert raw & 1 and decode_temperature(raw) == 150.0
    # A read without a pointer write reads the last register selected.
    assert bus.read_byte(0x48) == raw >> 8


def test_tmp102_shutdown_holds_then_one_shot_converts():
    sensor = TMP102(20.0)
    bus = SimI2CBus(1, {0x48: sensor})
    bus.write_block(0x48, b"\x01\x61\xa0")  # SD = 1
    sensor.temperature_c = 30.0
    assert decode_temperature(int.from_bytes(bus.read_block(0x48, b"\x00", 2), "big")) == 20.0
    bus.write_block(0x48, b"\x01\xe1\xa0")  # OS = 1 while shut down: one conversion
    assert decode_temperature(int.from_bytes(bus.read_block(0x48, b"\x00", 2), "big")) == 30.0
    assert bus.read_block(0x48, b"\x01", 2)[0] & 0x80  # OS reads 1 once done


def test_tmp102_comparator_alert_with_polarity():
    sensor = TMP102(70.0)
    bus = SimI2CBus(1, {0x48: sensor})
    bus.read_block(0x48, b"\x00", 2)
    assert bus.read_block(0x48, b"\x01", 2)[1] & 0x20  # AL = 1: no alert (POL = 0)
    sensor.temperature_c = 85.0
    bus.read_block(0x48, b"\x00", 2)
    assert not bus.read_block(0x48, b"\x01", 2)[1] & 0x20  # alert: AL = 0
    sensor.temperature_c = 77.0  # between T_LOW and T_HIGH: comparator keeps the alert
    bus.read_block(0x48, b"\x00", 2)
    assert not bus.read_block(0x48, b"\x01", 2)[1] & 0x20
    sensor.temperature_c = 70.0
    bus.read_block(0x48, b"\x00", 2)
    assert bus.read_block(0x48, b"\x01", 2)[1] & 0x20


def test_tmp102_interrupt_mode_alert_is_seen_once_then_cleared_by_the_read():
    sensor = TMP102(70.0)
    bus = SimI2CBus(1, {0x48: sensor})
    bus.write_block(0x48, b"\x01\x62\xa0")  # TM = 1: interrupt mode (POL = 0: AL = 0 means active)
    assert bus.read_block(0x48, b"\x01", 2)[1] & 0x20  # below T_HIGH: inactive
    sensor.temperature_c = 85.0
    # The part converts in the background: reading the configuration shows the event...
    assert not bus.read_block(0x48, b"\x01", 2)[1] & 0x20
    # ...and that read cleared it; staying above T_HIGH raises no new event (the next is < T_LOW).
    assert bus.read_block(0x48, b"\x01", 2)[1] & 0x20
    sensor.temperature_c = 77.0  # between T_LOW (75 °C) and T_HIGH (80 °C): nothing
    assert bus.read_block(0x48, b"\x01", 2)[1] & 0x20
    sensor.temperature_c = 70.0  # below T_LOW: the second event
    assert not bus.read_block(0x48, b"\x01", 2)[1] & 0x20
    assert bus.read_block(0x48, b"\x01", 2)[1] & 0x20


# -- BME280 ---------------------------------------------------------------------------------------
def test_bme280_chip_id_reset_state_and_calibration_layout():
    sensor = BME280()
    bus = SimI2CBus(1, {0x76: sensor})
    assert bus.read_byte_data(0x76, 0xD0) == 0x60
    assert bus.read_block(0x76, b"\xf7", 8) == bytes.fromhex("8000008000008000")  # reset values
    calib = bus.read_block(0x76, b"\x88", 26)
    t1 = int.from_bytes(calib[0:2], "little")
    t2 = int.from_bytes(calib[2:4], "little", signed=True)
    p9 = int.from_bytes(calib[22:24], "little", signed=True)
    assert (t1, t2, p9, calib[25]) == (
        CALIBRATION["T1"],
        CALIBRATION["T2"],
        CALIBRATION["P9"],
        CALIBRATION["H1"],
    )
    e1 = bus.read_block(0x76, b"\xe1", 7)
    h4 = (e1[3] << 4) | (e1[4] & 0x0F)
    h5 = (e1[5] << 4) | (e1[4] >> 4)
    assert (int.from_bytes(e1[0:2], "little", signed=True), e1[2], h4, h5, e1[6]) == (362, 0, 313, 50, 30)


def _driver_read(bus: SimI2CBus) -> tuple[float, float, float]:
    """What a driver written from the datasheet does: read calibration, force a measurement, compensate."""
    calib = bus.read_block(0x76, b"\x88", 26)
    e1 = bus.read_block(0x76, b"\xe1", 7)

    def u16(i):
        return int.from_bytes(calib[i : i + 2], "little")

    def s16(i):
        return int.from_bytes(calib[i : i + 2], "little", signed=True)

    h4 = (e1[3] << 4) | (e1[4] & 0x0F)
    h5 = (e1[5] << 4) | (e1[4] >> 4)
    c = {
        "T1": u16(0), "T2": s16(2), "T3": s16(4), "P1": u16(6), "P2": s16(8), "P3": s16(10), "P4": s16(12),
        "P5": s16(14), "P6": s16(16), "P7": s16(18), "P8": s16(20), "P9": s16(22), "H1": calib[25],
        "H2": int.from_bytes(e1[0:2], "little", signed=True), "H3": e1[2],
        "H4": h4 - 4096 if h4 & 0x800 else h4, "H5": h5 - 4096 if h5 & 0x800 else h5,
        "H6": e1[6] - 256 if e1[6] & 0x80 else e1[6],
    }  # fmt: skip
    bus.write_byte_data(0x76, 0xF2, 0x01)  # humidity x1 (latched by the ctrl_meas write below)
    bus.write_byte_data(0x76, 0xF4, 0b101_101_01)  # temperature x16, pressure x16, forced mode
    d = bus.read_block(0x76, b"\xf7", 8)
    adc_p = d[0] << 12 | d[1] << 4 | d[2] >> 4
    adc_t = d[3] << 12 | d[4] << 4 | d[5] >> 4
    adc_h = d[6] << 8 | d[7]
    t, t_fine = compensate_temperature(adc_t, c)
    return t / 100, compensate_pressure(adc_p, t_fine, c) / 256, compensate_humidity(adc_h, t_fine, c) / 1024


@pytest.mark.arm_smoke
@pytest.mark.parametrize(
    ("t", "p", "h"), [(22.0, 101325.0, 45.0), (-10.25, 87000.0, 90.0), (38.4, 105000.0, 5.5)]
)
def test_bme280_measurement_decodes_to_the_sim_values(t, p, h):
    bus = SimI2CBus(1, {0x76: BME280(t, p, h)})
    temperature, pressure, humidity = _driver_read(bus)
    assert temperature == pytest.approx(t, abs=0.01)
    assert pressure == pytest.approx(p, abs=1.0)
    assert humidity == pytest.approx(h, abs=0.01)
    assert bus.read_byte_data(0x76, 0xF4) & 0b11 == 0  # forced mode went back to sleep


def test_bme280_ctrl_hum_needs_ctrl_meas_and_skip_reads_0x8000():
    sensor = BME280()
    bus = SimI2CBus(1, {0x76: sensor})
    bus.write_byte_data(0x76, 0xF2, 0x01)
    assert bus.read_byte_data(0x76, 0xF2) == 0  # not yet in effect
    bus.write_byte_data(0x76, 0xF4, 0b001_000_01)  # temperature only, forced
    assert bus.read_byte_data(0x76, 0xF2) == 1
    data = bus.read_block(0x76, b"\xf7", 8)
    assert data[0:3] == b"\x80\x00\x00"  # pressure skipped
    assert data[3:6] != b"\x80\x00\x00"
    bus.write_byte_data(0x76, 0xE0, 0xB6)  # soft reset
    assert bus.read_block(0x76, b"\xf2", 3) == b"\x00\x00\x00"


# -- 24C32 ----------------------------------------------------------------------------------------
class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_eeprom_page_write_wraps_inside_the_page_and_acks_after_the_write_cycle(tmp_path):
    clock = FakeClock()
    rom = EEPROM24C32(tmp_path / "rom.bin", clock=clock)
    bus = SimI2CBus(1, {0x50: rom})
    bus.write_block(0x50, b"\x00\x1e" + bytes(range(1, 6)))  # 5 bytes from 0x1e: 2 fit, 3 wrap to 0x00
    with pytest.raises(OSError) as nack:
        bus.read_block(0x50, b"\x00\x00", 1)  # the write cycle is running: no acknowledge
    assert nack.value.errno == errno.EREMOTEIO
    clock.now += 0.005
    assert bus.read_block(0x50, b"\x00\x1e", 2) == b"\x01\x02"
    assert bus.read_block(0x50, b"\x00\x00", 4) == b"\x03\x04\x05\xff"
    rom.close()
    again = EEPROM24C32(tmp_path / "rom.bin")  # non-volatile
    assert again.memory[0x1E] == 1 and again.memory[0] == 3


def test_eeprom_sequential_read_rolls_over_and_top_address_bits_are_ignored():
    rom = EEPROM24C32(None, clock=FakeClock())
    rom.memory[0xFFF] = 0xAA
    rom.memory[0] = 0xBB
    bus = SimI2CBus(1, {0x50: rom})
    assert bus.read_block(0x50, b"\xff\xff", 2) == b"\xaa\xbb"  # 0xFFFF is 0xFFF; then 0x000
    assert bus.read_byte(0x50) == rom.memory[1]  # current-address read continues


# -- MCP3008 --------------------------------------------------------------------------------------
def _code(rx: bytes) -> int:
    return (rx[1] & 0x03) << 8 | rx[2]


@pytest.mark.arm_smoke
def test_mcp3008_three_byte_single_ended_reads():
    adc = MCP3008(vref=3.3, voltages=[0.0, 1.0, 3.3, 1.65, 0, 0, 0, 0])
    codes = [_code(adc.transfer(bytes([1, 0x80 | ch << 4, 0]), 1_000_000, 0, 8)) for ch in range(4)]
    assert codes == [0, 310, 1023, 512]


def test_mcp3008_bit_alignment_differential_and_mode_shift():
    adc = MCP3008(vref=3.3, voltages=[2.0, 1.0, 0, 0, 0, 0, 0, 0])
    # The start bit in the last bit of a leading zero byte: a 4-byte frame with the data later.
    rx = adc.transfer(bytes([0x00, 0x01, 0x80, 0x00]), 1_000_000, 0, 8)
    assert _code(rx[1:]) == int(1024 * 2.0 / 3.3)
    diff = adc.transfer(bytes([1, 0x00, 0]), 1_000_000, 0, 8)  # CH0+ CH1-
    assert _code(diff) == int(1024 * 1.0 / 3.3)
    reversed_pair = adc.transfer(bytes([1, 0x10, 0]), 1_000_000, 0, 8)  # CH0- CH1+: negative reads 0
    assert _code(reversed_pair) == 0
    shifted = adc.transfer(bytes([1, 0x80, 0]), 1_000_000, 1, 8)
    assert shifted != adc.transfer(bytes([1, 0x80, 0]), 1_000_000, 0, 8)
