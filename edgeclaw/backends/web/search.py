"""Web search providers: one request shape and one answer shape each, and the fallback chain.

Every provider is two pure functions — the request for a query (a `WebRequest`) and the
results read out of its answer — so the mapping is tested without a network. The requests
go through the guarded client (`client.fetch`), so the SSRF guard applies to the providers'
endpoints too: a SearXNG on the LAN is reached only when the owner allowed its network.

Keys travel in a header wherever the provider accepts one (all of them here), never in a
URL, so they cannot end up in a proxy's or a server's access log; they are read from the
environment or a file by `config.secrets` and registered with the scrubber there. Nothing
here logs a request, a header or a body.

DuckDuckGo has no API; the `ddgs` package that searched it makes its own connections,
outside the guard, so the "duckduckgo" provider now refuses every search, naming why
(`DUCKDUCKGO_REFUSED`), and the chain moves on to the next provider.

Results are normalised to title, URL and snippet; a hit without an http(s) URL is dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
import re
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import field
from typing import Any, get_args
from urllib.parse import urlencode, urlsplit

from edgeclaw.backends.web.client import WebRequest, WebResponse, fetch
from edgeclaw.backends.web.guard import NetworkPolicy, WebBlocked, WebError, vet
from edgeclaw.config.schema import SEARCH_PROVIDERS_KEYED, SearchProviderName
from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

# The providers, in the order the docs list them. "duckduckgo" is refused (DUCKDUCKGO_REFUSED).
PROVIDERS: tuple[str, ...] = get_args(SearchProviderName)
# Each provider's public endpoint; SearXNG has none (it is the owner's own instance).
DEFAULT_URLS = {
    "brave": "https://api.search.brave.com/res/v1/web/search",
    "tavily": "https://api.tavily.com/search",
    "jina": "https://s.jina.ai/",
    "exa": "https://api.exa.ai/search",
    "perplexity": "https://api.perplexity.ai/chat/completions",
}
DEFAULT_PERPLEXITY_MODEL = "sonar"

MAX_RESULTS = 20  # Brave's and Tavily's own ceiling per request; more is not a search, it is a crawl
MAX_TITLE_CHARS = 200
MAX_SNIPPET_CHARS = 500
MAX_ANSWER_CHARS = 4000  # Perplexity's written answer
MAX_DETAIL_CHARS = 200  # of a provider's own error message, in ours
MAX_URL_CHARS = 2048  # longer is not a result page's address
MAX_RESPONSE_BYTES = 2 * 1024 * 1024  # a results page is tens of kB; more is not a search answer

NO_RESULTS = "no results"

_TAG = re.compile(r"<[^>]{0,200}>")
_SPACE = re.compile(r"\s+")


@dataclass(frozen=True, slots=True)
class SearchHit:
    title: str
    url: str
    snippet: str

    def as_dict(self) -> dict[str, str]:
        return {"title": self.title, "url": self.url, "snippet": self.snippet}


@dataclass(frozen=True, slots=True)
class SearchAnswer:
    """What one provider answered: its hits, and a written answer when it gives one (Perplexity)."""

    provider: str
    hits: list[SearchHit]
    answer: str = ""


@dataclass(frozen=True)
class ProviderSettings:
    """One provider as configured: where it is, its key (already read), its limits."""

    kind: str
    url: str = ""  # "" = the provider's public endpoint (DEFAULT_URLS)
    api_key: str = field(default="", repr=False)  # never in a repr, a log line or a traceback
    model: str = ""  # Perplexity's model; "" = DEFAULT_PERPLEXITY_MODEL
    timeout_s: float = 10.0

    @property
    def endpoint(self) -> str:
        return self.url or DEFAULT_URLS.get(self.kind, "")


class SearchFailed(BackendError):
    """One provider could not answer (unreachable, refused, blocked, an answer we cannot read)."""


class SearchUnavailable(SearchFailed):
    """The provider cannot be used here at all (its optional package is not installed)."""


class SearchExhausted(BackendError):
    """Every provider of the chain failed; the message names each and why."""

    def __init__(self, failures: Sequence[tuple[str, str]]) -> None:
        self.failures = list(failures)
        super().__init__(
            "no search provider answered: " + "; ".join(f"{name}: {why}" for name, why in self.failures)
        )


# --- the text of results ----------------------------------------------------------------------


def clean_text(value: object, limit: int) -> str:
    """A provider's title or snippet as plain text: tags (Brave's <strong>) and entities gone,
    whitespace collapsed, cut at `limit` characters."""
    if not isinstance(value, str):
        return ""
    text = _SPACE.sub(" ", html.unescape(_TAG.sub("", value))).strip()
    if len(text) > limit:
        text = text[: limit - 1].rstrip() + "…"
    return text


def _hit(title: object, url: object, snippet: object) -> SearchHit | None:
    if not isinstance(url, str):
        return None
    url = url.strip()
    if len(url) > MAX_URL_CHARS or any(c.isspace() or not c.isprintable() for c in url):
        return None  # an address never holds these; a line break would make one result look like two
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return None  # a model is about to fetch these: nothing but web addresses
    return SearchHit(clean_text(title, MAX_TITLE_CHARS) or url, url, clean_text(snippet, MAX_SNIPPET_CHARS))


def _hits(rows: object, n: int, pick: Callable[[dict[str, Any]], SearchHit | None]) -> list[SearchHit]:
    if not isinstance(rows, list):
        raise SearchFailed("the answer has no list of results")
    out: list[SearchHit] = []
    seen: set[str] = set()
    for row in rows:
        hit = pick(row) if isinstance(row, dict) else None
        if hit is not None and hit.url not in seen:
            seen.add(hit.url)
            out.append(hit)
            if len(out) >= n:
                break
    return out


def _json(body: bytes) -> dict[str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise SearchFailed("the answer is not JSON") from None
    if not isinstance(value, dict):
        raise SearchFailed("the answer is not a JSON object")
    return value


# --- the providers: request and answer ----------------------------------------------------------


def _get(url: str, headers: dict[str, str], s: ProviderSettings) -> WebRequest:
    return WebRequest(url, headers=headers, timeout_s=s.timeout_s, max_bytes=MAX_RESPONSE_BYTES)


def _post_json(body: dict[str, Any], headers: dict[str, str], s: ProviderSettings) -> WebRequest:
    """A POST of a JSON body to the provider's endpoint; `headers` carry its Content-Type and key."""
    return WebRequest(
        s.endpoint,
        method="POST",
        headers=headers,
        body=json.dumps(body, ensure_ascii=False).encode("utf-8"),
        timeout_s=s.timeout_s,
        max_bytes=MAX_RESPONSE_BYTES,
    )


