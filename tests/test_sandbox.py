"""The sandbox backends, really applied: escapes that must fail under firejail and bubblewrap.

Each confinement test runs a real command under the real backend and checks
from the outside (a listener the test owns, files on the host, /proc) that
the escape did not happen. The `none` backend is the control: the same
escape works there, which shows the test can see it happen.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import time
from pathlib import Path

import pytest

from edgeclaw.sandbox import Limits, Sandbox, SandboxSettings, SandboxUnavailable
from edgeclaw.sandbox.base import hidden_entries
from edgeclaw.sandbox.cgroup import PidsCgroups
from edgeclaw.sandbox.manager import _PROBE_CACHE, probe
from edgeclaw.sandbox.process import HeadTailBuffer, StreamBuffer
from edgeclaw.tools.shell import ShellRunner
from edgeclaw.tools.workspace import Workspace

BACKENDS = [
    pytest.param(
        "firejail",
        marks=pytest.mark.skipif(not shutil.which("firejail"), reason="firejail is not installed"),
    ),
    pytest.param(
        "bubblewrap",
        marks=pytest.mark.skipif(not shutil.which("bwrap"), reason="bubblewrap is not installed"),
    ),
]
SECRET = "sk-test-0123456789abcdefSECRET"
MARKER = "edgeclaw-private-marker-7f3a"


class Layout:
    def __init__(self, tmp_path: Path) -> None:
        self.state = tmp_path / "state"
        self.workspace = self.state / "workspace"
        self.workspace.mkdir(parents=True)
        (self.state / "edgeclaw.db").write_text(MARKER + " database")
        (self.state / "secrets.key").write_text(MARKER + " key")
        self.config = tmp_path / "edgeclaw.toml"
        self.config.write_text(f'# {MARKER} config\nboard = "sim"\n')
        self.outside = tmp_path / "outside"
        self.outside.mkdir()


def _exists(path: Path | str) -> bool:
    return os.path.lexists(path)


def make_runner(layout: Layout, backend: str, **limits: int) -> ShellRunner:
    sandbox = Sandbox(SandboxSettings(backend=backend, limits=Limits(**limits)))
    return ShellRunner(
        sandbox=sandbox,
        workspace=Workspace(layout.workspace),
        state_dir=layout.state,
        env_allow=["PATH", "LANG", "EDGECLAW_TEST_VISIBLE", "OPENAI_API_KEY"],
        environ={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "EDGECLAW_TEST_VISIBLE": "visible-value",
            # Allowlisted by mistake, but its value is a secret: it must still not pass.
            "OPENAI_API_KEY": SECRET,
            "MQTT_PASSWORD": SECRET + "-mqtt",
        },
        secret_values=[SECRET, SECRET + "-mqtt"],
        secret_env_names=["MQTT_PASSWORD"],
        hidden=[layout.config],
        host_timeout_s=30,
        sandbox_timeout_s=30,
        max_output_bytes=16 * 1024,
    )


async def run(runner: ShellRunner, command: str, timeout_s: float = 20.0, network: bool = False):
    result, _backend = await runner.run(
        command, cwd=runner.workspace.root, network=network, timeout_s=timeout_s
    )
    return result


@pytest.fixture
def layout(tmp_path: Path) -> Layout:
    return Layout(tmp_path)


@pytest.fixture
def listener():
    """A TCP listener on loopback that records whether anyone connected."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    yield server
    server.close()


