"""Custom tools: shell command templates offered to the model as tools of their own.

A definition has a name, a description, JSON-schema parameters, a command
template, a timeout (60 s by default), a working directory inside the
workspace, environment values, a scope (every agent, or one agent id), and
two lists that widen what arguments may be: `option_args` (values that may
begin with `-`, where the program would read an option) and `code_args`
(values that may stand where a program reads code, such as a `sed` script).
`{{.key}}` in the template is replaced by the argument `key`, shell-quoted
(`shlex.quote`), so an argument is always one word of data and never shell
syntax; where a placeholder may stand and what its value may be is the
template's business (`custom_template`). The rendered command then goes
through the same deny groups (reading each value as the data it is),
approval for package installs, and sandbox as `exec` (the security and
ask-always modes, which restrict what a *model* writes, do not apply to an
administrator's template).

Definitions come from the config (`[[tools.custom]]`) or at runtime through
`CustomTools.define` / `remove`, which an admin channel calls: those are
stored in the state database (environment values sealed with AES-256-GCM,
which needs the `crypto` extra) and take effect at once, replacing any
earlier definition of that name in one step. An invalid definition is
refused with the reason (`InvalidDefinition`); config-defined tools cannot
be replaced at runtime.
"""

from __future__ import annotations

import logging
import math
import re
import weakref
from collections.abc import Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any

from edgeclaw.config.schema import Config
from edgeclaw.errors import ConfigError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.store.custom_tools import CustomToolStore
from edgeclaw.store.secretbox import CryptoUnavailable, SecretBox
from edgeclaw.tool_groups import RESERVED_NAMES
from edgeclaw.tools.base import Args, PendingApproval, Tool, ToolContext, ToolResult
from edgeclaw.tools.policy import KNOWN_TOOL_NAMES
from edgeclaw.tools.runtime.command_text import normalise
from edgeclaw.tools.runtime.custom_template import InvalidDefinition, Template
from edgeclaw.tools.runtime.denylist import DenyList
from edgeclaw.tools.runtime.shell import format_run
from edgeclaw.tools.runtime.shell_syntax import PLACEHOLDER
from edgeclaw.tools.schema import SchemaError, compile_schema

if TYPE_CHECKING:
    from edgeclaw.tools.registry import Registry
    from edgeclaw.tools.runtime.shell import ShellTools

log = logging.getLogger("edgeclaw.tools.runtime.custom")

_BAD_PLACEHOLDER = re.compile(r"\{\{(?!\s*\.[A-Za-z_][A-Za-z0-9_]*\s*\}\})")
NAME = re.compile(r"[a-z][a-z0-9_]{0,63}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# Variables that change how programs load or what they run: never settable by a definition.
FORBIDDEN_ENV = frozenset(
    {
        "PATH", "HOME", "IFS", "ENV", "BASH_ENV", "PROMPT_COMMAND", "PS4", "SHELLOPTS", "BASHOPTS",
        "GCONV_PATH", "PYTHONSTARTUP", "PYTHONHOME", "PERL5OPT", "PERL5LIB", "RUBYOPT", "NODE_OPTIONS",
        "GIT_SSH_COMMAND", "GIT_EXEC_PATH", "HOSTALIASES",
    }
)  # fmt: skip
MAX_TIMEOUT_S = 3600.0
FIELDS = frozenset(
    {"name", "description", "parameters", "command", "timeout_s", "cwd", "env", "agent", "option_args",
     "code_args"}
)  # fmt: skip
__all__ = ["CustomToolSpec", "CustomTools", "InvalidDefinition", "custom_tools_for", "parse_definition"]


@dataclass(frozen=True)
class CustomToolSpec:
    """A custom tool's definition: its checked command template and parameters."""

    name: str
    template: Template
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)
    timeout_s: float = 60.0
    cwd: str = ""
    env: dict[str, str] = field(default_factory=dict)
    agent: str = ""
    source: str = "runtime"  # "config" or "runtime"

    @property
    def command(self) -> str:
        return self.template.command

    @property
    def placeholders(self) -> list[str]:
        return self.template.placeholders

    def render(self, args: Mapping[str, Any]) -> str:
        return self.template.render(args)

    def checked_command(self, args: Mapping[str, Any]) -> tuple[str, str]:
        """The command to run and the text the deny groups read; refuses unusable values.

        Refused: a value beginning with `-` where the program reads options (unless
        the parameter is in `option_args`), and a rendered command that normalising
        would change (what is quoted must be what runs).
        """
        self.template.check_values(args)
        rendered = self.template.render(args)
        if normalise(rendered) != rendered:
            raise ToolRefused("refused arguments: their text is not stable under normalisation")
        return rendered, self.template.deny_reading(args)

    def definition(self) -> dict[str, Any]:
        """The stored form (environment values excluded: they are sealed separately)."""
        stored: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "parameters": self.parameters,
            "command": self.command,
            "timeout_s": self.timeout_s,
            "cwd": self.cwd,
            "agent": self.agent,
        }
        if self.template.option_args:
            stored["option_args"] = sorted(self.template.option_args)
        if self.template.code_args:
            stored["code_args"] = sorted(self.template.code_args)
        return stored

    def public(self) -> dict[str, Any]:
        """What a listing may show: environment variable names, never their values."""
        return {**self.definition(), "env": sorted(self.env), "source": self.source}


