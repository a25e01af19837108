"""`[[devices]]` in the board profile: each form validated on load, every problem named; `board show`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from edgeclaw import board
from edgeclaw.board import parts as sensor_parts
from edgeclaw.errors import ConfigErrors
from tests.hw_support import write_profile

GRANTS = """
[[i2c]]
bus = 1
read = [{ first = 0x08, last = 0x77 }]

[[spi]]
bus = 0
chip_select = 0
max_speed_hz = 1_000_000
"""


def load(tmp_path, devices: str) -> board.BoardProfile:
    return board.read_profile(Path(write_profile(tmp_path, "t", GRANTS + devices)))


def problems(tmp_path, devices: str) -> list[str]:
    with pytest.raises(ConfigErrors) as caught:
        load(tmp_path, devices)
    return [f"{e.key}: {e.problem}" for e in caught.value.errors]


def test_each_form_loads_with_its_location_in_words(tmp_path):
    profile = load(
        tmp_path,
        """
[[devices]]
part = "tmp102"
bus = 1
address = 0x48
name = "greenhouse air"

[[devices]]
part = "mcp3008"
bus = 0
chip_select = 0
name = "adc"
options = { vref = 5.0 }

[[devices]]
part = "ds18b20"
w1_id = "28-00000a1b2c3d"
name = "water"

[[devices]]
part = "analog"
adc = "adc"
channel = 7
name = "soil"
options = { scale = 100.0, offset = -50.0, quantity = "temperature", unit = "°C" }
""",
    )
    forms = {d.name: (d.form, d.location) for d in profile.devices}
    assert forms == {
        "greenhouse air": ("i2c", "at 0x48 on I2C bus 1"),
        "adc": ("spi", "on SPI 0.0"),
        "water": ("onewire", "on 1-Wire as 28-00000a1b2c3d"),
        "soil": ("adc", "on channel 7 of 'adc'"),
    }
    assert profile.device("adc").option("vref") == 5.0
    assert profile.device("greenhouse air").info.measures_text == "temperature (°C)"
    lines = board.describe_grants(profile)
    assert "device 'greenhouse air': tmp102 at 0x48 on I2C bus 1, measures temperature (°C)" in lines
    assert (
        "device 'soil': analog on channel 7 of 'adc', measures temperature (°C), scale = 100.0, "
        "offset = -50.0, quantity = 'temperature', unit = '°C'" in lines
    )


@pytest.mark.parametrize(
    ("devices", "expected"),
    [
        (
            'part = "tmp103"\nbus = 1\naddress = 0x48\nname = "x"',
            "devices[0].part: unknown part 'tmp103' (known: ",
        ),
        (
            'part = "tmp102"\nbus = 1\naddress = 0x40\nname = "x"',
            "devices[0].address: a tmp102 answers at 0x48, 0x49, 0x4a, 0x4b, not 0x40",
        ),
        (
            'part = "tmp102"\nbus = 3\naddress = 0x48\nname = "x"',
            "devices[0].bus: I2C bus 3 is not granted by this profile (add an [[i2c]] entry)",
        ),
        (
            'part = "tmp102"\nbus = 0\nchip_select = 0\nname = "x"',
            "devices[0]: part 'tmp102' is reached over i2c: expected bus and address",
        ),
        ('part = "tmp102"\naddress = 0x48\nname = "x"', "devices[0].bus: required for part 'tmp102'"),
        (
            'part = "tmp102"\nbus = 1\naddress = 0x48\nchip_select = 1\nname = "x"',
            "devices[0]: expected one of address, chip_select, w1_id or adc, got address and chip_select",
        ),
        (
            'part = "mcp3008"\nbus = 0\nchip_select = 1\nname = "x"',
            "devices[0]: SPI 0.1 is not granted by this profile (add an [[spi]] entry)",
        ),
        (
            'part = "ds18b20"\nw1_id = "10-00000a1b2c3d"\nname = "x"',
            "devices[0].w1_id: a ds18b20's ids start with 28-, got '10-00000a1b2c3d'",
        ),
        (
            'part = "ds18b20"\nw1_id = "28-xyz"\nname = "x"',
            "devices[0].w1_id: expected a 1-Wire id such as '28-00000a1b2c3d', got '28-xyz'",
        ),
        (
            'part = "ds18b20"\nw1_id = "28-00000a1b2c3d"\nbus = 1\nname = "x"',
            "devices[0].bus: not used by the onewire form (expected w1_id)",
        ),
        (
            'part = "mcp3008"\nbus = 0\nchip_select = 0\nname = "x"\noptions = { vref = 9.0 }',
            "devices[0].options.vref: expected at most 5.5, got 9.0",
        ),
        (
            'part = "mcp3008"\nbus = 0\nchip_select = 0\nname = "x"\noptions = { vref = "high" }',
            "devices[0].options.vref: expected a number, got 'high'",
        ),
        (
            'part = "tmp102"\nbus = 1\naddress = 0x48\nname = "x"\noptions = { gain = 1 }',
            "devices[0].options.gain: part 'tmp102' has no such option (its options: none)",
        ),
        ('part = "tmp102"\nbus = 1\naddress = 0x48\nname = ""', "devices[0].name: expected a name of 1-64"),
        (
            'part = "analog"\nadc = "x"\nchannel = 0\nname = "y"\noptions = { unit = "" }',
            "devices[0].options.unit: expected 1-32 printable characters, got ''",
        ),
        (
            'part = "analog"\nadc = "nothing"\nchannel = 0\nname = "x"',
            "devices[0].adc: expected the name of a declared ADC device, got 'nothing'",
        ),
    ],
)
def test_a_wrong_declaration_names_the_key_and_what_was_expected(tmp_path, devices, expected):
    found = problems(tmp_path, f"[[devices]]\n{devices}\n")
    assert any(p.startswith(expected) for p in found), found


def test_two_devices_in_one_place_or_under_one_name_are_refused(tmp_path):
    found = problems(
        tmp_path,
        """