def _bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"} if key else {}


def searxng_request(query: str, n: int, s: ProviderSettings) -> WebRequest:
    base = s.endpoint.rstrip("/")
    if not base.endswith("/search"):
        base += "/search"
    # SearXNG has no result count: a page is what its engines gave (about 20); we cut it.
    params = urlencode({"q": query, "format": "json", "pageno": 1})
    # An instance behind a reverse proxy that wants a token gets it as a bearer header.
    headers = {"Accept": "application/json", **_bearer(s.api_key)}
    return _get(f"{base}?{params}", headers, s)


def searxng_parse(body: bytes, n: int) -> SearchAnswer:
    data = _json(body)
    hits = _hits(data.get("results"), n, lambda r: _hit(r.get("title"), r.get("url"), r.get("content")))
    down = data.get("unresponsive_engines")
    if not hits and isinstance(down, list) and down:
        # Its engines failed (a CAPTCHA, a timeout): the instance could not search, which is not
        # "nothing found". Pairs of [engine, reason].
        named = [
            f"{clean_text(e[0], 40)} ({clean_text(e[1], 60)})"
            if isinstance(e, list) and len(e) == 2
            else clean_text(e, 40)
            for e in down[:5]
        ]
        raise SearchFailed(f"no results: its engines did not answer: {', '.join(named)}")
    return SearchAnswer("searxng", hits)


