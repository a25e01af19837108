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
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from shell_helpers import marked_processes

from edgeclaw.sandbox import Limits, Sandbox, SandboxSettings, SandboxUnavailable
from edgeclaw.sandbox.base import SandboxSpec, entries_beside, hidden_entries, split_hidden
from edgeclaw.sandbox.cgroup import SandboxCgroups
from edgeclaw.sandbox.firejail import FirejailBackend
from edgeclaw.sandbox.manager import _PROBE_CACHE, probe
from edgeclaw.sandbox.process import HeadTailBuffer, StreamBuffer
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.runtime.shell import ShellRunner

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
        env_allow=["PATH", "LANG", "TEST_VISIBLE", "OPENAI_API_KEY"],
        environ={
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "TEST_VISIBLE": "visible-value",
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
    assert "TEST_VISIBLE=visible-value" in result.output
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
    if os.geteuid() == 0 and SandboxCgroups.find("auto") is None:
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


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_a_timeout_kills_grandchildren(layout: Layout, backend: str) -> None:
    marker = f"987.{os.getpid() % 1000}{len(str(backend))}"
    # A grandchild in the background, one detached from its parent shell, and the child itself.
    script = f"(sleep {marker}1 &); sleep {marker}2 & sleep {marker}3"
    started = time.monotonic()
    result = await run(make_runner(layout, backend), script, timeout_s=1.5)
    assert result.timed_out and result.exit_code is None
    assert time.monotonic() - started < 30  # at the 1.5 s timeout, not when the ~990 s sleeps end
    await _none_left(marker)
    assert marked_processes(marker) == []


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


def test_hidden_entries_and_how_backends_split_them(tmp_path: Path) -> None:
    state = (tmp_path / "state").resolve()
    ws = state / "workspace"
    ws.mkdir(parents=True)
    (state / "edgeclaw.db").write_text("")
    # The whole state directory is hidden, workspace or not: files created later are covered too.
    assert hidden_entries(state, ws) == [state]
    elsewhere = tmp_path / "ws"
    elsewhere.mkdir()
    assert hidden_entries(state, elsewhere) == [state]
    # The odd layout where the workspace is the state directory: only edgeclaw's own files.
    assert [p.name for p in hidden_entries(state, state)] == ["edgeclaw.db"]
    inside = ws / "key.txt"
    ancestors, others = split_hidden([state / "edgeclaw.db", ws, inside, state, tmp_path / "x"], ws)
    assert ancestors == [state]  # covered, then the workspace made visible inside it
    assert others == [inside, tmp_path / "x"]  # the db is under the state dir; the ws never hidden
    (state / "history").mkdir()
    assert sorted(p.name for p in entries_beside(state, ws)) == ["edgeclaw.db", "history"]


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


# -- escape attempts found in review ------------------------------------------------------
#
# Each runs under the real backends, in two layouts: the tests' usual one under /tmp (which
# firejail and bubblewrap replace wholesale) and the production one, a state directory with the
# workspace inside it on the real root file system (/var/lib/edgeclaw/workspace), where only the
# sandbox's own hiding stands between a command and the database, the key and the config.


def _production_base() -> Path | None:
    for parent in (Path("/var/lib"), Path.home() / ".cache"):
        if parent.is_dir() and os.access(parent, os.W_OK):
            return parent
    return None


@pytest.fixture(params=["under-tmp", "production"])
def any_layout(request: pytest.FixtureRequest, tmp_path: Path):
    if request.param == "under-tmp":
        yield Layout(tmp_path)
        return
    parent = _production_base()
    if parent is None:
        pytest.skip("no writable directory outside /tmp for the production layout")
    base = Path(tempfile.mkdtemp(prefix="edgeclaw-test-", dir=parent))
    try:
        yield Layout(base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_state_files_created_while_a_command_runs_stay_hidden(any_layout: Layout, backend: str) -> None:
    # The key is created on the first custom-tool definition and the WAL file when the database
    # is opened: both may appear while a background command is running.
    layout = any_layout
    (layout.state / "secrets.key").unlink()
    runner = make_runner(layout, backend)

    async def create_later() -> None:
        await asyncio.sleep(0.7)
        (layout.state / "secrets.key").write_text(MARKER + " late key")
        (layout.state / "edgeclaw.db-wal").write_text(MARKER + " late wal")

    writer = asyncio.create_task(create_later())
    result = await run(runner, "sleep 2; ls -a ..; cat ../secrets.key ../edgeclaw.db-wal; true")
    await writer
    assert (layout.state / "secrets.key").exists()  # it was there to be read
    assert MARKER not in result.output, result.output


@pytest.mark.parametrize("backend", BACKENDS)
async def test_proc_does_not_lead_to_the_daemon_or_its_files(any_layout: Layout, backend: str) -> None:
    layout = any_layout
    # A process outside the sandbox standing in for the daemon: same user, a secret in its
    # environment, its working directory in the state directory.
    daemon = await asyncio.create_subprocess_exec(
        "sleep", "30", env={"DAEMON_SECRET": MARKER + "-env", "PATH": "/usr/bin:/bin"}, cwd=layout.state
    )
    try:
        pid = daemon.pid
        state, config = layout.state, layout.config
        script = (
            f"cat /proc/{pid}/environ /proc/{pid}/root{state}/edgeclaw.db /proc/{pid}/cwd/edgeclaw.db; "
            f"for d in /proc/[0-9]*; do cat $d/environ $d/root{state}/secrets.key $d/root{config} "
            f"$d/cwd/../edgeclaw.db; done; "
            f"cat /proc/self/root{state}/edgeclaw.db /proc/1/root{config} /proc/1/cwd/../secrets.key; "
            f"ls /proc/{pid}; true"
        )
        result = await run(make_runner(layout, backend), script)
    finally:
        daemon.kill()
        await daemon.wait()
    assert MARKER not in result.output, result.output


@pytest.mark.parametrize("backend", BACKENDS)
async def test_links_in_the_workspace_do_not_reach_hidden_files(any_layout: Layout, backend: str) -> None:
    layout = any_layout
    ws, state = layout.workspace, layout.state
    # Links made outside (an earlier, unsandboxed command; an admin) and inside the sandbox.
    (ws / "host-link").symlink_to(state / "edgeclaw.db")
    (ws / "config-link").symlink_to(layout.config)
    script = (
        f"ln -s ../secrets.key in-link; ln -s {state}/edgeclaw.db in-link2; "
        f"ln ../edgeclaw.db hard; ln {state}/secrets.key hard2; ln {layout.config} hard3; "
        "cp ../secrets.key copied; "
        "cat host-link config-link in-link in-link2 hard hard2 hard3 copied; true"
    )
    result = await run(make_runner(layout, backend), script)
    assert MARKER not in result.output, result.output
    real = {os.stat(p).st_ino for p in (state / "edgeclaw.db", state / "secrets.key", layout.config)}
    made = [p for p in ws.iterdir() if not p.is_symlink() and p.is_file()]
    assert [p for p in made if p.stat().st_ino in real] == []
    assert all(MARKER not in p.read_text(errors="replace") for p in made)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_mount_tricks_fail(any_layout: Layout, backend: str) -> None:
    layout = any_layout
    ws, state = layout.workspace, layout.state
    (ws / "m").mkdir()
    script = (
        f"mount --bind {state} {ws}/m; cat {ws}/m/edgeclaw.db; "
        f"unshare -m sh -c 'mount --bind {state} {ws}/m && cat {ws}/m/secrets.key'; "
        f"unshare -Urm sh -c 'umount -l {state}; mount -t tmpfs x /tmp && cat {state}/edgeclaw.db'; "
        f"unshare -Urm sh -c 'mount --bind / {ws}/m && cat {ws}/m{state}/edgeclaw.db'; "
        "true"
    )
    result = await run(make_runner(layout, backend), script)
    assert MARKER not in result.output, result.output
    assert list((ws / "m").iterdir()) == []


def _unix_listeners() -> list[socket.socket]:
    """A listening unix socket at a path in /run (visible to firejail) and an abstract one."""
    servers = []
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0edgeclaw-test-{os.getpid()}")
    servers.append(abstract)
    if os.access("/run", os.W_OK):
        path = Path(f"/run/edgeclaw-test-{os.getpid()}.sock")
        path.unlink(missing_ok=True)
        named = socket.socket(socket.AF_UNIX)
        named.bind(str(path))
        servers.append(named)
    for server in servers:
        server.listen(4)
        server.settimeout(0.2)
    return servers


def _close_listeners(servers: list[socket.socket]) -> None:
    for server in servers:
        name = server.getsockname()
        server.close()
        if isinstance(name, str) and name:
            Path(name).unlink(missing_ok=True)


UNIX_CONNECT = """
import socket
for name in {names!r}:
    try:
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(2)
        s.connect(name)
        print("CONNECTED", repr(name))
    except OSError as e:
        print("refused", repr(name), e)
"""


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_unix_sockets_outside_the_sandbox_are_unreachable(layout: Layout, backend: str) -> None:
    # A pathname socket is not bound to a network namespace: --net=none alone does not stop a
    # command from talking to D-Bus, systemd or a broker listening in /run as the daemon's user.
    servers = _unix_listeners()
    names = [s.getsockname() for s in servers]
    names = ["\0" + n[1:].decode() if isinstance(n, bytes) else n for n in names]
    (layout.workspace / "connect.py").write_text(UNIX_CONNECT.format(names=names))
    try:
        result = await run(make_runner(layout, backend), "python3 connect.py")
        reached = [s for s in servers if _connected(s)]
    finally:
        _close_listeners(servers)
    if backend == "none":
        # The control: on the host both are reachable, so the test can see an escape.
        assert len(reached) == len(servers) and "CONNECTED" in result.output
    else:
        assert reached == [] and "CONNECTED" not in result.output, result.output
        # Inside the sandbox a socket pair still works: asyncio needs one.
        inside = await run(
            make_runner(layout, backend),
            "python3 -c 'import asyncio; asyncio.run(asyncio.sleep(0)); print(\"loop ok\")'",
        )
        assert "loop ok" in inside.output, inside.output


DAEMONISE = """
import os, sys
if os.fork():
    sys.exit(0)
os.setsid()
if os.fork():
    os._exit(0)
for fd in (0, 1, 2):
    os.close(fd)
os.execvp("sleep", ["sleep", sys.argv[1]])
"""


@pytest.mark.parametrize("cgroup", ["pids-cgroup", "no-cgroup"])
@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_daemonised_grandchildren_do_not_outlive_the_command(
    layout: Layout, backend: str, cgroup: str
) -> None:
    # setsid, a double fork, nohup and setsid -f: each leaves the process group. The command
    # itself ends at once; nothing it started may live on, and the call must not wait for them.
    if cgroup == "pids-cgroup" and SandboxCgroups.find("auto") is None:
        pytest.skip("no writable pids cgroup here")
    if cgroup == "no-cgroup" and backend == "none":
        pytest.skip("on the host without a cgroup nothing can find a setsid process (documented)")
    marker = f"778.{os.getpid() % 1000}{len(backend)}{len(cgroup)}"
    (layout.workspace / "daemonise.py").write_text(DAEMONISE)
    script = (
        f"setsid sleep {marker}1 >/dev/null 2>&1 & nohup sleep {marker}2 >/dev/null 2>&1 & "
        f"(sleep {marker}3 >/dev/null 2>&1 &); python3 daemonise.py {marker}4; "
        f"setsid -f sleep {marker}5 >/dev/null 2>&1; echo started"
    )
    runner = make_runner(layout, backend)
    if cgroup == "no-cgroup":
        # What an unprivileged daemon gets (no writable cgroup): the PID namespace does the work.
        runner.sandbox = Sandbox(SandboxSettings(backend=backend, pids_cgroup="", required=False))
    started = time.monotonic()
    result, used = await runner.run(script, cwd=runner.workspace.root, network=False, timeout_s=60)
    assert used == backend
    assert "started" in result.output and not result.timed_out, result.output
    # Done when the command is, not at the 60 s timeout or when the escaped sleeps end.
    assert result.exit_code == 0 and time.monotonic() - started < 30
    await _none_left(marker)
    left = marked_processes(marker)
    for pid in left:
        os.kill(pid, 9)
    assert left == []


@pytest.mark.parametrize("backend", [*BACKENDS, "none"])
async def test_the_exit_status_is_the_commands_own(layout: Layout, backend: str) -> None:
    # firejail by default reports the status of whichever process ends last.
    result = await run(make_runner(layout, backend), "(sleep 0.5; exit 0) & exit 3")
    assert result.exit_code == 3, result


async def _none_left(marker: str, within_s: float = 20.0) -> None:
    """Wait (a busy machine reaps slowly) until no process with `marker` is left, or the time is up."""
    deadline = time.monotonic() + within_s
    while marked_processes(marker):
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.05)


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_output_flood_is_cut_and_killed_without_growing_the_daemon(
    layout: Layout, backend: str
) -> None:
    runner = make_runner(layout, backend)
    await run(runner, "true")  # warm up: the probe and its imports are not what is measured
    before = _rss_kib()
    started = time.monotonic()
    result = await run(runner, "yes edgeclaw-flood", timeout_s=60)
    assert result.output_limit_hit and not result.timed_out
    assert time.monotonic() - started < 30  # killed at the output limit, not at the 60 s timeout
    assert result.total_bytes > 8 * 1024 * 1024
    assert len(result.output.encode()) < 17 * 1024 and "output truncated" in result.output
    assert _rss_kib() - before < 16 * 1024


@pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("firejail") or not shutil.which("setpriv"),
    reason="needs root (to act as another user), firejail and setpriv",
)
def test_firejail_works_for_a_system_user_without_a_login_shell(tmp_path: Path) -> None:
    # The shipped sysusers file gives the edgeclaw user /usr/sbin/nologin. firejail 0.9.7x runs
    # a command given after `--` through the login shell, which then runs nothing.
    import pwd

    try:
        user = pwd.getpwnam("daemon")
    except KeyError:
        pytest.skip("no 'daemon' user")
    if not user.pw_shell.endswith(("nologin", "false")):
        pytest.skip("the 'daemon' user has a login shell here")
    if Path("/etc/firejail/firejail.users").exists():
        pytest.skip("firejail.users restricts who may use firejail")
    ws = Path(tempfile.mkdtemp(prefix="edgeclaw-nologin-", dir="/tmp"))
    try:
        os.chown(ws, user.pw_uid, user.pw_gid)
        spec = SandboxSpec(workspace=ws, cwd=ws)
        argv = FirejailBackend().wrap(["/bin/sh", "-c", "echo ran-as-$(id -un)"], spec)
        done = subprocess.run(
            ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups", *argv],
            cwd=ws,
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": "/usr/bin:/bin"},
        )
    finally:
        shutil.rmtree(ws, ignore_errors=True)
    assert "ran-as-daemon" in done.stdout, done.stdout + done.stderr