def _connected(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except (TimeoutError, BlockingIOError):
        return False
    conn.close()
    return True


CONNECT = (
    "python3 -c \"import socket,sys; s=socket.create_connection(('127.0.0.1', {port}), 3); "
    "print('CONNECTED')\""
)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_network_is_unreachable(layout: Layout, listener: socket.socket, backend: str) -> None:
    port = listener.getsockname()[1]
    result = await run(make_runner(layout, backend), CONNECT.format(port=port))
    assert "CONNECTED" not in result.output and result.exit_code != 0, result.output
    assert not _connected(listener)


async def test_the_listener_is_reachable_without_a_sandbox(layout: Layout, listener: socket.socket) -> None:
    # The control for the test above: the same command on the host does connect.
    port = listener.getsockname()[1]
    result = await run(make_runner(layout, "none"), CONNECT.format(port=port))
    assert "CONNECTED" in result.output
    assert _connected(listener)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_network_when_granted(layout: Layout, listener: socket.socket, backend: str) -> None:
    port = listener.getsockname()[1]
    result = await run(make_runner(layout, backend), CONNECT.format(port=port), network=True)
    assert "CONNECTED" in result.output, result.output


@pytest.mark.parametrize("backend", BACKENDS)
async def test_only_the_workspace_is_writable(layout: Layout, backend: str) -> None:
    runner = make_runner(layout, backend)
    script = (
        f"echo inside > {layout.workspace}/inside.txt; "
        f"echo nope > {layout.outside}/escaped.txt; "
        "echo nope > /usr/local/edgeclaw-escaped; "
        "echo nope > /var/tmp/edgeclaw-escaped; "
        f"echo nope > {layout.state}/planted; "
        "true"
    )
    result = await run(runner, script)
    assert (layout.workspace / "inside.txt").read_text() == "inside\n"
    escaped = [
        layout.outside / "escaped.txt",
        "/usr/local/edgeclaw-escaped",
        "/var/tmp/edgeclaw-escaped",
        layout.state / "planted",
    ]
    assert [p for p in escaped if _exists(p)] == []
    assert result.exit_code == 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_shadow_config_and_state_are_unreadable(layout: Layout, backend: str) -> None:
    runner = make_runner(layout, backend)
    result = await run(
        runner,
        f"cat /etc/shadow; cat {layout.config}; cat {layout.state}/edgeclaw.db; "
        f"cat {layout.state}/secrets.key; ls -la {layout.state}; true",
    )
    assert MARKER not in result.output
    assert "root:" not in result.output  # the first line of any /etc/shadow
    # Reading /etc/shadow does not just come back empty: it is not there at all.
    alone = await run(runner, "cat /etc/shadow")
    assert alone.exit_code != 0 and "No such file" in alone.output
    # The workspace inside the state directory is still there and usable.
    (layout.workspace / "note.txt").write_text("hello")
    assert "hello" in (await run(runner, "cat note.txt")).output


@pytest.mark.parametrize("backend", BACKENDS)
async def test_secrets_are_not_in_the_childs_environment(layout: Layout, backend: str) -> None:
    result = await run(
        make_runner(layout, backend),
        "for f in /proc/[0-9]*/environ; do tr '\\0' '\\n' < $f; done 2>/dev/null; echo HOME=$HOME",
    )
    assert SECRET not in result.output
    assert "MQTT_PASSWORD" not in result.output and "OPENAI_API_KEY" not in result.output
    assert "EDGECLAW_TEST_VISIBLE=visible-value" in result.output
    assert f"HOME={layout.workspace}" in result.output


FORKS = """
import os, time
ok = fail = 0
for _ in range(120):
    try:
        pid = os.fork()
    except OSError:
        fail += 1
        continue
    if pid == 0:
        time.sleep(2)
        os._exit(0)
    ok += 1
print(f"started={ok} failed={fail}", flush=True)
"""


@pytest.mark.parametrize("backend", BACKENDS)
async def test_a_fork_bomb_is_contained(layout: Layout, backend: str) -> None:
    # A bounded loop (120 children that each exit after 2 s), never a real bomb.
    if os.geteuid() == 0 and PidsCgroups.find("auto") is None:
        pytest.skip("root without a writable pids cgroup: the launch is refused instead (tested below)")
    (layout.workspace / "forks.py").write_text(FORKS)
    result = await run(make_runner(layout, backend, max_processes=16), "python3 forks.py")
    started = int(result.output.split("started=")[1].split()[0])
    failed = int(result.output.split("failed=")[1].split()[0])
    assert started <= 20 and failed >= 100, result.output
    assert result.fork_failures > 0 or os.geteuid() != 0


async def test_root_without_a_pids_cgroup_is_refused(layout: Layout) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root is exempt from RLIMIT_NPROC")
    sandbox = Sandbox(SandboxSettings(backend="firejail" if shutil.which("firejail") else "bubblewrap"))
    sandbox.settings = SandboxSettings(backend=sandbox.settings.backend, pids_cgroup="")
    with pytest.raises(SandboxUnavailable, match="pids cgroup"):
        ws = layout.workspace
        await sandbox.launch(["/bin/true"], workspace=ws, cwd=ws, env={}, network=False, timeout_s=5)


def _marked(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline and b"sh\x00-c" not in cmdline:
            found.append(int(entry))
    return found


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_a_timeout_kills_grandchildren(layout: Layout, backend: str) -> None:
    marker = f"987.{os.getpid() % 1000}{len(str(backend))}"
    # A grandchild in the background, one detached from its parent shell, and the child itself.
    script = f"(sleep {marker}1 &); sleep {marker}2 & sleep {marker}3"
    started = time.monotonic()
    result = await run(make_runner(layout, backend), script, timeout_s=1.5)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 10
    for _ in range(40):
        if not _marked(marker):
            break
        await asyncio.sleep(0.05)
    assert _marked(marker) == []


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_output_is_capped_and_the_cut_is_stated(layout: Layout, backend: str) -> None:
    result = await run(make_runner(layout, backend), "head -c 200000 /dev/zero | tr '\\0' x; echo; echo END")
    # firejail's own noise lines (filtered from the text) count in the total.
    assert result.total_bytes >= 200005
    assert "output truncated" in result.output and f"of {result.total_bytes} bytes not shown" in result.output
    assert result.output.rstrip().endswith("END")  # the tail is kept too
    assert len(result.output.encode()) < 17 * 1024


async def test_required_with_no_working_backend_refuses(tmp_path: Path) -> None:
    missing = SandboxSettings(
        backend="auto",
        firejail_path=str(tmp_path / "no-firejail"),
        bubblewrap_path=str(tmp_path / "no-bwrap"),
    )
    with pytest.raises(SandboxUnavailable) as err:
        await Sandbox(missing).backend()
    assert "firejail" in str(err.value) and "bubblewrap" in str(err.value)
    assert "sandbox.required = false" in str(err.value)
    # With required = false the host is used, and it says so by name.
    relaxed = SandboxSettings(**{**missing.__dict__, "required": False})
    backend = await Sandbox(relaxed).backend()
    assert backend.name == "none" and not backend.confines


async def test_a_backend_that_fails_its_smoke_test_is_not_used(tmp_path: Path) -> None:
    fake = tmp_path / "fake-firejail"
    fake.write_text("#!/bin/sh\necho 'Error clone: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    settings = SandboxSettings(backend="firejail", firejail_path=str(fake))
    with pytest.raises(SandboxUnavailable, match="Operation not permitted"):
        await Sandbox(settings).backend()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_the_probe_runs_once(backend: str) -> None:
    sandbox = Sandbox(SandboxSettings(backend=backend))
    chosen = await sandbox.backend()
    key = (chosen.name, chosen.locate(), os.geteuid())
    assert _PROBE_CACHE[key] is None
    _PROBE_CACHE[key] = "cached verdict"  # a second probe would not look at the cache if it ran again
    try:
        assert await probe(chosen, Limits()) == "cached verdict"
    finally:
        _PROBE_CACHE[key] = None


def test_hidden_entries_keep_the_workspace(tmp_path: Path) -> None:
    state = tmp_path / "state"
    (state / "workspace").mkdir(parents=True)
    (state / "edgeclaw.db").write_text("")
    (state / "history").mkdir()
    assert sorted(p.name for p in hidden_entries(state, state / "workspace")) == ["edgeclaw.db", "history"]
    elsewhere = tmp_path / "ws"
    elsewhere.mkdir()
    assert hidden_entries(state, elsewhere) == [state.resolve()]


def test_buffers_keep_head_tail_and_count_losses() -> None:
    buf = HeadTailBuffer(100)
    for _ in range(50):
        buf.feed(b"0123456789")
    text = buf.text()
    assert text.startswith("0123456789" * 7) and "400 of 500 bytes not shown" in text
    stream = StreamBuffer(10)
    stream.feed(b"abcdefghijklmno")
    data, lost = stream.read_new(100)
    assert (data, lost) == (b"fghijklmno", 5)
    assert stream.read_new(100) == (b"", 0)
