"""The CLI as people use it: options anywhere, pipes, `config show` / `config init`, `status`."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import re
import shutil
import subprocess
import sys
import time
import tomllib
from dataclasses import asdict
from pathlib import Path

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.control import socket_path


def test_tool_call_takes_its_json_after_the_options(run_cli):
    out = run_cli("tool", "call", "i2c", "--board", "sim", '{"action": "scan", "bus": 1}', "--json")
    assert out.returncode == 0, out.stderr
    assert "0x48" in out.stdout and json.loads(out.stdout)["ok"] is True


def test_leftover_arguments_are_still_a_usage_error(run_cli):
    out = run_cli("tool", "call", "i2c", '{"action": "scan"}', "--board", "sim", "extra")
    assert out.returncode == 2 and "unrecognized arguments: extra" in out.stderr


def test_a_closed_pipe_ends_quietly(state_env):
    # The reader is gone before the first write, as with `edgeclaw config init | head -0`.
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "config", "init"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=state_env,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(30) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err


def _uncomment(sample: str) -> str:
    """Every key and table of the sample, as a user who uncommented all of it would have it."""
    lines = []
    for line in sample.splitlines():
        line = re.sub(r"^# (\[|[a-z_]+ = )", r"\1", line)
        lines.append(re.sub(r"^(\[[^\]]+\]+)\s+#.*$", r"\1", line))
    return "\n".join(lines)


def test_config_init_is_a_sample_that_loads_commented_or_not(run_cli, tmp_path):
    out = run_cli("config", "init")
    assert out.returncode == 0
    assert tomllib.loads(out.stdout) == {}  # everything commented out: the defaults
    full = _uncomment(out.stdout)
    data = tomllib.loads(full)
    assert data["mqtt"]["port"] == 1883 and data["console"]["baud"] == 115200
    config = config_from_dict(data, "sample.toml", full)  # raises on any problem
    assert config.mqtt.outbox_max == data["mqtt"]["outbox_max"]
    # Each key carries the schema's comment.
    assert re.search(r"^# max_payload_bytes = 65536\s+# larger requests", out.stdout, re.M)


def test_config_init_never_overwrites(run_cli, tmp_path):
    target = tmp_path / "new.toml"
    assert run_cli("config", "init", str(target)).returncode == 0
    assert target.read_text().startswith("# edgeclaw configuration")
    target.write_text("mine\n")
    again = run_cli("config", "init", str(target))
    assert again.returncode == 2 and "exists" in again.stderr
    assert target.read_text() == "mine\n"


SHOWN = """\
board = "sim"
device_id = "greenhouse-07"
[tools]
rate_limit = 77
[[tools.custom]]
name = "say"
command = "echo {{.text}}"
description = "say it"
parameters = {type = "object", properties = {text = {type = "string"}}}
env = {TOKEN = "tok-very-secret-123"}
[console]
ports = ["/dev/ttyGS0"]
login_hash = "%s"
[providers.local]
kind = "openai"
model = "m"
base_url = "http://user:hunter2pass@127.0.0.1:8080/v1"
"""


def test_config_show_prints_the_effective_config_with_secrets_redacted(run_cli, state_env):
    from edgeclaw.config.pin_hash import hash_pin

    pin_hash = hash_pin("2468", "pbkdf2-sha256")
    Path(state_env["EDGECLAW_CONFIG"]).write_text(SHOWN % pin_hash)
    out = run_cli("config", "show")
    assert out.returncode == 0, out.stderr
    assert "tok-very-secret-123" not in out.stdout
    assert pin_hash not in out.stdout and pin_hash.split("$")[-1] not in out.stdout
    assert "hunter2pass" not in out.stdout
    assert "# device id: greenhouse-07" in out.stdout
    shown = tomllib.loads(out.stdout)
    assert shown["tools"]["rate_limit"] == 77  # the value in force ...
    assert shown["mqtt"]["port"] == 1883  # ... and every default, written out
    assert shown["tools"]["custom"][0]["env"] == {"TOKEN": "[REDACTED]"}
    # Apart from what was redacted, it loads back to the same configuration.
    shown["console"]["login_hash"] = pin_hash
    shown["tools"]["custom"][0]["env"] = {"TOKEN": "tok-very-secret-123"}
    shown["providers"]["local"]["base_url"] = "http://user:hunter2pass@127.0.0.1:8080/v1"
    original = tomllib.loads(SHOWN % pin_hash)
    # Field by field: the config's records have no generated __eq__.
    assert asdict(config_from_dict(shown, "x")) == asdict(config_from_dict(original, "x"))


# -- edgeclaw status ------------------------------------------------------------
@contextlib.contextmanager
def running_daemon(state_env):
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "run", "--board", "sim"],
        env=state_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    sock = socket_path(Path(state_env["EDGECLAW_STATE_DIR"]))
    try:
        deadline = time.monotonic() + 30
        while not sock.exists():
            assert proc.poll() is None, proc.communicate()[1]
            assert time.monotonic() < deadline, "the daemon never opened its control socket"
            time.sleep(0.1)
        yield proc, sock
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        proc.kill()


def test_status_asks_the_running_daemon(run_cli, state_env):
    assert run_cli("status").returncode == 1  # nobody to ask yet
    with running_daemon(state_env) as (proc, sock):
        assert sock.stat().st_mode & 0o777 == 0o600
        run_cli("tool", "call", "i2c", '{"action": "scan", "bus": 1}')  # a call of its own, not the daemon's
        out = run_cli("status", "--json")
        assert out.returncode == 0, out.stderr
        status = json.loads(out.stdout)
        assert status["pid"] == proc.pid and status["state"] == "serving"
        assert status["board"] == "sim" and status["simulated_board"] is True
        assert status["tools"]["registered"] > 10
        words = run_cli("status")
        assert words.returncode == 0 and f"pid {proc.pid}" in words.stdout and "board sim" in words.stdout
    gone = run_cli("status")
    assert gone.returncode == 1 and "no daemon is running" in gone.stderr


def _unprivileged_uid() -> int:
    try:
        return pwd.getpwnam("nobody").pw_uid
    except KeyError:
        pytest.skip("no 'nobody' user on this machine")


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_status_answers_only_the_daemons_own_user_and_root(state_env):
    import tempfile

    uid = _unprivileged_uid()
    # A state directory the other user can reach (pytest's own temp tree is private to root) ...
    state = Path(tempfile.mkdtemp(prefix="edgeclaw-status-"))
    env = {**state_env, "EDGECLAW_STATE_DIR": str(state)}
    try:
        with running_daemon(env) as (_, sock):
            # ... and the file system's door open wide: only the daemon's peer check stands in the way.
            state.chmod(0o755)
            sock.chmod(0o666)
            answer = _ask_as(uid, sock)
    finally:
        shutil.rmtree(state, ignore_errors=True)
    assert answer == {"ok": False, "error": "permission denied"}


def _ask_as(uid: int, sock: Path) -> dict:
    """One status request on `sock`, sent by a process running as `uid`."""
    probe = (
        "import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]);"
        's.sendall(b\'{"command": "status"}\\n\'); print(s.recv(65536).decode())'
    )
    command = [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        sys.executable, "-c", probe, str(sock),
    ]  # fmt: skip
    out = subprocess.run(command, capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)
