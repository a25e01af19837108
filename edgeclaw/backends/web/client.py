"""The one guarded HTTP request path: `fetch(WebRequest, NetworkPolicy) -> WebResponse`.

Every tool that fetches a URL a model chose (web_fetch, web_search's providers, http_request)
calls `fetch`. Each request and each redirect goes through the guard (`guard.vet`): the host is
resolved once, every address checked, and the connection made to the vetted address only (the
network backend below never resolves a name), while the Host header and the TLS server name (and
the certificate check) stay the host name. Redirects are followed by hand, at most
`policy.max_redirects`, each re-checked; headers the caller set go only to the origin they were
meant for. The body is read as a stream, decompressed here (gzip, deflate) a bounded piece at a
time, and cut at `max_bytes`: a decompression bomb or a 5 GB download costs `max_bytes` of memory,
no more. One deadline (`timeout_s`) covers the whole exchange, lookups and redirects included, so
a server dripping a byte a second is cut off too.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import zlib
from collections.abc import Callable, Mapping
from dataclasses import field
from typing import TYPE_CHECKING, Any, Final

from edgeclaw.backends.web.guard import (
    NetworkPolicy,
    Vetted,
    WebBlocked,
    WebError,
    check_target,
    normalize_host,
    shown_proxy,
    vet,
)
from edgeclaw.records import dataclass

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_MAX_BYTES",
    "NetworkPolicy",
    "WebBlocked",
    "WebError",
    "WebRequest",
    "WebResponse",
    "fetch",
]

# What a request's `accept` hook is asked: the response's headers (names lower-cased) and, when
# the headers did not decide, the body's first bytes (at most SNIFF_BYTES, decoded); it answers
# True (read the body), False (do not), or None (from the headers alone: undecided).
BodyCheck = Callable[[Mapping[str, str], bytes | None], bool | None]
SNIFF_BYTES: Final = 1024

DEFAULT_MAX_BYTES: Final = 2 * 1024 * 1024
DEFAULT_TIMEOUT_S: Final = 20.0
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
# Headers that may follow a redirect to another origin; the rest (Authorization, cookies, API keys
# under any name) were meant for the first origin only.
_CROSS_ORIGIN_HEADERS: Final = frozenset({"accept", "accept-language", "user-agent", "content-type"})
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}
_ACCEPT_ENCODING: Final = "gzip, deflate"  # what the decoder below reads; never br or zstd
_SCHEME: Final = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*):")
_AUTHORITY_HOST: Final = re.compile(r"//(?:[^/?#@]*@)?[^/?#:@]")  # "//", any user info, a host
# Where the transport puts a redirect's Location (see GuardedTransport), for `_exchange` to read.
_LOCATION: Final = "edgeclaw.location"


@dataclass(frozen=True)
class WebRequest:
    url: str
    method: str = "GET"
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    timeout_s: float = DEFAULT_TIMEOUT_S
    max_bytes: int = DEFAULT_MAX_BYTES  # of the decoded body; the rest is not read
    # The first hop as `guard.vet` answered for it under the same policy (web_fetch's check):
    # connected to as is, not looked up again. Redirects are always vetted afresh.
    vetted: Vetted | None = None
    # Asked before the body of the final response is read (see BodyCheck); None: always read.
    accept: BodyCheck | None = None


@dataclass(frozen=True)
class WebResponse:
    url: str  # where the body came from (after redirects)
    status: int
    headers: dict[str, str]  # names lower-cased; repeated headers joined with ", "
    body: bytes  # decoded (gzip/deflate undone), at most max_bytes
    truncated: bool  # the server had more than max_bytes
    redirects: list[str]  # each URL a redirect led to, in order (the last is `url`)
    unread: bool = False  # the request's accept hook refused the body: `body` holds its first bytes at most

    @property
    def content_type(self) -> str:
        """The media type without parameters, lower-cased ("text/html"); "" when none was sent."""
        return self.headers.get("content-type", "").split(";", 1)[0].strip().lower()


async def fetch(request: WebRequest, policy: NetworkPolicy) -> WebResponse:
    """Make one guarded request; WebBlocked when the guard refuses a hop, WebError otherwise."""
    if request.max_bytes < 1:
        raise WebError("max_bytes must be at least 1")
    try:
        async with asyncio.timeout(request.timeout_s):
            return await _exchange(request, policy)
    except TimeoutError:
        raise WebError(f"no complete answer within {request.timeout_s:g} s") from None


# -- connections only to vetted addresses ------------------------------------------------------

_ssl_context: ssl.SSLContext | None = None


def _default_ssl_context() -> ssl.SSLContext:
    """The trust store httpx uses (certifi), made once: loading it costs milliseconds each time."""
    global _ssl_context
    if _ssl_context is None:
        import httpx

        _ssl_context = httpx.create_ssl_context()
    return _ssl_context


# When a name has several addresses, each but the last gets this long to accept the connection.
_ATTEMPT_TIMEOUT_S: Final = 3.0


def _pinned_backend(pins: dict[tuple[str, int], tuple[str, ...]]) -> Any:
    import httpcore

    class PinnedBackend(httpcore.AsyncNetworkBackend):
        """Connects a host name only to the address the guard vetted for it; never resolves."""

        def __init__(self) -> None:
            self._inner = httpcore.AnyIOBackend()

        async def connect_tcp(
            self,
            host: str,
            port: int,
            timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
            local_address: str | None = None,
            socket_options: Any = None,
        ) -> httpcore.AsyncNetworkStream:
            addresses = pins.get((normalize_host(host), port))
            if not addresses:  # fail closed: a connection nobody vetted
                raise WebBlocked(f"blocked: {host}:{port} was not checked by the guard")
            for address in addresses[:-1]:
                attempt = _ATTEMPT_TIMEOUT_S if timeout is None else min(timeout, _ATTEMPT_TIMEOUT_S)
                try:
                    return await self._inner.connect_tcp(
                        address, port, attempt, local_address, socket_options
                    )
                except (httpcore.ConnectError, httpcore.ConnectTimeout):
                    continue  # the next vetted address
            return await self._inner.connect_tcp(addresses[-1], port, timeout, local_address, socket_options)

        async def connect_unix_socket(
            self,
            path: str,
            timeout: float | None = None,  # noqa: ASYNC109 (httpcore's signature)
            socket_options: Any = None,
        ) -> Any:
            raise WebBlocked("blocked: unix sockets")

        async def sleep(self, seconds: float) -> None:
            await self._inner.sleep(seconds)

    return PinnedBackend()


def _guarded_transport(policy: NetworkPolicy, first: Vetted | None = None) -> httpx.AsyncBaseTransport:
    import httpcore
    import httpx

    ssl_context = policy.ssl_context or _default_ssl_context()

    class GuardedTransport(httpx.AsyncBaseTransport):
        """Vets each request's target, then sends it directly (pinned) or through the proxy."""

        def __init__(self) -> None:
            self._pins: dict[tuple[str, int], tuple[str, ...]] = {}
            self._direct = httpx.AsyncHTTPTransport(verify=ssl_context, trust_env=False)
            # httpx has no switch for the network backend, so its pool is replaced by one that
            # connects through PinnedBackend (same settings otherwise).
            self._direct._pool = httpcore.AsyncConnectionPool(
                ssl_context=ssl_context,
                max_connections=4,
                retries=0,
                network_backend=_pinned_backend(self._pins),
            )
            self._proxied: dict[str, httpx.AsyncHTTPTransport] = {}
            self.last: Vetted | None = None
            self._first = first

        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            url = request.url
            host = url.raw_host.decode("ascii")
            target, self._first = self._first, None  # the caller's vetted first hop: used once
            if target is None or not _same_target(target, url.scheme, host, url.port):
                target = await vet(url.scheme, host, url.port, policy)
            self.last = target
            if target.proxy is None:
                self._pins[(target.host, target.port)] = (target.address, *target.alternatives)
                return _location_aside(await self._direct.handle_async_request(request))
            transport = self._proxied.get(target.proxy)
            if transport is None:
                transport = httpx.AsyncHTTPTransport(verify=ssl_context, trust_env=False, proxy=target.proxy)
                self._proxied[target.proxy] = transport
            return _location_aside(await transport.handle_async_request(request))

        async def aclose(self) -> None:
            await self._direct.aclose()
            for transport in self._proxied.values():
                await transport.aclose()

    return GuardedTransport()


