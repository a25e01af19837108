"""`edgeclaw doctor`: one line per check, FAIL for what would stop the daemon, exit 1 when any fails."""

from __future__ import annotations

import socket
from pathlib import Path

from tests.llm_server import ScriptedLLM


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_sim_board_with_reachable_provider_is_healthy(run_cli, state_env):
    with ScriptedLLM() as llm:
        Path(state_env["EDGECLAW_CONFIG"]).write_text(
            'board = "sim"\n[agent]\nproviders = ["local"]\n'
            f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\n'
        )
        out = run_cli("doctor")
    assert out.returncode == 0, out.stdout
    lines = out.stdout.splitlines()
    assert any(line.startswith("ok    board: sim") for line in lines)
    assert any(line.startswith("ok    provider local") for line in lines)
    assert any(line.startswith("ok    sandbox") for line in lines)
    assert not any(line.startswith("FAIL") for line in lines)


def test_unreachable_broker_and_provider_fail(run_cli, state_env):
    port = _closed_port()
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        f'board = "sim"\n[mqtt]\nenabled = true\nport = {port}\n[agent]\nproviders = ["cloud"]\n'
        f'[providers.cloud]\nkind = "anthropic"\nmodel = "m"\nbase_url = "http://127.0.0.1:{port}"\n'
        'api_key_env = "NOT_SET_ANYWHERE"\n'
    )
    out = run_cli("doctor")
    assert out.returncode == 1
    assert f"FAIL  mqtt broker: cannot connect to 127.0.0.1:{port}" in out.stdout
    assert "FAIL  provider cloud: cannot connect" in out.stdout


def test_a_real_board_profile_names_missing_device_files(run_cli, tmp_path, state_env):
    dev = tmp_path / "i2c-9"
    dev.write_bytes(b"")
    profile = tmp_path / "bench.toml"
    profile.write_text(
        '[board]\nname = "bench"\ndescription = "a test bench"\n'
        f'[[i2c]]\nbus = 9\ndevice = "{dev}"\nread = [{{ first = 0x03, last = 0x77 }}]\n'
        '[[i2c]]\nbus = 8\ndevice = "/nonexistent/i2c-8"\n'
    )
    out = run_cli("doctor", "--board", str(profile))
    assert f"ok    i2c bus 9: {dev} read/write" in out.stdout, out.stdout + out.stderr
    assert "FAIL  i2c bus 8: /nonexistent/i2c-8 does not exist" in out.stdout
    assert out.returncode == 1


def test_broken_config_is_a_failed_check(run_cli, state_env):
    Path(state_env["EDGECLAW_CONFIG"]).write_text("[mqtt]\nport = 'x'\n")
    out = run_cli("doctor")
    assert out.returncode == 1 and out.stdout.startswith("FAIL  config:") and "mqtt.port" in out.stdout


def test_a_provider_url_that_cannot_be_parsed_is_a_config_failure(run_cli, state_env):
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[agent]\nproviders = ["local"]\n'
        '[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "http://box:80a/v1"\n'
    )
    out = run_cli("doctor")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert out.stdout.startswith("FAIL  config:") and "providers.local.base_url" in out.stdout
