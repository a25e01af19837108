"""The configuration schema: one dataclass per TOML table.

Every key has a default, so an empty file (or no file) is a working sim-board
configuration. Secrets are never inline: a `*_env` key names an environment
variable and a `*_file` key names a file holding the value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

# The records have no generated __repr__ or __eq__ (`repr=False, eq=False`): a config holds values
# that must not reach a log or a traceback (a custom tool's env, a URL with its password), nothing
# compares configs but the tests (field by field, with dataclasses.asdict), and generating those two
# methods for every table was about a third of loading the config, at every start.

LogLevel = Literal["debug", "info", "warning", "error"]


@dataclass(repr=False, eq=False)
class AgentConfig:
    """[agent]: the main agent's providers, prompt, history budget and heartbeat."""

    # Provider names from [providers.*], tried in this order; empty = slash commands only.
    providers: list[str] = field(default_factory=list)
    max_iterations: int = 20
    system_prompt: str = ""  # added to the built-in prompt, before the workspace's context files
    history_budget_tokens: int = 6000  # history sent to the model, trimmed by whole turns
    history_max_messages: int = 400  # stored per session; older whole turns are dropped
    provider_attempts: int = 3  # tries per provider before falling back to the next
    max_retry_after_s: float = 30.0  # a longer Retry-After falls back at once instead of waiting
    # How often the agent reads HEARTBEAT.md and acts on it ("30m"; "" = never); skipped while it is empty.
    heartbeat_interval: str = ""
    heartbeat_quiet_hours: str = ""  # "22:00-07:00": no heartbeats then (automation.timezone's clock)
    heartbeat_to: list[str] = field(default_factory=list)  # where its reply goes (job targets); none = kept
    # Which agent answers which messages: the first route that matches; none = "main".
    routes: list[AgentRoute] = field(default_factory=list)


@dataclass(repr=False, eq=False)
class AgentRoute:
    """One [[agent.routes]] entry: the messages of a channel, or of the sessions a pattern matches,
    are answered by a named agent."""

    agent: str  # "main" or a name from [agents.NAME]
    channel: str = ""  # every session of this channel ("console", "mqtt", "cli") ...
    session: str = ""  # ... or the session keys this glob matches ("mqtt:ops-*")


@dataclass(repr=False, eq=False)
class ProviderConfig:
    """[providers.NAME]: one model endpoint (OpenAI, Anthropic or Ollama wire protocol) and its key."""

    kind: Literal["openai", "anthropic", "ollama"]
    model: str
    base_url: str = ""  # empty = the kind's public endpoint (Ollama: http://127.0.0.1:11434)
    api_key_env: str = ""
    api_key_file: str = ""
    timeout_s: float = 600.0  # the whole answer
    idle_timeout_s: float = 120.0  # no byte for this long (the prompt's evaluation included): stalled
    stream: bool = True  # ask for the answer as a stream (its text reaches people as it comes)
    max_tokens: int = 1024
    keep_alive: str = ""  # Ollama: how long the model stays loaded after a request ("10m"); "" = the server's
    # The model's context in tokens; 0 = ask the server (llama.cpp /props, Ollama /api/show).
    # Known, every request is fitted to it (system prompt, history, a subset of the tools).
    context_tokens: int = 0


@dataclass(repr=False, eq=False)
class PolicyOverride:
    """A provider's or a channel's step in the policy pipeline."""

    profile: str = ""  # empty = no profile at this step
    allow: list[str] = field(default_factory=list)


ExecSecurity = Literal["deny", "allowlist", "full"]
ExecAsk = Literal["off", "on-miss", "always"]

# Programs the exec tool runs without asking in `allowlist` mode: read-only look-arounds.
DEFAULT_EXEC_ALLOWLIST = [
    "ls", "cat", "head", "tail", "grep", "wc", "echo", "printf", "pwd", "date", "uname", "df", "du",
    "free", "uptime", "sort", "uniq", "cut", "stat", "file", "id", "whoami", "hostname", "basename",
    "dirname", "true", "false", "sleep", "diff", "tr", "i2cdetect", "i2cget", "i2cdump", "gpioinfo",
    "gpioget",
]  # fmt: skip


