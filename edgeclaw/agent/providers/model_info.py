"""How many tokens each provider's model takes: configured, else asked from its server.

`context_tokens` in `[providers.NAME]` wins. Without it, a local server is
asked once:

- llama.cpp's server: `GET {root}/props` answers the context of a slot as
  `default_generation_settings.n_ctx` (`-c 2048` gives 2048; with
  `--parallel N` each slot gets its share, which is what one request has).
- Ollama: `POST {root}/api/show` with the model's name. Ollama runs a model
  with its `num_ctx` (the Modelfile's `parameters`, else the server's
  default, 4096 in current releases, or `OLLAMA_CONTEXT_LENGTH`), not the
  longest context the model supports (`model_info.*.context_length`); and
  it cuts a prompt that is too long from the front without saying so. So
  `num_ctx` is taken when the model sets it, else the smaller of the
  model's length and `OLLAMA_DEFAULT_CONTEXT`.

The same answers say whether the server's chat template takes tools at
all: llama.cpp's `/props` has `chat_template_caps.supports_tools`. A template that cannot render tools makes
llama-server drop every definition without a word, so the model never
sees them; edgeclaw then sends none, says so once in the log at first
contact and in `/status` (`tools_note`), with the fix (`TEMPLATE_FIX`).
With `context_tokens` configured the server is still asked, once, for this.

`{root}` is the provider's `base_url` without its `/v1`. Public endpoints
are not asked (their models' contexts dwarf any request edgeclaw makes).
Anything that goes wrong (no such endpoint, a timeout, an answer without
the figure) means "unknown": the request goes unbudgeted, as before, and
the question is asked again after `RETRY_S`. A known size is kept for the
life of the daemon.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import field
from typing import TYPE_CHECKING, Any

from edgeclaw.agent.providers.endpoints import ANTHROPIC_BASE_URL, OPENAI_BASE_URL
from edgeclaw.records import dataclass

if TYPE_CHECKING:
    import httpx

log = logging.getLogger("edgeclaw.providers")

OLLAMA_DEFAULT_CONTEXT = 2048
OLLAMA_DEFAULT_URL = "http://127.0.0.1:11434"  # where kind "ollama" talks when base_url is empty
ASK_TIMEOUT_S = 5.0
RETRY_S = 60.0
PUBLIC_ENDPOINTS = frozenset(u.rstrip("/") for u in (OPENAI_BASE_URL, ANTHROPIC_BASE_URL))
TOOLS_UNAVAILABLE = "tools unavailable: the server's chat template cannot take them"
TEMPLATE_FIX = (
    "start llama-server with --jinja, and with --chat-template-file naming a template that takes "
    "tools when the model's own does not (edgeclaw sends none until then: plain chat and slash commands)"
)


@dataclass(frozen=True)
class ServerFacts:
    """What a local server said of its model: its context (tokens) and whether its template takes tools."""

    context: int | None = None
    tools: bool | None = None  # None: not said (assumed yes)


@dataclass(frozen=True)
class ProviderModel:
    """What model_info needs to know of one provider (from its `[providers.NAME]` table)."""

    name: str
    kind: str
    model: str
    base_url: str
    answer_tokens: int  # its max_tokens: the room kept for the answer
    context_tokens: int = 0  # configured; 0 = ask the server
    api_key: str = field(default="", repr=False)  # llama-server started with --api-key wants it on /props too


def server_root(base_url: str) -> str:
    root = base_url.rstrip("/")
    return root.removesuffix("/v1")


def llama_cpp_context(props: Any) -> int | None:
    """n_ctx of llama.cpp's `/props` answer (None when it is not there)."""
    if not isinstance(props, dict):
        return None
    settings = props.get("default_generation_settings")
    for source in (settings, props):
        if isinstance(source, dict):
            n_ctx = source.get("n_ctx")
            if isinstance(n_ctx, int) and n_ctx > 0:
                return n_ctx
    return None


def llama_cpp_tools(props: Any) -> bool | None:
    """Whether the chat template takes tools, from llama.cpp's `/props` (`chat_template_caps`)."""
    caps = props.get("chat_template_caps") if isinstance(props, dict) else None
    supports = caps.get("supports_tools") if isinstance(caps, dict) else None
    return supports if isinstance(supports, bool) else None


def template_note(props: Any) -> str:
    """For doctor and the console's banner: "" when llama.cpp's `/props` answer shows a template that
    takes tools (or says nothing of it), else what is wrong and the fix."""
    return f"{TOOLS_UNAVAILABLE}; {TEMPLATE_FIX}" if llama_cpp_tools(props) is False else ""


def ollama_context(show: Any) -> int | None:
    """The context Ollama runs the model with, from its `/api/show` answer (see the module's docstring)."""
    if not isinstance(show, dict):
        return None
    parameters = show.get("parameters")
    if isinstance(parameters, str):
        for line in parameters.splitlines():
            key, _, value = line.strip().partition(" ")
            if key == "num_ctx" and value.strip().isdigit():
                return int(value.strip())
    info = show.get("model_info")
    if isinstance(info, dict):
        for key, value in info.items():
            if key.endswith(".context_length") and isinstance(value, int) and value > 0:
                return min(value, OLLAMA_DEFAULT_CONTEXT)
    return None


