"""What the shell tools share: running checked commands in the sandbox, and the runtime's wiring.

`ShellRunner` is what exec, process and custom tools share after the
`CommandGate` has allowed a command: it picks the timeout (60 s on the
host, 300 s in a sandbox by default), builds the child's environment from
an allowlist (never the daemon's own environment: API keys and the MQTT
password stay out), works out what the command must not see (the state
directory and its database and key, the config file, secret files) and
launches it through `edgeclaw.sandbox`.

`ShellTools` holds the runner, the gate and the approval and database
wiring. It knows none of the tools that use it: they import this module,
never the other way round; `tools/shell_setup.py` builds and registers them
and hands `ShellTools` the hooks to run when the runtime attaches and closes.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.sandbox import ChildProcess, Launch, RunResult, Sandbox
from edgeclaw.sandbox.base import SandboxBackend, hidden_entries
from edgeclaw.sandbox.manager import SandboxUnavailable
from edgeclaw.sandbox.process import child_env
from edgeclaw.store.approvals import ApprovalStore
from edgeclaw.store.db import DB_FILENAME, Database
from edgeclaw.tools.approval import ApprovalBroker
from edgeclaw.tools.base import ToolResult
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.runtime.exec_policy import CommandGate, ExecPolicies

# Output past this many bytes kills the command (it is not shown anyway).
DRAIN_LIMIT_BYTES = 8 * 1024 * 1024
# Room left under the registry's output cap for the status line we append.
STATUS_ROOM_BYTES = 256
# Variables of the daemon's own process that a command must never get, whatever env_allow says:
# systemd's notify and watchdog channel, socket activation, and edgeclaw's own settings.
_DAEMON_ONLY_ENV = frozenset(
    {"NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID", "LISTEN_FDS", "LISTEN_PID", "LISTEN_FDNAMES",
     "INVOCATION_ID", "JOURNAL_STREAM", "CREDENTIALS_DIRECTORY", "MAINPID", "SYSTEMD_EXEC_PID"}
)  # fmt: skip
# A secret this long or longer is also looked for inside other values (a URL with a password in
# it); shorter ones only as a whole value, or they would knock out innocent variables.
_SECRET_SUBSTRING_MIN = 8


class ShellRunner:
    """Launches allowed commands in the sandbox with the right timeout, environment and hidden paths."""

    def __init__(
        self,
        *,
        sandbox: Sandbox,
        workspace: Workspace,
        state_dir: Path,
        env_allow: Iterable[str],
        environ: Mapping[str, str],
        secret_values: Iterable[str] = (),
        secret_env_names: Iterable[str] = (),
        hidden: Iterable[Path] = (),
        host_timeout_s: float = 60.0,
        sandbox_timeout_s: float = 300.0,
        max_output_bytes: int = 32 * 1024,
    ) -> None:
        self.sandbox = sandbox
        self.workspace = workspace
        self.state_dir = state_dir
        self.env_allow = tuple(env_allow)
        self.environ = dict(environ)
        self.secret_values = frozenset(v for v in secret_values if v)
        self.secret_env_names = frozenset(secret_env_names)
        self.hidden = tuple(hidden)
        self.host_timeout_s = host_timeout_s
        self.sandbox_timeout_s = sandbox_timeout_s
        self.max_output_bytes = max(1024, max_output_bytes - STATUS_ROOM_BYTES)

    async def backend(self) -> SandboxBackend:
        """The sandbox backend; refuses the call when none works and one is required."""
        try:
            return await self.sandbox.backend()
        except SandboxUnavailable as e:
            raise ToolRefused(f"sandbox unavailable: {e}") from None

    async def timeout_for(self, requested: float | None) -> float:
        """The requested timeout, capped at (and defaulting to) the host or sandbox limit."""
        backend = await self.backend()
        limit = self.sandbox_timeout_s if backend.confines else self.host_timeout_s
        if requested is None:
            return limit
        return min(float(requested), limit)

    def resolve_cwd(self, cwd: str | None) -> Path:
        if not cwd:
            return self.workspace.root
        path = self.workspace.resolve(cwd, must_exist=True)
        if not path.is_dir():
            raise ToolError(f"cwd {cwd!r} is not a directory")
        return path

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        """The child's environment: allowlisted names only, never the daemon's own channels or settings,
        and never a value that is or contains one of our secrets."""
        allowed = [
            n
            for n in self.env_allow
            if n not in self.secret_env_names and n not in _DAEMON_ONLY_ENV and not n.startswith("EDGECLAW_")
        ]
        env = child_env(allowed, self.environ, self.workspace.root)
        env = {k: v for k, v in env.items() if not self._holds_secret(v)}
        env.update(extra or {})
        return env

    def _holds_secret(self, value: str) -> bool:
        return value in self.secret_values or any(
            s in value for s in self.secret_values if len(s) >= _SECRET_SUBSTRING_MIN
        )

    def hidden_paths(self) -> list[Path]:
        """What the command must not see; the backends keep the workspace visible inside any of it."""
        ws = self.workspace.root
        paths = hidden_entries(self.state_dir, ws)
        paths.extend(p for p in self.hidden if p != ws and p.exists())
        return list(dict.fromkeys(paths))

    async def launch(
        self,
        command: str,
        *,
        cwd: Path,
        network: bool,
        timeout_s: float,
        env_extra: Mapping[str, str] | None = None,
    ) -> Launch:
        try:
            return await self.sandbox.launch(
                ["/bin/sh", "-c", command],
                workspace=self.workspace.root,
                cwd=cwd,
                env=self.env(env_extra or {}),
                network=network,
                timeout_s=timeout_s,
                hidden=self.hidden_paths(),
            )
        except SandboxUnavailable as e:
            raise ToolRefused(f"sandbox unavailable: {e}") from None

    async def run(self, command: str, *, timeout_s: float, **how: Any) -> tuple[RunResult, str]:
        """Run to the end; returns the result and the backend's name. `how`: `launch`'s other options."""
        launch = await self.launch(command, timeout_s=timeout_s, **how)
        child = await ChildProcess.start(launch)
        result = await child.run_to_end(timeout_s, self.max_output_bytes, DRAIN_LIMIT_BYTES)
        return result, launch.backend


def format_run(result: RunResult, backend: str, timeout_s: float, max_processes: int) -> ToolResult:
    """The tool result for a finished command: its output, then one status line for the model."""
    output = result.output
    notes: list[str] = []
    if result.timed_out:
        notes.append(f"timed out after {timeout_s:g} s: the command and everything it started were killed")
    elif result.output_limit_hit:
        notes.append(f"killed after {result.total_bytes} bytes of output")
    elif result.signal is not None:
        notes.append(f"killed by signal {result.signal}")
    else:
        notes.append(f"exit status {result.exit_code}")
    if result.fork_failures:
        notes.append(f"{result.fork_failures} process starts refused by the limit of {max_processes}")
    where = "no sandbox (host)" if backend == "none" else f"sandbox {backend}"
    notes.append(where)
    notes.append(f"{result.duration_s:.2f} s")
    status = "[" + "; ".join(notes) + "]"
    body = output if output.endswith("\n") or not output else output + "\n"
    failed = result.timed_out or result.output_limit_hit or result.exit_code != 0
    return ToolResult(for_llm=body + status, for_user=output if output else "(no output)", is_error=failed)


@dataclass
class _Wiring:
    """What the tools need from the runtime; filled in by `ShellTools.attach`."""

    broker: ApprovalBroker
    database: Callable[[], Database]


class ShellTools:
    """What the exec, process and custom tools of one runtime share: runner, gate, approvals, database."""

    def __init__(
        self,
        *,
        runner: ShellRunner,
        policies: ExecPolicies,
        state_dir: Path,
        scrub: Callable[[str], str],
        approval_timeout_s: float,
        max_processes: int,
    ) -> None:
        self.runner = runner
        self.policies = policies
        self.state_dir = state_dir
        self.max_processes = max_processes
        self._own_db: Database | None = None
        self._wiring = _Wiring(broker=ApprovalBroker(approval_timeout_s), database=self._open_own_db)
        self._approvals: ApprovalStore | None = None
        self.gate = CommandGate(
            policies,
            store=self.approval_store,
            broker=lambda: self._wiring.broker,
            scrub=scrub,
            approval_timeout_s=approval_timeout_s,
        )
        # Set by the tools' installer: run once the runtime attaches, and when it closes.
        self._attach_hooks: list[Callable[[], object]] = []
        self._close_hooks: list[Callable[[], Awaitable[object]]] = []

    # -- wiring -----------------------------------------------------------
    def _open_own_db(self) -> Database:
        # Until attached (unit tests, tools used without a Runtime) the tools open the database themselves.
        if self._own_db is None:
            self._own_db = Database.in_state_dir(self.state_dir)
        return self._own_db

    def database(self) -> Database:
        return self._wiring.database()

    def has_database(self) -> bool:
        return (self.state_dir / DB_FILENAME).exists()

    def approval_store(self) -> ApprovalStore:
        if self._approvals is None:
            self._approvals = ApprovalStore(self.database())
        return self._approvals

    @property
    def broker(self) -> ApprovalBroker:
        return self._wiring.broker

    def use_broker(self, broker: ApprovalBroker) -> None:
        self._wiring.broker = broker

    def when_attached(self, hook: Callable[[], object]) -> None:
        """Run `hook` once the runtime has attached its broker and database (loading stored tools)."""
        self._attach_hooks.append(hook)

    def when_closed(self, hook: Callable[[], Awaitable[object]]) -> None:
        """Await `hook` when the runtime closes (stopping background processes)."""
        self._close_hooks.append(hook)

    def attach(
        self,
        *,
        approvals: ApprovalBroker,
        database: Callable[[], Database],
        on_close: Callable[[Callable[[], object]], None],
    ) -> None:
        """Use the daemon's approval broker and database; run the close hooks when it closes."""
        self._wiring = _Wiring(broker=approvals, database=database)
        self._approvals = None
        on_close(self.aclose)
        for hook in self._attach_hooks:
            hook()

    async def aclose(self) -> None:
        for hook in self._close_hooks:
            await hook()
        if self._own_db is not None:
            self._own_db.close()
            self._own_db = None