@dataclass(repr=False, eq=False)
class ExecConfig:
    """[tools.exec]: the shell tools (exec, process) and what custom tools share with them."""

    security: ExecSecurity = "allowlist"  # deny: no exec; allowlist: listed programs; full: any
    ask: ExecAsk = "on-miss"  # when to ask a person: never, off-allowlist (and package installs), always
    allowlist: list[str] = field(default_factory=lambda: list(DEFAULT_EXEC_ALLOWLIST))
    deny_groups: dict[str, bool] = field(default_factory=dict)  # group -> on/off; all on by default
    network: bool = False  # commands may use the network
    host_timeout_s: float = 60.0  # default and longest run without a sandbox
    sandbox_timeout_s: float = 300.0  # default and longest run in a sandbox
    approval_timeout_s: float = 120.0  # an unanswered approval request is a deny
    env_allow: list[str] = field(default_factory=lambda: ["PATH", "LANG", "LC_ALL", "LC_CTYPE", "TERM", "TZ"])
    max_processes_per_caller: int = 4  # background processes (the process tool) of one caller identity
    max_processes_total: int = 8  # background processes on the device, every caller together
    process_timeout_s: float = 3600.0  # a background process is killed after this long
    process_buffer_bytes: int = 65536  # output kept per background process


@dataclass(repr=False, eq=False)
class AgentExecConfig:
    """[tools.agents.ID.exec]: one agent's departures from [tools.exec]; unset keys inherit."""

    security: ExecSecurity | None = None
    ask: ExecAsk | None = None
    allowlist: list[str] | None = None
    deny_groups: dict[str, bool] = field(default_factory=dict)  # merged over tools.exec.deny_groups
    network: bool | None = None


@dataclass(repr=False, eq=False)
class CustomToolConfig:
    """One [[tools.custom]] table: a shell command template offered to the model as a tool."""

    name: str
    command: str  # {{.key}} placeholders become shell-quoted argument values
    description: str = ""
    parameters: dict[str, Any] = field(default_factory=dict)  # JSON schema of the arguments
    timeout_s: float = 60.0
    cwd: str = ""  # relative to the workspace; empty = the workspace
    env: dict[str, str] = field(default_factory=dict)
    agent: str = ""  # empty = every agent; else only this agent id sees it
    option_args: list[str] = field(default_factory=list)  # parameters whose value may begin with '-'
    code_args: list[str] = field(default_factory=list)  # parameters that may be program code (a sed script)


@dataclass(repr=False, eq=False)
class WebSecretConfig:
    """[tools.web.secrets.NAME]: a value http_request puts where a request says {{secret:NAME}}."""

    env: str = ""  # an environment variable ...
    file: str = ""  # ... or a file holding the value (never inline)


SearchProviderName = Literal["searxng", "brave", "tavily", "jina", "exa", "perplexity", "duckduckgo"]
# The search providers that refuse every request without a key.
SEARCH_PROVIDERS_KEYED = frozenset({"brave", "tavily", "jina", "exa", "perplexity"})


@dataclass(repr=False, eq=False)
class SearchProviderConfig:
    """[tools.web.search.PROVIDER]: where one search provider is and its key."""

    url: str = ""  # "" = the provider's public endpoint; SearXNG: the owner's instance (required)
    api_key_env: str = ""  # the key: an environment variable ...
    api_key_file: str = ""  # ... or a file (never inline, never on a command line)
    model: str = ""  # Perplexity's Sonar model; "" = "sonar"
    timeout_s: float = 10.0  # one request to this provider


@dataclass(repr=False, eq=False)
class WebSearchConfig:
    """[tools.web.search]: web_search's provider, the ones tried after it, and each one's settings."""

    provider: Literal["", "searxng", "brave", "tavily", "jina", "exa", "perplexity", "duckduckgo"] = ""
    fallback_providers: list[SearchProviderName] = field(default_factory=list)  # tried in order
    fallback_on_empty: bool = True  # a provider that found nothing hands over to the next
    num_results: int = 5  # results when the call does not say (1..20)
    searxng: SearchProviderConfig = field(default_factory=SearchProviderConfig)
    brave: SearchProviderConfig = field(default_factory=SearchProviderConfig)
    tavily: SearchProviderConfig = field(default_factory=SearchProviderConfig)
    jina: SearchProviderConfig = field(default_factory=SearchProviderConfig)
    exa: SearchProviderConfig = field(default_factory=SearchProviderConfig)
    perplexity: SearchProviderConfig = field(default_factory=SearchProviderConfig)
    duckduckgo: SearchProviderConfig = field(default_factory=SearchProviderConfig)


