"""What an HTTP listener needs before it may start: a strong enough bearer token, TLS off loopback.

Both HTTP endpoints (`[mcp.server]` and `[fleet_page]`) take a bearer token from a file. A token
must carry at least 128 bits, counted conservatively by its length alone: at least 32 characters
when every one is a hex digit (4 bits each), otherwise at least 22 characters, all of them from
the base64url alphabet `[A-Za-z0-9_-]` (6 bits each; `secrets.token_urlsafe(32)` makes 43).

A listener on anything but a loopback address sends its token, and everything after it, across
the network: without TLS that is refused unless the section says `allow_plain_http = true` (a
private network, or TLS ended by a reverse proxy on the same host), which `doctor` points out.
"""

from __future__ import annotations

import ipaddress
import string
from pathlib import Path

from edgeclaw.config.schema import Config

MIN_TOKEN_BITS = 128
HEX = frozenset(string.hexdigits)
URLSAFE = frozenset(string.ascii_letters + string.digits + "-_")
MAKE_TOKEN = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def token_problem(token: str) -> str | None:
    """Why `token` is too weak for a bearer token, or None."""
    if token and set(token) <= HEX:
        enough, bits_each = len(token) >= 32, 4
    else:
        enough, bits_each = len(token) >= 22 and set(token) <= URLSAFE, 6
    if enough:
        return None
    return (
        f"the token must carry at least {MIN_TOKEN_BITS} bits: 32 hex digits or 22 characters of "
        f"[A-Za-z0-9_-] (this one has {len(token)} characters, ~{len(token) * bits_each} bits at most); "
        f"make one with {MAKE_TOKEN}"
    )


def is_loopback(host: str) -> bool:
    host = host.strip().removeprefix("[").removesuffix("]")
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def plain_http_problem(section: str, listen: str, tls: bool, allow_plain_http: bool) -> str | None:
    """Why `listen` must not serve plain HTTP, or None."""
    if not listen or tls or allow_plain_http:
        return None
    host = listen.rpartition(":")[0]
    if is_loopback(host):
        return None
    return (
        f"{listen!r} is not a loopback address and {section} has no TLS: what it serves (and a bearer "
        f"token, where there is one) would cross the network in the clear. Listen on 127.0.0.1, "
        + (
            "set tls_cert_file and tls_key_file, "
            if section == "mcp.server"
            else "put a TLS proxy in front, "
        )
        + f"or set {section}.allow_plain_http = true to accept it"
    )


def _token_file_problem(path: str) -> str | None:
    try:
        token = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None  # unreadable here (another user, not there yet): the start-up names it
    problem = token_problem(token)
    return f"{path}: {problem}" if problem else None


def listener_problems(config: Config) -> list[tuple[str, str]]:
    """[mcp.server], [metrics] and [fleet_page]: plain HTTP off loopback, and weak bearer tokens."""
    problems: list[tuple[str, str]] = []
    srv, fp = config.mcp.server, config.fleet_page
    if srv.listen:
        if problem := plain_http_problem(
            "mcp.server", srv.listen, bool(srv.tls_cert_file), srv.allow_plain_http
        ):
            problems.append(("mcp.server.listen", problem))
        if srv.token_file and (problem := _token_file_problem(srv.token_file)):
            problems.append(("mcp.server.token_file", problem))
    metrics = config.metrics
    if metrics.listen and (
        problem := plain_http_problem("metrics", metrics.listen, False, metrics.allow_plain_http)
    ):
        problems.append(("metrics.listen", problem))
    if problem := plain_http_problem("fleet_page", fp.listen, False, fp.allow_plain_http):
        problems.append(("fleet_page.listen", problem))
    if fp.token_file and (problem := _token_file_problem(fp.token_file)):
        problems.append(("fleet_page.token_file", problem))
    return problems
