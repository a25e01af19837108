"""The MCP servers of `[mcp.servers.*]`, their transports, and their tools in the registry.

`install_mcp(...)` builds one `McpBridge`: the manager (backends.mcp)
connects and watches the servers; the bridge turns each server's tool list
into registry tools (`mcp_{server}_{tool}`, group `mcp:{server}`, and every
one in the runtime group `mcp`), after `tool_allow`/`tool_deny` (deny wins),
and takes them out again when the server goes away. A tool's schema is
brought to the subset the registry checks first (schema_subset.py); one that
still cannot be used is reported (doctor, status, the log) and left out; its
siblings stay.

stdio servers are third-party programs: by default they run under the
sandbox, like `exec`, with their own writable directory
`<state dir>/mcp/NAME` and the network only when `network = true`.
"""

from __future__ import annotations

import logging
import os
import shutil
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.config.schema import Config, McpServerConfig
from edgeclaw.tools.registry import Registry

# The MCP client (backends.mcp), the bridged tool and the sandbox's process launcher are imported
# by the bridge's methods: a daemon without [mcp.servers.*] never builds one and never loads them.
if TYPE_CHECKING:
    from edgeclaw.backends.mcp.transport import Transport
    from edgeclaw.sandbox.manager import Sandbox
    from edgeclaw.sandbox.process import ChildProcess

log = logging.getLogger("edgeclaw.mcp")

# How long a start waits for the servers' first connections before going on without them.
FIRST_CONNECT_WAIT_CAP_S = 30.0
# The daemon's own variables a stdio program gets (besides HOME, its own directory).
PASSED_ENV = ("PATH", "LANG", "LC_ALL", "TZ")


def allowed_tools(server: McpServerConfig, names: list[str]) -> list[str]:
    """The server's tools kept by `tool_allow` (empty = all) and `tool_deny` (wins)."""
    allow, deny = set(server.tool_allow), set(server.tool_deny)
    return [n for n in names if n not in deny and (not allow or n in allow)]


def installation_of(program: str) -> list[Path]:
    """The directories a program needs to read to run: its own installation and its script
    interpreter's (`#!`), each the prefix above `bin/` (a Python under the daemon user's home,
    which the sandbox hides, must still be there for its scripts)."""
    out: list[Path] = []
    for path in (program, _interpreter(program)):
        if not path:
            continue
        # Both where it is named and where it really is: a virtualenv's python is a link to the
        # base interpreter, and the virtualenv (its site-packages) is needed as much as the base.
        for where in (Path(os.path.abspath(path)), Path(os.path.realpath(path))):
            out.append(where.parent.parent if where.parent.name in ("bin", "sbin") else where.parent)
    return list(dict.fromkeys(out))


def _interpreter(program: str) -> str:
    try:
        with open(program, "rb") as f:
            first = f.readline(256)
    except OSError:
        return ""
    if not first.startswith(b"#!"):
        return ""
    words = first[2:].decode("utf-8", "replace").split()
    return words[0] if words and words[0].startswith("/") else ""