async def ask_server(
    client: httpx.AsyncClient, base_url: str, model: str, kind: str = "openai", api_key: str = ""
) -> ServerFacts:
    """What a local server reports for `model`: llama.cpp's `/props`, else Ollama's `/api/show`;
    empty facts when neither answers."""
    import httpx

    root = server_root(base_url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    Read = Callable[[Any], int | None]
    attempts: list[tuple[str, str, dict[str, Any] | None, Read, Callable[[Any], bool | None]]] = []
    if kind != "ollama":
        attempts.append(("GET", "/props", None, llama_cpp_context, llama_cpp_tools))
    # Ollama's own "no tools" (its capabilities) is the Ollama provider's to tell (providers.ollama).
    attempts.append(("POST", "/api/show", {"model": model}, ollama_context, lambda _: None))
    tools: bool | None = None
    for method, path, body, read, read_tools in attempts:
        try:
            response = await client.request(
                method, root + path, json=body, headers=headers, timeout=ASK_TIMEOUT_S
            )
        except httpx.HTTPError as e:
            log.debug("context size: %s%s: %s", root, path, e)
            if isinstance(e, httpx.TransportError) and not isinstance(e, httpx.TimeoutException):
                break  # nobody listens there: the other endpoint is on the same server
            continue
        if response.status_code != 200:
            continue
        try:
            answer = response.json()
        except ValueError:
            continue
        said = read_tools(answer)
        tools = said if said is not None else tools
        size = read(answer)
        if size is not None:
            return ServerFacts(size, tools)
    return ServerFacts(None, tools)


class ModelInfo:
    """Each provider's context size, cached: the configured one, else the server's (asked once)."""

    def __init__(self, client: Callable[[], httpx.AsyncClient], clock: Callable[[], float] = time.monotonic):
        self._client = client
        self._clock = clock
        self._models: dict[str, ProviderModel] = {}
        self._known: dict[str, int] = {}
        self._source: dict[str, str] = {}  # "configured" or "from the server", for /status
        self._tools: dict[str, bool] = {}  # whether the server's template takes tools, when it said
        self._settled: set[str] = set()  # providers whose server need not be asked again
        self._failed_at: dict[str, float] = {}

    def add(self, model: ProviderModel) -> None:
        self._models[model.name] = model
        if model.context_tokens > 0:
            self._known[model.name] = model.context_tokens
            self._source[model.name] = "configured"

    def known(self, name: str) -> str:
        """The context size found so far, in words ("2048 tokens (from the server)"); "" when none."""
        size = self._known.get(name)
        return f"{size} tokens ({self._source.get(name, 'from the server')})" if size else ""

    def model(self, name: str) -> ProviderModel | None:
        return self._models.get(name)

    def tools_note(self, name: str) -> str:
        """For /status, doctor and the console's banner: "" unless the server said its chat template
        cannot take tools; then that, and the fix."""
        return f"{TOOLS_UNAVAILABLE}; {TEMPLATE_FIX}" if self._tools.get(name) is False else ""

    async def takes_tools(self, name: str) -> bool | None:
        """Whether the provider's server takes tools (asked at first contact); None: it did not say."""
        await self._learn(name)
        return self._tools.get(name)

    async def context_tokens(self, name: str) -> int | None:
        """The provider's context size; None when it is not configured and its server does not say."""
        await self._learn(name)
        return self._known.get(name)

    async def _learn(self, name: str) -> None:
        """Ask the provider's server once what it knows (see the module's docstring)."""
        if name in self._settled:
            return
        model = self._models.get(name)
        base = ""
        if model is not None and model.kind != "anthropic":
            base = (model.base_url or (OLLAMA_DEFAULT_URL if model.kind == "ollama" else "")).rstrip("/")
        if model is None or not base or base in PUBLIC_ENDPOINTS:
            self._settled.add(name)
            return
        failed = self._failed_at.get(name)
        if failed is not None and self._clock() - failed < RETRY_S:
            return
        facts = await ask_server(self._client(), base, model.model, model.kind, model.api_key)
        if facts.tools is not None and name not in self._tools:
            self._tools[name] = facts.tools
            if not facts.tools:
                log.warning("%s: %s; %s", name, TOOLS_UNAVAILABLE, TEMPLATE_FIX)
        if name in self._known:  # configured: the server was asked for its template only, once
            self._settled.add(name)
            return
        if facts.context is None:
            if failed is None:
                log.info(
                    "%s: the server did not say its context size (llama.cpp /props, Ollama /api/show); "
                    "requests are not fitted to it. Set providers.%s.context_tokens to fit them.",
                    name,
                    name,
                )
            self._failed_at[name] = self._clock()
            return
        log.info("%s: context size %d tokens (from the server)", name, facts.context)
        self._known[name] = facts.context
        self._source[name] = "from the server"
        self._failed_at.pop(name, None)
        self._settled.add(name)