def brave_request(query: str, n: int, s: ProviderSettings) -> WebRequest:
    params = urlencode({"q": query, "count": min(n, MAX_RESULTS)})
    headers = {"Accept": "application/json", "X-Subscription-Token": s.api_key}
    return _get(f"{s.endpoint}?{params}", headers, s)


def brave_parse(body: bytes, n: int) -> SearchAnswer:
    data = _json(body)
    web = data.get("web")
    # No "web" section at all is Brave's answer for nothing found (it omits empty sections).
    rows = web.get("results") if isinstance(web, dict) else [] if web is None else None
    hits = _hits(rows, n, lambda r: _hit(r.get("title"), r.get("url"), r.get("description")))
    return SearchAnswer("brave", hits)


def tavily_request(query: str, n: int, s: ProviderSettings) -> WebRequest:
    body = {"query": query, "max_results": min(n, MAX_RESULTS), "search_depth": "basic"}
    headers = {"Content-Type": "application/json", **_bearer(s.api_key)}
    return _post_json(body, headers, s)


def tavily_parse(body: bytes, n: int) -> SearchAnswer:
    data = _json(body)
    hits = _hits(data.get("results"), n, lambda r: _hit(r.get("title"), r.get("url"), r.get("content")))
    return SearchAnswer("tavily", hits)


def jina_request(query: str, n: int, s: ProviderSettings) -> WebRequest:
    base = s.endpoint if s.endpoint.endswith("/") else s.endpoint + "/"
    headers = {
        "Accept": "application/json",
        # Titles, URLs and descriptions only: without it every result carries its whole page.
        "X-Respond-With": "no-content",
        **_bearer(s.api_key),
    }
    return _get(f"{base}?{urlencode({'q': query})}", headers, s)


def jina_parse(body: bytes, n: int) -> SearchAnswer:
    data = _json(body)
    rows = data.get("data")
    hits = _hits(
        [] if rows is None else rows,
        n,
        lambda r: _hit(r.get("title"), r.get("url"), r.get("description") or r.get("content")),
    )
    return SearchAnswer("jina", hits)


def exa_request(query: str, n: int, s: ProviderSettings) -> WebRequest:
    # Highlights: a few sentences of each page that match the query, which is what a snippet is.
    body = {"query": query, "numResults": min(n, MAX_RESULTS), "contents": {"highlights": True}}
    headers = {"Content-Type": "application/json", "x-api-key": s.api_key}
    return _post_json(body, headers, s)


def _exa_hit(row: dict[str, Any]) -> SearchHit | None:
    highlights = row.get("highlights")
    if isinstance(highlights, list) and highlights:
        snippet: object = " … ".join(h for h in highlights if isinstance(h, str))
    else:
        snippet = row.get("summary") or row.get("text")
    return _hit(row.get("title"), row.get("url"), snippet)


def exa_parse(body: bytes, n: int) -> SearchAnswer:
    data = _json(body)
    return SearchAnswer("exa", _hits(data.get("results"), n, _exa_hit))


def perplexity_request(query: str, n: int, s: ProviderSettings) -> WebRequest:
    body = {
        "model": s.model or DEFAULT_PERPLEXITY_MODEL,
        "messages": [{"role": "user", "content": query}],
        "max_tokens": 800,  # an answer to read on a board, not an essay to pay for
    }
    headers = {"Content-Type": "application/json", "Accept": "application/json", **_bearer(s.api_key)}
    return _post_json(body, headers, s)