@dataclass(repr=False, eq=False)
class WebConfig:
    """[tools.web]: the web tools (web_fetch, web_search, http_request) and the SSRF guard they share."""

    allow_networks: list[str] = field(default_factory=list)  # ranges trusted anyway: "192.168.1.0/24"
    allow_hosts: list[str] = field(default_factory=list)  # host globs whose addresses are not range-checked
    ports: list[int] = field(default_factory=lambda: [80, 443, 8080, 8443])  # the ports a request may use
    max_redirects: int = 5  # redirects followed, each checked again
    timeout_s: float = 20.0  # a whole exchange (lookup, connect, redirects, body)
    max_response_bytes: int = 2 * 1024 * 1024  # of a body web_fetch reads; the rest is never read
    extractor: str = "auto"  # how web_fetch reads HTML: auto (trafilatura if installed), builtin, trafilatura
    allowed_domains: list[str] = field(default_factory=list)  # host globs http_request may reach; none = none
    max_response_size: int = 1_000_000  # bytes of a body http_request returns
    secrets: dict[str, WebSecretConfig] = field(default_factory=dict)  # by name, for {{secret:NAME}}
    search: WebSearchConfig = field(default_factory=WebSearchConfig)  # web_search's providers


TtsKind = Literal["openai", "elevenlabs", "minimax", "edge", "espeak", "piper"]


@dataclass(repr=False, eq=False)
class TtsProviderConfig:
    """[tools.media.tts.providers.NAME]: one speech provider."""

    kind: TtsKind
    base_url: str = ""  # "" = the service's public endpoint
    model: str = ""  # "" = the service's default; piper: the .onnx voice file
    voice: str = ""  # the default voice (name or id); "" = the provider's default
    group_id: str = ""  # MiniMax: the account's GroupId, when it has one
    api_key_env: str = ""
    api_key_file: str = ""
    timeout_s: float = 30.0


@dataclass(repr=False, eq=False)
class TtsConfig:
    """[tools.media.tts]: the `tts` tool's providers, tried in `chain` order."""

    chain: list[str] = field(default_factory=list)  # names from providers; [] = espeak-ng alone
    providers: dict[str, TtsProviderConfig] = field(default_factory=dict)
    espeak_fallback: bool = True  # espeak-ng (when installed) after the chain
    max_chars: int = 2000  # of one text
    audio_device: str = ""  # ALSA device for play (aplay -D); "" = the default device


@dataclass(repr=False, eq=False)
class ImageGenerationConfig:
    """[tools.media.image]: the images service `image generate` asks (OpenAI-compatible)."""

    enabled: bool = False
    base_url: str = ""  # "" = OpenAI
    model: str = "gpt-image-1"
    api_key_env: str = ""
    api_key_file: str = ""
    timeout_s: float = 120.0


@dataclass(repr=False, eq=False)
class MediaConfig:
    """[tools.media]: speech, images and what describes a picture."""

    tts: TtsConfig = field(default_factory=TtsConfig)
    image: ImageGenerationConfig = field(default_factory=ImageGenerationConfig)
    describe_provider: str = ""  # a [providers] name for image describe; "" = the main agent's first


@dataclass(repr=False, eq=False)
class AgentWebConfig:
    """[tools.agents.ID.web]: one agent's departures from [tools.web]; unset keys inherit (lists replace)."""

    allow_networks: list[str] | None = None
    allow_hosts: list[str] | None = None
    ports: list[int] | None = None
    allowed_domains: list[str] | None = None
    secrets: list[str] | None = None  # names from [tools.web.secrets] this agent may use; unset = all


@dataclass(repr=False, eq=False)
class AgentPolicy:
    """[tools.agents.ID]: one agent's tool lists, per-provider overrides and exec settings."""

    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    also_allow: list[str] = field(default_factory=list)
    # agent+provider allow: [tools.agents.ID.providers.NAME] allow = [...]
    providers: dict[str, PolicyOverride] = field(default_factory=dict)
    exec: AgentExecConfig = field(default_factory=AgentExecConfig)
    web: AgentWebConfig = field(default_factory=AgentWebConfig)


@dataclass(repr=False, eq=False)
class SubagentPolicy:
    """[tools.subagents]: how deep, how many and with which tools subagents run."""

    max_depth: int = 1
    deny: list[str] = field(default_factory=list)  # added to the built-in always-denied list
    leaf_deny: list[str] = field(default_factory=list)  # added to the built-in leaf-denied list
    max_concurrent: int = 8  # children running at once, every parent together
    max_children: int = 5  # children one parent session may have running at once
    max_iterations: int = 20  # model round trips of one child
    timeout_s: float = 900.0  # a child still running after this long fails
    archive_after_s: float = 3600.0  # an ended child leaves `subagents list` this long after it ended
    announce_debounce_s: float = 0.5  # results ending this close together reach the parent as one notice


