"""A symlink swapped in between the check and the use: the read must never leave what it was allowed.

A thread flips a path between a real directory (or file) and a symlink to a secret outside, as
fast as it can, while the code under test checks and uses the path again and again. The secret
must never show up. The paths: a program's own installation made visible in the sandbox (what an
MCP stdio server's script directory is), a custom tool's working directory, and the files of a
memory import.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_sandbox import BACKENDS

from edgeclaw.sandbox import Sandbox, SandboxSettings
from edgeclaw.sandbox.process import ChildProcess

SECRET = "edgeclaw-race-secret-5d1e"
PUBLIC = "edgeclaw-race-public"
ROUNDS = 40


@contextlib.contextmanager
def flipping(path: Path, real: Path, target: Path, hold_s: float = 0.002) -> Iterator[list[int]]:
    """Swap `path` between `real` (renamed into place) and a symlink to `target`, in a loop, each
    state held about `hold_s` (so that both are met, and the swaps in between)."""
    stop = threading.Event()
    flips = [0]
    link = path.with_name(path.name + ".link")
    parked = path.with_name(path.name + ".real")

    def run() -> None:
        while not stop.is_set():
            with contextlib.suppress(OSError):
                os.symlink(target, link)
            with contextlib.suppress(OSError):
                os.rename(path, parked)  # the real one out of the way
                os.rename(link, path)  # the symlink in
            stop.wait(hold_s)
            with contextlib.suppress(OSError):
                os.rename(path, link)
                os.rename(parked, path)  # the real one back
            flips[0] += 1
            stop.wait(hold_s)

    os.rename(real, path) if real != path else None
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield flips
    finally:
        stop.set()
        thread.join(5)


def rounds(flips: list[int], least_flips: int = 10, within_s: float = 60.0) -> Iterator[int]:
    """ROUNDS rounds, and more while the swap has not yet run `least_flips` times: on a loaded
    machine the flipping thread may get few turns while the rounds are quick refusals."""
    deadline = time.monotonic() + within_s
    n = 0
    while n < ROUNDS or (flips[0] <= least_flips and time.monotonic() < deadline):
        yield n
        n += 1


@pytest.fixture
def secret_dir() -> Iterator[Path]:
    """A directory outside everything the code under test may read, holding the secret: in the same
    top-level directory as the installation, where firejail would follow a symlink."""
    where = Path(tempfile.mkdtemp(prefix="edgeclaw-race-secret-", dir="/tmp"))
    where.chmod(0o755)
    (where / "word").write_text(SECRET + "\n")
    (where / "word").chmod(0o644)
    yield where
    shutil.rmtree(where, ignore_errors=True)


async def _run(sandbox: Sandbox, ws: Path, command: str, keep: list[Path]) -> str:
    launch = await sandbox.launch(
        ["/bin/sh", "-c", command], workspace=ws, cwd=ws, env={"PATH": "/usr/bin:/bin"}, network=False,
        timeout_s=20, keep_visible=keep,
    )  # fmt: skip
    child = await ChildProcess.start(launch)
    result = await child.run_to_end(20, 16 * 1024, 16 * 1024)
    return result.output


@pytest.fixture
def installation() -> Iterator[Path]:
    """A program's installation outside the workspace (an MCP server's script directory), in a
    directory another user owns: that user could swap it (the test does it for them)."""
    parent = Path(tempfile.mkdtemp(prefix="edgeclaw-race-inst-", dir="/tmp"))
    parent.chmod(0o755)
    if os.geteuid() == 0:
        os.chown(parent, 65534, 65534)
    (parent / "server").mkdir()
    (parent / "server" / "word").write_text(PUBLIC + "\n")
    yield parent / "server"
    shutil.rmtree(parent, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_visible_installation_swapped_for_a_symlink_never_shows_its_target(
    tmp_path: Path, secret_dir: Path, installation: Path, backend: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    sandbox = Sandbox(SandboxSettings(backend=backend))
    seen: list[str] = []
    with flipping(installation, installation, secret_dir) as flips:
        for _ in rounds(flips):
            seen.append(await _run(sandbox, ws, f"cat {installation}/word", [installation]))
    assert flips[0] > 10, "the swap did not run"
    assert not [s for s in seen if SECRET in s], [s for s in seen if SECRET in s][:3]
    if backend == "bubblewrap":
        # Bound from a descriptor: the real installation is shown whenever it was in place.
        assert any(PUBLIC in s for s in seen), seen[:3]
    elif os.geteuid() == 0:
        # firejail looks paths up by name: one another user could swap is not shown at all.
        assert not any(PUBLIC in s for s in seen), seen[:3]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_symlink_already_in_place_of_a_visible_path_shows_nothing(
    tmp_path: Path, secret_dir: Path, installation: Path, backend: str
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    link = installation.with_name("linked")
    link.symlink_to(secret_dir)
    out = await _run(Sandbox(SandboxSettings(backend=backend)), ws, f"cat {link}/word", [link])
    assert SECRET not in out, out


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_custom_tools_working_directory_swapped_for_a_symlink_never_leaves_the_workspace(
    tmp_path: Path, secret_dir: Path, backend: str
) -> None:
    from shell_helpers import ctx, make_runtime

    tool = {"name": "peek", "command": "cat word", "cwd": "sub", "parameters": {"type": "object"}}
    runtime = make_runtime(tmp_path, sandbox={"backend": backend}, tools={"custom": [tool]})
    try:
        sub = runtime.workspace / "sub"
        sub.mkdir()
        (sub / "word").write_text(PUBLIC + "\n")
        outputs: list[str] = []
        with flipping(sub, sub, secret_dir) as flips:
            for _ in rounds(flips):
                out = await runtime.registry.execute("peek", {}, ctx())
                outputs.append(f"{out.for_llm} {out.error or ''}")
        assert flips[0] > 10
        assert not [o for o in outputs if SECRET in o], [o for o in outputs if SECRET in o][:3]
        assert any(PUBLIC in o for o in outputs), outputs[:3]
    finally:
        await runtime.aclose()


def test_a_memory_import_with_files_swapped_for_symlinks_never_reads_outside(
    tmp_path: Path, secret_dir: Path
) -> None:
    # Reads through the workspace walk (each component opened with O_NOFOLLOW from the one above).
    from edgeclaw.cli.memory_files import export_memory, import_memory
    from edgeclaw.store.context_files import ContextFileStore
    from edgeclaw.store.db import Database
    from edgeclaw.store.memory import GLOBAL, MemoryStore

    db = Database(tmp_path / "a.db")
    memory, contexts = MemoryStore(db), ContextFileStore(db)
    memory.put("memory/note.md", "ordinary note " + PUBLIC, scope=GLOBAL)
    export = tmp_path / "export"
    export_memory(memory, contexts, export)
    [doc] = list((export / "memory").rglob("note.md"))
    folder = doc.parent
    reports = []
    # Both the file and the directory holding it are swapped.
    with flipping(doc, doc, secret_dir / "word") as flips, flipping(folder.parent, folder.parent, secret_dir):
        for _ in range(10 * ROUNDS):
            reports.append(import_memory(memory, contexts, export))
    assert flips[0] > 10
    for report in reports:
        assert SECRET not in " ".join(report.problems), report.problems
    assert SECRET not in memory.document("memory/note.md", GLOBAL).content
    assert any(not r.problems for r in reports) or all(r.problems for r in reports)
