"""`edgeclaw doctor` warns about choices that are allowed but must be deliberate: the simulated board,
a board profile that matched nothing, a PIN-less console on a physical port, and MQTT callers
given more than the remote default while commands are unsigned."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from edgeclaw import board
from edgeclaw.config.pin_hash import hash_pin


def doctor(run_cli, state_env, config: str) -> list[str]:
    Path(state_env["EDGECLAW_CONFIG"]).write_text(config)
    out = run_cli("doctor")
    assert "Traceback" not in out.stderr, out.stderr
    return out.stdout.splitlines()


def lines_of(lines: list[str], check: str) -> list[str]:
    return [line for line in lines if line[6:].startswith(f"{check}:")]


def test_the_simulated_board_is_a_warning(run_cli, state_env):
    [line] = lines_of(doctor(run_cli, state_env, 'board = "sim"\n'), "board choice")
    assert line.startswith("warn  board choice: 'sim' is simulated: every sensor reading is fabricated")


def test_auto_that_matched_nothing_is_a_warning_and_naming_the_board_silences_it(run_cli, state_env):
    if board.DEVICE_TREE_MODEL.exists():  # pragma: no cover - running on a real board
        pytest.skip("this machine has a device tree")
    [line] = lines_of(doctor(run_cli, state_env, ""), "board choice")
    assert line.startswith("warn  board choice: no board profile matches this machine, so 'generic-linux'")
    assert lines_of(doctor(run_cli, state_env, 'board = "generic-linux"\n'), "board choice") == []


def test_a_console_without_a_pin_on_a_physical_port_is_a_warning(run_cli, state_env, tmp_path):
    port = "/dev/ttyGS0"
    config = f'board = "sim"\n[console]\nports = ["{port}"]\n'
    [line] = lines_of(doctor(run_cli, state_env, config), "console login")
    assert line.startswith(f"warn  console login: no PIN on {port} (no login_hash or login_hash_file)")
    off = config + f'login = "off"\nlogin_hash = "{hash_pin("2468")}"\n'
    [line] = lines_of(doctor(run_cli, state_env, off), "console login")
    assert line.startswith(f'warn  console login: no PIN on {port} (login = "off")')
    pinned = config + f'login_hash = "{hash_pin("2468")}"\n'
    assert lines_of(doctor(run_cli, state_env, pinned), "console login") == [
        f"ok    console login: PIN required on {port}"
    ]


def test_a_console_on_a_pseudo_terminal_needs_no_pin(run_cli, state_env):
    leader, follower = os.openpty()
    try:
        path = os.ttyname(follower)
        config = f'board = "sim"\n[console]\nports = ["{path}"]\n'
        assert lines_of(doctor(run_cli, state_env, config), "console login") == [
            "ok    console login: no PIN, but only pseudo-terminals are served"
        ]
    finally:
        os.close(leader)
        os.close(follower)


def test_mqtt_callers_widened_without_signing_is_a_warning(run_cli, state_env, tmp_path):
    mqtt = 'board = "sim"\n[mqtt]\nenabled = true\nport = 1\n'
    [line] = lines_of(doctor(run_cli, state_env, mqtt), "mqtt tools")
    assert line == "ok    mqtt tools: MQTT callers get the 'remote' profile: reading, hardware"
    widened = mqtt + '[tools.channels.mqtt]\nprofile = "full"\n'
    [line] = lines_of(doctor(run_cli, state_env, widened), "mqtt tools")
    assert line.startswith("warn  mqtt tools: MQTT callers may also use ")
    assert "exec" in line and "write_file" in line and "commands are not signed" in line
    key = tmp_path / "hmac.key"
    key.write_text("s3cret-shared-between-backend-and-device")
    key.chmod(0o600)
    signed = mqtt + f'hmac_secret_file = "{key}"\n[tools.channels.mqtt]\nprofile = "full"\n'
    [line] = lines_of(doctor(run_cli, state_env, signed), "mqtt tools")
    assert line.startswith("ok    mqtt tools: MQTT callers may also use ") and "(commands are signed)" in line