@dataclass(repr=False, eq=False)
class SessionsToolConfig:
    """[tools.sessions]: where sessions_send may deliver."""

    # "channel": only sessions of the caller's own channel; "all": any session on the device.
    send_scope: Literal["channel", "all"] = "channel"


@dataclass(repr=False, eq=False)
class NodesToolConfig:
    """[tools.nodes]: which peers on the broker the `nodes` tool may call, and which of their tools.
    Empty lists = list only, no calls (fail closed)."""

    peers: list[str] = field(default_factory=list)  # device ids or shell-style patterns ("greenhouse-*")
    tools: list[str] = field(default_factory=list)  # the peers' tool names (or patterns) that may be called
    timeout_s: float = 10.0  # how long a call waits for the peer's answer


@dataclass(repr=False, eq=False)
class ToolsConfig:
    """[tools]: the tool policy (profile, lists, overrides) and the limits every tool call shares."""

    profile: str = "full"
    allow: list[str] = field(default_factory=list)
    deny: list[str] = field(default_factory=list)
    also_allow: list[str] = field(default_factory=list)
    providers: dict[str, PolicyOverride] = field(default_factory=dict)
    channels: dict[str, PolicyOverride] = field(default_factory=dict)
    agents: dict[str, AgentPolicy] = field(default_factory=dict)
    subagents: SubagentPolicy = field(default_factory=SubagentPolicy)
    sessions: SessionsToolConfig = field(default_factory=SessionsToolConfig)
    timeout_s: float = 60.0
    max_output_bytes: int = 32 * 1024
    max_file_bytes: int = 10 * 1024 * 1024
    allowed_paths: list[str] = field(default_factory=list)  # extra path prefixes beside the workspace
    # Token buckets per caller identity (never per session name), under a ceiling per channel.
    # Sized so a backend polling every 10 s plus bursts of commands never meets them; a flood is
    # stopped after the burst and gets a call back every 60/per_minute s.
    rate_limit: int = 60  # calls one caller may make at once (the bucket); 0 = no rate limits at all
    rate_per_minute: float = 30.0  # the bucket's refill: one caller's sustained rate
    channel_rate_limit: int = 300  # calls all callers of one channel may make at once; 0 = no ceiling
    channel_rate_per_minute: float = 600.0  # the channel bucket's refill
    exec: ExecConfig = field(default_factory=ExecConfig)
    custom: list[CustomToolConfig] = field(default_factory=list)
    web: WebConfig = field(default_factory=WebConfig)
    media: MediaConfig = field(default_factory=MediaConfig)
    nodes: NodesToolConfig = field(default_factory=NodesToolConfig)


@dataclass(repr=False, eq=False)
class SandboxConfig:
    """[sandbox]: which sandbox confines shell commands, whether one is required, and its limits."""

    backend: Literal["auto", "firejail", "bubblewrap", "none"] = "auto"
    required: bool = True  # refuse shell tools when no sandbox is available
    firejail_path: str = "firejail"
    bubblewrap_path: str = "bwrap"
    max_processes: int = 64  # per command (a pids cgroup; RLIMIT_NPROC for non-root)
    max_memory_mb: int = 512  # address space per process
    max_total_memory_mb: int = 512  # all sandboxed commands together (a memory cgroup); 0 = no such bound
    disk_reserve_mb: int = 64  # free space commands must leave on the workspace's file system; 0 = none
    max_file_mb: int = 64  # largest file a command may write
    max_open_files: int = 256
    pids_cgroup: str = "auto"  # "auto", "" (none) or a writable cgroup directory
    etc_allow: list[str] = field(default_factory=list)  # /etc entries commands see; empty = built-in list
    hide_paths: list[str] = field(default_factory=list)  # more paths commands must not see


@dataclass(repr=False, eq=False)
class TlsConfig:
    """[mqtt.tls]: CA, client certificate and key files (empty = the system's CAs, no client cert)."""

    ca_file: str = ""
    cert_file: str = ""
    key_file: str = ""


