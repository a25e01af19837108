"""The configuration schema: one dataclass per TOML table.

Every key has a default, so an empty file (or no file) is a working sim-board
configuration. Secrets are never inline: a `*_env` key names an environment
variable and a `*_file` key names a file holding the value.
"""

from __future__ import annotations

from dataclasses import field
from typing import Literal

from edgeclaw.config.tools_schema import (  # noqa: F401 -- re-exported: the schema is one vocabulary
    DEFAULT_EXEC_ALLOWLIST,
    SEARCH_PROVIDERS_KEYED,
    AgentExecConfig,
    AgentPolicy,
    AgentWebConfig,
    CustomToolConfig,
    ExecAsk,
    ExecConfig,
    ExecSecurity,
    ImageGenerationConfig,
    MediaConfig,
    NodesToolConfig,
    PolicyOverride,
    SearchProviderConfig,
    SearchProviderName,
    SessionsToolConfig,
    SubagentPolicy,
    ToolsConfig,
    TtsConfig,
    TtsKind,
    TtsProviderConfig,
    WebConfig,
    WebSearchConfig,
    WebSecretConfig,
)
from edgeclaw.records import dataclass

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
    # Answers the broker acknowledged this recently are published again after a lost connection, in
    # case the broker died before saving them (match its autosave interval); bounded by count and bytes.
    resend_window_s: float = 30.0
    resend_max_messages: int = 1000
    resend_max_bytes: int = 1 << 20
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
    # The update entity's Install runs the update an admin offered (`gateway` `update`, which policy must
    # admit for the homeassistant channel); off = the entity only shows the versions.
    homeassistant_update_install: bool = False
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
    """[skills]: directories of NAME/SKILL.md, besides STATE/local/skills (never the workspace's)."""

    enabled: bool = True
    dirs: list[str] = field(default_factory=list)  # looked in after STATE/local/skills
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
    # ... and then stay healthy this long (no channel lost, no crash) before it is kept: a version that
    # comes up and falls over a few seconds later is rolled back too.
    health_window_s: float = 10.0
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
    # Tools (names, `group:NAME`, `*`) whose calls hold STATE/update.lock while they run, as scheduled
    # jobs always do: an update arriving meanwhile is deferred until the lock is free...
    defer_updates_during: list[str] = field(default_factory=list)
    # ... for at most this long; then it is given up (`deferred_expired`), not applied.
    update_defer_max_s: float = 3600.0


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
    # stdio in the sandbox: the program's memory (RAM, no swap), bounded by its own cgroup rather than
    # by address space (Node's and the JVM's reservations exceed any useful RLIMIT_AS)
    max_memory_mb: int = 512
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
    allowed_hosts: list[str] = field(default_factory=list)  # Host names served besides local ones
    allow_plain_http: bool = False  # a non-loopback listen without TLS (refused otherwise)
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
    # The primary host application's id: births only while its STATE says online (empty = none).
    primary_host_id: str = ""


@dataclass(repr=False, eq=False)
class MetricsConfig:
    """[metrics]: the daemon's Prometheus metrics on GET /metrics (docs/metrics.md). Off by default."""

    listen: str = ""  # HOST:PORT, e.g. "127.0.0.1:9464"; empty = off
    allow_plain_http: bool = False  # a non-loopback listen (there is no TLS here); refused otherwise
    allowed_hosts: list[str] = field(default_factory=list)  # Host names served besides local ones


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
    max_devices: int = 20000  # devices remembered; more are ignored (and logged once)
    max_events: int = 500  # events kept for the page, all devices together
    call_timeout_s: float = 150.0  # a call waits this long for its answer (approvals take time)
    broadcast_wait_s: float = 10.0  # a broadcast collects answers this long at most
    allow_plain_http: bool = False  # a non-loopback listen (no TLS here: a proxy's job); refused otherwise
    # Host names served besides local ones (the name a reverse proxy forwards): others get 421, so a
    # page a browser loaded from another name (DNS rebinding) cannot reach this one.
    allowed_hosts: list[str] = field(default_factory=list)
    # Each device's signing key (docs/fleet.md#device-keys): provisioned here (DEVICE = "ed25519:BASE64")
    # or in the file (one `DEVICE ed25519:BASE64` a line), where keys pinned at first sight are added too.
    device_keys: dict[str, str] = field(default_factory=dict)
    device_keys_file: str = ""  # empty = <state dir>/fleet-page-device-keys
    trust_on_first_use: bool = True  # pin an unknown device's key from its first signed status
    # Where health points, events, broadcast answers and approvals are kept across restarts
    # (docs/fleet.md#history): SQLite in the state dir, PostgreSQL at history_dsn, or "off" (memory only).
    history_store: Literal["sqlite", "postgresql", "off"] = "sqlite"
    history_file: str = ""  # empty = <state dir>/fleet-page-history.sqlite3
    history_dsn: str = ""  # PostgreSQL's connection string (libpq's; its password from PGPASSWORD)
    history_retention_s: float = 7 * 86400.0  # older history is deleted
    # Several pages on one broker and one history database (docs/fleet.md#several-pages): the MQTT 5
    # shared subscription group through which one page of the group writes each message to the history.
    share_group: str = ""


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
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    callers: dict[str, CallerConfig] = field(default_factory=dict)  # MQTT callers by name
    # Where it came from, for messages; not a TOML key.
    _source: str = "<defaults>"
