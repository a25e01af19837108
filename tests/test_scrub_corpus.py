"""Sixty-odd credential formats planted in workspace files: none comes back through read_file,
search, exec, the audit trail or the log."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import Runtime, build_runtime
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.scrub import REDACTED, Scrubber
from tests.scrub_corpus import CORPUS, PEM_FILE, PEM_TAIL_FROM_LINE, RSA_BODY, Sample

CLI = ToolContext(channel="cli", session_key="cli:corpus", caller="cli:tester")


def test_the_corpus_is_large_and_its_samples_distinct() -> None:
    assert len(CORPUS) >= 40
    assert len({s.name for s in CORPUS}) == len(CORPUS)


@pytest.mark.parametrize("sample", CORPUS, ids=lambda s: s.name)
def test_each_format_is_redacted(sample: Sample) -> None:
    scrubber = Scrubber()
    out = scrubber.scrub(sample.text)
    leaked = [secret for secret in sample.secrets if secret in out]
    assert not leaked, out
    assert REDACTED in out and scrubber.scrub(out) == out


@pytest.fixture
def planted(tmp_path: Path) -> Runtime:
    """A runtime whose workspace holds one file per sample, under corpus/."""
    config = config_from_dict(
        {"board": "sim", "state_dir": str(tmp_path / "state"), "workspace": str(tmp_path / "ws")},
        str(tmp_path / "edgeclaw.toml"),
    )
    runtime = build_runtime(config, environ={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})
    corpus = runtime.workspace / "corpus"
    corpus.mkdir()
    for sample in CORPUS:
        (corpus / f"{sample.name}.txt").write_text(sample.text)
    (runtime.workspace / "key.pem").write_text(PEM_FILE)
    return runtime


def _leaks(text: str) -> list[str]:
    return [f"{s.name}: {secret[:12]}..." for s in CORPUS for secret in s.secrets if secret in text]


@pytest.mark.parametrize("sample", CORPUS, ids=lambda s: s.name)
async def test_read_file_shows_no_secret(planted: Runtime, sample: Sample) -> None:
    out = await planted.registry.execute("read_file", {"path": f"corpus/{sample.name}.txt"}, CLI)
    assert out.ok, out.error
    for text in (out.for_llm, out.for_user or ""):
        assert not [secret for secret in sample.secrets if secret in text], text


async def test_search_over_every_file_shows_no_secret(planted: Runtime) -> None:
    out = await planted.registry.execute(
        "search", {"pattern": ".", "path": "corpus", "max_results": 1000}, CLI
    )
    assert out.ok and "matches in" in out.for_llm, out.error
    assert not _leaks(out.for_llm) and not _leaks(out.for_user or "")


@pytest.mark.parametrize(
    ("start", "end", "shown"),
    [
        pytest.param(PEM_TAIL_FROM_LINE, None, RSA_BODY[PEM_TAIL_FROM_LINE - 2 :], id="to-the-end-line"),
        pytest.param(3, 9, RSA_BODY[1:8], id="middle-lines-only"),
    ],
)
async def test_a_private_key_read_from_its_middle_is_redacted(
    planted: Runtime, start: int, end: int | None, shown: list[str]
) -> None:
    args = {"path": "key.pem", "start_line": start} | ({"end_line": end} if end else {})
    out = await planted.registry.execute("read_file", args, CLI)
    assert out.ok and f"lines {start}-" in out.for_llm
    assert "BEGIN" not in out.for_llm  # really read from the middle
    assert not [line for line in shown if line in out.for_llm], out.for_llm


@pytest.mark.skipif(
    not (os.path.exists("/usr/bin/firejail") or os.path.exists("/usr/bin/bwrap")),
    reason="no sandbox installed (firejail or bubblewrap)",
)
async def test_exec_cat_of_every_file_shows_no_secret(planted: Runtime) -> None:
    out = await planted.registry.execute("exec", {"command": "cat corpus/*.txt key.pem"}, CLI)
    assert out.ok, out.error
    assert "DB_HOST=10.0.0.5" in out.for_llm  # the files really were printed
    assert not _leaks(out.for_llm) and not _leaks(out.for_user or "")


async def test_the_audit_trail_and_the_log_show_no_secret(
    planted: Runtime, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[dict[str, object]] = []
    planted.audit.add_sink(events.append)
    records = []
    planted.registry.add_audit_sink(records.append)
    log = logging.getLogger("edgeclaw.test.corpus")
    for sample in CORPUS:
        # What a careless log line or an event field quoting tool output would carry.
        log.warning("tool output: %s", sample.text)
        planted.audit.emit("test", detail=sample.text)
        try:
            raise RuntimeError(f"failed on {sample.text}")
        except RuntimeError:
            log.exception("while handling %s", sample.name)
        # A call that fails naming its argument: neither its record nor its log line quote it.
        caller = ToolContext(channel="cli", session_key="cli:corpus", caller=f"cli:{sample.name}")
        await planted.registry.execute("read_file", {"path": sample.text}, caller)
    logged = "\n".join(caplog.text.splitlines())
    assert "tool output: " in logged and "RuntimeError: failed on" in logged
    assert not _leaks(logged)
    assert not _leaks(json.dumps(events)) and len(events) == len(CORPUS)
    assert not _leaks(json.dumps([r.as_dict() for r in records])) and len(records) == len(CORPUS)
    assert {r.stage for r in records} <= {"bounds", "tool_error"}  # each call got as far as the tool


def test_the_cli_log_and_answer_show_no_secret(tmp_path: Path) -> None:
    """The real command: `edgeclaw tool call`, its audit line at info on stderr, as the journal gets it."""
    ws = tmp_path / "ws"
    (ws / "corpus").mkdir(parents=True)
    for sample in CORPUS:
        (ws / "corpus" / f"{sample.name}.txt").write_text(sample.text)
    (tmp_path / "edgeclaw.toml").write_text(f'board = "sim"\nworkspace = "{ws}"\n')
    env = {
        "PATH": os.environ["PATH"],
        "EDGECLAW_STATE_DIR": str(tmp_path / "state"),
        "EDGECLAW_CONFIG": str(tmp_path / "edgeclaw.toml"),
    }
    args = json.dumps({"pattern": ".", "path": "corpus", "max_results": 1000})
    proc = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "tool", "call", "search", args, "--json", "--log-level", "info"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert "tool_call tool=search outcome=ok" in proc.stderr
    assert "matches in" in json.loads(proc.stdout)["for_llm"]
    assert not _leaks(proc.stdout) and not _leaks(proc.stderr)
