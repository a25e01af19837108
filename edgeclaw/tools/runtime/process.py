"""`process`: background commands. Start one, list them, poll new output, write to stdin, kill.

A started command goes through exactly the same checks, approval and
sandbox as `exec`, but keeps running; its output is read continuously into a
bounded buffer that `poll` reads from where the last poll stopped (saying how
much was dropped if the buffer overflowed).

A background process belongs to the caller that started it
(`ToolContext.identity`: the signing key, declared sender, console port or
CLI user as the channel knows it), not to the session name, which a caller
chooses freely: another caller can neither list, poll, write to nor kill it,
and is told only that it has no process of that id (whether the id exists is
not said). Each caller may run `tools.exec.max_processes_per_caller` at once
and the whole device `tools.exec.max_processes_total`, however many session
names are used. A finished process stays pollable for a while
(`FINISHED_KEEP_S`, a few per caller), then its record is dropped, so the
table never grows with the names callers invent.

A command whose program would run what is written to its stdin (an
interactive shell or REPL, `xargs`, `sed`'s `e` command ...) is refused:
lines written with `action=write` pass no command check, so they must never
reach something that runs them (see `stdin_runner`).

A process is killed when it outlives `tools.exec.process_timeout_s`, when its
caller ends the session it was started in (`/new`, `end_session`) and when
the daemon shuts down; killing takes the whole process group and cgroup, so
nothing is orphaned.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.sandbox.process import READ_CHUNK, ChildProcess, StreamBuffer
from edgeclaw.tools.base import Args, PendingApproval, Tool, ToolContext, ToolResult
from edgeclaw.tools.runtime.command_roles import stdin_runner

if TYPE_CHECKING:
    from edgeclaw.tools.runtime.shell import ShellTools

POLL_MAX_BYTES = 16 * 1024
# How fast a background command's output is read. Past this the pipe fills and the command waits
# for us: a `yes` left running for an hour must not keep the daemon's event loop busy copying
# bytes nobody will read (the buffer keeps only the last few KiB anyway).
READ_BYTES_PER_S = 256 * 1024
# A finished process stays pollable this long, and at most this many per caller and in all: then
# its record (and output buffer) is dropped.
FINISHED_KEEP_S = 600.0
MAX_FINISHED_PER_CALLER = 8
MAX_FINISHED_TOTAL = 32
STDIN_MAX_BYTES = 64 * 1024


@dataclass
class BackgroundProcess:
    """A command the process tool started in the background, with its owner."""

    id: str
    owner: str  # the identity of the caller that started it (ToolContext.identity)
    session_key: str  # the session it was started in: ending that session (by its owner) kills it
    command: str
    backend: str
    child: ChildProcess
    buffer: StreamBuffer
    started_at: float = field(default_factory=time.monotonic)
    ended_at: float | None = None  # time.monotonic() when it ended
    timed_out: bool = False
    pump: asyncio.Task[None] | None = None
    watchdog: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.ended_at is None

    def status(self) -> str:
        if self.running:
            return f"running for {time.monotonic() - self.started_at:.0f} s"
        code = self.child.proc.returncode
        if self.timed_out:
            return "killed: it outlived its timeout"
        if self.child.killed_by_us:
            return "killed"
        if code is not None and code < 0:
            return f"ended by signal {-code}"
        return f"exited with status {code}"

    def describe(self) -> str:
        return f"{self.id}  {self.status()}  [{self.backend}]  {self.command[:80]}"


class ProcessManager:
    """Every background process of the runtime, each owned by the caller identity that started it."""

    def __init__(
        self,
        *,
        max_per_caller: int = 4,
        max_total: int = 8,
        timeout_s: float = 3600.0,
        buffer_bytes: int = 65536,
        finished_keep_s: float = FINISHED_KEEP_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_per_caller = max_per_caller
        self.max_total = max_total
        self.timeout_s = timeout_s
        self.buffer_bytes = buffer_bytes
        self.finished_keep_s = finished_keep_s
        self._clock = clock
        self._procs: dict[str, BackgroundProcess] = {}
        # Starts between the room check and the process being in the table (approval is asked
        # before; launching takes a moment): counted as running, so concurrent starts cannot
        # overshoot a cap. Entries are removed at zero.
        self._starting: Counter[str] = Counter()

    # -- room ---------------------------------------------------------------
    def running_count(self, owner: str | None = None) -> int:
        """Running (and starting) processes of `owner`, or of everyone when None."""
        running = sum(1 for p in self._procs.values() if p.running and (owner is None or p.owner == owner))
        return running + (self._starting[owner] if owner is not None else sum(self._starting.values()))

    def check_room(self, owner: str) -> None:
        if self.running_count(owner) >= self.max_per_caller:
            raise ToolRefused(
                f"you already run {self.max_per_caller} background processes "
                "(tools.exec.max_processes_per_caller); kill one first"
            )
        if self.running_count() >= self.max_total:
            raise ToolRefused(
                f"the device already runs {self.max_total} background processes "
                "(tools.exec.max_processes_total); try again when one has ended"
            )

    @contextlib.asynccontextmanager
    async def reserve(self, owner: str) -> AsyncIterator[None]:
        """Hold a slot for `owner` while a process is launched; refused (ToolRefused) when none is free."""
        self.check_room(owner)
        self._starting[owner] += 1
        try:
            yield
        finally:
            self._starting[owner] -= 1
            if self._starting[owner] <= 0:
                del self._starting[owner]

    # -- the table ----------------------------------------------------------
    async def start(
        self, owner: str, session_key: str, command: str, child: ChildProcess, timeout_s: float
    ) -> BackgroundProcess:
        proc = BackgroundProcess(
            id=self._new_id(),
            owner=owner,
            session_key=session_key,
            command=command,
            backend=child.launch.backend,
            child=child,
            buffer=StreamBuffer(self.buffer_bytes),
            started_at=self._clock(),
        )
        self._procs[proc.id] = proc
        proc.pump = asyncio.create_task(self._pump(proc), name=f"process {proc.id} output")
        proc.watchdog = asyncio.create_task(self._watch(proc, timeout_s), name=f"process {proc.id} timeout")
        self.prune()
        return proc

    def _new_id(self) -> str:
        # Random, not a counter: an id says nothing about how many processes others started, and
        # cannot be guessed (not that a guessed id would help: ownership is checked on every use).
        while True:
            import secrets  # on first use, not at start

            proc_id = "p" + secrets.token_hex(4)
            if proc_id not in self._procs:
                return proc_id

    async def _pump(self, proc: BackgroundProcess) -> None:
        stdout = proc.child.proc.stdout
        assert stdout is not None
        with contextlib.suppress(ConnectionError):
            while chunk := await stdout.read(READ_CHUNK):
                proc.buffer.feed(chunk)
                await asyncio.sleep(len(chunk) / READ_BYTES_PER_S)
        await proc.child.proc.wait()
        proc.ended_at = self._clock()
        # The leader is gone; make sure nothing it started lives on, and drop its cgroup.
        await proc.child.close()

    async def _watch(self, proc: BackgroundProcess, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)
        if proc.running:
            proc.timed_out = True
            proc.child.kill()

    def prune(self) -> None:
        """Drop finished processes' records: past `finished_keep_s`, then the oldest beyond the counts."""
        now = self._clock()
        finished = sorted(
            (p for p in self._procs.values() if p.ended_at is not None), key=lambda p: p.ended_at or 0.0
        )
        keep: list[BackgroundProcess] = []
        per_owner: Counter[str] = Counter()
        for p in reversed(finished):  # newest first
            assert p.ended_at is not None
            if now - p.ended_at > self.finished_keep_s:
                continue
            if per_owner[p.owner] >= MAX_FINISHED_PER_CALLER or len(keep) >= MAX_FINISHED_TOTAL:
                continue
            per_owner[p.owner] += 1
            keep.append(p)
        kept = {p.id for p in keep}
        for p in finished:
            if p.id not in kept:
                self._procs.pop(p.id, None)

    def __len__(self) -> int:
        return len(self._procs)

    def get(self, owner: str, proc_id: str) -> BackgroundProcess:
        self.prune()
        proc = self._procs.get(proc_id)
        if proc is None or proc.owner != owner:
            # The same answer for an id that does not exist and one another caller owns: which ids
            # exist is nobody else's business.
            raise ToolError(
                f"you have no background process {proc_id!r} (a process is visible only to the "
                f"caller that started it; you are {owner})"
            )
        return proc

    def list(self, owner: str) -> list[BackgroundProcess]:
        self.prune()
        return [p for p in self._procs.values() if p.owner == owner]

    def poll(self, owner: str, proc_id: str, limit: int = POLL_MAX_BYTES) -> tuple[str, BackgroundProcess]:
        proc = self.get(owner, proc_id)
        data, lost = proc.buffer.read_new(limit)
        text = data.decode("utf-8", "replace")
        if proc.child.launch.noise_lines:
            text = "".join(
                line
                for line in text.splitlines(keepends=True)
                if line.rstrip("\r\n") not in proc.child.launch.noise_lines
            )
        if lost:
            text = (
                f"[{lost} bytes of earlier output were dropped: the buffer holds {self.buffer_bytes}]\n"
                + text
            )
        return text, proc

    async def write(self, owner: str, proc_id: str, data: str, eof: bool = False) -> BackgroundProcess:
        proc = self.get(owner, proc_id)
        stdin = proc.child.proc.stdin
        if not proc.running or stdin is None or stdin.is_closing():
            raise ToolError(f"process {proc_id} does not take input any more ({proc.status()})")
        try:
            stdin.write(data.encode())
            await stdin.drain()
            if eof:
                stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            raise ToolError(f"process {proc_id} closed its input") from None
        return proc

    async def kill(self, owner: str, proc_id: str) -> BackgroundProcess:
        proc = self.get(owner, proc_id)
        await self._stop(proc)
        return proc

    async def _stop(self, proc: BackgroundProcess) -> None:
        if proc.running:
            await proc.child.terminate(grace_s=2.0)
        if proc.pump is not None:
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                async with asyncio.timeout(3.0):
                    await asyncio.shield(proc.pump)
            if not proc.pump.done():
                proc.pump.cancel()
            if proc.ended_at is None:
                proc.ended_at = self._clock()
        if proc.watchdog is not None:
            proc.watchdog.cancel()

    async def end_session(self, session_key: str, owner: str) -> int:
        """Kill and forget the processes `owner` started in `session_key` (`/new`: the agent loop's hook).

        Only the owner's: another caller ending a session of the same name ends nothing of theirs.
        """
        procs = [p for p in self._procs.values() if p.session_key == session_key and p.owner == owner]
        await asyncio.gather(*(self._stop(p) for p in procs))
        for p in procs:
            self._procs.pop(p.id, None)
        return len(procs)

    async def aclose(self) -> None:
        """Shutdown: kill everything still running."""
        procs = list(self._procs.values())
        await asyncio.gather(*(self._stop(p) for p in procs))
        self._procs.clear()