[[devices]]
part = "tmp102"
bus = 1
address = 0x48
name = "a"

[[devices]]
part = "ads1115"
bus = 1
address = 0x48
name = "b"

[[devices]]
part = "tmp102"
bus = 1
address = 0x49
name = "a"
""",
    )
    assert "devices[1]: at 0x48 on I2C bus 1 is already declared as 'a'" in found
    assert "devices[2].name: device name 'a' is used twice" in found


def test_an_adc_channel_must_exist_on_a_real_adc(tmp_path):
    found = problems(
        tmp_path,
        """
[[devices]]
part = "tmp102"
bus = 1
address = 0x48
name = "t"

[[devices]]
part = "ads1115"
bus = 1
address = 0x49
name = "adc"

[[devices]]
part = "analog"
adc = "t"
channel = 0
name = "x"

[[devices]]
part = "analog"
adc = "adc"
channel = 4
name = "y"
""",
    )
    assert "devices[2].adc: device 't' is a tmp102, not an ADC" in found
    assert "devices[3].channel: a ads1115 has channels 0-3, got 4" in found


def test_the_sim_profile_declares_a_device_for_every_part():
    sim = board.load_profile("sim")
    assert {d.part for d in sim.devices} == set(sensor_parts.PARTS)


def test_likely_parts_at_an_address():
    assert [p.name for p in sensor_parts.likely_parts(0x76)] == ["bme280", "bmp280"]
    assert sensor_parts.likely_parts(0x10) == []


def test_board_show_lists_the_devices(run_cli):
    out = run_cli("board", "show", "sim")
    assert out.returncode == 0, out.stderr
    assert (
        "  device 'air': bme280 at 0x76 on I2C bus 1, measures temperature (°C), pressure (hPa), "
        "humidity (%RH)" in out.stdout
    )
    assert "  device 'water': ds18b20 on 1-Wire as 28-00000a1b2c3d, measures temperature (°C)" in out.stdout


def test_a_profile_without_devices_does_not_load_the_parts_catalogue():
    code = (
        "import sys; from edgeclaw import board; board.load_profile('rpi4b'); "
        "print('edgeclaw.board.parts' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30)
    assert out.stdout.strip() == "False", out.stderr
