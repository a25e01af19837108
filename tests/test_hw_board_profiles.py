"""Board profiles: every shipped one validates, errors name file/key/expectation, detection, the CLI."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgeclaw import board
from edgeclaw.backends.sim.board import I2C_BUS1_PARTS
from edgeclaw.board import detection
from edgeclaw.errors import ConfigErrors
from tests.hw_support import write_profile

SHIPPED = [
    "rpi-zero-w",
    "rpi-zero-2w",
    "rpi3b",
    "rpi4b",
    "rpi5",
    "generic-linux",
    "nucleo-f401re",
    "esp32-bridge",
    "sim",
]


def load_errors(path: str | Path) -> str:
    """Every problem loading the profile at `path` reports, as one text."""
    with pytest.raises(ConfigErrors) as caught:
        board.read_profile(Path(path))
    return str(caught.value)


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profiles_load_and_describe(name):
    profile = board.load_profile(name)
    assert profile.name == name and profile.spec is not None
    assert board.describe_grants(profile)


@pytest.mark.parametrize(
    ("name", "region", "base"),
    [
        ("rpi-zero-w", "gpio", 0x2020_0000),  # BCM2835 peripherals at 0x2000_0000
        ("rpi-zero-2w", "gpio", 0x3F20_0000),  # BCM2837 (RP3A0) at 0x3F00_0000
        ("rpi3b", "system-timer", 0x3F00_3000),
        ("rpi4b", "gpio", 0xFE20_0000),  # BCM2711 at 0xFE00_0000
        ("rpi5", "rp1-gpio", 0x1F_000D_0000),  # RP1 io_bank0 behind PCIe
    ],
)
def test_pi_profiles_use_the_real_peripheral_addresses(name, region, base):
    regions = {r.name: r for r in board.load_profile(name).spec.memory}
    assert regions[region].base == base and regions[region].access == "ro"


def test_shipped_real_boards_grant_no_writes():
    for name in ("rpi-zero-w", "rpi-zero-2w", "rpi3b", "rpi4b", "rpi5"):
        spec = board.load_profile(name).spec
        assert all(not g.write for g in spec.i2c)
        assert all(g.direction == "in" for g in spec.gpio)
        assert all(m.access == "ro" for m in spec.memory)
        assert all(s.access == "ro" for s in spec.spi)


def test_profile_errors_name_file_key_and_expectation(tmp_path):
    path = write_profile(
        tmp_path,
        "broken",
        '[[i2c]]\nbus = 1\nread = [{ first = 0x50, last = 0x40 }]\nwrite = [0x90]\nscan = "yes"\n'
        '[[memory]]\nname = "a"\nbase = 0x1000\nsize = 0x100\naccess = "rwx"\n'
        '[[gpio]]\npin = 4\nname = "in4"\ndirection = "in"\npwm = true\n'
        '[probe]\ntransport = "gdb"\ntarget = "x"\ngdb_address = "nowhere"\n',
    )
    text = load_errors(path)
    assert f"{path}: i2c[0].scan: expected true or false, got a string" in text
    assert f"{path}: memory[0].access: expected one of 'ro', 'rw', got 'rwx'" in text
    # Type errors come first; once the types are right the cross-key checks run.
    fixed = write_profile(
        tmp_path,
        "broken2",
        "[[i2c]]\nbus = 1\nread = [{ first = 0x50, last = 0x40 }]\nwrite = [0x90]\n"
        '[[gpio]]\npin = 4\nname = "in4"\ndirection = "in"\npwm = true\n'
        '[probe]\ntransport = "gdb"\ntarget = "x"\ngdb_address = "nowhere"\n'
        '[[memory]]\nname = "a"\nbase = 0x1000\nsize = 0x100\n'
        '[[memory]]\nname = "b"\nbase = 0x1080\nsize = 0x100\n',
    )
    text = load_errors(fixed)
    assert f"{fixed}: i2c[0].read[0]: expected first <= last, got 0x50 > 0x40" in text
    assert f"{fixed}: i2c[0].write[0]: expected 7-bit I2C addresses" in text
    assert f"{fixed}: gpio[0].pwm: PWM needs direction = 'out'" in text
    assert f"{fixed}: probe.gdb_address: expected 'HOST:PORT' or 'qemu', got 'nowhere'" in text
    assert "regions 'a' and 'b' overlap" in text


@pytest.mark.parametrize(
    ("body", "words"),
    [
        # /dev/gpiomem maps the block at 0: a base 2 bytes into a word would make every aligned
        # register address an unaligned load in the mapping.
        (
            '[[memory]]\nname = "r"\nbase = 0xFE200002\nsize = 0x10\n'
            'device = "/dev/gpiomem"\ndevice_offset = 0\n',
            "memory[0]: expected base (0xfe200002) and its offset in the device (0x0) to agree modulo 4",
        ),
        (
            'simulated = true\n[[memory]]\nname = "r"\nbase = 0x1001\nsize = 0x10\n',
            "memory[0]: expected base (0x1001) and its offset in the device (0x0) to agree modulo 4",
        ),
        (
            '[probe]\ntransport = "gdb"\ntarget = "x"\ngdb_address = "qemu"\n'
            'regions = [{ name = "top", base = 0xFFFF_FF00, size = 0x200 }]\n',
            "probe.regions[0]: expected a region inside the target's 32-bit address space",
        ),
        (
            '[probe]\ntransport = "gdb"\ntarget = "x"\ngdb_address = "qemu"\nflash = true\n'
            "flash_base = 0xFFFF_0000\nflash_size = 0x2_0000\n",
            "probe.flash_base: expected the flash area inside the target's 32-bit address space",
        ),
    ],
)
def test_address_arithmetic_problems_are_caught_when_the_profile_loads(tmp_path, body, words):
    path = write_profile(tmp_path, "arith", body)
    assert f"{path}: {words}" in load_errors(path)


def test_esp32_grants_the_chip_cannot_honour_are_errors(tmp_path):
    path = write_profile(
        tmp_path,
        "esp",
        '[esp32]\nport = "/dev/ttyUSB0"\n'
        'gpio = [{ pin = 35, name = "in-only", direction = "out" },\n'
        '        { pin = 7, name = "flash", direction = "in" }]\n'
        'adc = [{ pin = 4, name = "adc2" }]\n',
    )
    text = load_errors(path)
    assert f"{path}: esp32.gpio[0].direction: GPIO 35 is input-only on the ESP32 (34-39)" in text
    assert f"{path}: esp32.gpio[1].pin: expected a usable ESP32 GPIO (not 6-11, the flash), got 7" in text
    assert f"{path}: esp32.adc[0].pin: expected an ADC1 pin (32-39), got 4" in text


def test_unknown_keys_and_missing_name_are_errors(tmp_path):
    path = tmp_path / "x.toml"
    path.write_text('[board]\ndescription = "no name"\n[[i2c]]\nbus = 1\nspeed = 100000\n')
    text = load_errors(path)
    assert "board.name: required key is missing (expected a string)" in text
    assert "i2c[0].speed: unknown key (expected one of:" in text


def test_a_profile_is_read_once_per_start_and_again_when_the_file_changes(tmp_path):
    path = write_profile(tmp_path, "bench", 'description = "first"\n[[i2c]]\nbus = 1\n')
    first = board.load_profile(path)
    assert board.load_profile(path) is first  # the config check and the runtime share one read
    # Edited at once and to the same size (the file's mtime may not even change): read again.
    Path(path).write_text(Path(path).read_text().replace("bus = 1", "bus = 3"))
    edited = board.load_profile(path)
    assert [b.bus for b in edited.spec.i2c] == [3]
    Path(path).write_text('[board]\nname = "bench"\n[[gpio]]\npin = "x"\n')  # broken now
    with pytest.raises(ConfigErrors):
        board.load_profile(path)


# -- detection from device-tree files -------------------------------------------------------------
def _dt(tmp_path, model: str | None, compatible: list[str]):
    model_path, compat_path = tmp_path / "model", tmp_path / "compatible"
    if model is not None:
        model_path.write_bytes(model.encode() + b"\0")
    compat_path.write_bytes(b"".join(c.encode() + b"\0" for c in compatible))
    return model_path, compat_path


@pytest.mark.arm_smoke
@pytest.mark.parametrize(
    ("model", "compatible", "expected"),
    [
        ("Raspberry Pi 4 Model B Rev 1.4", ["raspberrypi,4-model-b", "brcm,bcm2711"], "rpi4b"),
        ("Raspberry Pi 3 Model B Plus Rev 1.3", ["raspberrypi,3-model-b-plus", "brcm,bcm2837"], "rpi3b"),
        ("Raspberry Pi Zero 2 W Rev 1.0", ["raspberrypi,model-zero-2-w", "brcm,bcm2837"], "rpi-zero-2w"),
        ("Raspberry Pi Zero W Rev 1.1", ["raspberrypi,model-zero-w", "brcm,bcm2835"], "rpi-zero-w"),
        ("Raspberry Pi 5 Model B Rev 1.0", ["raspberrypi,5-model-b", "brcm,bcm2712"], "rpi5"),
        (None, ["raspberrypi,4-model-b", "brcm,bcm2711"], "rpi4b"),  # compatible alone suffices
        # Boards without a profile of their own get the one for their SoC, never the sim board.
        ("Raspberry Pi 400 Rev 1.0", ["raspberrypi,400", "brcm,bcm2711"], "rpi4b"),
        ("Raspberry Pi Compute Module 4 Rev 1.0", ["raspberrypi,4-compute-module", "brcm,bcm2711"], "rpi4b"),
        ("Raspberry Pi 3 Model A Plus Rev 1.0", ["raspberrypi,3-model-a-plus", "brcm,bcm2837"], "rpi3b"),
        ("Raspberry Pi Model B Plus Rev 1.2", ["raspberrypi,model-b-plus", "brcm,bcm2835"], "rpi-zero-w"),
        ("Raspberry Pi Compute Module 5 Rev 1.0", ["raspberrypi,5-compute-module", "brcm,bcm2712"], "rpi5"),
        ("Pine64 RockPro64", ["pine64,rockpro64", "rockchip,rk3399"], None),
    ],
)
def test_detection_from_device_tree_files(tmp_path, model, compatible, expected):
    model_path, compat_path = _dt(tmp_path, model, compatible)
    found = board.detect(model_path, compat_path)
    assert (found.name if found else None) == expected


def test_no_device_tree_means_no_match(tmp_path):
    assert board.detect(tmp_path / "missing-model", tmp_path / "missing-compatible") is None


def test_auto_that_matches_nothing_picks_generic_linux_and_says_so(monkeypatch, tmp_path, caplog):
    model, compatible = _dt(tmp_path, "Pine64 RockPro64", ["pine64,rockpro64", "rockchip,rk3399"])
    monkeypatch.setattr(detection, "DEVICE_TREE_MODEL", model)
    monkeypatch.setattr(detection, "DEVICE_TREE_COMPATIBLE", compatible)
    with caplog.at_level("INFO", logger="edgeclaw.board"):
        chosen = board.resolve("auto")
    assert chosen.name == "generic-linux" and not chosen.simulated
    assert board.describe_grants(chosen) == ["nothing: no buses, pins, memory regions, probe or bridge"]
    [record] = [r for r in caplog.records if "no board profile matches" in r.getMessage()]
    assert record.levelname == "WARNING"
    assert "(Pine64 RockPro64); using 'generic-linux', which grants nothing" in record.getMessage()
    assert 'board = "sim" for the simulated board' in record.getMessage()


def test_the_simulated_board_only_when_asked_for(monkeypatch, tmp_path):
    monkeypatch.setattr(detection, "DEVICE_TREE_MODEL", tmp_path / "none")
    monkeypatch.setattr(detection, "DEVICE_TREE_COMPATIBLE", tmp_path / "none")
    assert not board.resolve("auto").simulated
    assert board.resolve("sim").simulated


def test_a_deployment_without_board_serves_no_fabricated_readings(state_env, tmp_path):
    """The gateway case: no `board =`, a machine no profile matches. The TMP102 must not answer."""
    if board.DEVICE_TREE_MODEL.exists():  # pragma: no cover - running on a real board
        pytest.skip("this machine has a device tree")
    config = tmp_path / "gateway.toml"
    config.write_text(f'state_dir = "{tmp_path / "gw-state"}"\n')
    env = {**state_env, "EDGECLAW_CONFIG": str(config)}
    read = '{"action": "read_word", "bus": 1, "address": 72, "register": 0}'
    out = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "tool", "call", "i2c", read, "--json"],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    assert "I2C bus 1 is not granted by the generic-linux profile" in json.loads(out.stdout)["error"]
    assert "using 'generic-linux'" in out.stderr  # and the log said why


# -- the command line -----------------------------------------------------------------------------
def test_board_show_rpi4b_prints_the_grants(run_cli):
    out = run_cli("board", "show", "rpi4b")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("rpi4b: Raspberry Pi 4 Model B (BCM2711)")
    assert "i2c bus 1 (/dev/i2c-1): read 0x08-0x77; write none; scan yes" in out.stdout
    assert "memory 'gpio': 0xfe200000-0xfe2000f3 (244 bytes) read-only via /dev/gpiomem" in out.stdout
    assert "gpio 17 'gpio17': input (read only)" in out.stdout


def test_board_show_bad_profile_exits_2(run_cli, tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text('[board]\nname = "bad"\n[[gpio]]\npin = "x"\n')
    out = run_cli("board", "show", str(bad))
    assert out.returncode == 2 and f"{bad}: gpio[0].pin: expected an integer, got a string" in out.stderr


def test_board_detect_off_board(run_cli):
    out = run_cli("board", "detect")
    if board.DEVICE_TREE_MODEL.exists():  # pragma: no cover - running on a real board
        return
    assert out.returncode == 1 and "the daemon would use 'generic-linux'" in out.stdout


def test_done_when_i2c_scan_lists_exactly_the_sim_devices(run_cli):
    out = run_cli("tool", "call", "i2c", '{"action": "scan", "bus": 1}', "--board", "sim", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["ok"] is True
    assert result["data"]["addresses"] == [f"0x{a:02x}" for a in sorted(I2C_BUS1_PARTS)]


@pytest.mark.skipif(shutil.which("qemu-system-arm") is None, reason="qemu-system-arm is not installed")
def test_done_when_probe_reads_the_vector_table_from_qemu(run_cli):
    args = '{"action": "read_memory", "address": 134217728, "length": 8}'
    out = run_cli("tool", "call", "probe", args, "--board", "sim", "--json")
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)["data"]
    assert result["words_le"] == [0x2000_2000, 0x0800_0011]  # initial SP, reset vector (Thumb)
    # The CLI stopped the QEMU it started.
    left = subprocess.run(["pgrep", "-f", "stm32-vector-table.bin"], capture_output=True, text=True)
    assert left.stdout.strip() == ""


def test_dry_run_from_the_cli_refuses_an_ungranted_write(run_cli):
    out = run_cli(
        "tool", "call", "i2c", '{"action": "write_byte", "bus": 1, "address": 72, "register": 1, "value": 0}',
        "--board", "rpi4b", "--dry-run", "--json",
    )  # fmt: skip
    assert out.returncode == 2
    assert (
        "writing to 0x48 on I2C bus 1 is not granted by the rpi4b profile" in json.loads(out.stdout)["error"]
    )