def test_the_environment_never_carries_daemon_channels_or_secrets(layout: Layout) -> None:
    runner = make_runner(layout, "none")
    runner.env_allow = (
        "PATH",
        "NOTIFY_SOCKET",
        "WATCHDOG_USEC",
        "LISTEN_FDS",
        "EDGECLAW_STATE_DIR",
        "EDGECLAW_CONFIG",
        "BROKER_URL",
        "SHORT",
    )
    runner.environ.update(
        NOTIFY_SOCKET="@/org/freedesktop/systemd1/notify",
        WATCHDOG_USEC="30000000",
        LISTEN_FDS="1",
        EDGECLAW_STATE_DIR=str(layout.state),
        EDGECLAW_CONFIG=str(layout.config),
        BROKER_URL=f"mqtt://edgeclaw:{SECRET}-mqtt@127.0.0.1:1883",  # a secret inside a value
        SHORT="ok",
    )
    env = runner.env()
    assert set(env) == {"PATH", "SHORT", "LANG", "HOME"}, env
    assert env["SHORT"] == "ok" and env["HOME"] == str(layout.workspace)


# -- a program's own installation, wherever it lies ---------------------------------------------------
INSTALLED = (
    '#!/bin/sh\ncat "$(dirname "$0")/../share/word"\n'
    'echo x > "$(dirname "$0")/../share/word" || echo read-only\n'
)


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_installation_under_tmp_is_readable_only_when_kept_visible(
    any_layout: Layout, backend: str
) -> None:
    """A program installed under /tmp (a virtualenv of a checkout there) runs in the sandbox when its
    installation is kept visible, read-only; otherwise /tmp is the sandbox's own, empty."""
    inst = Path(tempfile.mkdtemp(prefix="edgeclaw-inst-", dir="/tmp"))
    try:
        (inst / "bin").mkdir()
        (inst / "share").mkdir()
        (inst / "share" / "word").write_text("installed-word\n")
        prog = inst / "bin" / "prog"
        prog.write_text(INSTALLED)
        prog.chmod(0o755)
        sandbox = Sandbox(SandboxSettings(backend=backend))
        ws = any_layout.workspace

        async def run_prog(keep: list[Path]) -> str:
            launch = await sandbox.launch(
                [str(prog)], workspace=ws, cwd=ws, env={"PATH": "/usr/bin:/bin"}, network=False,
                timeout_s=20, keep_visible=keep,
            )  # fmt: skip
            proc = await asyncio.create_subprocess_exec(
                *launch.full_argv(),
                env=launch.env,
                cwd=launch.cwd,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                pass_fds=launch.pass_fds,  # what bubblewrap binds the installation from
            )
            for fd in launch.pass_fds:
                os.close(fd)
            out, _ = await proc.communicate()
            if launch.cgroup is not None:
                launch.cgroup.remove()
            return out.decode(errors="replace")

        shown = await run_prog([inst])
        assert "installed-word" in shown and "read-only" in shown, shown
        assert (inst / "share" / "word").read_text() == "installed-word\n"
        assert "installed-word" not in await run_prog([])
    finally:
        shutil.rmtree(inst, ignore_errors=True)
