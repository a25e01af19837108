"""What of the host a sandboxed command sees: an allowlist, not the host minus a few paths.

Real commands under the real backends, as whoever runs pytest (root in CI) and, through the last
test, again as the unprivileged service user. Root-only host files (`/var/log/btmp`, debconf's
passwords, apt's terminal log, `/etc/shadow`), `/root`, the rest of `/var` and a top-level directory
nobody listed must be out of reach; ordinary commands must still work. The `none` backend is the
control: there the planted files are readable, so the test can see a leak when there is one.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from shell_helpers import SERVICE_USER, pytest_as_service_user
from test_sandbox import BACKENDS

from edgeclaw.sandbox import Sandbox, SandboxSettings
from edgeclaw.sandbox.process import ChildProcess

WORD = "edgeclaw-view-" + secrets.token_hex(4)
ROOT_ONLY_FILES = (
    "/var/log/btmp",
    "/var/cache/debconf/passwords.dat",
    "/var/log/apt/term.log",
    "/etc/shadow",
)


async def sandboxed(backend: str, workspace: Path, command: str) -> tuple[int | None, str]:
    """`sh -c command` in the sandbox: (exit status, stdout and stderr)."""
    sandbox = Sandbox(SandboxSettings(backend=backend))
    launch = await sandbox.launch(
        ["/bin/sh", "-c", command],
        workspace=workspace,
        cwd=workspace,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": str(workspace), "LANG": "C.UTF-8"},
        network=False,
        timeout_s=30,
    )
    child = await ChildProcess.start(launch)
    result = await child.run_to_end(30, 64 * 1024, 64 * 1024)
    return result.exit_code, result.output


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "state" / "workspace"
    ws.mkdir(parents=True)
    return ws


@pytest.fixture
def planted() -> Iterator[Path]:
    """A world-readable file where any user may put one (/var/tmp): readable on the host by whoever
    runs the test, so its absence inside is the allowlist at work, not file permissions."""
    where = Path(tempfile.mkdtemp(prefix="edgeclaw-view-", dir="/var/tmp"))
    where.chmod(0o755)
    (where / "note").write_text(WORD + "\n")
    (where / "note").chmod(0o644)
    yield where / "note"
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def unlisted_top() -> Iterator[Path]:
    """A top-level directory no list names (as a board's /data or /snap would be): root only."""
    if os.geteuid() != 0:
        pytest.skip("making a directory in / needs root")
    top = Path("/edgeclaw-view-" + secrets.token_hex(4))
    top.mkdir(mode=0o755)
    (top / "note").write_text(WORD + "\n")
    (top / "note").chmod(0o644)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _reads(path: str) -> str:
    """A shell line that prints READ when `cat` of `path` succeeds (even for an empty file)."""
    return f"cat {path} > /dev/null && echo READ"


def _lists(path: str) -> str:
    """A shell line that prints LISTED when `ls` of `path` succeeds and shows anything."""
    return f"ls -A {path} > .listing && test -s .listing && echo LISTED"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    "command",
    [
        *(_reads(p) for p in ROOT_ONLY_FILES),
        *(_lists(p) for p in ("/var/cache/debconf", "/var/log", "/var", "/root", "/home", "/srv")),
        *(_lists(p) for p in ("/opt", "/mnt", "/media", "/boot", "/sys", "/run/systemd")),
    ],
)
async def test_host_files_outside_the_allowlist_are_out_of_reach(
    workspace: Path, backend: str, command: str
) -> None:
    _, output = await sandboxed(backend, workspace, command)
    assert "READ" not in output.split() and "LISTED" not in output.split(), (
        f"{command!r} under {backend}:\n{output}"
    )


def _read_and_list(note: Path) -> str:
    return f"cat {note}; ls -A {note.parent} | grep -qx {note.name} && echo LISTED"


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_a_world_readable_file_under_var_is_out_of_reach(
    workspace: Path, backend: str, planted: Path
) -> None:
    _, output = await sandboxed(backend, workspace, _read_and_list(planted))
    if backend == "none":
        # The control: on the host it is there for anyone.
        assert WORD in output, output
        return
    assert WORD not in output and "LISTED" not in output, output


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_a_top_level_directory_nobody_listed_is_out_of_reach(
    workspace: Path, backend: str, unlisted_top: Path
) -> None:
    _, output = await sandboxed(backend, workspace, _read_and_list(unlisted_top / "note"))
    if backend == "none":
        assert WORD in output, output
        return
    assert WORD not in output and "LISTED" not in output, output


@pytest.mark.parametrize("backend", BACKENDS)
async def test_ordinary_commands_still_work(workspace: Path, backend: str) -> None:
    script = (
        "set -e; echo data > f.txt; ls; python3 -c 'import sys; print(sys.version_info[0])'; "
        "sh -c 'echo nested-shell'; grep -c data f.txt; date +%Y >/dev/null && echo date-ok; id -u; "
        "ls /usr/bin >/dev/null && echo usr-ok; cat /etc/passwd >/dev/null && echo passwd-ok; echo all-done"
    )
    exit_code, output = await sandboxed(backend, workspace, script)
    assert exit_code == 0, output
    for word in ("f.txt", "3", "nested-shell", "date-ok", "usr-ok", "passwd-ok", "all-done"):
        assert word in output.split(), (word, output)
    assert (workspace / "f.txt").read_text() == "data\n"
    assert re.search(rf"^{os.getuid()}$", output, re.M), output


def test_the_view_is_the_same_for_the_unprivileged_service_user() -> None:
    """This file again, as the service user the daemon runs as in production."""
    status, output = pytest_as_service_user(["-rs", "tests/test_sandbox_view.py"], "edgeclaw-svc-view-")
    assert status == 0, f"as {SERVICE_USER}:\n{output}"
    summary = output.strip().splitlines()[-1]
    passed = int(m.group(1)) if (m := re.search(r"(\d+) passed", summary)) else 0
    # Every backend's case ran as that user (only the root-only directory in / is skipped).
    assert passed >= 2 * 16 + 3 + 2, summary


def test_firejail_keeps_a_symlinked_resolv_conf_target_only_with_the_network(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With systemd-resolved, /etc/resolv.conf points into /run: that one file's way stays visible
    when the network is granted; the rest of /run is hidden either way."""
    import edgeclaw.sandbox.firejail as firejail
    from edgeclaw.sandbox.base import SandboxSpec

    stub = Path("/run/systemd/resolve/stub-resolv.conf")
    monkeypatch.setattr(firejail, "_resolver", lambda spec: [stub] if spec.network else [])
    monkeypatch.setattr(
        firejail,
        "_entries",
        lambda d: [d / n for n in (("systemd", "dbus", "firejail") if d == Path("/run") else ())],
    )
    monkeypatch.setattr(
        firejail, "entries_beside", lambda a, p: [Path("/run/dbus"), Path("/run/systemd/users")]
    )
    ws = tmp_path / "ws"
    offline = firejail._host_view(SandboxSpec(workspace=ws, cwd=ws, network=False))
    online = firejail._host_view(SandboxSpec(workspace=ws, cwd=ws, network=True))
    assert "--blacklist=/run/systemd" in offline and "--blacklist=/run/dbus" in offline
    assert "--blacklist=/run/systemd" not in online and "--blacklist=/run/systemd/users" in online
    assert "--blacklist=/run/dbus" in online and not any("/run/firejail" in a for a in offline + online)