def _location_aside(response: httpx.Response) -> httpx.Response:
    """A redirect's Location moved from the headers to the response's extensions.

    httpx builds a redirect's next request even when it does not follow it, and raises its own
    InvalidURL on a Location it cannot build one from (`http:127.0.0.1:8080/`, `data:...`,
    `jar:...`); `_redirect_target` reads the Location instead and refuses it by name.
    """
    location = response.headers.get("location")
    if response.status_code in _REDIRECTS and location is not None:
        del response.headers["location"]
        response.extensions = {**response.extensions, _LOCATION: location}
    return response


def _redirect_target(url: httpx.URL, location: str, status: int) -> httpx.URL:
    """Where a redirect leads, or WebBlocked naming what makes its Location unusable."""
    import httpx

    shown = location if len(location) <= 200 else location[:200] + "..."
    scheme = _SCHEME.match(location)
    if scheme is not None and scheme[1].lower() not in _DEFAULT_PORTS:
        raise WebBlocked(
            f"blocked: scheme {scheme[1].lower()!r} (only http and https): the {status} redirect to "
            f"{shown!r} is not followed"
        )
    if scheme is not None and not location[scheme.end() :].startswith("//"):
        # "http:host:port/" is a path on this server to one parser and another host to a browser's.
        raise WebBlocked(
            f"not followed: the {status} redirect's Location {shown!r} has a scheme but no '//' before "
            "the host, which clients read differently"
        )
    rest = location[scheme.end() :] if scheme is not None else location
    if rest.startswith("//") and not _AUTHORITY_HOST.match(rest):
        raise WebBlocked(f"not followed: the {status} redirect's Location {shown!r} names no host")
    try:
        target = url.join(location)
        httpx.URL(str(target))  # what the next request is built from must parse again
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        raise WebBlocked(
            f"not followed: the {status} redirect's Location {shown!r} is not a valid URL: {e}"
        ) from None
    if target.scheme not in _DEFAULT_PORTS:
        raise WebBlocked(
            f"blocked: scheme {target.scheme!r} (only http and https): the {status} redirect to "
            f"{shown!r} is not followed"
        )
    if not target.host:
        raise WebBlocked(f"not followed: the {status} redirect's Location {shown!r} names no host")
    return target