@dataclass(repr=False, eq=False)
class MqttConfig:
    """[mqtt]: the broker, topics, protocol version, credentials and request signing."""

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
    client_id: str = ""  # empty = the device id
    connect_timeout_s: float = 10.0  # for the CONNACK (and subscribe acknowledgements)
    session_expiry_s: int = 3600  # how long the broker keeps our session (and queued QoS 1 commands) offline
    telemetry_interval_s: float = 60.0  # 0 = no telemetry
    max_payload_bytes: int = 65536  # larger requests are answered with an error, not parsed
    inbound_queue: int = 64  # requests waiting or running at once; beyond it the answer is "busy"
    max_concurrent: int = 8  # requests running at once
    outbox_max: int = 10000  # messages kept while the broker is unreachable
    dedup_window_s: float = 600.0  # a repeated request id within this window is answered, not run again
    hmac_secret_env: str = ""  # shared secret for signed commands: an environment variable ...
    hmac_secret_file: str = ""  # ... or a file (never inline)
    hmac_key_name: str = "command"  # callers signing with it are "mqtt:NAME" (role operate)
    hmac_max_age_s: float = 300.0  # signed messages carry a "ts" at most this far from the device's clock
    # The approver key: approval/response must be signed with it. Unset = no MQTT approvals (denied).
    approver_secret_env: str = ""
    approver_secret_file: str = ""
    approver_key_name: str = "approver"  # decisions are on record as by "mqtt:NAME"
    # The admin key: the admin topics (admin/tools, admin/cron, admin/gateway) take commands signed by
    # a caller with the admin role only (this key, or a [callers.NAME]). None: the admin topics are off.
    admin_secret_env: str = ""
    admin_secret_file: str = ""
    admin_key_name: str = "admin"  # admin callers are "mqtt:NAME"
    events: bool = True  # one audit event per tool call on {prefix}/{dev}/events
    discovery: bool = True  # Home Assistant device discovery
    discovery_prefix: str = "homeassistant"
    # The board's own hardware as Home Assistant entities (switches, binary sensors, sensors), in
    # the discovery message; their states are checked for a change this often.
    homeassistant_entities: bool = True
    homeassistant_poll_s: float = 1.0
    homeassistant_restart_button: bool = False  # a restart button (runs `gateway`, which policy must admit)
    admin_unsigned: bool = False  # lab opt-in: accept unsigned admin commands (as mqtt:anonymous)
    # Fleet commands: {prefix}/_all/tool/call always, {prefix}/_group/GROUP/tool/call for each group.
    groups: list[str] = field(default_factory=list)
    broadcast_admin: bool = False  # admin commands (admin/*) by broadcast or group; off = refused


CallerRole = Literal["observe", "operate", "approve", "admin"]


@dataclass(repr=False, eq=False)
class CallerConfig:
    """[callers.NAME]: one MQTT caller with its own HMAC key; its identity is "mqtt:NAME"
    (docs/security.md). The checks across keys are in config.callers."""

    secret_env: str = ""  # its HMAC-SHA256 secret: an environment variable ...
    secret_file: str = ""  # ... or a file (never inline)
    roles: list[CallerRole] = field(default_factory=list)  # observe, operate, approve, admin
    profile: str = ""  # the tools profile its calls stay within; empty = the channel's


@dataclass(repr=False, eq=False)
class ConsoleConfig:
    """[console]: the serial ports the technician console serves, their line settings and login."""

    ports: list[str] = field(default_factory=list)
    baud: int = 115200
    parity: Literal["N", "E", "O"] = "N"
    stop_bits: Literal[1, 2] = 1
    flow_control: Literal["none", "rtscts", "xonxoff"] = "none"
    # The login gate: "auto" = on when a hash is configured. Only a hash is ever stored
    # (`edgeclaw console hash-pin`), inline or in a file.
    login: Literal["auto", "on", "off"] = "auto"
    login_hash: str = ""
    login_hash_file: str = ""
    max_login_failures: int = 5  # wrong entries in a row before the lockout
    lockout_s: float = 300.0
    login_delay_s: float = 1.0  # pause after each wrong entry
    idle_logout_s: float = 900.0  # 0 = never
    echo: bool = True  # false for terminals that echo locally
    width: int = 80  # wrap output at this many columns; 0 = no wrapping
    page_lines: int = 22  # rows before a "-- more --" prompt; 0 = no paging
    max_output_lines: int = 400  # longer replies are cut with a note
    pace: bool = True  # write no faster than the line rate (baud / bits per character)
    reconnect_min_s: float = 1.0  # backoff when a port is missing or lost
    reconnect_max_s: float = 30.0


