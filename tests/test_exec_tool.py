"""The exec tool end to end: the Done-when commands, approvals (each decision, persistence, timeout),
security and ask modes, per-agent switches, and the terminal approver of `edgeclaw tool call`."""

from __future__ import annotations

import json
import os
import pty
import select
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from shell_helpers import ScriptedApprover, ctx, make_runtime

from edgeclaw.errors import ToolRefused
from edgeclaw.store.approvals import ApprovalStore
from edgeclaw.tools.approval import Decision
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.runtime.custom import custom_tools_for

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/bin/firejail") or os.path.exists("/usr/bin/bwrap")),
    reason="no sandbox installed (firejail or bubblewrap)",
)
PY42 = 'python3 -c "print(6 * 7)"'  # python3 is not on the default allowlist: a miss


# -- the Done-when commands, as a user types them ------------------------------------------


def test_cat_shadow_fails_inside_the_sandbox(run_cli) -> None:
    proc = run_cli("tool", "call", "exec", '{"command": "cat /etc/shadow"}', "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 1, proc.stderr
    assert out["ok"] is False and "/etc/shadow" in out["error"]
    assert "root:" not in out["for_llm"]
    assert "exit status 1; sandbox firejail" in out["for_llm"]


def test_rm_rf_root_dry_run_is_refused_naming_the_group(run_cli) -> None:
    proc = run_cli("tool", "call", "exec", '{"command": "rm -rf /"}', "--dry-run", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 2
    assert out["ok"] is False and "destructive-ops" in out["error"]


def test_echo_hello_runs_under_firejail(run_cli) -> None:
    proc = run_cli("tool", "call", "exec", '{"command": "echo hello"}', "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 0, proc.stderr
    assert out["for_llm"].startswith("hello\n") and "sandbox firejail" in out["for_llm"]
    plain = run_cli("tool", "call", "exec", '{"command": "echo hello"}')
    assert plain.stdout.strip() == "hello"


def test_without_a_terminal_a_miss_is_denied(run_cli) -> None:
    proc = run_cli("tool", "call", "exec", json.dumps({"command": PY42}), "--json")
    assert proc.returncode == 2
    assert "cannot ask anyone" in json.loads(proc.stdout)["error"]


def test_no_working_sandbox_refuses_exec(run_cli, state_env, tmp_path: Path) -> None:
    config = Path(state_env["EDGECLAW_CONFIG"])
    config.write_text(
        f'board = "sim"\n[sandbox]\nfirejail_path = "{tmp_path}/none"\nbubblewrap_path = "{tmp_path}/none"\n'
    )
    proc = run_cli("tool", "call", "exec", '{"command": "echo hello"}', "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 2 and "sandbox unavailable" in out["error"]
    assert "hello" not in out["for_llm"]


# -- approvals -------------------------------------------------------------------------


async def test_allow_once_runs_and_asks_again(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    approver = ScriptedApprover(Decision.ALLOW_ONCE, Decision.ALLOW_ONCE)
    runtime.approvals.register("mqtt", approver)
    try:
        for _ in range(2):
            out = await runtime.registry.execute("exec", {"command": PY42}, ctx())
            assert out.ok and out.for_llm.startswith("42")
        assert len(approver.asked) == 2
        assert "python3" in approver.asked[0].summary and "allowlist" in approver.asked[0].summary
        assert approver.asked[0].seconds_left > 100  # the 2-minute default
        assert ApprovalStore(runtime.db).list() == []
    finally:
        await runtime.aclose()


async def test_allow_always_is_stored_survives_restart_and_is_revocable(
    tmp_path: Path, run_cli, state_env
) -> None:
    runtime = make_runtime(tmp_path)
    approver = ScriptedApprover(Decision.ALLOW_ALWAYS)
    runtime.approvals.register("mqtt", approver)
    try:
        assert (await runtime.registry.execute("exec", {"command": PY42}, ctx())).ok
        assert (await runtime.registry.execute("exec", {"command": PY42}, ctx())).ok
        assert len(approver.asked) == 1
        # The exact command only: another command is a new question.
        other = await runtime.registry.execute("exec", {"command": 'python3 -c "print(1)"'}, ctx())
        assert other.refused and len(approver.asked) == 2
    finally:
        await runtime.aclose()

    again = make_runtime(tmp_path)  # a restart: a new runtime on the same state
    silent = ScriptedApprover()
    again.approvals.register("mqtt", silent)
    try:
        out = await again.registry.execute("exec", {"command": PY42}, ctx())
        assert out.ok and silent.asked == []
        rows = ApprovalStore(again.db).list()
        assert [(r.tool, r.agent_id, r.pattern, r.created_by) for r in rows] == [
            ("exec", "main", PY42, "mqtt:tester")
        ]
        assert rows[0].uses >= 2
    finally:
        await again.aclose()

    env = dict(state_env, EDGECLAW_STATE_DIR=str(tmp_path / "state"))
    listed = run_cli("approvals", "list", "--json", env=env)
    assert listed.returncode == 0 and json.loads(listed.stdout)[0]["pattern"] == PY42
    text = run_cli("approvals", "list", env=env)
    assert PY42 in text.stdout
    approval_id = json.loads(listed.stdout)[0]["id"]
    assert run_cli("approvals", "revoke", str(approval_id), env=env).returncode == 0
    assert run_cli("approvals", "revoke", str(approval_id), env=env).returncode == 1
    assert json.loads(run_cli("approvals", "list", "--json", env=env).stdout) == []

    after = make_runtime(tmp_path)
    asked = ScriptedApprover(Decision.DENY)
    after.approvals.register("mqtt", asked)
    try:
        out = await after.registry.execute("exec", {"command": PY42}, ctx())
        assert out.refused and len(asked.asked) == 1
    finally:
        await after.aclose()


async def test_deny_timeout_and_no_approver_all_refuse(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"approval_timeout_s": 0.3}})
    try:
        runtime.approvals.register("mqtt", ScriptedApprover(Decision.DENY))
        out = await runtime.registry.execute("exec", {"command": PY42}, ctx())
        assert out.refused and "denied by the person asked" in out.error

        runtime.approvals.register("mqtt", ScriptedApprover(Decision.ALLOW_ONCE, delay=60))
        started = time.monotonic()
        out = await runtime.registry.execute("exec", {"command": PY42}, ctx())
        assert out.refused and "timed out after 0.3 s" in out.error
        assert time.monotonic() - started < 20  # at the 0.3 s timeout, not the approver's 60 s

        out = await runtime.registry.execute("exec", {"command": PY42}, ctx(channel="console"))
        assert out.refused and "cannot ask anyone" in out.error
    finally:
        await runtime.aclose()


async def test_a_dry_run_never_asks(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    approver = ScriptedApprover(Decision.ALLOW_ONCE)
    runtime.approvals.register("mqtt", approver)
    try:
        out = await runtime.registry.execute("exec", {"command": PY42}, ctx(), dry_run=True)
        assert out.ok and approver.asked == []
    finally:
        await runtime.aclose()


# -- security and ask modes ---------------------------------------------------------------


async def test_security_and_ask_modes(tmp_path: Path) -> None:
    def gate(**exec_cfg):
        rt = make_runtime(
            tmp_path / str(len(exec_cfg)) / "_".join(map(str, exec_cfg.values())), tools={"exec": exec_cfg}
        )
        return rt, rt.registry.get("exec").shell.gate

    rt, g = gate(security="deny")
    with pytest.raises(ToolRefused, match="disabled"):
        g.check("echo hi", ctx(), tool="exec")
    await rt.aclose()

    rt, g = gate(security="allowlist", ask="off")
    assert not g.check("ls -la | grep x", ctx(), tool="exec").needs_approval
    with pytest.raises(ToolRefused, match=r"needs approval .* tools.exec.ask = 'off'"):
        g.check(PY42, ctx(), tool="exec")
    with pytest.raises(ToolRefused, match="needs approval"):
        g.check("echo $(id)", ctx(), tool="exec")  # substitution never matches the allowlist
    await rt.aclose()

    rt, g = gate(security="full", ask="on-miss")
    assert not g.check(PY42, ctx(), tool="exec").needs_approval
    install = g.check("apt-get install -y htop", ctx(), tool="exec")
    assert install.needs_approval and "package-install" in install.reasons[0]
    with pytest.raises(ToolRefused, match="destructive-ops"):
        g.check("rm -rf /", ctx(), tool="exec")  # no approval can let a deny group through
    await rt.aclose()

    rt, g = gate(security="full", ask="always")
    assert g.check("echo hi", ctx(), tool="exec").needs_approval
    await rt.aclose()

    rt, g = gate(security="full", ask="off")
    with pytest.raises(ToolRefused, match="package-install"):
        g.check("pip install requests", ctx(), tool="exec")
    await rt.aclose()


def _listener() -> socket.socket:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    return server


async def test_per_agent_deny_groups_and_network(tmp_path: Path) -> None:
    runtime = make_runtime(
        tmp_path,
        tools={
            "exec": {"security": "full"},
            "agents": {"lab": {"exec": {"network": True, "deny_groups": {"network_recon": False}}}},
        },
    )
    gate = runtime.registry.get("exec").shell.gate
    try:
        with pytest.raises(ToolRefused, match="network-recon"):
            gate.check("nmap -sn 192.168.1.0/24", ctx(), tool="exec")
        assert not gate.check("nmap -sn 192.168.1.0/24", ctx(agent="lab"), tool="exec").needs_approval

        server = _listener()
        port = server.getsockname()[1]
        probe = (
            f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 3); print('UP')\""
        )
        try:
            lab = await runtime.registry.execute("exec", {"command": probe}, ctx(agent="lab"))
            main = await runtime.registry.execute("exec", {"command": probe}, ctx())
        finally:
            server.close()
        assert lab.ok and "UP" in lab.for_llm
        assert not main.ok and "UP" not in main.for_llm
    finally:
        await runtime.aclose()


async def test_cwd_and_timeout_arguments(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    (runtime.workspace / "sub").mkdir()
    try:
        out = await runtime.registry.execute("exec", {"command": "pwd", "cwd": "sub"}, ctx())
        assert out.ok and out.for_llm.startswith(str((runtime.workspace / "sub").resolve()))
        out = await runtime.registry.execute("exec", {"command": "pwd", "cwd": "../.."}, ctx())
        assert out.refused and "'..'" in out.error
        out = await runtime.registry.execute("exec", {"command": "sleep 5", "timeout_s": 0.5}, ctx())
        assert not out.ok and not out.refused and "timed out after 0.5 s" in out.error
    finally:
        await runtime.aclose()


async def test_the_daemons_secrets_never_reach_a_command(tmp_path: Path) -> None:
    secret = "sk-live-abcdef0123456789XYZ"
    runtime = make_runtime(
        tmp_path,
        environ={"CLOUD_KEY": secret, "VISIBLE": "yes-visible"},
        providers={"cloud": {"kind": "openai", "model": "m", "api_key_env": "CLOUD_KEY"}},
        tools={"exec": {"security": "full", "env_allow": ["PATH", "CLOUD_KEY", "VISIBLE"]}},
    )
    (runtime.workspace / "dump.py").write_text(
        "import os\nfor k, v in sorted(os.environ.items()):\n    print(k, v)\n"
    )
    try:
        out = await runtime.registry.execute("exec", {"command": "python3 dump.py"}, ctx())
        assert out.ok and "VISIBLE yes-visible" in out.for_llm
        assert (
            secret not in out.for_llm and "CLOUD_KEY" not in out.for_llm and "[REDACTED]" not in out.for_llm
        )
    finally:
        await runtime.aclose()


# -- the terminal approver of `edgeclaw tool call` -----------------------------------------


def _read_until(fd: int, needle: bytes, timeout: float = 20.0) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while needle not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(fd, 4096)
            except OSError:
                break
            if not chunk:
                break
            seen += chunk
    return seen


@pytest.mark.parametrize(("answer", "expect_ok"), [(b"a\n", True), (b"d\n", False)])
def test_tool_call_asks_on_the_terminal(state_env, answer: bytes, expect_ok: bool) -> None:
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "tool", "call", "exec", json.dumps({"command": PY42}), "--json"],
        stdin=child,
        stdout=subprocess.PIPE,
        stderr=child,
        env=state_env,
    )
    os.close(child)
    try:
        prompt = _read_until(main, b"[o/w/d]")
        assert b"Approval needed: exec wants to run:" in prompt and b"python3" in prompt, prompt
        os.write(main, answer)
        stdout, _ = proc.communicate(timeout=30)
    finally:
        os.close(main)
        if proc.poll() is None:
            proc.kill()
    out = json.loads(stdout)
    assert out["ok"] is expect_ok
    if expect_ok:
        assert out["for_llm"].startswith("42")
    else:
        assert proc.returncode == 2 and "denied" in out["error"]


def test_context_defaults_are_the_cli() -> None:
    # The CLI's own calls come from channel "cli"; that is where the terminal approver registers.
    assert ToolContext().channel == "cli"


# -- allowlist and approval bypasses found in review --------------------------------------


async def test_an_allowlisted_program_cannot_run_another_program_unasked(tmp_path: Path) -> None:
    # `sort` is on the default allowlist, and `sort --compress-program=sh` feeds its data to sh:
    # a command line that would run anything without the question the allowlist mode promises.
    runtime = make_runtime(tmp_path)
    approver = ScriptedApprover(Decision.DENY, Decision.DENY, Decision.DENY, Decision.DENY)
    runtime.approvals.register("mqtt", approver)
    ws = runtime.workspace
    (ws / "data.txt").write_text("".join(f"touch pwned #{i}\n" for i in range(3000)))
    (ws / "ls").write_text("#!/bin/sh\ntouch pwned\n")
    (ws / "ls").chmod(0o755)
    try:
        for command in (
            "sort --compress-program=sh -S 16K data.txt",
            "sort --compress-prog=sh -S 16K data.txt",  # getopt takes an unambiguous prefix
            "./ls -la",
            f"{ws}/ls",
        ):
            out = await runtime.registry.execute("exec", {"command": command}, ctx())
            assert out.refused and "denied by the person asked" in out.error, (command, out.error)
        assert len(approver.asked) == 4
        assert not (ws / "pwned").exists()
        gate = runtime.registry.get("exec").shell.gate
        for plain in ("ls -la", "/bin/ls -la", "sort data.txt | head -n 3", "cat data.txt | wc -l"):
            assert not gate.check(plain, ctx(), tool="exec").needs_approval, plain
        for wrapped in ("env ls", "timeout 5 cat x", "xargs cat < list", "nice ls"):
            assert gate.check(wrapped, ctx(), tool="exec").needs_approval, wrapped
    finally:
        await runtime.aclose()


async def test_a_stored_approval_covers_that_exact_command_only(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full", "ask": "always"}})
    approver = ScriptedApprover(Decision.ALLOW_ALWAYS, Decision.DENY, Decision.DENY, Decision.DENY)
    runtime.approvals.register("mqtt", approver)
    ws = runtime.workspace
    try:
        assert (await runtime.registry.execute("exec", {"command": "ls -la"}, ctx())).ok
        # The same command (normalised: surrounding space, a fullwidth letter) is not asked again ...
        for same in ("  ls -la  ", "\uff4cs -la"):
            assert (await runtime.registry.execute("exec", {"command": same}, ctx())).ok
        assert len(approver.asked) == 1
        # ... but a longer one, another agent, and another tool each are new questions.
        longer = await runtime.registry.execute("exec", {"command": "ls -la; touch pwned"}, ctx())
        other_agent = await runtime.registry.execute("exec", {"command": "ls -la"}, ctx(agent="lab"))
        other_tool = await runtime.registry.execute(
            "process", {"action": "start", "command": "ls -la"}, ctx()
        )
        assert longer.refused and other_agent.refused and other_tool.refused
        assert len(approver.asked) == 4
        assert not (ws / "pwned").exists()
        # A dry run never asks, whatever the mode, and with nobody to ask at all.
        runtime.approvals.unregister("mqtt")
        dry = await runtime.registry.execute("exec", {"command": "touch x"}, ctx(), dry_run=True)
        assert dry.ok and len(approver.asked) == 4
    finally:
        await runtime.aclose()


def _own_home() -> Path | None:
    import pwd

    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    return home if home.is_dir() and any(home.iterdir()) else None


async def test_the_daemons_home_is_hidden(tmp_path: Path) -> None:
    # SSH keys and shell histories: a root daemon's commands run as uid 0 and could read /root.
    home = _own_home()
    if home is None:
        pytest.skip("the daemon user's home is empty or missing here")
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    try:
        out = await runtime.registry.execute("exec", {"command": f"ls -A {home}; true"}, ctx())
        assert out.ok and out.for_user == "(no output)", out.for_llm
    finally:
        await runtime.aclose()


async def test_a_multi_line_command_says_so_before_its_first_line(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    approver = ScriptedApprover(Decision.DENY)
    runtime.approvals.register("mqtt", approver)
    try:
        command = "ls" + "\n" * 40 + "python3 -c 'print(1)'"
        out = await runtime.registry.execute("exec", {"command": command}, ctx())
        assert out.refused
        assert approver.asked[0].summary.startswith("[a command of 41 lines]\nls\n")
    finally:
        await runtime.aclose()


# -- dry runs say what would happen --------------------------------------------------------


def test_a_dry_run_of_an_allowlist_miss_says_it_would_ask(run_cli) -> None:
    proc = run_cli("tool", "call", "exec", '{"command": "rm notes.txt"}', "--dry-run", "--json")
    out = json.loads(proc.stdout)
    assert proc.returncode == 3, proc.stderr
    assert out["ok"] is True
    assert out["for_llm"] == (
        "dry run: exec would ask for approval: 'rm' is not on the allowlist (tools.exec.allowlist)"
    )
    plain = run_cli("tool", "call", "exec", '{"command": "ls -la"}', "--dry-run")
    assert plain.returncode == 0 and plain.stdout.strip() == "dry run: exec would run"


async def test_dry_runs_name_each_reason_for_approval(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    reg = runtime.registry
    try:
        for command, reason in (
            ("rm notes.txt", "'rm' is not on the allowlist"),
            ("env ls", "'env' runs other programs"),
            ("./ls", "'./ls' is not a program from a system directory"),
            ("sort --compress-program=gzip x", "'sort' is given an option that runs another program"),
            ("ls $(pwd)", "a command or process substitution cannot be allowlisted"),
        ):
            dry = await reg.execute("exec", {"command": command}, ctx(), dry_run=True)
            assert dry.ok and dry.stage == "dry_run_approval", dry
            assert dry.for_llm.startswith("dry run: exec would ask for approval: ") and reason in dry.for_llm
        started = await reg.execute("process", {"action": "start", "command": "rm x"}, ctx(), dry_run=True)
        assert started.stage == "dry_run_approval" and "'rm' is not on the allowlist" in started.for_llm
        # A stored allow-always answer stands in for the question: then it would just run.
        runtime.approvals.register("mqtt", ScriptedApprover(Decision.ALLOW_ALWAYS))
        assert (await reg.execute("exec", {"command": "rm -f gone.txt"}, ctx())).ok
        again = await reg.execute("exec", {"command": "rm -f gone.txt"}, ctx(), dry_run=True)
        assert again.stage == "dry_run" and again.for_llm == "dry run: exec would run"
    finally:
        await runtime.aclose()

    full = make_runtime(tmp_path / "full", tools={"exec": {"security": "full"}})
    custom = custom_tools_for(full.registry)
    custom.define({"name": "get", "command": "pip install {{.pkg}}", "parameters": {
        "type": "object", "properties": {"pkg": {"type": "string"}}}})  # fmt: skip
    try:
        for tool, args in (("exec", {"command": "apt-get install -y htop"}), ("get", {"pkg": "requests"})):
            dry = await full.registry.execute(tool, args, ctx(), dry_run=True)
            assert dry.stage == "dry_run_approval" and "package-install" in dry.for_llm, dry
    finally:
        await full.aclose()


async def test_removing_a_directory_that_holds_the_workspace_is_refused(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"exec": {"security": "full"}})
    ws = runtime.workspace
    (ws / "build").mkdir()
    (ws / "keep.txt").write_text("kept")
    try:
        for command in (f"rm -rf {ws.parent}", f"rm -rf {ws}", "rm -rf ~/..", f"rm -Rf {ws.parent.parent}/*"):
            for dry_run in (True, False):
                out = await runtime.registry.execute("exec", {"command": command}, ctx(), dry_run=dry_run)
                assert out.refused and "destructive-ops" in out.error, (command, out.error)
        assert (ws / "keep.txt").read_text() == "kept"
        assert (await runtime.registry.execute("exec", {"command": "rm -rf build"}, ctx())).ok
        assert not (ws / "build").exists()
    finally:
        await runtime.aclose()