class ProcessTool(Tool):
    name = "process"
    group = "runtime"
    description = (
        "Background shell commands in the sandbox. action=start (command, optional cwd, timeout_s) "
        "returns an id; list; poll (id) returns new output and status; write (id, input, optional eof) "
        "sends to stdin; kill (id). Same checks and approvals as exec; a process is yours alone. "
        "Interactive shells and interpreters reading stdin are refused: use exec for each command."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"enum": ["start", "list", "poll", "write", "kill"]},
            "command": {"type": "string", "minLength": 1},
            "cwd": {"type": "string"},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0},
            "id": {"type": "string", "maxLength": 32},
            "input": {"type": "string", "maxLength": STDIN_MAX_BYTES},
            "eof": {"type": "boolean"},
            "max_bytes": {"type": "integer", "minimum": 1, "maximum": POLL_MAX_BYTES},
        },
        "required": ["action"],
        "additionalProperties": False,
    }

    def __init__(self, shell: ShellTools, manager: ProcessManager) -> None:
        self.shell = shell
        self.manager = manager
        self.timeout_s = shell.gate.approval_timeout_s + 60

    def _checked(self, command: str, ctx: ToolContext) -> Any:
        """The gate's assessment, refused when the command would run what is written to its stdin."""
        assessment = self.shell.gate.check(command, ctx, tool=self.name)
        why = stdin_runner(assessment.command)
        if why:
            raise ToolRefused(
                f"refused background command: {why}; lines written to a process pass no command check, "
                "so a program that runs its input cannot be started here (run each command with exec)"
            )
        return assessment

    async def check(self, args: Args, ctx: ToolContext) -> PendingApproval | None:
        action = args["action"]
        if action == "start":
            if "command" not in args:
                raise ToolRefused("action 'start' needs a 'command'")
            assessment = self._checked(args["command"], ctx)
            self.shell.runner.resolve_cwd(args.get("cwd"))
            self.manager.check_room(ctx.identity)
            await self.shell.runner.backend()
            return self.shell.gate.dry_run_note(assessment, ctx, tool=self.name)
        if action in ("poll", "write", "kill") and "id" not in args:
            raise ToolRefused(f"action {action!r} needs an 'id'")
        if action == "write" and "input" not in args and not args.get("eof"):
            raise ToolRefused("action 'write' needs 'input' (or eof = true)")
        return None

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        m = self.manager
        owner = ctx.identity
        if action == "start":
            return await self._start(args, ctx)
        if action == "list":
            procs = m.list(owner)
            if not procs:
                return ToolResult(f"you have no background processes ({owner})")
            return ToolResult("\n".join(p.describe() for p in procs))
        if action == "poll":
            text, proc = m.poll(owner, args["id"], args.get("max_bytes", POLL_MAX_BYTES))
            body = text if text else "(no new output)\n"
            if not body.endswith("\n"):
                body += "\n"
            return ToolResult(f"{body}[{proc.id}: {proc.status()}]", for_user=text or "(no new output)")
        if action == "write":
            proc = await m.write(owner, args["id"], args.get("input", ""), bool(args.get("eof")))
            sent = len(args.get("input", "").encode())
            return ToolResult(
                f"wrote {sent} bytes to {proc.id}" + (" and closed its input" if args.get("eof") else "")
            )
        proc = await m.kill(owner, args["id"])
        return ToolResult(f"{proc.id}: {proc.status()}")

    async def _start(self, args: Args, ctx: ToolContext) -> ToolResult:
        shell = self.shell
        assessment = self._checked(args["command"], ctx)
        cwd = shell.runner.resolve_cwd(args.get("cwd"))
        self.manager.check_room(ctx.identity)
        requested = args.get("timeout_s")
        timeout_s = min(float(requested), self.manager.timeout_s) if requested else self.manager.timeout_s
        await shell.gate.approve(assessment, ctx, tool=self.name)
        policy = shell.policies.for_agent(ctx.agent_id)
        # Approval may have taken a while: room is checked again, and held while the sandbox starts.
        async with self.manager.reserve(ctx.identity):
            launch = await shell.runner.launch(
                assessment.command, cwd=cwd, network=policy.network, timeout_s=timeout_s
            )
            child = await ChildProcess.start(launch, stdin=True)
            proc = await self.manager.start(
                ctx.identity, ctx.session_key, assessment.command, child, timeout_s
            )
        where = "no sandbox (host)" if proc.backend == "none" else f"sandbox {proc.backend}"
        return ToolResult(
            f"started {proc.id} ({where}; killed after {timeout_s:g} s). "
            f"Use action=poll with id={proc.id!r} for its output.",
            for_user=f"started {proc.id}",
        )
