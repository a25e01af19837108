"""The `[tools]` tables of the configuration schema: policy steps, exec, custom tools, web, media,
agents' tool policies, subagents, sessions and nodes (see `config.schema` for the rest)."""

from __future__ import annotations

from dataclasses import field
from typing import Any, Literal

from edgeclaw.records import dataclass


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


@dataclass(repr=False, eq=False)
class BrowserConfig:
    """[tools.browser]: the headless chromium of the `browser` tool (docs/browser.md)."""

    executable: str = ""  # "" = chromium on PATH
    allow_evaluate: bool = False  # may a call run its own JavaScript in a page (action evaluate)
    idle_timeout_s: float = 300.0  # a caller's browser closes after this long without a call
    max_instances: int = 2  # browsers running at once (one per caller at most)
    load_timeout_s: float = 30.0  # open: how long a page may take to load
    # Memory one browser may use, bounded by its own cgroup in the sandbox; past it chromium is stopped.
    memory_mb: int = 512
    # Processes and threads one browser may have (its pids cgroup); chromium runs hundreds of threads.
    max_processes: int = 512


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
    # Call peers with no device key pinned (they sign nothing) and take their answers, marked unverified.
    unsigned_peers: bool = False


@dataclass(repr=False, eq=False)
class GitToolConfig:
    """[tools.git]: the git tool. Remotes are reached under the web rules ([tools.web]: allowed_domains,
    the SSRF guard, ports), over HTTPS; plain http only to the hosts listed here."""

    allow_http_hosts: list[str] = field(default_factory=list)  # host globs a remote may use http:// with


@dataclass(repr=False, eq=False)
class ComposioToolConfig:
    """[tools.composio]: the Composio platform's actions, reached under the web rules ([tools.web]:
    allowed_domains must list its host, the SSRF guard, ports); the API key is a [tools.web.secrets] name."""

    base_url: str = "https://backend.composio.dev/api/v3"
    api_key_secret: str = ""  # the name of a [tools.web.secrets] entry holding the key; empty = off
    user_id: str = "default"  # whose connected accounts the actions run with


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
    browser: BrowserConfig = field(default_factory=BrowserConfig)
    media: MediaConfig = field(default_factory=MediaConfig)
    nodes: NodesToolConfig = field(default_factory=NodesToolConfig)
    git: GitToolConfig = field(default_factory=GitToolConfig)
    composio: ComposioToolConfig = field(default_factory=ComposioToolConfig)
