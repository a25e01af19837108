"""The configuration schema: one dataclass per TOML table.

Every key has a default, so an empty file (or no file) is a working sim-board
configuration. Secrets are never inline: a `*_env` key names an environment
variable and a `*_file` key names a file holding the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LogLevel = Literal["debug", "info", "warning", "error"]


@dataclass
class AgentConfig:
    # Provider names from [providers.*], tried in this order; empty = slash commands only.
    providers: list[str] = field(default_factory=list)
    max_iterations: int = 20
    system_prompt: str = ""  # added to the built-in prompt, before the workspace's context files
    history_budget_tokens: int = 6000  # history sent to the model, trimmed by whole turns
    history_max_messages: int = 400  # stored per session; older whole turns are dropped
    provider_attempts: int = 3  # tries per provider before falling back to the next
    max_retry_after_s: float = 30.0  # a longer Retry-After falls back at once instead of waiting


@dataclass
class ProviderConfig:
    kind: Literal["openai", "anthropic"]
    model: str
    base_url: str = ""  # empty = the kind's public endpoint
    api_key_env: str = ""
    api_key_file: str = ""
    timeout_s: float = 60.0
    max_tokens: int = 1024


@dataclass
class PolicyOverride:
    """A provider's or a channel's step in the policy pipeline."""

    profile: str = ""  # empty = no profile at this step
    allow: list[str] = field(default_factory=list)


@dataclass
class AgentPolicy:
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    also_allow: list[str] = field(default_factory=list)
    # agent+provider allow: [tools.agents.ID.providers.NAME] allow = [...]
    providers: dict[str, PolicyOverride] = field(default_factory=dict)


@dataclass
class SubagentPolicy:
    max_depth: int = 1
    deny: list[str] = field(default_factory=list)  # added to the built-in always-denied list
    leaf_deny: list[str] = field(default_factory=list)  # added to the built-in leaf-denied list


@dataclass
class ToolsConfig:
    profile: str = "full"
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    also_allow: list[str] = field(default_factory=list)
    providers: dict[str, PolicyOverride] = field(default_factory=dict)
    channels: dict[str, PolicyOverride] = field(default_factory=dict)
    agents: dict[str, AgentPolicy] = field(default_factory=dict)
    subagents: SubagentPolicy = field(default_factory=SubagentPolicy)
    timeout_s: float = 60.0
    max_output_bytes: int = 32 * 1024
    max_file_bytes: int = 10 * 1024 * 1024
    allowed_paths: list[str] = field(default_factory=list)  # extra path prefixes beside the workspace
    rate_limit: int = 150  # calls per session per window; 0 = unlimited
    rate_window_s: float = 3600.0


@dataclass
class SandboxConfig:
    backend: Literal["auto", "firejail", "bubblewrap", "none"] = "auto"
    required: bool = True  # refuse shell tools when no sandbox is available


@dataclass
class TlsConfig:
    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclass
class MqttConfig:
    enabled: bool = False
    host: str = "127.0.0.1"
    port: int = 1883
    topic_prefix: str = "edgeclaw"
    protocol: Literal["5", "3.1.1"] = "5"
    username: str = ""
    password_env: str = ""
    password_file: str = ""
    keepalive_s: int = 60
    tls: TlsConfig | None = None


@dataclass
class ConsoleConfig:
    ports: list[str] = field(default_factory=list)
    baud: int = 115200
    parity: Literal["N", "E", "O"] = "N"
    stop_bits: Literal[1, 2] = 1
    flow_control: Literal["none", "rtscts", "xonxoff"] = "none"


@dataclass
class HardwareConfig:
    op_timeout_s: float = 2.0  # every bus operation gets this deadline


@dataclass
class Config:
    device_id: str = ""  # empty = the hostname
    board: str = "auto"  # a profile name, a path to a profile file, or "auto"
    workspace: str = ""  # empty = <state dir>/workspace
    state_dir: str = ""  # empty = $EDGECLAW_STATE_DIR, /var/lib/edgeclaw, ~/.local/state/edgeclaw
    log_level: LogLevel = "info"
    shutdown_grace_s: float = 10.0  # in-flight tool calls get this long on SIGTERM
    agent: AgentConfig = field(default_factory=AgentConfig)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    # Where it came from, for messages; not a TOML key.
    _source: str = "<defaults>"
