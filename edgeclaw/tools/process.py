"""`process`: background commands. Start one, list them, poll new output, write to stdin, kill.

A started command goes through exactly the same checks, approval and
sandbox as `exec`, but keeps running; its output is read continuously into a
bounded buffer that `poll` reads from where the last poll stopped (saying how
much was dropped if the buffer overflowed). Each session may run at most
`tools.exec.max_processes_per_session` at once and sees only its own. A
process is killed when it outlives `tools.exec.process_timeout_s`, when its
session ends (`ProcessManager.end_session`) and when the daemon shuts down;
killing takes the whole process group and cgroup, so nothing is orphaned.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.sandbox.process import READ_CHUNK, ChildProcess, StreamBuffer
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

if TYPE_CHECKING:
    from edgeclaw.tools.shell import ShellTools

POLL_MAX_BYTES = 16 * 1024
# How fast a background command's output is read. Past this the pipe fills and the command waits
# for us: a `yes` left running for an hour must not keep the daemon's event loop busy copying
# bytes nobody will read (the buffer keeps only the last few KiB anyway).
READ_BYTES_PER_S = 256 * 1024
MAX_FINISHED_KEPT = 8  # per session: finished processes stay pollable until then
STDIN_MAX_BYTES = 64 * 1024


@dataclass
class BackgroundProcess:
    id: str
    session_key: str
    command: str
    backend: str
    child: ChildProcess
    buffer: StreamBuffer
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    timed_out: bool = False
    pump: asyncio.Task[None] | None = None
    watchdog: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return self.ended_at is None

    def status(self) -> str:
        if self.running:
            return f"running for {time.time() - self.started_at:.0f} s"
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
    """Every background process of the runtime, by session."""

    def __init__(
        self, *, max_per_session: int = 4, timeout_s: float = 3600.0, buffer_bytes: int = 65536
    ) -> None:
        self.max_per_session = max_per_session
        self.timeout_s = timeout_s
        self.buffer_bytes = buffer_bytes
        self._procs: dict[str, BackgroundProcess] = {}
        self._ids = itertools.count(1)

    def running_count(self, session_key: str) -> int:
        return sum(1 for p in self._procs.values() if p.session_key == session_key and p.running)

    def check_room(self, session_key: str) -> None:
        if self.running_count(session_key) >= self.max_per_session:
            raise ToolRefused(
                f"this session already runs {self.max_per_session} background processes "
                "(tools.exec.max_processes_per_session); kill one first"
            )

    async def start(
        self, session_key: str, command: str, child: ChildProcess, timeout_s: float
    ) -> BackgroundProcess:
        proc = BackgroundProcess(
            id=f"p{next(self._ids)}",
            session_key=session_key,
            command=command,
            backend=child.launch.backend,
            child=child,
            buffer=StreamBuffer(self.buffer_bytes),
        )
        self._procs[proc.id] = proc
        proc.pump = asyncio.create_task(self._pump(proc), name=f"process {proc.id} output")
        proc.watchdog = asyncio.create_task(self._watch(proc, timeout_s), name=f"process {proc.id} timeout")
        self._forget_old(session_key)
        return proc

    async def _pump(self, proc: BackgroundProcess) -> None:
        stdout = proc.child.proc.stdout
        assert stdout is not None
        with contextlib.suppress(ConnectionError):
            while chunk := await stdout.read(READ_CHUNK):
                proc.buffer.feed(chunk)
                await asyncio.sleep(len(chunk) / READ_BYTES_PER_S)
        await proc.child.proc.wait()
        proc.ended_at = time.time()
        # The leader is gone; make sure nothing it started lives on, and drop its cgroup.
        await proc.child.close()

    async def _watch(self, proc: BackgroundProcess, timeout_s: float) -> None:
        await asyncio.sleep(timeout_s)
        if proc.running:
            proc.timed_out = True
            proc.child.kill()

    def _forget_old(self, session_key: str) -> None:
        finished = [p for p in self._procs.values() if p.session_key == session_key and not p.running]
        for p in finished[:-MAX_FINISHED_KEPT] if len(finished) > MAX_FINISHED_KEPT else []:
            self._procs.pop(p.id, None)

    def get(self, session_key: str, proc_id: str) -> BackgroundProcess:
        proc = self._procs.get(proc_id)
        if proc is None or proc.session_key != session_key:
            # Another session's process is as good as absent: do not confirm it exists.
            raise ToolError(f"no background process {proc_id!r} in this session")
        return proc

    def list(self, session_key: str) -> list[BackgroundProcess]:
        return [p for p in self._procs.values() if p.session_key == session_key]

    def poll(
        self, session_key: str, proc_id: str, limit: int = POLL_MAX_BYTES
    ) -> tuple[str, BackgroundProcess]:
        proc = self.get(session_key, proc_id)
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

    async def write(self, session_key: str, proc_id: str, data: str, eof: bool = False) -> BackgroundProcess:
        proc = self.get(session_key, proc_id)
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

    async def kill(self, session_key: str, proc_id: str) -> BackgroundProcess:
        proc = self.get(session_key, proc_id)
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
                proc.ended_at = time.time()
        if proc.watchdog is not None:
            proc.watchdog.cancel()

    async def end_session(self, session_key: str) -> int:
        """Kill and forget every process of a session (the agent loop calls this when a session ends)."""
        procs = self.list(session_key)
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
        "sends to stdin; kill (id). Same checks and approvals as exec."
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

    def __init__(self, shell: ShellTools) -> None:
        self.shell = shell
        self.timeout_s = shell.gate.approval_timeout_s + 60

    @property
    def manager(self) -> ProcessManager:
        assert self.shell.processes is not None
        return self.shell.processes

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action = args["action"]
        if action == "start":
            if "command" not in args:
                raise ToolRefused("action 'start' needs a 'command'")
            self.shell.gate.check(args["command"], ctx, tool=self.name)
            self.shell.runner.resolve_cwd(args.get("cwd"))
            self.manager.check_room(ctx.session_key)
            await self.shell.runner.backend()
        elif action in ("poll", "write", "kill") and "id" not in args:
            raise ToolRefused(f"action {action!r} needs an 'id'")
        elif action == "write" and "input" not in args and not args.get("eof"):
            raise ToolRefused("action 'write' needs 'input' (or eof = true)")

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        action = args["action"]
        m = self.manager
        if action == "start":
            return await self._start(args, ctx)
        if action == "list":
            procs = m.list(ctx.session_key)
            if not procs:
                return ToolResult("no background processes in this session")
            return ToolResult("\n".join(p.describe() for p in procs))
        if action == "poll":
            text, proc = m.poll(ctx.session_key, args["id"], args.get("max_bytes", POLL_MAX_BYTES))
            body = text if text else "(no new output)\n"
            if not body.endswith("\n"):
                body += "\n"
            return ToolResult(f"{body}[{proc.id}: {proc.status()}]", for_user=text or "(no new output)")
        if action == "write":
            proc = await m.write(ctx.session_key, args["id"], args.get("input", ""), bool(args.get("eof")))
            sent = len(args.get("input", "").encode())
            return ToolResult(
                f"wrote {sent} bytes to {proc.id}" + (" and closed its input" if args.get("eof") else "")
            )
        proc = await m.kill(ctx.session_key, args["id"])
        return ToolResult(f"{proc.id}: {proc.status()}")

    async def _start(self, args: Args, ctx: ToolContext) -> ToolResult:
        shell = self.shell
        assessment = shell.gate.check(args["command"], ctx, tool=self.name)
        cwd = shell.runner.resolve_cwd(args.get("cwd"))
        self.manager.check_room(ctx.session_key)
        requested = args.get("timeout_s")
        timeout_s = min(float(requested), self.manager.timeout_s) if requested else self.manager.timeout_s
        await shell.gate.approve(assessment, ctx, tool=self.name)
        # Approval may have taken a while: the limit is checked again right before starting.
        self.manager.check_room(ctx.session_key)
        policy = shell.policies.for_agent(ctx.agent_id)
        launch = await shell.runner.launch(
            assessment.command, cwd=cwd, network=policy.network, timeout_s=timeout_s
        )
        child = await ChildProcess.start(launch, stdin=True)
        proc = await self.manager.start(ctx.session_key, assessment.command, child, timeout_s)
        where = "no sandbox (host)" if proc.backend == "none" else f"sandbox {proc.backend}"
        return ToolResult(
            f"started {proc.id} ({where}; killed after {timeout_s:g} s). "
            f"Use action=poll with id={proc.id!r} for its output.",
            for_user=f"started {proc.id}",
        )
