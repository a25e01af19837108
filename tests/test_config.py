"""Config files: found where documented, and every mistake named by file, key and expectation."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeclaw.config.loader import find_config_path, load_config
from edgeclaw.config.paths import state_dir
from edgeclaw.config.secrets import resolve_secrets
from edgeclaw.errors import ConfigErrors

FULL_EXAMPLE = """
device_id = "greenhouse-07"
board = "sim"
workspace = "{ws}"

[agent]
providers = ["local", "cloud"]

[providers.local]
kind = "openai"
base_url = "http://127.0.0.1:8080/v1"
model = "qwen2.5-1.5b-instruct"
api_key_env = "LOCAL_LLM_KEY"

[providers.cloud]
kind = "anthropic"
model = "claude-haiku"
api_key_file = "{keyfile}"

[tools]
profile = "coding"
deny = ["exec"]
also_allow = ["group:hardware"]

[tools.channels.mqtt]
profile = "device"

[tools.agents.main]
deny = ["web_fetch"]

[mqtt]
enabled = true
host = "127.0.0.1"
port = 1883
topic_prefix = "edgeclaw"
password_env = "MQTT_PASS"

[console]
ports = ["/dev/ttyGS0"]
"""


def write(tmp_path: Path, text: str, name: str = "edgeclaw.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def errors_of(path: Path) -> list[str]:
    with pytest.raises(ConfigErrors) as info:
        load_config(path, environ={})
    return [str(e) for e in info.value.errors]


def test_documented_example_loads(tmp_path):
    key = write(tmp_path, "sk-file-secret\n", "key")
    path = write(tmp_path, FULL_EXAMPLE.format(ws=tmp_path / "ws", keyfile=key))
    config = load_config(path, environ={})
    assert config.device_id == "greenhouse-07"
    assert config.agent.providers == ["local", "cloud"]
    assert config.providers["cloud"].kind == "anthropic"
    assert config.tools.channels["mqtt"].profile == "device"
    assert config.mqtt.enabled and config.mqtt.port == 1883
    secrets, problems = resolve_secrets(config, {"LOCAL_LLM_KEY": "sk-local", "MQTT_PASS": "pw-1234"})
    assert problems == []
    assert secrets == {"providers.local": "sk-local", "providers.cloud": "sk-file-secret", "mqtt": "pw-1234"}


def test_missing_secret_is_named(tmp_path):
    key = write(tmp_path, "x", "key")
    config = load_config(write(tmp_path, FULL_EXAMPLE.format(ws=tmp_path, keyfile=key)), environ={})
    _, problems = resolve_secrets(config, {})
    messages = [str(p) for p in problems]
    assert any("providers.local.api_key_env" in m and "LOCAL_LLM_KEY is not set" in m for m in messages)
    assert any("mqtt.password_env" in m and "MQTT_PASS" in m for m in messages)


def test_no_file_means_defaults(tmp_path, monkeypatch):
    monkeypatch.setattr("edgeclaw.config.loader.SYSTEM_CONFIG", tmp_path / "absent.toml")
    assert find_config_path(None, {}) is None
    config = load_config(None, environ={})
    assert config.board == "auto" and config.tools.profile == "full" and config.tools.rate_limit == 60


def test_search_order(tmp_path, monkeypatch):
    system = write(tmp_path, "", "system.toml")
    monkeypatch.setattr("edgeclaw.config.loader.SYSTEM_CONFIG", system)
    assert find_config_path(None, {}) == system
    assert find_config_path(None, {"EDGECLAW_CONFIG": "/x/env.toml"}) == Path("/x/env.toml")
    assert find_config_path("/x/arg.toml", {"EDGECLAW_CONFIG": "/x/env.toml"}) == Path("/x/arg.toml")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('[mqtt]\nport = "1883"', "mqtt.port: expected an integer, got a string"),
        ("[mqtt]\nport = true", "mqtt.port: expected an integer, got a boolean"),
        ("[mqtt]\nport = 70000", "mqtt.port: expected a port number 1-65535"),
        ("[mqtt]\nprot = 1", "mqtt.prot: unknown key (expected one of:"),
        ("colour = 'red'", "colour: unknown key"),
        ('[mqtt]\nprotocol = "4"', "mqtt.protocol: expected one of '5', '3.1.1', got '4'"),
        ('[tools]\nprofile = "admin"', "tools.profile: unknown profile 'admin'"),
        ('[tools]\ndeny = ["group:shell"]', "tools.deny[0]: unknown group 'group:shell'"),
        ('[tools]\nallow = ["rm"]', "tools.allow[0]: unknown tool 'rm'"),
        ('[tools]\ndeny = "exec"', "tools.deny: expected an array of strings, got a string"),
        ('[tools.channels.sms]\nprofile = "minimal"', "tools.channels.sms: unknown channel"),
        ('[agent]\nproviders = ["local"]', "agent.providers[0]: no [providers.local] table"),
        ('[providers.local]\nkind = "openai"', "providers.local.model: required key is missing"),
        ('[providers.local]\nkind = "gemini"\nmodel = "m"', "providers.local.kind: expected one of"),
        ("[tools]\nrate_limit = -1", "tools.rate_limit: expected an integer >= 0"),
        ("mqtt = 3", "mqtt: expected a table, got an integer"),
        ('device_id = "a/b"', "device_id: expected a name without '/'"),
        ("this is not toml", "not valid TOML"),
        ("[console]\nbaud = 0", "console.baud: expected a rate a serial port can be set to"),
        ("[console]\nbaud = 115201", "console.baud: expected a rate a serial port can be set to"),
        ("[hardware]\nmax_read_bytes = 0", "hardware.max_read_bytes: expected an integer 1-1048576, got 0"),
        ("[agent]\nmax_retry_after_s = -1", "agent.max_retry_after_s: expected a number >= 0, got -1.0"),
        ("[mqtt]\nclient_id = 'a#'", "mqtt.client_id: expected a name without MQTT wildcards"),
        (
            '[providers.l]\nkind = "openai"\nmodel = "m"\nmax_tokens = 0',
            "providers.l.max_tokens: expected an integer >= 1, got 0",
        ),
        (
            '[providers.l]\nkind = "openai"\nmodel = "m"\ntimeout_s = 0',
            "providers.l.timeout_s: expected a number > 0, got 0.0",
        ),
        (
            '[providers.l]\nkind = "openai"\nmodel = "m"\nbase_url = "localhost:8080/v1"',
            "providers.l.base_url: expected an http:// or https:// URL",
        ),
        (
            '[providers.l]\nkind = "openai"\nmodel = "m"\nbase_url = "http://box:80a/v1"',
            "providers.l.base_url: expected an http:// or https:// URL",
        ),
    ],
)
def test_errors_name_file_key_and_expectation(tmp_path, text, expected):
    path = write(tmp_path, text)
    messages = errors_of(path)
    assert any(m.startswith(f"{path}: ") and expected in m for m in messages), messages


def test_all_errors_reported_at_once(tmp_path):
    path = write(tmp_path, "[mqtt]\nport = 'x'\nhost = 5\n[tools]\ntimeout_s = 'slow'")
    assert len(errors_of(path)) == 3


NINE_MISTAKES = """\
device_id = "a/b"
bord = "sim"

