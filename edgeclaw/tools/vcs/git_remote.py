"""Where the git tool's network actions may go, and how git is held to exactly that.

A remote URL is checked as http_request checks one (`backends.web.guard`): the host must match
the agent's `allowed_domains`, the port one of `tools.web.ports`, and every address the name
resolves to must pass the SSRF guard (no LAN, loopback or metadata address unless the owner
allowed it). HTTPS only; plain http only to the hosts `[tools.git] allow_http_hosts` lists. No
file://, ssh, git:// or ext:: URL, no scp-like `host:path`, no user name or password in the URL.

Git resolves names itself, so the vetted address is handed to it (`http.curloptResolve`): the
connection goes where the guard looked, not where a second DNS answer would send it. Redirects
are off (`http.followRedirects=false`). A credential is named, never written: the value of
`[tools.web.secrets.NAME]` goes into an `Authorization` header scoped to that remote's origin,
through the environment (`GIT_CONFIG_COUNT`), never the command line.
"""

from __future__ import annotations

import base64
from collections.abc import Iterable, Sequence
from typing import Final
from urllib.parse import urlsplit

from edgeclaw.backends.web.guard import NetworkPolicy, WebBlocked, WebError, host_matches, vet
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass

MAX_URL_CHARS: Final = 2048


@dataclass(frozen=True)
class RemoteTarget:
    """A remote URL that passed every check, and the address git must connect to."""

    url: str
    scheme: str
    host: str
    port: int
    address: str
    proxy: str | None

    @property
    def origin(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/"


def looks_like_url(value: str) -> bool:
    """Whether a `remote` argument is a URL (or meant as one) rather than a remote's name."""
    return "://" in value or ":" in value or "@" in value or "/" in value


def _syntax(url: str, allow_http_hosts: Sequence[str]) -> tuple[str, str, int | None]:
    if not isinstance(url, str) or not url:
        raise ToolRefused("refused: the remote URL is empty")
    if len(url) > MAX_URL_CHARS:
        raise ToolRefused(f"refused: the remote URL is longer than {MAX_URL_CHARS} characters")
    if url.startswith("-"):
        raise ToolRefused(f"refused: remote URL {url!r} begins with '-' (git would read it as an option)")
    if any(ord(c) < 0x21 or c == "\x7f" for c in url):
        raise ToolRefused("refused: the remote URL contains a space or a control character")
    if "::" in url.split("/", 1)[0]:
        raise ToolRefused(f"refused: {url!r} names a remote helper (ext::, fd::...); only https:// URLs")
    parts = urlsplit(url)
    scheme = parts.scheme.lower() if "://" in url else ""
    if scheme not in ("https", "http"):
        shown = f"{scheme}://" if scheme else "a scp-like host:path (or local path)"
        raise ToolRefused(f"refused: {shown} remote {url!r}; the git tool reaches https:// URLs only")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ToolRefused(
            "refused: the remote URL carries a user name or password; name a credential instead "
            "(credential: NAME, from [tools.web.secrets])"
        )
    try:
        host, port = parts.hostname or "", parts.port
    except ValueError as e:
        raise ToolRefused(f"refused: remote URL {url!r}: {e}") from None
    if not host:
        raise ToolRefused(f"refused: remote URL {url!r} names no host")
    if scheme == "http" and not host_matches(host, allow_http_hosts):
        raise ToolRefused(
            f"refused: http:// to {host}: plain http only to hosts in tools.git.allow_http_hosts; use https://"
        )
    return scheme, host, port


async def vet_remote(url: str, policy: NetworkPolicy, allow_http_hosts: Sequence[str]) -> RemoteTarget:
    """Check a remote URL and resolve its host once; ToolRefused says which rule stopped it."""
    scheme, host, port = _syntax(url, allow_http_hosts)
    try:
        vetted = await vet(scheme, host, port, policy)
    except WebBlocked as e:
        hint = "; git reaches only hosts in tools.web.allowed_domains" if "allowed_domains" in str(e) else ""
        raise ToolRefused(f"{e}{hint}") from None
    except WebError as e:
        raise ToolError(str(e)) from None
    return RemoteTarget(url, vetted.scheme, vetted.host, vetted.port, vetted.address, vetted.proxy)


def network_overrides(targets: Sequence[RemoteTarget]) -> list[tuple[str, str]]:
    """`-c` settings that pin each target's host to its vetted address and allow its scheme."""
    out: list[tuple[str, str]] = []
    schemes: set[str] = set()
    proxies = {t.proxy for t in targets}
    for t in targets:
        schemes.add(t.scheme)
        if t.host == t.address:
            continue  # an address literal: nothing for git to look up
        address = f"[{t.address}]" if ":" in t.address else t.address
        out.append(("http.curloptResolve", f"{t.host}:{t.port}:{address}"))
    if "http" in schemes:
        out.append(("protocol.http.allow", "always"))
    proxy = next(iter(proxies), None) if len(proxies) == 1 else None
    out.append(("http.proxy", proxy or ""))
    return out


def allowed_protocols(targets: Iterable[RemoteTarget]) -> str:
    """`GIT_ALLOW_PROTOCOL`: the only transports git may use in this run, whatever config says."""
    return ":".join(sorted({t.scheme for t in targets})) or "https"


def credential_env(targets: Sequence[RemoteTarget], user: str, secret: str) -> dict[str, str]:
    """An Authorization header for each target's origin, as config in the environment (never argv)."""
    token = base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
    env: dict[str, str] = {}
    origins = sorted({t.origin for t in targets})
    for i, origin in enumerate(origins):
        env[f"GIT_CONFIG_KEY_{i}"] = f"http.{origin}.extraHeader"
        env[f"GIT_CONFIG_VALUE_{i}"] = f"Authorization: Basic {token}"
    env["GIT_CONFIG_COUNT"] = str(len(origins))
    return env


def header_token(user: str, secret: str) -> str:
    """The base64 form of a credential as it travels, to scrub from output too."""
    return base64.b64encode(f"{user}:{secret}".encode()).decode("ascii")