class McpBridge:
    def __init__(
        self,
        config: Config,
        registry: Registry,
        *,
        state_dir: Path,
        secrets: Mapping[str, str],
        environ: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
        hidden: list[Path] | None = None,
        client_version: str = "",
    ) -> None:
        self.config = config
        self.registry = registry
        self.state_dir = state_dir
        self.secrets = dict(secrets)
        self.environ = dict(os.environ if environ is None else environ)
        self.sandbox = sandbox
        self.hidden = list(hidden or [])
        self._names: dict[str, list[str]] = {}  # server -> registry names of its tools
        # server -> its tools whose schemas are checked only in part here, and what the server alone checks
        self._partly: dict[str, dict[str, str]] = {}
        self._started = False
        from edgeclaw.backends.mcp.manager import McpManager, ServerSpec

        m = config.mcp
        specs = [
            ServerSpec(name, self._transport_factory(name, s), s.timeout_s, s.enabled)
            for name, s in m.servers.items()
        ]
        self.manager = McpManager(
            specs,
            on_tools=self._add_tools,
            on_gone=self._remove_tools,
            health_interval_s=m.health_interval_s,
            reconnect_first_s=m.reconnect_first_s,
            reconnect_max_s=m.reconnect_max_s,
            reconnect_attempts=m.reconnect_attempts,
            client_version=client_version,
        )

    # -- lifecycle -------------------------------------------------------------
    async def start(self, wait_s: float | None = None) -> None:
        """Connect every enabled server; wait (bounded) for the first attempts so the first turn
        already sees their tools."""
        if wait_s is None:
            timeouts = [s.connect_timeout_s for s in self.manager.specs.values() if s.enabled]
            wait_s = min(max(timeouts, default=0.0), FIRST_CONNECT_WAIT_CAP_S)
        self._started = True
        await self.manager.start(wait_s)

    async def stop(self) -> None:
        await self.manager.stop()

    def reconnect(self, name: str) -> str:
        return self.manager.reconnect(name)

    def status(self) -> dict[str, dict[str, Any]]:
        """Each server's state, for `edgeclaw status` and `doctor`."""
        return {
            name: {**st.as_dict(), "partly_checked": dict(self._partly.get(name, {}))}
            for name, st in self.manager.status.items()
        }

    def retry(self) -> list[str]:
        """Every enabled server that is not connected is tried again now (the admin request; a
        `failed` one starts a new round of attempts). Returns their names."""
        names = [
            name for name, st in self.manager.status.items() if st.state not in ("connected", "disabled")
        ]
        for name in names:
            self.manager.reconnect(name)
        return names

    def status_lines(self) -> list[str]:
        """One line per server, for `/status`."""
        out = []
        for name, st in self.manager.status.items():
            line = f"MCP server {name}: {st.state}"
            if st.state == "connected":
                line += f", {len(st.tools)} tools"
                if st.broken:
                    line += f" ({len(st.broken)} left out: {', '.join(sorted(st.broken))})"
            elif st.error:
                line += f" ({st.error[:200]})"
            out.append(line)
        return out

    def telemetry(self) -> dict[str, dict[str, Any]]:
        """The figures a fleet watches: state, tools, reconnect attempts."""
        return {
            name: {"state": st.state, "tools": len(st.tools), "attempts": st.attempts}
            for name, st in self.manager.status.items()
        }

    # -- the registry ------------------------------------------------------------
    def _add_tools(self, server: str, tools: list[dict[str, Any]]) -> dict[str, str]:
        from edgeclaw.tools.mcp.bridge import MAX_DESCRIPTION_CHARS, McpTool
        from edgeclaw.tools.mcp.names import tool_name
        from edgeclaw.tools.mcp.schema_subset import SchemaUnusable, described, usable

        cfg = self.config.mcp.servers[server]
        by_name = {str(t.get("name")): t for t in tools if isinstance(t.get("name"), str) and t.get("name")}
        broken: dict[str, str] = {}
        partly: dict[str, str] = {}
        names: list[str] = []
        taken = set(self.registry.names())
        for remote in allowed_tools(cfg, list(by_name)):
            spec = by_name[remote]
            execution = spec.get("execution")
            as_task = isinstance(execution, dict) and execution.get("taskSupport") == "required"
            if as_task and not self.manager.runs_tool_tasks(server):
                # A plain call of it is refused, and the server does not say it takes tasks.
                broken[remote] = (
                    "it runs only as a task (taskSupport 'required'), and the server does not declare "
                    "tasks for tools/call"
                )
                continue
            try:
                # Brought to the subset edgeclaw checks; what only the server checks is said in the
                # description (tools/mcp/schema_subset.py).
                schema, notes = usable(spec.get("inputSchema"))
            except SchemaUnusable as e:
                broken[remote] = str(e)
                continue
            except (TypeError, ValueError, AttributeError, RecursionError) as e:
                # The schema is third-party input: a case the rewriting did not foresee costs this
                # tool, never its siblings or the connection.
                log.exception("MCP server %s: the input schema of tool %r could not be read", server, remote)
                broken[remote] = f"its input schema could not be read ({type(e).__name__}: {e})"
                continue
            if notes:
                partly[remote] = "; ".join(notes)
                log.info(
                    "MCP server %s: tool %s checked by the server only: %s", server, remote, partly[remote]
                )
            name = tool_name(server, remote, taken)
            tool = McpTool(
                self.manager,
                server=server,
                remote_name=remote,
                name=name,
                description=described(str(spec.get("description") or ""), notes, MAX_DESCRIPTION_CHARS),
                parameters=schema,
                timeout_s=cfg.timeout_s,
                as_task=as_task,
            )
            self.registry.register(tool, replace=False)
            taken.add(name)
            names.append(name)
        self._names[server] = names
        self._partly[server] = partly
        self._publish_groups()
        return broken

    def _remove_tools(self, server: str) -> None:
        self._partly.pop(server, None)
        for name in self._names.pop(server, []):
            self.registry.unregister(name)
        self._publish_groups()

    def _publish_groups(self) -> None:
        policy = self.registry.policy
        policy.register_group("mcp", [n for names in self._names.values() for n in names])
        for server in self.config.mcp.servers:
            policy.register_group(f"mcp:{server}", self._names.get(server, []))

    # -- transports ----------------------------------------------------------------
    def _secret(self, server: str, kind: str, var: str) -> str:
        from edgeclaw.backends.mcp.protocol import McpError

        value = self.secrets.get(f"mcp.{server}.{kind}.{var}")
        if value is None:
            key = "env_from/env_files" if kind == "env" else "headers_from/header_files"
            raise McpError(f"the secret for {var} (mcp.servers.{server}.{key}) could not be read")
        return value

    def _headers(self, server: str, cfg: McpServerConfig) -> dict[str, str]:
        headers = dict(cfg.headers)
        for header in [*cfg.headers_from, *cfg.header_files]:
            headers[header] = self._secret(server, "header", header)
        return headers

    def _transport_factory(self, name: str, cfg: McpServerConfig) -> Any:
        # Each transport is imported when a server uses it: the HTTP ones bring httpx.
        def make() -> Transport:
            if cfg.transport == "http":
                from edgeclaw.backends.mcp.http import StreamableHttpTransport

                return StreamableHttpTransport(name, cfg.url, self._headers(name, cfg), cfg.timeout_s)
            if cfg.transport == "sse":
                from edgeclaw.backends.mcp.http import SseTransport

                return SseTransport(name, cfg.url, self._headers(name, cfg), cfg.timeout_s)
            from edgeclaw.backends.mcp.stdio import StdioTransport

            return StdioTransport(name, lambda: self._spawn(name, cfg), cfg.command)

        return make

    def _scripts_of(self, args: list[str]) -> list[Path]:
        """The directories of the files a server's arguments name (`python3 /opt/srv/server.py`): the
        server reads them, wherever they lie. A script inside a Node package installation
        (`node /opt/mcp/node_modules/@scope/server/dist/index.js`) needs its dependencies beside it, so
        the outermost `node_modules` it lies in is shown whole. Never what the sandbox hides: the state
        directory and the daemon's own files stay out of sight whatever the arguments say."""
        out: list[Path] = []
        hidden = [self.state_dir.resolve(), *(Path(os.path.realpath(p)) for p in self.hidden)]
        for arg in args:
            if not os.path.isabs(arg) or not os.path.isfile(arg):
                continue
            script = Path(os.path.realpath(arg))
            folder = script.parent
            if "node_modules" in script.parts:
                folder = Path(*script.parts[: script.parts.index("node_modules") + 1])
            if not any(folder.is_relative_to(h) or h.is_relative_to(folder) for h in hidden):
                out.append(folder)
        return out

    async def _spawn(self, name: str, cfg: McpServerConfig) -> ChildProcess:
        from edgeclaw.backends.mcp.protocol import MAX_MESSAGE_BYTES, McpError
        from edgeclaw.sandbox.base import DEFAULT_PATH, hidden_entries
        from edgeclaw.sandbox.process import ChildProcess, Launch, parent_death_launcher

        env = {k: self.environ[k] for k in PASSED_ENV if k in self.environ}
        env.setdefault("PATH", DEFAULT_PATH)
        env.setdefault("LANG", "C.UTF-8")
        home = Path(cfg.cwd) if cfg.cwd else self.state_dir / "mcp" / name
        home.mkdir(parents=True, exist_ok=True, mode=0o700)
        home = home.resolve()
        env["HOME"] = str(home)
        env.update(cfg.env)
        for var in [*cfg.env_from, *cfg.env_files]:
            env[var] = self._secret(name, "env", var)
        program = cfg.command if os.path.isabs(cfg.command) else shutil.which(cfg.command, path=env["PATH"])
        if not program:
            raise McpError(f"{cfg.command!r} is not found on PATH ({env['PATH']})")
        argv = [program, *cfg.args]
        if cfg.sandbox:
            if self.sandbox is None:
                raise McpError("no sandbox is configured for stdio servers")
            launch = await self.sandbox.launch(
                argv,
                workspace=home,
                cwd=home,
                env=env,
                network=cfg.network,
                timeout_s=cfg.timeout_s,
                hidden=[*hidden_entries(self.state_dir, home), *(p for p in self.hidden if p.exists())],
                keep_visible=[*installation_of(program), *self._scripts_of(cfg.args)],
                memory_bytes=cfg.max_memory_mb * 1024 * 1024,
            )
        else:
            launch = Launch(
                argv=argv, env=env, cwd=home, backend="host", parent_death=parent_death_launcher()
            )
        return await ChildProcess.start(
            launch, stdin=True, separate_stderr=True, read_limit=MAX_MESSAGE_BYTES
        )


def install_mcp(
    config: Config,
    registry: Registry,
    *,
    state_dir: Path,
    secrets: Mapping[str, str],
    on_ready: Callable[[Callable[[], Awaitable[None]]], None],
    on_close: Callable[[Callable[[], Awaitable[None]]], None],
) -> McpBridge | None:
    """The bridge for `[mcp.servers.*]`, started by `on_ready` (once every channel is up), stopped
    by `on_close`."""
    # Policy lists may name these servers' groups and tools before they are connected.
    registry.policy.mcp_servers = frozenset(config.mcp.servers)
    if not config.mcp.servers:
        return None
    from edgeclaw import __version__
    from edgeclaw.tools.runtime.shell_setup import hidden_from_commands, shared_sandbox

    bridge = McpBridge(
        config,
        registry,
        state_dir=state_dir,
        secrets=secrets,
        sandbox=shared_sandbox(config),
        hidden=hidden_from_commands(config),
        client_version=__version__,
    )
    on_ready(bridge.start)
    on_close(bridge.stop)
    return bridge
