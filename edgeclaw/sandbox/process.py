"""Starting, watching and killing a sandboxed command.

Every command starts in a new session (so it leads its own process group)
and, where available, in its own cgroup. Killing it kills the whole group and
everything in the cgroup, grandchildren included, and the child is always
waited for, so nothing is left running and nothing is left a zombie. Output
(stdout and stderr interleaved, as a terminal shows them) is read
continuously so the child never blocks on a full pipe; only a bounded amount
is kept, and what was cut is stated.

Commands die with the daemon: the first process gets a parent-death signal
(`setpriv --pdeathsig`, util-linux) before anything else runs, and stays as
the sandbox's parent, a small shell that kills the sandbox and its process
group when the signal comes (the sandbox's own processes die with it: its
PID namespace ends). It stays because the kernel clears the signal when a
setuid program such as firejail is executed by an unprivileged user. What
escapes both (a detached process on the host, a system without setpriv) is
ended by the next start, through the cgroups (`cgroup.end_leftovers`).

While a command runs, a watch kills it when the workspace's file system falls
under the reserve kept for the daemon, or (cgroup v1, which has no
`memory.oom.group`) when the OOM killer has taken one of its processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import shutil
import signal
import subprocess
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass
from edgeclaw.sandbox.cgroup import CommandCgroup

log = logging.getLogger("edgeclaw.sandbox")

READ_CHUNK = 64 * 1024
MIB = 1024 * 1024
# The first shell of a command. $0 is the daemon's pid, or "-": setpriv gave this process its
# parent-death signal before the shell started, so if the daemon died before that, no signal
# will ever come, and $PPID (the parent when the shell started) says so; the shell then stops.
# It writes its own pid into each of the command's cgroup.procs files ($1 says how many
# follow), so that no Python runs between fork and exec and the command is inside from its
# first instruction.
_PREAMBLE = (
    '[ "$0" = - ] || [ "$PPID" = "$0" ] || exit 137; '
    'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; shift; n=$((n - 1)); done; '
)
_THEN_EXEC = _PREAMBLE + 'exec "$@"'
# With a parent-death signal the shell stays, as the sandbox's parent: the kernel clears that
# signal when a setuid program (firejail) is executed by an unprivileged user, bubblewrap sets
# its own only once it has made its namespaces, and on the host a command's children never get
# it. So setpriv gives this shell SIGUSR1, and the shell SIGKILLs the sandbox and its whole
# process group when it comes. It starts the sandbox as its child (stdin handed on explicitly: a
# background command's stdin is otherwise /dev/null) and waits for it. SIGTERM, SIGINT and SIGHUP
# reach the sandbox directly (same process group); the shell ignores them, so it is still there
# to report the status, ending by the same signal as the sandbox when a signal ended it. `$!` in
# the trap is empty until the sandbox is started, and traps run between commands.
_THEN_GUARD = _PREAMBLE + (
    "trap 'kill -KILL $! 2>/dev/null; kill -KILL 0' USR1; "
    'exec 3<&0; "$@" <&3 3<&- & '
    "trap '' TERM INT HUP; "
    "exec 3<&- </dev/null >/dev/null 2>&1; "
    "wait $!; s=$?; "
    '[ "$s" -gt 128 ] && [ "$s" -lt 160 ] && { trap - TERM INT HUP USR1; kill -$((s - 128)) $$; }; '
    'exit "$s"'
)
CGROUP_JOIN_FAILED = 125
# After a kill, how long to wait for the output pipe to close before giving up on it.
_POST_KILL_DRAIN_S = 2.0
# The disk watch looks again in the time the headroom above the reserve would last at this
# rate, which is faster than a board can write even into its page cache; between these bounds.
_DISK_FILL_BYTES_PER_S = 8 * 1024 * MIB
_DISK_WATCH_MIN_S = 0.005
_DISK_WATCH_MAX_S = 1.0
# cgroup v1 kills one process at the memory limit; how soon the rest of the command follows.
_OOM_WATCH_S = 0.1


@functools.cache
def parent_death_launcher() -> str | None:
    """`setpriv` when it can set a parent-death signal (util-linux 2.33 and later), else None."""
    path = shutil.which("setpriv")
    if path is None:
        log.warning("setpriv (util-linux) not found: sandboxed commands will not die with the daemon")
        return None
    try:
        done = subprocess.run(
            [path, "--pdeathsig", "KILL", "/bin/true"], capture_output=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        done = None
    if done is None or done.returncode != 0:
        log.warning("%s cannot set a parent-death signal: commands will not die with the daemon", path)
        return None
    return path


@dataclass(frozen=True)
class WorkspaceSpaceFloor:
    """The free space a command must leave on the workspace's file system (sandbox.disk_reserve_mb), so
    the daemon's own state can still be written. Not `store.reserve.DiskReserve`, the file that holds
    space back for the database."""

    path: Path
    reserve_bytes: int

    def free_bytes(self) -> int | None:
        try:
            st = os.statvfs(self.path)
        except OSError:
            return None
        return st.f_bavail * st.f_frsize

    def note(self) -> str:
        return (
            f"the workspace's file system fell under {self.reserve_bytes // MIB} MiB free, the reserve "
            "kept for the daemon's own state (sandbox.disk_reserve_mb)"
        )


@dataclass
class Launch:
    """Everything needed to start one command: the wrapped argv and its surroundings."""

    argv: list[str]
    env: dict[str, str]
    cwd: Path
    backend: str
    cgroup: CommandCgroup | None = None
    noise_lines: frozenset[str] = frozenset()
    # setpriv, to give the first process a parent-death signal; None: commands outlive the daemon.
    parent_death: str | None = None
    space_floor: WorkspaceSpaceFloor | None = None
    memory_bound_bytes: int = 0  # what all sandboxed commands together may use (0: not bounded)
    command_memory_bytes: int = 0  # what this command may use, by its own cgroup (0: no bound of its own)
    # Descriptors the command inherits (what the backend binds from them); closed here once started.
    pass_fds: tuple[int, ...] = ()

    def full_argv(self) -> list[str]:
        procs = [str(p) for p in self.cgroup.procs_files] if self.cgroup is not None else []
        if self.parent_death is None and not procs:
            return list(self.argv)
        if self.parent_death is None:
            return ["/bin/sh", "-c", _THEN_EXEC, "-", str(len(procs)), *procs, *self.argv]
        core = ["/bin/sh", "-c", _THEN_GUARD, str(os.getpid()), str(len(procs)), *procs, *self.argv]
        return [self.parent_death, "--pdeathsig", "USR1", *core]

    def memory_note(self) -> str:
        together = (
            f"all sandboxed commands together may use {self.memory_bound_bytes // MIB} MiB "
            "(sandbox.max_total_memory_mb)"
        )
        if self.command_memory_bytes <= 0:
            return f"out of memory: {together}"
        return f"out of memory: this program may use {self.command_memory_bytes // MIB} MiB, {together}"


@dataclass
class RunResult:
    """How a command ended, and its (capped) output."""

    exit_code: int | None  # None when killed by us
    output: str
    total_bytes: int
    timed_out: bool = False
    output_limit_hit: bool = False
    fork_failures: int = 0
    duration_s: float = 0.0
    signal: int | None = None  # the signal that ended it, when one did
    # Why it was killed, when a limit of the sandbox as a whole did it (memory, disk reserve).
    limit_hit: str | None = None


class HeadTailBuffer:
    """Keeps the first and the last part of a stream, and counts what was dropped in between."""

    def __init__(self, max_bytes: int) -> None:
        self.head_max = max(0, max_bytes * 3 // 4)
        self.tail_max = max(0, max_bytes - self.head_max)
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_len = 0
        self.total = 0

    def feed(self, data: bytes) -> None:
        self.total += len(data)
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if not data or self.tail_max == 0:
            return
        self.tail.append(data)
        self.tail_len += len(data)
        while self.tail_len - len(self.tail[0]) >= self.tail_max:
            self.tail_len -= len(self.tail.popleft())

    def text(self, noise: frozenset[str] = frozenset()) -> str:
        tail = b"".join(self.tail)[-self.tail_max :] if self.tail_max else b""
        dropped = self.total - len(self.head) - len(tail)
        head_text = _clean(self.head.decode("utf-8", "replace"), noise)
        if dropped <= 0:
            return head_text + _clean(tail.decode("utf-8", "replace"), noise)
        note = f"\n[... output truncated: {dropped} of {self.total} bytes not shown ...]\n"
        return head_text + note + _clean(tail.decode("utf-8", "replace"), noise)


def _clean(text: str, noise: frozenset[str]) -> str:
    if not noise or not text:
        return text
    return "".join(line for line in text.splitlines(keepends=True) if line.rstrip("\r\n") not in noise)


class ChildProcess:
    """A started command. Use `start`, then `run_to_end` or the background methods; always `close`."""

    def __init__(self, launch: Launch, proc: asyncio.subprocess.Process) -> None:
        self.launch = launch
        self.proc = proc
        self.started = time.monotonic()
        self.killed_by_us = False
        # Set when a limit of the sandbox as a whole ended the command: what it was, in words.
        self.limit_hit: str | None = None
        self._watch: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        launch: Launch,
        *,
        stdin: bool = False,
        separate_stderr: bool = False,
        read_limit: int = READ_CHUNK,
    ) -> ChildProcess:
        """Start the command. `separate_stderr`: stderr on its own pipe (a program speaking a
        protocol on stdout, such as an MCP server, logs there); `read_limit`: the longest line
        `proc.stdout.readline()` accepts."""
        try:
            proc = await asyncio.create_subprocess_exec(
                *launch.full_argv(),
                stdin=asyncio.subprocess.PIPE if stdin else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE if separate_stderr else asyncio.subprocess.STDOUT,
                cwd=str(launch.cwd),
                env=dict(launch.env),
                start_new_session=True,
                close_fds=True,
                pass_fds=launch.pass_fds,
                limit=read_limit,
            )
        except OSError as e:
            if launch.cgroup is not None:
                launch.cgroup.remove()
            raise BackendError(f"cannot start the command ({launch.backend}): {e.strerror or e}") from None
        finally:
            for fd in launch.pass_fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
        child = cls(launch, proc)
        cgroup = launch.cgroup
        v1_memory = cgroup is not None and cgroup.memory_dir is not None and not cgroup.v2
        if launch.space_floor is not None or v1_memory:
            child._watch = asyncio.create_task(child._watch_limits(), name=f"limits of command {proc.pid}")
        return child

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.returncode is None

    def signal_group(self, sig: int) -> None:
        """Signal the whole process group (the child leads its own session)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the process group and everything in the cgroup."""
        if self.running:
            # Only a kill that ends the command counts: `close` after a normal exit kills what is
            # left of the group, and the command must still read as having exited by itself.
            self.killed_by_us = True
        self.signal_group(signal.SIGKILL)
        if self.launch.cgroup is not None:
            self.launch.cgroup.kill()

    async def terminate(self, grace_s: float = 2.0) -> None:
        """SIGTERM, `grace_s` to go, then SIGKILL; waits for the child either way."""
        if self.running:
            self.killed_by_us = True
            self.signal_group(signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self.proc.wait()
        await self.close()

    async def close(self) -> None:
        """Kill whatever is left of the command, reap the child, remove its cgroup."""
        self.kill()
        with contextlib.suppress(ProcessLookupError):
            await self.proc.wait()
        # Members of the group may outlive the direct child for a moment (they were killed,
        # not reaped by us); kill the group again now that the leader is gone.
        self.signal_group(signal.SIGKILL)
        if self._watch is not None:
            self._watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watch
            self._watch = None
        self.note_limits()
        if self.launch.cgroup is not None:
            await asyncio.to_thread(self.launch.cgroup.remove)

    def note_limits(self) -> None:
        """Whether the OOM killer took part of the command (v2 kills all of it by itself)."""
        cgroup = self.launch.cgroup
        if self.limit_hit is None and cgroup is not None and cgroup.oom_kills() > 0:
            self.limit_hit = self.launch.memory_note()

    def _limit_breach(self) -> tuple[str | None, float]:
        """A limit of the sandbox as a whole that the command has crossed, and when to look again."""
        delay = _DISK_WATCH_MAX_S
        reserve = self.launch.space_floor
        if reserve is not None:
            free = reserve.free_bytes()
            if free is not None:
                headroom = free - reserve.reserve_bytes
                if headroom < 0:
                    return reserve.note(), 0.0
                delay = min(max(headroom / _DISK_FILL_BYTES_PER_S, _DISK_WATCH_MIN_S), _DISK_WATCH_MAX_S)
        cgroup = self.launch.cgroup
        if cgroup is not None and cgroup.memory_dir is not None and not cgroup.v2:
            if cgroup.oom_kills() > 0:
                return self.launch.memory_note(), 0.0
            delay = min(delay, _OOM_WATCH_S)
        return None, delay

    async def _watch_limits(self) -> None:
        while self.running:
            reason, delay = self._limit_breach()
            if reason is not None:
                log.warning("command %d killed: %s", self.proc.pid, reason)
                self.limit_hit = reason
                self.kill()
                return
            await asyncio.sleep(delay)

    def fork_failures(self) -> int:
        return self.launch.cgroup.fork_failures() if self.launch.cgroup is not None else 0

    async def run_to_end(self, timeout_s: float, max_output_bytes: int, drain_limit: int) -> RunResult:
        """Wait for the command, keeping at most `max_output_bytes` of output.

        Output beyond `drain_limit` bytes kills the command: a runaway
        `yes` should not burn the CPU until the timeout.
        """
        buffer = HeadTailBuffer(max_output_bytes)
        timed_out = over_limit = False
        assert self.proc.stdout is not None
        stdout = self.proc.stdout

        async def pump() -> None:
            nonlocal over_limit
            while chunk := await stdout.read(READ_CHUNK):
                buffer.feed(chunk)
                if buffer.total > drain_limit and not over_limit:
                    over_limit = True
                    self.kill()

        reader = asyncio.create_task(pump())
        try:
            try:
                async with asyncio.timeout(timeout_s):
                    await asyncio.shield(reader)
                    await self.proc.wait()
            except TimeoutError:
                timed_out = True
                self.kill()
            if not reader.done():
                # Killed: the pipe closes once every holder is dead. A process that escaped
                # both the group and the cgroup could hold it open; do not wait for it forever.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(_POST_KILL_DRAIN_S):
                        await asyncio.shield(reader)
        finally:
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await reader
            failures = self.fork_failures()
            await self.close()
        text = buffer.text(self.launch.noise_lines)
        if self.limit_hit is not None:
            text += ("" if not text or text.endswith("\n") else "\n") + f"[killed: {self.limit_hit}]\n"
        code = self.proc.returncode
        sig = -code if code is not None and code < 0 else None
        if (
            self.launch.cgroup is not None
            and code == CGROUP_JOIN_FAILED
            and buffer.total < 200
            and b"cgroup" in bytes(buffer.head)
        ):
            raise BackendError("the command could not be placed in its pids cgroup")
        return RunResult(
            exit_code=None if (timed_out or over_limit) else code,
            output=text,
            total_bytes=buffer.total,
            timed_out=timed_out,
            output_limit_hit=over_limit,
            fork_failures=failures,
            duration_s=time.monotonic() - self.started,
            signal=sig,
            limit_hit=self.limit_hit,
        )


@dataclass
class StreamBuffer:
    """Background output: the last `max_bytes` kept, read incrementally by a cursor."""

    max_bytes: int
    data: bytearray = field(default_factory=bytearray)
    start: int = 0  # stream offset of data[0]
    cursor: int = 0  # stream offset the next poll reads from

    @property
    def total(self) -> int:
        return self.start + len(self.data)

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        extra = len(self.data) - self.max_bytes
        if extra > 0:
            del self.data[:extra]
            self.start += extra

    def read_new(self, limit: int) -> tuple[bytes, int]:
        """Bytes since the last read (at most `limit`), and how many were lost to the buffer bound."""
        lost = max(0, self.start - self.cursor)
        begin = max(self.cursor, self.start)
        chunk = bytes(self.data[begin - self.start : begin - self.start + limit])
        self.cursor = begin + len(chunk)
        return chunk, lost


def child_env(allow: list[str] | tuple[str, ...], base: Mapping[str, str], home: Path) -> dict[str, str]:
    """The child's environment, built from an allowlist, never from the daemon's whole environment."""
    env = {name: base[name] for name in allow if name in base}
    env.setdefault("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = str(home)
    return env
