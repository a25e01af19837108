"""Building the shell tools of a runtime: settings checked, exec, process and custom tools registered.

The one module that knows every shell tool: it imports `shell` (what they
share) and each tool module, and none of those imports it, so the imports
point one way. `install_shell_tools` returns the `ShellTools` the runtime
then attaches (its approval broker and database) and closes.
"""

from __future__ import annotations

import os
import pwd
import weakref
from collections.abc import Mapping
from pathlib import Path

from edgeclaw.config.schema import Config
from edgeclaw.config.secrets import secret_refs
from edgeclaw.errors import ConfigError, ConfigErrors
from edgeclaw.sandbox import Limits, Sandbox, SandboxSettings
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.runtime.custom import CustomTools, custom_config_errors
from edgeclaw.tools.runtime.exec import ExecTool
from edgeclaw.tools.runtime.exec_policy import ExecPolicies
from edgeclaw.tools.runtime.process import ProcessManager, ProcessTool
from edgeclaw.tools.runtime.shell import ShellRunner, ShellTools
from edgeclaw.tools.scrub import Scrubber

# Places that hold edgeclaw's own configuration and runtime state on an installed system, systemd's
# credentials (LoadCredential=) and root's home (SSH keys, shell history: a root daemon's commands
# run as uid 0 and could read them).
SYSTEM_HIDDEN = (
    Path("/etc/edgeclaw"),
    Path("/run/edgeclaw"),
    Path("/var/lib/edgeclaw"),
    Path("/run/credentials"),
    Path("/root"),
)


def _sandbox_settings(config: Config) -> SandboxSettings:
    s = config.sandbox
    mib = 1024 * 1024
    return SandboxSettings(
        backend=s.backend,
        required=s.required,
        firejail_path=s.firejail_path,
        bubblewrap_path=s.bubblewrap_path,
        limits=Limits(
            max_processes=s.max_processes,
            max_memory_bytes=s.max_memory_mb * mib,
            max_file_bytes=s.max_file_mb * mib,
            max_open_files=s.max_open_files,
        ),
        pids_cgroup=s.pids_cgroup,
        max_total_memory_bytes=s.max_total_memory_mb * mib,
        disk_reserve_bytes=s.disk_reserve_mb * mib,
        etc_allow=tuple(s.etc_allow) if s.etc_allow else None,
        # Real paths: a symlinked directory holding the workspace must still be seen to hold it.
        hide_paths=tuple(Path(os.path.realpath(p)) for p in s.hide_paths),
    )


def sandbox_settings(config: Config) -> SandboxSettings:
    """[sandbox] as the sandbox layer takes it (for every program edgeclaw confines)."""
    return _sandbox_settings(config)


# One Sandbox per configuration: exec's commands, MCP servers and the browser share its cgroups.
_SANDBOXES: weakref.WeakKeyDictionary[Config, Sandbox] = weakref.WeakKeyDictionary()


def shared_sandbox(config: Config) -> Sandbox:
    """The Sandbox every program confined under `config` starts through. One instance, so one run
    cgroup: sandbox.max_total_memory_mb bounds exec's commands, the MCP servers and the browser
    together, as doctor says, rather than each of them apart."""
    sandbox = _SANDBOXES.get(config)
    if sandbox is None:
        sandbox = _SANDBOXES[config] = Sandbox(_sandbox_settings(config))
    return sandbox


def hidden_from_commands(config: Config) -> list[Path]:
    """What no sandboxed program may see: edgeclaw's own places, the config file, secret files,
    the TLS key, the daemon user's home (the state directory is added per launch)."""
    source = config._source
    hidden: list[Path] = [*SYSTEM_HIDDEN]
    if source and not source.startswith("<") and Path(source).exists():
        hidden.append(Path(os.path.realpath(source)))
    hidden.extend(Path(os.path.realpath(r.file)) for r in secret_refs(config).values() if r.file)
    tls = config.mqtt.tls
    if tls is not None and tls.key_file:
        hidden.append(Path(os.path.realpath(tls.key_file)))
    home = _own_home()
    if home is not None:
        # The daemon user's home: its keys and histories are as readable to a command as to us.
        hidden.append(home)
    return hidden


def _own_home() -> Path | None:
    """The home directory of the user the daemon runs as (from the password database, not $HOME)."""
    try:
        home = Path(os.path.realpath(pwd.getpwuid(os.geteuid()).pw_dir))
    except KeyError:
        return None
    return home if len(home.parts) > 1 else None