def parse_definition(data: Mapping[str, Any], *, source: str = "runtime") -> CustomToolSpec:
    """Check a definition and build its spec. Raises InvalidDefinition naming the problem."""
    if not isinstance(data, Mapping):
        raise InvalidDefinition("a definition must be a JSON object")
    unknown = sorted(set(data) - FIELDS)
    if unknown:
        raise InvalidDefinition(
            f"unknown field(s) {', '.join(unknown)} (expected: {', '.join(sorted(FIELDS))})"
        )
    name = data.get("name")
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise InvalidDefinition(
            f"name {name!r}: expected lowercase letters, digits and '_', starting with a letter (at most 64)"
        )
    if name in KNOWN_TOOL_NAMES or name in RESERVED_NAMES:
        raise InvalidDefinition(f"name {name!r} is a built-in tool's name")
    description = data.get("description", "")
    if not isinstance(description, str) or len(description) > 2000:
        raise InvalidDefinition("description: expected a string of at most 2000 characters")
    command = data.get("command")
    if not isinstance(command, str) or not command.strip():
        raise InvalidDefinition("command: expected a non-empty string")
    try:
        normalised = normalise(command)
    except ToolRefused as e:
        raise InvalidDefinition(f"command: {e}") from None
    if normalised != command.strip():
        raise InvalidDefinition(
            "command: it contains invisible or non-normalised characters; write it plainly"
        )
    if _BAD_PLACEHOLDER.search(command):
        raise InvalidDefinition("command: a '{{' that is not a {{.name}} placeholder")
    parameters = data.get("parameters") or {"type": "object", "properties": {}}
    if not isinstance(parameters, Mapping):
        raise InvalidDefinition("parameters: expected a JSON-schema object")
    parameters = dict(parameters)
    if parameters.get("type", "object") != "object":
        raise InvalidDefinition("parameters: the top-level schema must have type 'object'")
    parameters.setdefault("type", "object")
    parameters.setdefault("properties", {})
    try:
        compile_schema(parameters)
    except SchemaError as e:
        raise InvalidDefinition(f"parameters: {e}") from None
    except (TypeError, ValueError) as e:
        raise InvalidDefinition(f"parameters: {e}") from None
    props = parameters.get("properties") or {}
    missing = [key for key in PLACEHOLDER.findall(command) if key not in props]
    if missing:
        raise InvalidDefinition(
            f"command: placeholder(s) {', '.join(sorted(set(missing)))} not in parameters"
        )
    timeout = data.get("timeout_s", 60.0)
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not math.isfinite(timeout):
        raise InvalidDefinition("timeout_s: expected a number")
    if not 0 < timeout <= MAX_TIMEOUT_S:
        raise InvalidDefinition(f"timeout_s: expected more than 0 and at most {MAX_TIMEOUT_S:g}")
    cwd = data.get("cwd", "")
    if not isinstance(cwd, str) or cwd.startswith("/") or ".." in re.split(r"[/\\]", cwd) or "\x00" in cwd:
        raise InvalidDefinition("cwd: expected a path relative to the workspace, without '..'")
    env = data.get("env") or {}
    if not isinstance(env, Mapping):
        raise InvalidDefinition("env: expected an object of NAME: value strings")
    for key, value in env.items():
        if not isinstance(key, str) or not ENV_NAME.fullmatch(key):
            raise InvalidDefinition(f"env: {key!r} is not a valid variable name")
        if key in FORBIDDEN_ENV or key.startswith(("LD_", "MALLOC_", "GIT_CONFIG_")):
            raise InvalidDefinition(f"env: {key} may not be set by a custom tool")
        if not isinstance(value, str) or "\x00" in value:
            raise InvalidDefinition(f"env: the value of {key} must be a string without NUL bytes")
    agent = data.get("agent", "")
    if not isinstance(agent, str):
        raise InvalidDefinition("agent: expected an agent id, or '' for every agent")
    lists = {}
    for key in ("option_args", "code_args"):
        value = data.get(key) or []
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise InvalidDefinition(f"{key}: expected a list of parameter names")
        lists[key] = value
    template = Template.load(
        normalised, parameters=props, option_args=lists["option_args"], code_args=lists["code_args"]
    )
    # The template itself must pass the deny groups (with neutral words for the placeholders):
    # a definition that can only ever be refused is a mistake worth reporting now.
    probe = PLACEHOLDER.sub("ARG", normalised)
    for hit in DenyList().check(probe):
        if hit.group.action == "deny":
            raise InvalidDefinition(f"command: {hit.describe()}")
    return CustomToolSpec(
        name=name,
        template=template,
        description=description,
        parameters=parameters,
        timeout_s=float(timeout),
        cwd=cwd,
        env={str(k): str(v) for k, v in env.items()},
        agent=agent,
        source=source,
    )


