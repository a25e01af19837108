"""`edgeclaw doctor` names every way the config lets one caller act as another or as the administrator:
one config that opens each way, and its safe counterpart that does not."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edgeclaw.cli.doctor_identity import identity_problems
from edgeclaw.config.loader import config_from_dict

MQTT = {"enabled": True, "host": "broker.example.net", "port": 8883}
TLS_LOGIN = {"tls": {}, "username": "greenhouse-07", "password_env": "BROKER_PASSWORD"}
OPERATOR = {"backend-1": {"secret_env": "KEY_BACKEND1", "roles": ["operate"]}}


def problems(data: dict[str, Any]) -> list[str]:
    return identity_problems(config_from_dict({"board": "sim", **data}, "edgeclaw.toml"))


def named(data: dict[str, Any], phrase: str) -> list[str]:
    return [p for p in problems(data) if phrase in p]


def test_a_signed_fleet_behind_tls_and_a_login_has_no_finding():
    assert problems({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": OPERATOR}) == []
    assert problems({}) == []  # no MQTT, the fleet page on loopback


def test_unsigned_commands_make_everyone_mqtt_anonymous():
    [line] = named({"mqtt": {**MQTT, **TLS_LOGIN}}, "unsigned commands are accepted")
    assert "mqtt:anonymous" in line and "[callers.NAME]" in line
    # a [callers] key signs as well as the legacy key (an observer too: then every command must be signed)
    assert named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": OPERATOR}, "unsigned") == []
    observer = {"viewer": {"secret_env": "KEY_VIEWER", "roles": ["observe"]}}
    assert named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": observer}, "unsigned") == []
    # an approver alone does not sign commands
    approver = {"ops": {"secret_env": "KEY_OPS", "roles": ["approve"]}}
    assert named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": approver}, "unsigned commands are accepted")


@pytest.mark.parametrize(
    ("mqtt", "missing"),
    [({}, "without TLS and a login"), ({"tls": {}}, "without a login"), ({"username": "d"}, "without TLS")],
)
def test_an_open_broker_while_commands_are_unsigned(mqtt, missing):
    [line] = named({"mqtt": {**MQTT, **mqtt}}, "mqtt broker broker.example.net:8883")
    assert missing in line
    # keys on: the broker's openness no longer lets anyone command the device
    assert named({"mqtt": {**MQTT, **mqtt}, "callers": OPERATOR}, "mqtt broker") == []


def test_unsigned_admin():
    data = {"mqtt": {**MQTT, **TLS_LOGIN, "admin_unsigned": True}, "callers": OPERATOR}
    assert named(data, "mqtt.admin_unsigned = true")
    data["mqtt"]["admin_unsigned"] = False
    assert named(data, "admin_unsigned") == []


@pytest.mark.parametrize(
    ("roles", "apart"), [(["operate", "approve"], "approve"), (["admin", "operate"], "admin")]
)
def test_one_caller_holding_roles_that_should_be_apart(roles, apart):
    callers = {"backend-1": {"secret_env": "KEY_BACKEND1", "roles": roles}}
    [line] = named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": callers}, "holds both")
    assert line.startswith(f"caller mqtt:backend-1 holds both operate and {apart}")
    split = {**OPERATOR, "ops": {"secret_env": "KEY_OPS", "roles": ["approve", "admin"]}}
    assert named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": split}, "holds both") == []


def test_a_legacy_key_in_use():
    [line] = named({"mqtt": {**MQTT, **TLS_LOGIN, "hmac_secret_env": "KEY"}}, "legacy key")
    assert line.startswith("legacy key mqtt.hmac_secret_env in use (caller mqtt:command, role operate)")
    assert named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": OPERATOR}, "legacy key") == []


def test_a_key_file_others_may_read(tmp_path: Path):
    key = tmp_path / "backend.key"
    key.write_text("a-secret-long-enough-for-anyone")
    key.chmod(0o644)
    callers = {"backend-1": {"secret_file": str(key), "roles": ["operate"]}}
    [line] = named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": callers}, "readable by others")
    assert line.startswith(f"callers.backend-1.secret_file {key} is readable") and "mode 644" in line
    key.chmod(0o600)
    assert named({"mqtt": {**MQTT, **TLS_LOGIN}, "callers": callers}, "readable") == []


def test_unsigned_updates():
    data = {"gateway": {"allow_unsigned_updates": True}}
    assert named(data, "gateway.allow_unsigned_updates = true")
    data["gateway"]["update_public_key"] = "ab" * 32
    assert named(data, "allow_unsigned_updates") == []


def test_mcp_over_mqtt_answers_without_a_signature():
    data = {"mqtt": {**MQTT, **TLS_LOGIN}, "callers": OPERATOR, "mcp": {"server": {"mqtt": True}}}
    assert named(data, "mcp.server.mqtt = true")
    data["mcp"]["server"]["mqtt"] = False
    assert named(data, "mcp.server") == []


def test_the_fleet_page_listening_beyond_loopback():
    # config check refuses plain HTTP beyond loopback unless allowed; allowed, doctor still names it.
    lines = named({"fleet_page": {"listen": "0.0.0.0:8088", "allow_plain_http": True}}, "fleet_page.listen")
    assert [line.split(": ", 1)[0] for line in lines] == [
        "fleet_page.listen = '0.0.0.0:8088' without a login (login_hash or token_file)",
        "fleet_page.listen = '0.0.0.0:8088' serves plain HTTP beyond loopback",
    ]
    assert named({"fleet_page": {"listen": "127.0.0.1:8088"}}, "fleet_page") == []


def test_doctor_prints_each_finding_and_an_ok_line_when_none(run_cli, state_env, tmp_path):
    config = Path(state_env["EDGECLAW_CONFIG"])
    config.write_text('board = "sim"\n[mqtt]\nenabled = true\nport = 1\nadmin_unsigned = true\n')
    out = run_cli("doctor")
    lines = [line for line in out.stdout.splitlines() if line.startswith("warn  impersonation: ")]
    assert any("unsigned commands are accepted" in line for line in lines), out.stdout
    assert any("mqtt.admin_unsigned = true" in line for line in lines), out.stdout
    assert any("mqtt broker 127.0.0.1:1 without TLS and a login" in line for line in lines), out.stdout

    config.write_text('board = "sim"\n')
    out = run_cli("doctor")
    assert [line for line in out.stdout.splitlines() if "impersonation" in line] == [
        "ok    impersonation: no caller can act as another or as the administrator"
    ]


def test_a_callers_key_counts_as_signing_for_the_mqtt_tools_line(run_cli, state_env):
    config = Path(state_env["EDGECLAW_CONFIG"])
    wide = '[tools.channels.mqtt]\nprofile = "full"\n'
    mqtt = 'board = "sim"\n[mqtt]\nenabled = true\nport = 1\n'
    callers = '[callers.backend-1]\nsecret_env = "EDGECLAW_TEST_KEY_BACKEND1"\nroles = ["operate"]\n'
    config.write_text(mqtt + callers + wide)
    [line] = [line for line in run_cli("doctor").stdout.splitlines() if "mqtt tools:" in line]
    assert line.startswith("ok    mqtt tools: MQTT callers may also use ") and "(commands are signed)" in line


def test_a_device_that_would_sign_nothing(tmp_path: Path, monkeypatch):
    from edgeclaw.cli.doctor_identity import device_signing_problem
    from edgeclaw.net import device_key

    def problem(mqtt: dict[str, Any]) -> str | None:
        config = config_from_dict({"board": "sim", "mqtt": {**MQTT, **mqtt}}, "edgeclaw.toml")
        return device_signing_problem(config, tmp_path)

    assert problem({}) is None  # the key is made at the daemon's first start
    assert not (tmp_path / device_key.KEY_FILENAME).exists()  # and not by the doctor
    assert "need MQTT 5" in str(problem({"protocol": "3.1.1"}))
    device_key.DeviceKey.in_state_dir(tmp_path)
    assert problem({}) is None
    (tmp_path / device_key.KEY_FILENAME).chmod(0o640)
    assert "mode 0640" in str(problem({})) and "chmod 600" in str(problem({}))

    def missing() -> None:
        raise device_key.DeviceKeyUnavailable("no Ed25519 here")

    monkeypatch.setattr(device_key, "_ed25519", missing)
    assert "signs nothing it publishes: no Ed25519 here" in str(problem({}))