[agent]
providers = ["nope"]
max_iterations = "ten"

[providers.x]
kind = "gemini"

[mqtt]
port = 70000
keepalive-s = true

[console]
baud = 115201
width = 5
"""


def test_type_and_value_mistakes_are_reported_in_one_pass_with_their_lines(tmp_path):
    path = write(tmp_path, NINE_MISTAKES)
    messages = errors_of(path)
    expected = [
        ("device_id", 1),
        ("bord", 2),
        ("agent.providers[0]", 5),
        ("agent.max_iterations", 6),
        ("providers.x.model", 8),  # required and absent: the table's line
        ("providers.x.kind", 9),
        ("mqtt.port", 12),
        ("mqtt.keepalive-s", 13),
        ("console.baud", 16),
        ("console.width", 17),
    ]
    assert len(messages) == len(expected), messages
    for message, (key, line) in zip(messages, expected, strict=True):
        assert message.startswith(f"{path}: {key}: ") and message.endswith(f"(line {line})"), message


def test_browser_bounds_too_small_for_chromium_are_refused_at_load(tmp_path):
    text = "[tools.browser]\nmemory_mb = 16\nmax_processes = 8\nmax_instances = 0\n"
    messages = errors_of(write(tmp_path, text))
    assert [m.split(": ")[1] for m in messages] == [
        "tools.browser.memory_mb",
        "tools.browser.max_processes",
        "tools.browser.max_instances",
    ]
    assert "expected an integer >= 64, got 16" in messages[0]
    smallest = write(tmp_path, "[tools.browser]\nmemory_mb = 64\nmax_processes = 64\n")
    assert load_config(smallest, environ={}).tools.browser.memory_mb == 64


def test_a_key_whose_type_is_wrong_is_not_also_reported_for_its_value(tmp_path):
    # A wrong type leaves the default in place for the other checks; no second message about it.
    messages = errors_of(write(tmp_path, '[mqtt]\nport = "x"\n[console]\nbaud = "fast"\n'))
    assert [m.split(": ")[1] for m in messages] == ["mqtt.port", "console.baud"]


def test_a_standard_baud_rate_is_accepted(tmp_path):
    assert load_config(write(tmp_path, "[console]\nbaud = 9600\n"), environ={}).console.baud == 9600


def test_lines_are_found_in_arrays_of_tables_and_quoted_keys(tmp_path):
    from edgeclaw.config.loader import key_lines, line_of

    text = '[[tools.custom]]\nname = "a"\n[[tools.custom]]\n"name" = "b"\ntimeout_s = "x"\n'
    lines = key_lines(text)
    assert lines["tools.custom[1].name"] == 4
    assert line_of("tools.custom[1].timeout_s", lines) == 5
    assert line_of("tools.custom[1].command", lines) == 3  # absent: the table's header


def test_missing_explicit_file_is_an_error(tmp_path):
    assert any("file not found" in m for m in errors_of(tmp_path / "nope.toml"))


def test_state_dir_order(tmp_path):
    assert state_dir("/cfg", {"EDGECLAW_STATE_DIR": "/env"}) == Path("/cfg")
    assert state_dir("", {"EDGECLAW_STATE_DIR": "/env"}) == Path("/env")


def test_state_dir_falls_back_to_the_documented_home_path(tmp_path, monkeypatch):
    # The contract names ~/.local/state/edgeclaw; a login session's XDG_STATE_HOME does not move it.
    monkeypatch.setattr("edgeclaw.config.paths.SYSTEM_STATE_DIR", tmp_path / "missing" / "edgeclaw")
    environ = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    assert state_dir("", environ) == Path.home() / ".local" / "state" / "edgeclaw"


def test_an_empty_secret_file_is_named(tmp_path):
    key = write(tmp_path, "\n", "key")
    config = load_config(write(tmp_path, FULL_EXAMPLE.format(ws=tmp_path, keyfile=key)), environ={})
    _, problems = resolve_secrets(config, {"LOCAL_LLM_KEY": "sk-local", "MQTT_PASS": "pw-1234"})
    assert [str(p) for p in problems] == [
        f"{config._source}: providers.cloud.api_key_file: secret file {key} is empty"
    ]


def test_policy_lists_may_name_custom_tools_from_the_same_file(tmp_path):
    path = write(
        tmp_path,
        '[tools]\ndeny = ["say"]\n[[tools.custom]]\nname = "say"\ncommand = "echo {{.text}}"\n'
        'description = "say it"\nparameters = {type = "object", properties = {text = {type = "string"}}}\n',
    )
    assert load_config(path, environ={}).tools.deny == ["say"]
    other = write(tmp_path, '[tools]\ndeny = ["sya"]\n', "typo.toml")
    assert any("unknown tool 'sya'" in m for m in errors_of(other))