class CustomTool(Tool):
    """One custom tool. Name, description and parameters come from its definition."""

    group = "custom"

    def __init__(self, spec: CustomToolSpec, shell: ShellTools) -> None:
        self.spec = spec
        self.shell = shell
        self.name = spec.name  # type: ignore[misc]
        self.description = spec.description or f"custom tool: runs `{spec.command}`"  # type: ignore[misc]
        self.parameters = spec.parameters  # type: ignore[misc]
        self.timeout_s = spec.timeout_s + shell.gate.approval_timeout_s + 30

    def _scope(self, ctx: ToolContext) -> None:
        if self.spec.agent and ctx.agent_id != self.spec.agent:
            raise ToolRefused(f"custom tool {self.name!r} belongs to agent {self.spec.agent!r}")

    async def check(self, args: Args, ctx: ToolContext) -> PendingApproval | None:
        self._scope(ctx)
        command, reading = self.spec.checked_command(args)
        assessment = self.shell.gate.check(command, ctx, tool=self.name, trusted=True, reading=reading)
        self.shell.runner.resolve_cwd(self.spec.cwd or None)
        await self.shell.runner.backend()
        return self.shell.gate.dry_run_note(assessment, ctx, tool=self.name)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        self._scope(ctx)
        shell = self.shell
        command, reading = self.spec.checked_command(args)
        assessment = shell.gate.check(command, ctx, tool=self.name, trusted=True, reading=reading)
        cwd = shell.runner.resolve_cwd(self.spec.cwd or None)
        timeout_s = await shell.runner.timeout_for(self.spec.timeout_s)
        await shell.gate.approve(assessment, ctx, tool=self.name)
        policy = shell.policies.for_agent(ctx.agent_id)
        result, backend = await shell.runner.run(
            assessment.command, cwd=cwd, network=policy.network, timeout_s=timeout_s, env_extra=self.spec.env
        )
        return format_run(result, backend, timeout_s, shell.max_processes)


