"""Every reader of a workspace file against a concurrent symlink swap.

A separate process flips a name in the workspace, as fast as it can, between
a harmless regular file and a symlink to a secret (the daemon's own
`/proc/self/environ`, an API key file outside the workspace), or flips a
directory on the path for a symlink to the outside, or swaps in an image
bigger than the flash area. Meanwhile the reader runs hundreds of times.
The secret must never show up in what it returns (or flashes, or sends to a
provider), and the target's flash must never be written past its end.
Each test also insists that the swap was seen (some reads refused), so it
cannot pass by never racing.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeclaw.agent.prompt import PromptBuilder
from edgeclaw.backends.qemu import qemu_available
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.fs.files import ReadFileTool, SearchTool
from edgeclaw.tools.fs.workspace import Workspace
from tests.hw_support import call, make_runtime, ok, write_profile
from tests.llm_server import ScriptedLLM, openai_text

CTX = ToolContext()
KEY_SECRET = "sk-ant-api03-RACED-SECRET-0123456789abcdef"
GOOD = "just some harmless guidance\n"
RUNS = 300
MIN_SECONDS = 2.0
MAX_SECONDS = 30.0

# The flipper: replaces NAME (atomically, by rename) with each state in turn until killed.
# file:HEX = a regular file holding those bytes; link:TARGET = a symlink; dir-away:OUTSIDE = the
# directory NAME moved aside and a symlink to OUTSIDE put in its place; dir-back = moved back.
FLIPPER = r"""
import os, sys
name, states = sys.argv[1], sys.argv[2:]
tmp = name + ".flip"
while True:
    for state in states:
        kind, _, value = state.partition(":")
        if kind == "dir-away":
            os.rename(name, tmp)
            os.symlink(value, name)
            continue
        if kind == "dir-back":
            os.unlink(name)
            os.rename(tmp, name)
            continue
        if kind == "file":
            with open(tmp, "wb") as f:
                f.write(bytes.fromhex(value))
        else:
            os.symlink(value, tmp)
        os.replace(tmp, name)
"""


def _environ_secret() -> str:
    """A distinctive entry of this process's /proc/self/environ: what a raced read would leak."""
    entries = [e for e in Path("/proc/self/environ").read_bytes().split(b"\0") if len(e) >= 16]
    assert entries, "this process has no environment to protect"
    return max(entries, key=len)[:64].decode("utf-8", "replace")


@contextlib.contextmanager
def flipping(name: Path, *states: str) -> Iterator[None]:
    proc = subprocess.Popen([sys.executable, "-c", FLIPPER, str(name), *states])
    try:
        time.sleep(0.2)  # let it get going
        assert proc.poll() is None, "the flipper died"
        yield
        assert proc.poll() is None, "the flipper died during the test"
    finally:
        proc.kill()
        proc.wait()


def _file(data: bytes) -> str:
    return "file:" + data.hex()


def _racing(runs: int = RUNS, seen: dict[str, int] | None = None) -> Iterator[int]:
    """Iterations: at least `runs`, for at least MIN_SECONDS, and (on a busy machine, where the
    flipper may not be scheduled for a while) until every outcome in `seen` happened, up to MAX_SECONDS."""
    started = time.monotonic()
    i = 0
    while True:
        elapsed = time.monotonic() - started
        enough = i >= runs and elapsed >= MIN_SECONDS
        if enough and (seen is None or all(seen.values()) or elapsed >= MAX_SECONDS):
            return
        yield i
        i += 1


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Workspace, Path]:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "api_key").write_text(KEY_SECRET + "\n")
    (outside / "SOUL.md").write_text(KEY_SECRET + "\n")
    return Workspace(root), outside


# -- the fs tools -------------------------------------------------------------------------------------


@pytest.mark.parametrize("secret_target", ["environ", "key_file"])
async def test_read_file_never_returns_what_a_swapped_symlink_points_to(layout, secret_target) -> None:
    ws, outside = layout
    target = "/proc/self/environ" if secret_target == "environ" else str(outside / "api_key")
    secret = _environ_secret() if secret_target == "environ" else KEY_SECRET
    name = ws.root / "notes.md"
    name.write_text(GOOD)
    tool = ReadFileTool(ws)
    seen = {"good": 0, "refused": 0}
    with flipping(name, _file(GOOD.encode()), f"link:{target}"):
        for _ in _racing(seen=seen):
            try:
                await tool.check({"path": "notes.md"}, CTX)
                out = (await tool.execute({"path": "notes.md"}, CTX)).for_llm
            except (ToolError, ToolRefused) as e:
                assert secret not in str(e)
                seen["refused"] += 1
                continue
            assert secret not in out
            assert GOOD.strip() in out
            seen["good"] += 1
    assert seen["good"] and seen["refused"], seen