def _check_settings(config: Config) -> list[ConfigError]:
    source = config._source
    errors: list[ConfigError] = []
    e = config.tools.exec
    s = config.sandbox
    for key, value in (
        ("tools.exec.host_timeout_s", e.host_timeout_s),
        ("tools.exec.sandbox_timeout_s", e.sandbox_timeout_s),
        ("tools.exec.approval_timeout_s", e.approval_timeout_s),
        ("tools.exec.process_timeout_s", e.process_timeout_s),
    ):
        if value <= 0:
            errors.append(ConfigError(source, key, f"expected a number > 0, got {value}"))
    for key, value, least in (
        ("tools.exec.max_processes_per_caller", e.max_processes_per_caller, 0),
        ("tools.exec.max_processes_total", e.max_processes_total, 0),
        ("tools.exec.process_buffer_bytes", e.process_buffer_bytes, 1024),
        ("sandbox.max_processes", s.max_processes, 1),
        ("sandbox.max_memory_mb", s.max_memory_mb, 16),
        ("sandbox.max_file_mb", s.max_file_mb, 1),
        ("sandbox.max_open_files", s.max_open_files, 16),
        ("sandbox.disk_reserve_mb", s.disk_reserve_mb, 0),
    ):
        if value < least:
            errors.append(ConfigError(source, key, f"expected an integer >= {least}, got {value}"))
    if s.max_total_memory_mb != 0 and s.max_total_memory_mb < 32:
        # Below this the sandbox's own processes (firejail, a shell) hardly fit.
        errors.append(
            ConfigError(
                source,
                "sandbox.max_total_memory_mb",
                f"expected 0 (no bound) or an integer >= 32, got {s.max_total_memory_mb}",
            )
        )
    for i, name in enumerate(s.etc_allow):
        if not name or "/" in name or "," in name or name in (".", ".."):
            errors.append(ConfigError(source, f"sandbox.etc_allow[{i}]", "expected a name inside /etc"))
    for i, path in enumerate(s.hide_paths):
        if not path.startswith("/"):
            errors.append(ConfigError(source, f"sandbox.hide_paths[{i}]", "expected an absolute path"))
    return errors


def install_shell_tools(
    registry: Registry,
    config: Config,
    workspace: Workspace,
    state_dir: Path,
    secrets: Mapping[str, str],
    scrubber: Scrubber,
    environ: Mapping[str, str] | None = None,
) -> ShellTools:
    """Register exec, process and the configured custom tools. Raises ConfigErrors for bad settings."""
    source = config._source
    errors = _check_settings(config)
    try:
        # The workspace as configured and as its real path: a recursive rm of either, or of a
        # directory holding it, is destructive (see DenyList).
        roots = dict.fromkeys([str(workspace.root), os.path.realpath(workspace.root)])
        policies = ExecPolicies(config.tools.exec, config.tools.agents, workspace=roots)
    except ValueError as e:
        errors.append(ConfigError(source, "tools.exec.deny_groups", str(e)))
        policies = None
    if errors or policies is None:
        raise ConfigErrors(errors)

    refs = secret_refs(config)
    hidden = hidden_from_commands(config)

    e = config.tools.exec
    runner = ShellRunner(
        sandbox=shared_sandbox(config),
        workspace=workspace,
        state_dir=Path(os.path.realpath(state_dir)),
        env_allow=e.env_allow,
        environ=os.environ if environ is None else environ,
        secret_values=secrets.values(),
        secret_env_names=[r.env for r in refs.values() if r.env],
        hidden=hidden,
        host_timeout_s=e.host_timeout_s,
        sandbox_timeout_s=e.sandbox_timeout_s,
        max_output_bytes=registry.max_output_bytes,
    )
    shell = ShellTools(
        runner=runner,
        policies=policies,
        state_dir=state_dir,
        scrub=scrubber.scrub,
        approval_timeout_s=e.approval_timeout_s,
        max_processes=config.sandbox.max_processes,
    )
    processes = ProcessManager(
        max_per_caller=e.max_processes_per_caller,
        max_total=e.max_processes_total,
        timeout_s=e.process_timeout_s,
        buffer_bytes=e.process_buffer_bytes,
    )
    shell.when_closed(processes.aclose)
    registry.register(ExecTool(shell))
    registry.register(ProcessTool(shell, processes))
    custom = CustomTools(registry, shell)
    # Runtime-defined tools exist only once the database does; a `tool call` with none never opens it.
    shell.when_attached(lambda: custom.load_stored() if shell.has_database() else None)
    problems = custom_config_errors(custom, config)
    if problems:
        raise ConfigErrors(problems)
    return shell