class CustomTools:
    """The custom tools of a runtime: config-defined ones, and the runtime definition API.

    `define`, `remove` and `list` are what an admin channel (MQTT
    `{prefix}/{dev}/admin/tools`) calls; changes are stored and effective
    immediately, without a restart.
    """

    def __init__(self, registry: Registry, shell: ShellTools) -> None:
        self.registry = registry
        self.shell = shell
        self._specs: dict[str, CustomToolSpec] = {}
        self._store: CustomToolStore | None = None
        self._loaded = False
        _BY_REGISTRY[id(registry)] = self

    # -- storage -------------------------------------------------------------
    def store(self) -> CustomToolStore:
        if self._store is None:
            self._store = CustomToolStore(self.shell.database(), SecretBox.in_state_dir(self.shell.state_dir))
        return self._store

    def load_stored(self) -> list[str]:
        """Register every runtime-defined tool from the database; returns their names."""
        self._loaded = True
        names = []
        for row in self.store().list():
            if row.name in self._specs and self._specs[row.name].source == "config":
                continue  # the config wins; the stale row stays until removed
            if row.env_problem:
                # Sealed values that cannot be opened here (no `cryptography`, another key): the
                # tool would run without its environment, so it is not offered at all.
                log.warning("stored custom tool %s skipped: %s", row.name, row.env_problem)
                continue
            try:
                spec = parse_definition({**row.definition, "env": row.env})
            except InvalidDefinition as e:
                # A definition valid when stored may clash with a newer built-in tool name.
                log.warning("stored custom tool %s skipped: %s", row.name, e)
                continue
            self._install(spec)
            names.append(spec.name)
        return names

    # -- the tool table --------------------------------------------------------
    def _install(self, spec: CustomToolSpec) -> None:
        existing = self.registry.get(spec.name)
        if existing is not None and not isinstance(existing, CustomTool):
            raise InvalidDefinition(f"name {spec.name!r} is already a built-in tool")
        tool = CustomTool(spec, self.shell)
        # Scope first, then the tool: between the two no other agent can see it.
        self.registry.policy.set_scope(spec.name, spec.agent or None)
        self.registry.register(tool, replace=True)
        self._specs[spec.name] = spec

    def add_from_config(self, data: Mapping[str, Any]) -> CustomToolSpec:
        spec = parse_definition(data, source="config")
        if spec.name in self._specs:
            raise InvalidDefinition(f"name {spec.name!r} is defined twice")
        self._install(spec)
        return spec

    def define(self, definition: Mapping[str, Any]) -> CustomToolSpec:
        """Define or replace a runtime custom tool. Raises InvalidDefinition with the reason."""
        spec = parse_definition(definition)
        current = self._specs.get(spec.name)
        if current is not None and current.source == "config":
            raise InvalidDefinition(
                f"{spec.name!r} is defined in the config file and cannot be replaced at runtime"
            )
        existing = self.registry.get(spec.name)
        if existing is not None and not isinstance(existing, CustomTool):
            raise InvalidDefinition(f"name {spec.name!r} is already a built-in tool")
        # Stored first: if the database write fails, the running table is unchanged too.
        try:
            self.store().put(spec.name, spec.agent, spec.definition(), spec.env)
        except CryptoUnavailable as e:
            raise InvalidDefinition(f"env: {e}") from None
        self._install(spec)
        return spec

    def remove(self, name: str) -> bool:
        """Remove a runtime custom tool; False when there was none. Config-defined ones cannot be removed."""
        current = self._specs.get(name)
        if current is not None and current.source == "config":
            raise InvalidDefinition(
                f"{name!r} is defined in the config file and cannot be removed at runtime"
            )
        stored = self.store().delete(name)
        if current is not None:
            self.registry.unregister(name)
            self.registry.policy.set_scope(name, None)
            del self._specs[name]
        return stored or current is not None

    def get(self, name: str) -> CustomToolSpec | None:
        return self._specs.get(name)

    def list(self) -> list[CustomToolSpec]:
        return [self._specs[n] for n in sorted(self._specs)]


# Lets a channel find the custom tools of a runtime from its registry without new Runtime fields.
_BY_REGISTRY: weakref.WeakValueDictionary[int, CustomTools] = weakref.WeakValueDictionary()


def custom_tools_for(registry: Registry) -> CustomTools | None:
    """The `CustomTools` serving `registry` (for an admin channel: `custom_tools_for(runtime.registry)`)."""
    found = _BY_REGISTRY.get(id(registry))
    return found if found is not None and found.registry is registry else None


def custom_config_errors(custom: CustomTools, config: Config) -> list[ConfigError]:
    """Install the config's [[tools.custom]] tables; each bad one is a ConfigError naming it."""
    errors = []
    for i, entry in enumerate(config.tools.custom):
        data = {
            "name": entry.name,
            "command": entry.command,
            "description": entry.description,
            "parameters": entry.parameters,
            "timeout_s": entry.timeout_s,
            "cwd": entry.cwd,
            "env": entry.env,
            "agent": entry.agent,
            "option_args": entry.option_args,
            "code_args": entry.code_args,
        }
        try:
            custom.add_from_config(data)
        except InvalidDefinition as e:
            errors.append(ConfigError(config._source, f"tools.custom[{i}]", str(e)))
    return errors