async def test_read_file_never_follows_a_directory_swapped_for_a_symlink(layout) -> None:
    ws, outside = layout
    (ws.root / "docs").mkdir()
    (ws.root / "docs" / "api_key").write_text(GOOD)
    tool = ReadFileTool(ws)
    seen = {"good": 0, "refused": 0}
    with flipping(ws.root / "docs", f"dir-away:{outside}", "dir-back"):
        for _ in _racing(seen=seen):
            try:
                await tool.check({"path": "docs/api_key"}, CTX)
                out = (await tool.execute({"path": "docs/api_key"}, CTX)).for_llm
            except (ToolError, ToolRefused) as e:
                assert KEY_SECRET not in str(e)
                seen["refused"] += 1
                continue
            assert KEY_SECRET not in out
            seen["good"] += 1
    assert seen["good"] and seen["refused"], seen


async def test_search_never_matches_inside_a_swapped_symlink(layout) -> None:
    ws, outside = layout
    name = ws.root / "notes.md"
    name.write_text(GOOD)
    tool = SearchTool(ws)
    with flipping(name, _file(GOOD.encode()), f"link:{outside / 'api_key'}"):
        for _ in _racing():
            for path in ("notes.md", "."):  # the file named, and found by a walk
                try:
                    out = (await tool.execute({"pattern": "sk-ant", "path": path}, CTX)).for_llm
                except (ToolError, ToolRefused) as e:
                    assert KEY_SECRET not in str(e)
                    continue
                assert KEY_SECRET not in out and "no matches" in out


# -- the system prompt --------------------------------------------------------------------------------


@pytest.mark.parametrize("secret_target", ["environ", "key_file"])
def test_the_system_prompt_never_takes_a_swapped_context_file(layout, secret_target) -> None:
    ws, outside = layout
    target = "/proc/self/environ" if secret_target == "environ" else str(outside / "api_key")
    secret = _environ_secret() if secret_target == "environ" else KEY_SECRET
    soul = ws.root / "SOUL.md"
    soul.write_text(GOOD)
    builder = PromptBuilder(ws.root, {})
    seen = {"with": 0, "without": 0}
    with flipping(soul, _file(GOOD.encode()), f"link:{target}"):
        for _ in _racing(seen=seen):
            prompt = builder.build()
            assert secret not in prompt
            seen["with" if "## SOUL.md" in prompt else "without"] += 1
    assert seen["with"] and seen["without"], seen


async def test_provider_requests_never_carry_a_secret_through_soul_md(tmp_path) -> None:
    from edgeclaw.agent.channel import InboundMessage
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.agent import build_agent
    from edgeclaw.daemon.runtime import build_runtime

    key_file = tmp_path / "llm.key"
    key_file.write_text(KEY_SECRET + "\n")
    with ScriptedLLM() as llm:
        config = config_from_dict(
            {
                "board": "sim",
                "state_dir": str(tmp_path / "state"),
                "agent": {"providers": ["local"]},
                "providers": {
                    "local": {
                        "kind": "openai",
                        "model": "m",
                        "base_url": llm.url + "/v1",
                        "api_key_file": str(key_file),
                    }
                },
            },
            "test.toml",
        )
        runtime = build_runtime(config, environ={})
        try:
            agent = build_agent(runtime)
            soul = runtime.local.root / "SOUL.md"
            soul.write_text(GOOD)
            # Turns go on (on a busy machine the flipper may sit in one state for a while) until
            # SOUL.md was both taken and left out, so the test cannot pass by never racing.
            seen = {"taken": 0, "left out": 0}
            with flipping(soul, _file(GOOD.encode()), f"link:{key_file}", "link:/proc/self/environ"):
                for i in _racing(runs=120, seen=seen):
                    llm.reply(openai_text("ok"))
                    message = InboundMessage(channel="cli", text="hi", chat_id=f"c{i}", peer_kind="local")
                    assert (await agent.handle(message)).ok
                    seen["taken" if "## SOUL.md" in str(llm.requests[-1]) else "left out"] += 1
        finally:
            await runtime.aclose()
        bodies = [str(r) for r in llm.requests]
    assert len(bodies) == sum(seen.values())
    environ_secret = _environ_secret()
    assert not [b for b in bodies if KEY_SECRET in b or environ_secret in b]
    assert all(seen.values()), seen  # the swap raced the turns both ways