def _same_target(target: Vetted, scheme: str, host: str, port: int | None) -> bool:
    scheme = scheme.lower()
    port = port if port is not None else _DEFAULT_PORTS.get(scheme)
    return (target.scheme, target.host, target.port) == (scheme, normalize_host(host), port)


# -- the exchange: redirects by hand -----------------------------------------------------------


def _origin(url: httpx.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


async def _exchange(request: WebRequest, policy: NetworkPolicy) -> WebResponse:
    import httpx

    try:
        url = httpx.URL(request.url)
    except (httpx.InvalidURL, TypeError) as e:
        raise WebError(f"not a valid URL: {e}") from None
    method = request.method.upper()
    body = request.body
    headers = {k: v for k, v in request.headers.items()}
    names = {k.lower() for k in headers}
    if "accept-encoding" not in names:
        headers["Accept-Encoding"] = _ACCEPT_ENCODING
    if "user-agent" not in names:
        from edgeclaw import __version__

        headers["User-Agent"] = f"edgeclaw/{__version__}"
    redirects: list[str] = []
    transport = _guarded_transport(policy, request.vetted)
    async with httpx.AsyncClient(
        transport=transport, follow_redirects=False, trust_env=False, timeout=None
    ) as client:
        while True:
            check_target(url.scheme, url.host, url.port, policy)  # before httpx sees a file:// URL
            try:
                async with client.stream(method, url, headers=headers, content=body or None) as response:
                    location = response.extensions.get(_LOCATION)
                    if response.status_code in _REDIRECTS and location:
                        if len(redirects) >= policy.max_redirects:
                            raise WebError(f"too many redirects (more than {policy.max_redirects})")
                        target = _redirect_target(url, location, response.status_code)
                        if response.status_code == 303 or (
                            response.status_code in (301, 302) and method == "POST"
                        ):
                            method = "GET" if method != "HEAD" else method
                            body = b""
                            headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
                        if _origin(target) != _origin(url):
                            if body:
                                raise WebError(
                                    f"not followed: the {response.status_code} redirect to {target} would "
                                    "send the request body to another origin"
                                )
                            headers = {k: v for k, v in headers.items() if k.lower() in _CROSS_ORIGIN_HEADERS}
                        redirects.append(str(target))
                        url = target
                        continue
                    header_dict = _header_dict(response.headers)
                    content, truncated, unread = await _read_body(
                        response, request.max_bytes, request.accept, header_dict
                    )
                    return WebResponse(
                        url=str(url),
                        status=response.status_code,
                        headers=header_dict,
                        body=content,
                        truncated=truncated,
                        redirects=redirects,
                        unread=unread,
                    )
            except httpx.TimeoutException:
                raise WebError(f"{url.host}: no answer within {request.timeout_s:g} s") from None
            except httpx.ConnectError as e:
                raise WebError(_connect_failure(url, transport.last, e)) from None
            except httpx.HTTPError as e:
                raise WebError(f"{url.host}: {type(e).__name__}: {e}") from None


def _connect_failure(url: httpx.URL, target: Vetted | None, error: Exception) -> str:
    if target is None:
        return f"cannot connect to {url.host}: {error}"
    if target.proxy is not None:
        return f"cannot connect to {target.host} through the proxy {shown_proxy(target.proxy)}: {error}"
    return f"cannot connect to {target.host} ({target.address}, port {target.port}): {error}"


def _header_dict(headers: httpx.Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers.multi_items():
        key = name.lower()
        out[key] = f"{out[key]}, {value}" if key in out else value
    return out


# -- the body: streamed, decoded in bounded pieces, cut at the cap -----------------------------


class _Decoder:
    """gzip / deflate / identity, never producing more than asked for at a time."""

    def __init__(self, encoding: str) -> None:
        encoding = encoding.strip().lower()
        self.encoding = encoding
        if encoding in ("", "identity"):
            self._zlib = None
        elif encoding in ("gzip", "x-gzip"):
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif encoding == "deflate":
            self._zlib = zlib.decompressobj()
            self._raw_fallback = True  # some servers send raw deflate without the zlib header
        else:
            raise WebError(f"the body is in an encoding this client does not read: {encoding!r}")
        self._pending = b""
        self._started = False

    def feed(self, data: bytes) -> None:
        self._pending += data

    def take(self, limit: int) -> bytes:
        """Up to `limit` decoded bytes from what was fed."""
        if self._zlib is None:
            out, self._pending = self._pending[:limit], self._pending[limit:]
            return out
        try:
            out = self._zlib.decompress(self._pending, limit)
        except zlib.error:
            if self.encoding == "deflate" and not self._started:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                self._started = True
                return self.take(limit)
            raise WebError(f"the body does not decode as {self.encoding}") from None
        self._started = True
        self._pending = self._zlib.unconsumed_tail
        return out

    def has_pending(self) -> bool:
        return bool(self._pending)


async def _read_body(
    response: httpx.Response, max_bytes: int, accept: BodyCheck | None, headers: Mapping[str, str]
) -> tuple[bytes, bool, bool]:
    """(body, cut at max_bytes, refused by `accept`). With `accept`, the headers are asked first;
    when they do not decide, the first SNIFF_BYTES are read and asked about. A refused body is
    not read further (the connection is dropped with the rest unread); how long it was is not known."""
    verdict = None if accept is None else accept(headers, None)
    if verdict is False:
        return b"", False, True
    sniff = accept is not None and verdict is None
    decoder = _Decoder(response.headers.get("content-encoding", ""))
    parts: list[bytes] = []
    size = 0
    async for raw in response.aiter_raw():
        decoder.feed(raw)
        while True:
            room = max_bytes - size
            piece = decoder.take(room + 1)  # one byte more than fits tells us there is more
            if len(piece) > room:
                parts.append(piece[:room])
                return b"".join(parts), True, False
            parts.append(piece)
            size += len(piece)
            if not piece or not decoder.has_pending():
                break
        if sniff and size >= min(SNIFF_BYTES, max_bytes):
            sniff = False
            head = b"".join(parts)
            if accept is not None and accept(headers, head[:SNIFF_BYTES]) is False:
                return head[:SNIFF_BYTES], False, True
    body = b"".join(parts)
    if sniff and accept is not None and accept(headers, body) is False:  # all of it shorter than the window
        return body, False, True
    return body, False, False