@dataclass(repr=False, eq=False)
class HardwareConfig:
    """[hardware]: deadlines and size limits for bus, probe and GPIO operations."""

    op_timeout_s: float = 2.0  # every bus operation gets this deadline
    flash_timeout_s: float = 50.0  # flashing a target (must fit inside tools.timeout_s)
    max_read_bytes: int = 4096  # longest memory / probe / SPI / I2C block one call may move
    max_pulse_s: float = 10.0  # longest GPIO pulse


@dataclass(repr=False, eq=False)
class StateConfig:
    """[state]: backups of the state database and the disk space held back for it."""

    # A VACUUM INTO copy of the state database this often and at a clean stop; 0 = no backups.
    backup_interval_s: float = 3600.0
    # Disk space held back for the daemon's own state (released when a write meets a full disk); 0 = none.
    reserve_bytes: int = 8 * 1024 * 1024


AgentType = Literal["open", "predefined"]


@dataclass(repr=False, eq=False)
class NamedAgentConfig:
    """One [agents.NAME] table: an agent beside "main" (or "main" itself). Unset keys take [agent]'s."""

    description: str = ""  # what it is for, as agents_list shows it
    type: AgentType | None = None  # context-file routing; unset: memory.agent_types, else "open"
    providers: list[str] | None = None  # its provider chain; unset = agent.providers
    system_prompt: str | None = None  # replaces agent.system_prompt for this agent
    max_iterations: int | None = None  # model round trips per turn; unset = agent.max_iterations


@dataclass(repr=False, eq=False)
class MemoryConfig:
    """[memory]: the memory store, the context files routed to it, and embeddings."""

    enabled: bool = True  # false: no memory tools, and the fs tools see the workspace only
    # A [providers.NAME] (kind "openai") whose server embeds text; empty = keyword search only.
    embedder: str = ""
    embedding_model: str = ""  # the embeddings model name (required with embedder)
    embedding_api: Literal["openai", "ollama"] = "openai"  # {base_url}/embeddings or Ollama's /api/embed
    embedding_batch: int = 32  # texts per embeddings request
    embedding_timeout_s: float = 30.0
    embedding_attempts: int = 3  # tries per request on 429 / 5xx / connection errors
    embedding_cooldown_s: float = 60.0  # an embedder that failed is not asked again for this long
    chunk_tokens: int = 256  # a chunk's size (about 4 characters a token)
    chunk_overlap_tokens: int = 32  # carried from one chunk into the next
    max_document_bytes: int = 1024 * 1024  # largest stored document or context file
    daily_half_life_days: float = 7.0  # a `daily` memory's search weight halves this often; 0 = no fading
    mmr_lambda: float = 0.7  # relevance against diversity when a search asks to diversify
    shared_writers: list[str] = field(default_factory=lambda: ["cli", "console"])  # may write global memory
    agent_types: dict[str, AgentType] = field(default_factory=dict)  # agent id -> type; unlisted: open
    bootstrap_max_turns: int = 10  # BOOTSTRAP.md is removed after this many turns; 0 = only when emptied
    prompt_chars: int = 12000  # context files, memory summary and skills together in the system prompt
    prompt_memory_chars: int = 1500  # of which the summary of what is remembered


@dataclass(repr=False, eq=False)
class SkillsConfig:
    """[skills]: directories of NAME/SKILL.md, besides the workspace's skills/."""

    enabled: bool = True
    dirs: list[str] = field(default_factory=list)  # looked in after the workspace's skills/
    system_dir: str = ""  # looked in last; empty = the skills shipped with edgeclaw
    prompt_max: int = 30  # skills listed (name and description) in the system prompt


@dataclass(repr=False, eq=False)
class PushoverConfig:
    """[notify.pushover]: push notifications through Pushover (the `message` tool's "pushover" channel)."""

    token_env: str = ""  # the application's API token: an environment variable ...
    token_file: str = ""  # ... or a file
    user_env: str = ""  # the user (or group) key: an environment variable ...
    user_file: str = ""  # ... or a file
    devices: list[str] = field(default_factory=list)  # device names a message may be aimed at
    base_url: str = "https://api.pushover.net"
    timeout_s: float = 10.0


@dataclass(repr=False, eq=False)
class NtfyConfig:
    """[notify.ntfy]: notifications through an ntfy server (self-hostable)."""

    server: str = "https://ntfy.sh"
    topics: list[str] = field(default_factory=list)  # the topics messages may go to; the first is the default
    token_env: str = ""  # an access token, when the server wants one: an environment variable ...
    token_file: str = ""  # ... or a file
    timeout_s: float = 10.0