# -- flashing -----------------------------------------------------------------------------------------

needs_qemu = pytest.mark.skipif(not qemu_available(), reason="qemu-system-arm is not installed")
FLASH_BASE = 0x0800_0000
FLASH_SIZE = 0x1000  # the profile's flash area: smaller than the chip's, so "past the end" is testable
SMALL_FLASH = (
    '[probe]\ntransport = "gdb"\ntarget = "qemu"\ngdb_address = "qemu"\nreset_command = "system_reset"\n'
    f"control = true\nflash = true\nflash_base = {FLASH_BASE:#x}\nflash_size = {FLASH_SIZE:#x}\n"
    'regions = [{ name = "flash", base = 0x0800_0000, size = 0x2_0000, access = "ro" }]\n'
)


@needs_qemu
async def test_flash_never_writes_a_swapped_secret_or_past_the_flash_area(tmp_path) -> None:
    key_file = tmp_path / "api_key"
    key_file.write_text(KEY_SECRET + "\n")
    runtime = make_runtime(tmp_path, board=write_profile(tmp_path, "small-flash", SMALL_FLASH))
    try:
        image = bytes((i * 13 + 1) & 0xFF for i in range(256))
        oversized = b"\xaa" * (FLASH_SIZE + 256)  # fits the chip, not the profile's flash area
        (runtime.workspace / "app.bin").write_bytes(image)
        beyond = await ok(runtime, "probe", action="read_memory", address=FLASH_BASE + FLASH_SIZE, length=256)
        probe = runtime.registry.get("probe").backends.probe()
        flashed: list[bytes] = []
        real_program = probe.program

        async def recording_program(segments, progress):
            flashed.extend(bytes(segment.data) for segment in segments)
            return await real_program(segments, progress)

        probe.program = recording_program
        states = [
            _file(image),
            f"link:{key_file}",
            _file(image),
            "link:/proc/self/environ",
            _file(image),
            _file(oversized),
        ]
        seen = {"flashed": 0, "refused": 0}
        with flipping(runtime.workspace / "app.bin", *states):
            for _ in _racing(200, seen):
                outcome = await call(runtime, "probe", action="flash", path="app.bin")
                if not outcome.ok:
                    assert KEY_SECRET not in (outcome.error or "")
                seen["flashed" if outcome.ok else "refused"] += 1
        secret = _environ_secret().encode()
        assert flashed and seen["refused"], seen
        assert all(len(data) <= FLASH_SIZE for data in flashed)
        assert all(KEY_SECRET.encode() not in data and secret not in data for data in flashed)
        assert all(data == image for data in flashed)
        after = await ok(runtime, "probe", action="read_memory", address=FLASH_BASE + FLASH_SIZE, length=256)
        assert after["data"] == beyond["data"], "the flash was written past the end of the flash area"
        back = await ok(runtime, "probe", action="read_memory", address=FLASH_BASE, length=len(image))
        assert bytes.fromhex(back["data"]) == image
    finally:
        await runtime.aclose()


async def test_an_image_bigger_than_the_flash_area_is_refused_on_what_is_read(tmp_path) -> None:
    # No race needed: the size that counts is the one of the open descriptor, not a stat beforehand.
    runtime = make_runtime(tmp_path, board=write_profile(tmp_path, "small-flash", SMALL_FLASH))
    try:
        (runtime.workspace / "big.bin").write_bytes(b"\xaa" * (FLASH_SIZE + 1))
        outcome = await call(runtime, "probe", action="flash", path="big.bin")
        assert outcome.refused and "does not fit the flash area" in outcome.error
        (runtime.workspace / "link.bin").symlink_to(tmp_path / "small-flash.toml")
        outcome = await call(runtime, "probe", action="flash", path="link.bin")
        assert outcome.refused and "outside the workspace" in outcome.error
        os.link(tmp_path / "small-flash.toml", runtime.workspace / "hard.bin")
        outcome = await call(runtime, "probe", action="flash", path="hard.bin")
        assert outcome.refused and "hard links" in outcome.error
    finally:
        await runtime.aclose()


def test_the_race_helpers_run_a_real_second_process(tmp_path) -> None:
    name = tmp_path / "x"
    name.write_text("a")
    kinds = set()
    with flipping(name, _file(b"a"), f"link:{tmp_path}"):
        deadline = time.monotonic() + 2
        while len(kinds) < 2 and time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                kinds.add(name.is_symlink())
    assert kinds == {True, False}
