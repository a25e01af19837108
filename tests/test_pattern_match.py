"""Pattern matching bounded by a deadline, with the compiled `regex` package and without it (`re` in a
child interpreter, the path on 32-bit ARM where PyPI has no `regex` wheel)."""

from __future__ import annotations

import asyncio
import os
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from edgeclaw.errors import ToolError
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.fs import globs, pattern_match
from edgeclaw.tools.fs.files import GlobTool, SearchTool
from edgeclaw.tools.fs.pattern_match import Deadline, Matcher, MatchTimeout, PatternError
from edgeclaw.tools.fs.workspace import Workspace

pytestmark = pytest.mark.arm_smoke
CTX = ToolContext()
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(params=["regex", "re-worker"])
def engine(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    if request.param == "re-worker":
        monkeypatch.setitem(sys.modules, "regex", None)  # as on a board where it is not installed
    elif pattern_match.engine_name() != "regex":
        pytest.skip("the regex package is not installed here")
    assert pattern_match.engine_name() == request.param
    return request.param


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "main.py").write_text("import os\nPRINT = 1\nprint('Hello')\n")
    (root / "src" / "deep" / "util.py").write_text("def hello():\n    return 'hello'\n")
    (root / "notes.txt").write_text("hello world\n")
    return Workspace(root)


def _children() -> set[int]:
    """Process ids whose parent is this process."""
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if stat.rsplit(")", 1)[1].split()[1] == me:
                found.add(int(entry))
    return found


async def test_search_finds_the_same_lines_with_either_engine(ws: Workspace, engine: str) -> None:
    out = (await SearchTool(ws).execute({"pattern": r"^print\(", "path": "src"}, CTX)).for_llm
    assert "src/main.py:3: print('Hello')" in out
    out = (
        await SearchTool(ws).execute({"pattern": "hello", "ignore_case": True, "glob": "*.py"}, CTX)
    ).for_llm
    assert "src/main.py:3:" in out and "src/deep/util.py:1:" in out and "src/deep/util.py:2:" in out
    assert "notes.txt" not in out


async def test_glob_finds_the_same_paths_with_either_engine(ws: Workspace, engine: str) -> None:
    out = (await GlobTool(ws).execute({"pattern": "**/*.py"}, CTX)).for_llm
    assert out.splitlines() == ["src/deep/util.py", "src/main.py"]


async def test_a_bad_pattern_is_refused_naming_it_with_either_engine(ws: Workspace, engine: str) -> None:
    with pytest.raises(ToolError, match=r"invalid regular expression '\(unclosed'"):
        await SearchTool(ws).execute({"pattern": "(unclosed"}, CTX)


async def test_a_pathological_pattern_is_stopped_and_the_loop_keeps_running(
    ws: Workspace, engine: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    (ws.root / "minified.js").write_text("a" * 5000 + "!\n")
    monkeypatch.setattr(globs, "MATCH_BUDGET_S", 1.0)
    before = _children()
    ticks = 0

    async def heartbeat() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.02)
            ticks += 1

    loop = asyncio.get_running_loop()
    beat = asyncio.create_task(heartbeat())
    started = loop.time()
    with pytest.raises(ToolError, match=r"took longer than 1 s"):
        await SearchTool(ws).execute({"pattern": r"(a|aa)+$", "path": "minified.js"}, CTX)
    elapsed = loop.time() - started
    beat.cancel()
    assert elapsed < 30  # the budget ended it: the match itself would run for ages
    assert ticks >= elapsed / 0.02 / 4  # the event loop ran while the pattern was being matched
    assert _children() <= before  # no matching child left running


def test_the_child_engine_answers_again_after_a_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "regex", None)
    with Matcher() as matcher:
        slow = matcher.compile(r"(a|aa)+$")
        word = matcher.compile(r"\bcafé\b", ignore_case=True)
        with pytest.raises(MatchTimeout):
            slow.select(["a" * 5000 + "!"], Deadline(0.5))
        # Subjects as a walk yields them: any text, an undecodable file name (surrogate escapes) too.
        subjects = ["x", "un CAFÉ noir", "caf\udcc3\udca9", "café"]
        assert word.select(subjects, Deadline(30)) == [1, 3]
        assert word.matches("CAFÉ", Deadline(30), full=True)


async def test_a_matching_child_that_dies_is_a_clear_error(
    ws: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "regex", None)
    dying = tmp_path / "dying_worker.py"
    dying.write_text("import sys\nsys.exit(3)\n")
    monkeypatch.setattr(pattern_match, "WORKER_SCRIPT", dying)
    with pytest.raises(ToolError, match=r"pattern matching failed: .*exited with status 3"):
        await SearchTool(ws).execute({"pattern": "hello"}, CTX)


def test_a_bad_pattern_names_the_reason_without_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "regex", None)
    before = _children()
    with Matcher() as matcher, pytest.raises(PatternError, match="missing \\), unterminated subpattern"):
        matcher.compile("(a")
    assert _children() <= before


@pytest.mark.parametrize(
    ("machine", "gets_regex"),
    [("x86_64", True), ("aarch64", True), ("armv7l", False), ("armv6l", False), ("armv8l", False)],
)
def test_the_core_needs_no_compiler_on_32_bit_arm(machine: str, gets_regex: bool) -> None:
    # PyPI has wheels of `regex` for x86_64 and aarch64 but none for 32-bit ARM, where pip would
    # build it from source: the dependency is only declared where a wheel exists.
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    environment = {"platform_machine": machine, "sys_platform": "linux", "python_version": "3.11"}
    wanted = {
        Requirement(r).name
        for r in project["dependencies"]
        if Requirement(r).marker is None or Requirement(r).marker.evaluate(environment)
    }
    assert ("regex" in wanted) is gets_regex
    assert {"httpx", "aiomqtt", "paho-mqtt", "cronsim"} <= wanted