@dataclass(repr=False, eq=False)
class NotifyConfig:
    """[notify]: the push services (Pushover, ntfy) the message tool may use."""

    pushover: PushoverConfig | None = None
    ntfy: NtfyConfig | None = None


@dataclass(repr=False, eq=False)
class AutomationConfig:
    """[automation]: scheduled jobs (the cron and schedule tools) and how they treat the clock."""

    enabled: bool = True  # false: no scheduler runs (jobs stay stored)
    timezone: str = ""  # cron fields and times of day are read in it; "" = the machine's zone
    # Jobs wait until the clock is synchronised: the kernel's time status, else timedatectl.
    clock_sync: Literal["auto", "kernel", "timedatectl", "off"] = "auto"
    clock_sync_max_wait_s: float = 300.0  # then run by the local clock anyway; 0 = wait for ever
    late_limit_s: float = 60.0  # a slot later than this is missed (catch_up decides); never a burst
    jitter_s: float = 0.0  # new jobs wait a random delay up to this, the same per device and slot
    max_running: int = 4  # job runs at once; the rest wait (and count as running for overlaps)


@dataclass(repr=False, eq=False)
class GatewayConfig:
    """[gateway]: administering the daemon (the gateway tool, MQTT admin/gateway): trials, updates."""

    # A newly applied config or version must be healthy (READY, and connected to the broker when
    # MQTT is on) within this long, else the previous one is put back and the daemon restarted.
    health_deadline_s: float = 120.0
    update_max_bytes: int = 64 * 1024 * 1024  # a wheel, downloaded or sent in chunks
    update_chunk_bytes: int = 32 * 1024  # decoded, per chunk: its base64 fits mqtt.max_payload_bytes
    # Update URLs pass the web guard: loopback and private ranges only where allowed here.
    update_allow_hosts: list[str] = field(default_factory=list)
    update_allow_networks: list[str] = field(default_factory=list)
    update_slots: int = 3  # versions kept under STATE/venvs (the running one and the previous among them)
    # An Ed25519 public key (64 hex digits, the raw 32 bytes): when set, every update must carry a
    # signature of the wheel made with its private key (the crypto extra checks it).
    update_public_key: str = ""
    # Without a public key an update is refused unless this says unsigned wheels may be installed
    # (whoever can send an update then chooses the code the daemon runs).
    allow_unsigned_updates: bool = False


McpTransport = Literal["stdio", "sse", "http"]


@dataclass(repr=False, eq=False)
class McpServerConfig:
    """One [mcp.servers.NAME] table: an MCP server whose tools the agent may use (`mcp_NAME_TOOL`)."""

    transport: McpTransport = "stdio"  # stdio: a program we start; sse (legacy) or http: a URL
    enabled: bool = True
    command: str = ""  # stdio: the program (an absolute path, or found on PATH)
    args: list[str] = field(default_factory=list)
    cwd: str = ""  # stdio: where it starts; empty = its own directory under the state directory
    env: dict[str, str] = field(default_factory=dict)  # plain values for the program's environment
    env_from: dict[str, str] = field(default_factory=dict)  # NAME = a variable of the daemon's environment
    env_files: dict[str, str] = field(default_factory=dict)  # NAME = a file holding the value
    sandbox: bool = True  # stdio: run under [sandbox] (third-party code); false = on the host
    network: bool = False  # stdio in the sandbox: may the program use the network
    url: str = ""  # sse: the event-stream URL; http: the MCP endpoint
    headers: dict[str, str] = field(default_factory=dict)  # plain header values
    headers_from: dict[str, str] = field(default_factory=dict)  # header = a variable holding its value
    header_files: dict[str, str] = field(default_factory=dict)  # header = a file holding its value
    timeout_s: float = 60.0  # one tool call; the connection's start gets the same
    tool_allow: list[str] = field(default_factory=list)  # the server's tool names; empty = all
    tool_deny: list[str] = field(default_factory=list)  # the server's tool names; wins over tool_allow


@dataclass(repr=False, eq=False)
class McpServeConfig:
    """[mcp.server]: edgeclaw's own tools served to MCP clients (channel `mcp`)."""

    listen: str = ""  # "127.0.0.1:8765": streamable HTTP in the daemon; empty = off
    path: str = "/mcp"  # the endpoint's path
    token_file: str = ""  # the bearer token HTTP clients must send (required with listen)
    tls_cert_file: str = ""  # with tls_key_file: HTTPS instead of HTTP
    tls_key_file: str = ""
    allowed_origins: list[str] = field(default_factory=list)  # browser Origins let in; none = no browser
    mqtt: bool = False  # MCP over MQTT on the daemon's broker connection ([mqtt] must be enabled)
    mqtt_server_name: str = ""  # the server-name in the MQTT topics; empty = "edgeclaw/{device id}"
    mqtt_presence_expiry_s: int = 600  # the retained presence expires unless refreshed (half as often)
    max_sessions: int = 16  # MCP clients at once (HTTP and MQTT together)
    session_idle_s: float = 3600.0  # a session unused this long is ended
    approval_timeout_s: float = 120.0  # an approval asked of an MCP client (elicitation), then deny


