"""`edgeclaw chat` as a person uses it: one turn with --message, and interactive on a terminal."""

from __future__ import annotations

import asyncio
import io
import signal
import subprocess
import sys
import time
from pathlib import Path

import pexpect
import pytest

from edgeclaw.channels.terminal import TerminalChannel
from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.agent import build_agent
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import Tool
from tests.llm_server import Scripted, ScriptedLLM, openai_text, openai_tools


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


def configure(state_env: dict[str, str], llm: ScriptedLLM | None) -> None:
    text = 'board = "sim"\n'
    if llm is not None:
        text += (
            '[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
            f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 10\n'
        )
    Path(state_env["EDGECLAW_CONFIG"]).write_text(text)


def test_message_runs_the_tool_and_prints_the_answer(run_cli, state_env, llm):
    configure(state_env, llm)
    workspace = Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace"
    workspace.mkdir(parents=True)
    (workspace / "greenhouse.txt").write_text("temperature: 21.5 C\n")
    llm.reply(openai_tools(("read_file", {"path": "greenhouse.txt"})), openai_text("It is 21.5 °C."))
    out = run_cli("chat", "--message", "what is the temperature?")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "It is 21.5 °C."
    tool_result = next(m for m in llm.requests[1]["messages"] if m["role"] == "tool")
    assert "21.5 C" in tool_result["content"]


def test_message_exits_1_when_the_turn_fails(run_cli, state_env, llm):
    configure(state_env, llm)
    llm.reply(Scripted(500, {}))
    out = run_cli("chat", "--message", "hi")
    assert out.returncode == 1 and "no language model could answer" in out.stdout


def test_slash_call_works_with_no_provider(run_cli, state_env):
    configure(state_env, None)
    out = run_cli("chat", "--message", "/call session_status {}")
    assert out.returncode == 0 and "session: cli:" in out.stdout
    plain = run_cli("chat", "--message", "hello?")
    assert plain.returncode == 1 and "/call TOOL" in plain.stdout


def _spawn(state_env: dict[str, str]) -> pexpect.spawn:
    child = pexpect.spawn(
        sys.executable, ["-m", "edgeclaw", "chat"], env=state_env, encoding="utf-8", timeout=15
    )
    child.expect("Ctrl-D quits")
    return child


def test_interactive_session(state_env, llm):
    configure(state_env, llm)
    llm.reply(openai_text("hello technician"))
    child = _spawn(state_env)
    child.expect("you> ")
    child.sendline("/call session_status {}")
    child.expect("channel: cli")
    child.expect("you> ")
    child.sendline("hi there")
    child.expect("hello technician")
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0
    assert (Path(state_env["EDGECLAW_STATE_DIR"]) / "chat_history").is_file()


def test_ctrl_c_cancels_the_turn_in_flight(state_env, llm):
    configure(state_env, llm)
    llm.reply(Scripted(hang_s=30, body={}), openai_text("after the stop"))
    child = _spawn(state_env)
    child.expect("you> ")
    child.sendline("a slow question")
    child.expect(r"\r\n")  # the line was taken
    deadline = time.monotonic() + 30
    while not llm.requests:  # the turn reached the provider: interrupt it there
        assert time.monotonic() < deadline, "the turn never reached the provider"
        time.sleep(0.02)
    child.sendintr()
    child.expect("Stopped.")
    child.expect("you> ")
    child.sendline("/status")
    child.expect("idle")
    child.expect("you> ")  # Ctrl-D sent before readline is reading again can be lost by the terminal
    child.sendeof()
    child.expect(pexpect.EOF)


def test_the_approval_question_reads_as_on_the_console(state_env):
    configure(state_env, None)
    child = _spawn(state_env)
    child.expect("you> ")
    child.sendline('/call exec {"command": "python3 -c \'print(6 * 7)\'"}')
    child.expect_exact("Approval needed: exec wants to run:")
    child.expect_exact("python3 -c")
    child.expect(r"allow once / always / deny \[o/w/d\] \(\d+ s\)\? ")
    child.sendline("maybe")
    child.expect_exact("Answer o (allow once), w (allow always) or d (deny).")
    child.sendline("o")
    child.expect_exact("Allowed once.")
    child.expect(r"\r\n42\r\n")
    child.expect("you> ")
    child.sendeof()
    child.expect(pexpect.EOF)


class Forever(Tool):
    name = "forever"
    group = "runtime"
    description = "Runs until cancelled."
    parameters = {"type": "object", "properties": {}}

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def execute(self, args, ctx):
        self.started.set()
        await asyncio.sleep(3600)


async def test_ctrl_c_stops_a_slow_slash_command_and_the_chat_goes_on(tmp_path):
    config = config_from_dict({"board": "sim", "state_dir": str(tmp_path / "state")}, "test.toml")
    runtime = build_runtime(config)
    try:
        agent = build_agent(runtime)
        tool = Forever()
        agent.registry.register(tool)
        out = io.StringIO()
        terminal = TerminalChannel(agent, out=out, interactive=False)
        # A /call is the session's turn: Ctrl-C stops it like a model turn, and the chat goes on.
        handling = asyncio.create_task(terminal.handle_line("/call forever {}"))
        await asyncio.wait_for(tool.started.wait(), 5)
        terminal.interrupt()
        reply = await asyncio.wait_for(handling, 5)
        assert reply.text == "Stopped." and not reply.ok
        terminal.interrupt()  # at the prompt: only a hint
        assert "(Ctrl-D quits)" in out.getvalue()
        assert (await terminal.handle_line("/status")).ok
    finally:
        await runtime.aclose()


def test_a_missing_model_key_is_a_warning_not_a_refusal(run_cli, state_env, llm):
    Path(state_env["EDGECLAW_CONFIG"]).write_text(
        'board = "sim"\n[agent]\nproviders = ["local"]\n'
        f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\n'
        'api_key_env = "EDGECLAW_TEST_UNSET_KEY"\n'
    )
    out = run_cli("chat", "--message", "/status")
    assert out.returncode == 0 and "model local" in out.stdout
    assert "warning:" in out.stderr and "EDGECLAW_TEST_UNSET_KEY is not set" in out.stderr


def test_an_unusable_state_database_is_reported_not_a_traceback(run_cli, state_env, tmp_path):
    (tmp_path / "a-file").write_text("")
    env = {**state_env, "EDGECLAW_STATE_DIR": str(tmp_path / "a-file" / "state")}
    Path(state_env["EDGECLAW_CONFIG"]).write_text(f'board = "sim"\nworkspace = "{tmp_path / "ws"}"\n')
    out = run_cli("chat", "--message", "/status", env=env)
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "/status failed: BackendError: cannot open the state database" in out.stdout


def test_ctrl_c_during_a_one_shot_turn_exits_130_quietly(state_env, llm):
    configure(state_env, llm)
    llm.reply(Scripted(hang_s=30, body={}))  # the turn runs till the SIGINT
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgeclaw", "chat", "--message", "slow"],
        env=state_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 15
    while not llm.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=15)
    assert proc.returncode == 130 and "Traceback" not in err