def perplexity_parse(body: bytes, n: int) -> SearchAnswer:
    data = _json(body)
    answer = ""
    choices = data.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        message = choices[0].get("message")
        if isinstance(message, dict) and isinstance(message.get("content"), str):
            answer = message["content"].strip()
            if len(answer) > MAX_ANSWER_CHARS:
                answer = answer[: MAX_ANSWER_CHARS - 1].rstrip() + "…"
    results = data.get("search_results")
    if isinstance(results, list):
        hits = _hits(results, n, lambda r: _hit(r.get("title"), r.get("url"), r.get("snippet")))
    else:
        # Older answers carry only `citations`, a list of URLs.
        citations = data.get("citations")
        rows = [{"url": c} for c in citations] if isinstance(citations, list) else None
        if rows is None and not answer:
            raise SearchFailed("the answer has neither search results, citations nor a message")
        hits = _hits(rows or [], n, lambda r: _hit("", r.get("url"), ""))
    return SearchAnswer("perplexity", hits, answer)


Requester = Callable[[str, int, ProviderSettings], WebRequest]
Parser = Callable[[bytes, int], SearchAnswer]

HTTP_PROVIDERS: dict[str, tuple[Requester, Parser]] = {
    "searxng": (searxng_request, searxng_parse),
    "brave": (brave_request, brave_parse),
    "tavily": (tavily_request, tavily_parse),
    "jina": (jina_request, jina_parse),
    "exa": (exa_request, exa_parse),
    "perplexity": (perplexity_request, perplexity_parse),
}


# --- calling one provider -----------------------------------------------------------------------


def _error_detail(body: bytes) -> str:
    """A provider's own words for a refusal, when it gives some (a short JSON field, else nothing)."""
    try:
        data = json.loads(body[:65536])
    except (ValueError, RecursionError):
        return ""
    if not isinstance(data, dict):
        return ""
    for key in ("error", "message", "detail", "readableMessage"):
        value = data.get(key)
        if isinstance(value, dict):  # Brave: {"error": {"detail": ..., "code": ...}}, OpenAI style
            value = value.get("detail") or value.get("message")
        if isinstance(value, str) and value.strip():
            return clean_text(value, MAX_DETAIL_CHARS)
    return ""


Fetcher = Callable[[WebRequest, NetworkPolicy], Awaitable[WebResponse]]


def _check_ready(settings: ProviderSettings) -> None:
    if settings.kind == "searxng" and not settings.endpoint:
        raise SearchFailed("no instance URL configured (tools.web.search.searxng.url)")
    if settings.kind in SEARCH_PROVIDERS_KEYED and not settings.api_key:
        # The loader requires the key's source, so an empty one is a source that could not be read.
        raise SearchFailed(
            f"no API key (tools.web.search.{settings.kind}: its variable or file could not be read)"
        )


async def search_http(
    query: str, n: int, settings: ProviderSettings, policy: NetworkPolicy, fetcher: Fetcher = fetch
) -> SearchAnswer:
    """One HTTP provider, through the guarded client. Raises SearchFailed naming what went wrong."""
    make, parse = HTTP_PROVIDERS[settings.kind]
    _check_ready(settings)
    request = make(query, n, settings)
    try:
        response = await fetcher(request, policy)
    except WebBlocked as e:
        raise SearchFailed(str(e)) from None  # it names the rule or range: "blocked: ..."
    except TimeoutError:
        raise SearchFailed(f"no answer within {settings.timeout_s:g} s") from None
    except WebError as e:
        raise SearchFailed(str(e)) from None
    if response.status >= 400:
        detail = _error_detail(response.body)
        hint = ""
        if settings.kind == "searxng" and response.status == 403:
            hint = " (is 'json' listed under search.formats in the instance's settings.yml?)"
        elif response.status in (401, 403):
            hint = " (is the API key right?)"
        raise SearchFailed(f"HTTP {response.status}{': ' + detail if detail else ''}{hint}")
    if response.truncated:
        raise SearchFailed(f"the answer is over {request.max_bytes} bytes")
    return parse(response.body, n)


# Why the "duckduckgo" provider answers nothing: its only way in was the `ddgs` package, whose
# own HTTP client connects wherever it is pointed, past the SSRF guard (no pinned address, no
# allow_networks, no proxy rule), so a search could not be held to the same rules as a fetch.
DUCKDUCKGO_REFUSED = (
    "the duckduckgo provider is disabled: it searched through the ddgs package, whose own HTTP "
    "client connects outside the SSRF guard (tools.web); use searxng, brave, tavily, jina, exa "
    "or perplexity instead"
)