@dataclass(repr=False, eq=False)
class McpConfig:
    """[mcp]: MCP servers whose tools the agent uses, and edgeclaw's tools served over MCP."""

    servers: dict[str, McpServerConfig] = field(default_factory=dict)
    server: McpServeConfig = field(default_factory=McpServeConfig)
    health_interval_s: float = 30.0  # a ping to each connected server this often
    reconnect_first_s: float = 2.0  # backoff after a server goes away: doubling from this ...
    reconnect_max_s: float = 60.0  # ... up to this
    reconnect_attempts: int = 10  # then the server is marked failed (retried on reload or request)


@dataclass(repr=False, eq=False)
class SparkplugConfig:
    """[sparkplug]: the board as a Sparkplug B edge node, on the [mqtt] broker (own connection)."""

    enabled: bool = False
    group_id: str = "edgeclaw"
    edge_node_id: str = ""  # empty = the device id
    data_interval_s: float = 60.0  # every metric in an NDATA this often (changes go at once)
    poll_s: float = 1.0  # GPIO, sensors and tool statistics are checked for a change this often


@dataclass(repr=False, eq=False)
class FleetPageConfig:
    """[fleet_page]: `edgeclaw fleet serve`, the fleet's web page (docs/fleet.md#the-fleet-page)."""

    listen: str = "127.0.0.1:8088"  # HOST:PORT; loopback by default (TLS through a reverse proxy)
    # Who may log in: a password hash (`edgeclaw console hash-pin`), inline or in a file, and/or a token.
    login_hash: str = ""
    login_hash_file: str = ""
    token_file: str = ""  # a file holding a token taken at the login form and as `Authorization: Bearer`
    session_ttl_s: float = 3600.0  # a browser session ends this long after its login
    max_sessions: int = 64  # sessions at once; the oldest ends first
    max_login_failures: int = 5  # wrong entries in a row before the lockout
    lockout_s: float = 300.0
    history_s: float = 3600.0  # each device's health kept this long for the charts
    max_devices: int = 2000  # devices remembered; more are ignored (and logged once)
    max_events: int = 500  # events kept for the page, all devices together
    call_timeout_s: float = 150.0  # a call waits this long for its answer (approvals take time)
    broadcast_wait_s: float = 10.0  # a broadcast collects answers this long at most


@dataclass(repr=False, eq=False)
class Config:
    """The whole configuration file, as the loader checked it."""

    device_id: str = ""  # empty = the hostname
    board: str = "auto"  # a profile name, a path to a profile file, or "auto"
    workspace: str = ""  # empty = <state dir>/workspace
    state_dir: str = ""  # empty = $EDGECLAW_STATE_DIR, /var/lib/edgeclaw, ~/.local/state/edgeclaw
    log_level: LogLevel = "info"
    shutdown_grace_s: float = 10.0  # in-flight tool calls get this long on SIGTERM
    agent: AgentConfig = field(default_factory=AgentConfig)
    agents: dict[str, NamedAgentConfig] = field(default_factory=dict)
    providers: dict[str, ProviderConfig] = field(default_factory=dict)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)
    mqtt: MqttConfig = field(default_factory=MqttConfig)
    console: ConsoleConfig = field(default_factory=ConsoleConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    state: StateConfig = field(default_factory=StateConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    skills: SkillsConfig = field(default_factory=SkillsConfig)
    automation: AutomationConfig = field(default_factory=AutomationConfig)
    gateway: GatewayConfig = field(default_factory=GatewayConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    mcp: McpConfig = field(default_factory=McpConfig)
    sparkplug: SparkplugConfig = field(default_factory=SparkplugConfig)
    fleet_page: FleetPageConfig = field(default_factory=FleetPageConfig)
    callers: dict[str, CallerConfig] = field(default_factory=dict)  # MQTT callers by name
    # Where it came from, for messages; not a TOML key.
    _source: str = "<defaults>"
