"""The `edgeclaw` command: output shapes and exit statuses as documented."""

from __future__ import annotations

import json
from pathlib import Path

import edgeclaw


def test_version(run_cli):
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"edgeclaw {edgeclaw.__version__}"


def test_traversal_is_refused_with_exit_2(run_cli):
    out = run_cli("tool", "call", "read_file", '{"path": "../../etc/passwd"}', "--json")
    assert out.returncode == 2
    result = json.loads(out.stdout)
    assert result["ok"] is False and result["tool"] == "read_file"
    assert "refused" in result["error"] and ".." in result["error"]
    assert set(result) == {"ok", "tool", "for_llm", "for_user", "error", "duration_ms"}


def test_write_then_read_round_trip(run_cli, state_env):
    out = run_cli("tool", "call", "write_file", '{"path": "a/b.txt", "content": "one\\ntwo\\n"}', "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ok"]
    assert (Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace/a/b.txt").read_text() == "one\ntwo\n"
    read = run_cli("tool", "call", "read_file", '{"path": "a/b.txt", "start_line": 2}')
    assert read.returncode == 0 and "two" in read.stdout and "one" not in read.stdout


def test_tool_error_exits_1(run_cli):
    out = run_cli("tool", "call", "read_file", '{"path": "missing.txt"}', "--json")
    assert out.returncode == 1
    assert "missing.txt" in json.loads(out.stdout)["error"]


def test_refusals_exit_2(run_cli):
    assert run_cli("tool", "call", "no_such_tool", "{}").returncode == 2
    bad_args = run_cli("tool", "call", "read_file", '{"path": 3}', "--json")
    assert bad_args.returncode == 2 and "'path'" in json.loads(bad_args.stdout)["error"]
    assert run_cli("tool", "call", "read_file", "{not json").returncode == 2
    assert run_cli("tool", "call").returncode == 2  # usage error


def test_dry_run_checks_without_writing(run_cli, state_env):
    out = run_cli("tool", "call", "write_file", '{"path": "x.txt", "content": "y"}', "--dry-run", "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ok"]
    assert not (Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace/x.txt").exists()
    refused = run_cli("tool", "call", "write_file", '{"path": "/etc/x", "content": "y"}', "--dry-run")
    assert refused.returncode == 2 and "refused" in refused.stderr


def test_policy_from_config_refuses(run_cli, state_env):
    Path(state_env["EDGECLAW_CONFIG"]).write_text('board = "sim"\n[tools]\ndeny = ["group:fs"]\n')
    out = run_cli("tool", "call", "list_files", "{}", "--json")
    assert out.returncode == 2 and "tools.deny" in json.loads(out.stdout)["error"]
    listed = run_cli("tools", "list", "--json")
    names = {t["name"] for t in json.loads(listed.stdout)}
    assert "session_status" in names and not names & {"read_file", "write_file", "list_files", "glob"}


def test_tools_list_with_profile(run_cli):
    full = json.loads(run_cli("tools", "list", "--json").stdout)
    assert {"read_file", "write_file", "session_status"} <= {t["name"] for t in full}
    assert all(t["group"] for t in full)
    minimal = run_cli("tools", "list", "--profile", "minimal")
    assert minimal.returncode == 0 and minimal.stdout.split()[0] == "session_status"
    assert run_cli("tools", "list", "--profile", "root").returncode == 2


def test_config_check(run_cli, tmp_path):
    good = tmp_path / "good.toml"
    good.write_text('device_id = "greenhouse-07"\n[tools]\nprofile = "device"\n')
    out = run_cli("config", "check", str(good))
    assert out.returncode == 0 and "ok" in out.stdout
    bad = tmp_path / "bad.toml"
    bad.write_text('[mqtt]\nport = "high"\n[tools]\nprofile = "admin"\n')
    out = run_cli("config", "check", str(bad))
    assert out.returncode == 1
    assert f"{bad}: mqtt.port: expected an integer, got a string" in out.stderr


def test_broken_config_refuses_tool_calls(run_cli, state_env):
    Path(state_env["EDGECLAW_CONFIG"]).write_text("[tools\n")
    out = run_cli("tool", "call", "session_status")
    assert out.returncode == 2 and "not valid TOML" in out.stderr


def test_unknown_board_is_refused(run_cli):
    out = run_cli("tool", "call", "session_status", "--board", "toaster")
    assert out.returncode == 2 and "unknown board profile 'toaster'" in out.stderr


def test_board_show(run_cli):
    out = run_cli("board", "show", "sim")
    assert out.returncode == 0 and out.stdout.startswith("sim: ")


def test_a_broken_config_still_prints_one_json_object(run_cli, state_env):
    Path(state_env["EDGECLAW_CONFIG"]).write_text("[tools\n")
    out = run_cli("tool", "call", "session_status", "--json")
    assert out.returncode == 2
    result = json.loads(out.stdout)
    assert set(result) == {"ok", "tool", "for_llm", "for_user", "error", "duration_ms"}
    assert (
        result["ok"] is False and result["tool"] == "session_status" and "not valid TOML" in result["error"]
    )


def test_a_secret_missing_from_this_shell_does_not_refuse_a_tool_call(run_cli, state_env):
    # The service gets its broker password from systemd; a technician's shell does not have it.
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[mqtt]\npassword_env = "EDGECLAW_TEST_UNSET_PASSWORD"\n'
    )
    out = run_cli("tool", "call", "write_file", '{"path": "x.txt", "content": "y"}', "--json")
    assert out.returncode == 0 and json.loads(out.stdout)["ok"], out.stderr


def test_run_reports_an_unusable_state_database_in_one_line(run_cli, state_env, tmp_path):
    (tmp_path / "a-file").write_text("")
    env = {**state_env, "EDGECLAW_STATE_DIR": str(tmp_path / "a-file" / "state")}
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        f'board = "sim"\nworkspace = "{tmp_path / "ws"}"\n[mqtt]\nenabled = true\nport = 9\n'
    )
    out = run_cli("run", env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "edgeclaw: cannot open the state database" in out.stderr


def _parsed(parser, argv):
    """What `parser` makes of `argv`: the namespace, or the exit status and what it printed."""
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            return vars(parser.parse_args(argv))
        except SystemExit as e:
            return (e.code, out.getvalue(), err.getvalue())


def test_a_command_parsed_with_only_its_own_parser_reads_as_with_the_whole_one():
    """`edgeclaw run` (at every start) builds only its own part of the parser: each command's
    arguments, --help and errors must read as they do with every command's part built."""
    import pytest

    from edgeclaw.cli.parser import COMMAND_PARSERS, build_parser

    whole = build_parser()
    shown = _parsed(whole, ["--help"])
    for name in COMMAND_PARSERS:
        assert f"    {name} " in shown[1] or f"    {name}\n" in shown[1]  # every command is listed
        own = build_parser(name)
        for argv in (
            [name, "--help"],
            [name],
            [name, "--bogus"],
            [name, "--board", "sim", "--log-level", "debug"],
            [name, "list", "--json"],
            [name, "call", "i2c", '{"action": "scan"}', "--dry-run"],
        ):
            assert _parsed(own, argv) == _parsed(whole, argv), argv
    with pytest.raises(SystemExit):
        build_parser("run").parse_args(["chat"])  # only its own command