async def probe(settings: ProviderSettings, policy: NetworkPolicy, timeout_s: float = 3.0) -> str:
    """Whether a provider could be asked, without asking it (a search can cost money): its key or
    package, the guard's verdict on its endpoint, and a TCP connection to the address the guard
    vetted (or to the proxy). Returns what was found; raises SearchFailed naming the problem."""
    if settings.kind == "duckduckgo":
        raise SearchUnavailable(DUCKDUCKGO_REFUSED)
    _check_ready(settings)
    parts = urlsplit(settings.endpoint)
    try:
        target = await vet(parts.scheme, parts.hostname or "", parts.port, policy)
    except WebError as e:  # WebBlocked included: it names the rule or range
        raise SearchFailed(str(e)) from None
    if target.proxy is not None:
        proxy = urlsplit(target.proxy)
        host, port, via = proxy.hostname or "", proxy.port or 80, f" through the proxy {target.proxy}"
    else:
        host, port, via = target.address, target.port, ""
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        raise SearchFailed(f"no answer from {host}:{port}{via} within {timeout_s:g} s") from None
    except OSError as e:
        raise SearchFailed(f"cannot connect to {host}:{port}{via}: {e.strerror or e}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return f"{settings.endpoint} reachable ({target.address}, port {target.port}{via})"


# --- the chain ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class SearchOutcome:
    answer: SearchAnswer
    failures: list[tuple[str, str]]  # the providers tried before it, and why each did not answer


class SearchChain:
    """The configured provider, then the fallbacks in order, until one answers.

    A provider that fails (unreachable, timed out, blocked, HTTP 4xx/5xx, an answer that is
    not its documented shape) hands over to the next. So does one that found nothing, when
    `fallback_on_empty` is on: an engine that finds nothing for a real query is more often
    rate-limited or broken than right. When every provider found nothing, that is the answer.
    """

    def __init__(
        self,
        providers: Sequence[ProviderSettings],
        *,
        fallback_on_empty: bool = True,
        fetcher: Fetcher = fetch,
    ) -> None:
        if not providers:
            raise ValueError("a search chain needs at least one provider")
        unknown = [p.kind for p in providers if p.kind not in PROVIDERS]
        if unknown:
            raise ValueError(
                f"unknown search provider {unknown[0]!r} (expected one of {', '.join(PROVIDERS)})"
            )
        self.providers = list(providers)
        self.fallback_on_empty = fallback_on_empty
        self._fetch = fetcher

    @property
    def names(self) -> list[str]:
        return [p.kind for p in self.providers]

    async def probe(self, policy: NetworkPolicy) -> list[tuple[str, bool, str]]:
        """Each provider: (name, usable, what was found or what is wrong), asking none of them."""
        out: list[tuple[str, bool, str]] = []
        for settings in self.providers:
            try:
                out.append((settings.kind, True, await probe(settings, policy)))
            except SearchFailed as e:
                out.append((settings.kind, False, str(e)))
        return out

    async def search(self, query: str, n: int, policy: NetworkPolicy) -> SearchOutcome:
        failures: list[tuple[str, str]] = []
        empty: SearchAnswer | None = None  # the first provider that answered, with nothing
        for settings in self.providers:
            try:
                if settings.kind == "duckduckgo":
                    raise SearchUnavailable(DUCKDUCKGO_REFUSED)
                answer = await search_http(query, n, settings, policy, self._fetch)
            except SearchFailed as e:
                failures.append((settings.kind, str(e)))
                continue
            if answer.hits or answer.answer or not self.fallback_on_empty:
                return SearchOutcome(answer, failures)
            empty = empty or answer
            failures.append((settings.kind, NO_RESULTS))
        if empty is not None:  # nobody failed outright: nothing found is the answer
            return SearchOutcome(empty, [f for f in failures if f[0] != empty.provider])
        raise SearchExhausted(failures)
