"""The SSRF guard: where a request a model asked for may go.

A board sits on a LAN beside routers, NAS boxes, PLCs and a cloud's metadata endpoint. A URL a
model chose may reach none of them unless the owner allowed it. For every request (and every
redirect) the guard checks, in order:

1. the scheme: http or https only;
2. the host against `allowed_domains` when the caller has such a list (`http_request`);
3. the port against the configured set (default 80, 443, 8080, 8443);
4. the addresses: the host is resolved once (through `NetworkPolicy.resolver`, the seam tests
   use), and every address it resolves to is classified; one blocked address refuses the
   request. Blocked are loopback, RFC 1918, link-local (with cloud metadata), carrier-grade NAT,
   multicast, broadcast, "this network", documentation, benchmarking and reserved ranges, the
   IPv6 unspecified and loopback addresses, unique-local and link-local; and the IPv4-mapped,
   IPv4-compatible, NAT64, 6to4 and Teredo spellings of blocked IPv4 addresses. The owner's
   `allow_networks` and `allow_hosts` lift the range check (never the scheme or port checks).

The result is a `Vetted` target: the address the connection must go to. The client connects to
exactly that address (no second lookup a rebinding DNS server could answer differently), sending
the host name in the Host header and as the TLS server name, whose certificate is checked.

A proxy from the environment (HTTPS_PROXY, HTTP_PROXY, ALL_PROXY, NO_PROXY) is used, but only
after the target passed every check here: the target is still resolved and vetted on the board.
The connection then goes to the proxy, which resolves the name again itself; the proxy is the
owner's, so that second lookup is the owner's to trust.
"""

from __future__ import annotations

import asyncio
import fnmatch
import ipaddress
import os
import socket
import ssl
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import field
from typing import Final

from edgeclaw.errors import BackendError
from edgeclaw.records import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

# (host, port) -> the addresses the name resolves to, as strings, in preference order.
Resolver = Callable[[str, int], Awaitable[list[str]]]

DEFAULT_PORTS: Final = frozenset({80, 443, 8080, 8443})
DEFAULT_MAX_REDIRECTS: Final = 5
SCHEMES: Final = ("http", "https")
_DEFAULT_PORT = {"http": 80, "https": 443}


class WebError(BackendError):
    """A request that could not be made or answered: unresolvable name, refused connection,
    timeout, too many redirects, a body that does not decode."""


class WebBlocked(WebError):
    """The guard refused the request; the message names the rule or the address range."""


@dataclass(frozen=True)
class BlockedRange:
    """An address range web requests may not reach, with what it is."""

    network: IPNetwork
    label: str  # what the range is: "loopback", "private", "link-local" ...
    note: str = ""  # which standard or what lives there: "RFC 1918", "cloud metadata"

    def describe(self) -> str:
        inner = f"{self.network}, {self.note}" if self.note else str(self.network)
        return f"{self.label} ({inner})"


def _ranges(rows: Iterable[tuple[str, str, str]]) -> tuple[BlockedRange, ...]:
    return tuple(BlockedRange(ipaddress.ip_network(net), label, note) for net, label, note in rows)


# First match wins, so a narrower range stands before the range that holds it.
BLOCKED_V4: Final = _ranges(
    [
        ("0.0.0.0/8", "'this network'", "unspecified"),
        ("10.0.0.0/8", "private", "RFC 1918"),
        ("100.64.0.0/10", "carrier-grade NAT", "RFC 6598"),
        ("127.0.0.0/8", "loopback", ""),
        ("169.254.0.0/16", "link-local", "cloud metadata"),
        ("172.16.0.0/12", "private", "RFC 1918"),
        ("192.0.0.0/24", "reserved", "IETF protocol assignments"),
        ("192.0.2.0/24", "documentation", "TEST-NET-1"),
        ("192.88.99.0/24", "reserved", "6to4 relay anycast"),
        ("192.168.0.0/16", "private", "RFC 1918"),
        ("198.18.0.0/15", "reserved", "benchmarking"),
        ("198.51.100.0/24", "documentation", "TEST-NET-2"),
        ("203.0.113.0/24", "documentation", "TEST-NET-3"),
        ("224.0.0.0/4", "multicast", ""),
        ("255.255.255.255/32", "broadcast", ""),
        ("240.0.0.0/4", "reserved", "future use"),
    ]
)
BLOCKED_V6: Final = _ranges(
    [
        ("::/128", "unspecified", ""),
        ("::1/128", "loopback", ""),
        ("::/96", "reserved", "IPv4-compatible, deprecated"),
        ("64:ff9b:1::/48", "private", "local-use NAT64, RFC 8215"),
        ("100::/64", "reserved", "discard-only"),
        ("2001:db8::/32", "documentation", ""),
        ("2001::/23", "reserved", "IETF protocol assignments"),
        ("3fff::/20", "documentation", ""),
        ("fc00::/7", "unique local", "ULA"),
        ("fe80::/10", "link-local", ""),
        ("fec0::/10", "site-local", "deprecated"),
        ("ff00::/8", "multicast", ""),
    ]
)
_GLOBAL_UNICAST_V6: Final = ipaddress.ip_network("2000::/3")
_NAT64: Final = ipaddress.ip_network("64:ff9b::/96")
_TEREDO: Final = ipaddress.ip_network("2001::/32")
_IPV4_COMPATIBLE: Final = ipaddress.ip_network("::/96")


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[tuple[str, ipaddress.IPv4Address]]:
    """The IPv4 addresses an IPv6 address carries, with the name of the spelling.

    A packet to any of these forms ends up at (or is relayed by) the IPv4 address inside, so the
    inner address is classified like a plain one.
    """
    if address.ipv4_mapped is not None:
        return [("IPv4-mapped", address.ipv4_mapped)]
    if address in _NAT64:
        return [("NAT64", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))]
    if address.sixtofour is not None:
        return [("6to4", address.sixtofour)]
    if address in _TEREDO and address.teredo is not None:
        server, client = address.teredo
        return [("Teredo client", client), ("Teredo server", server)]
    if address in _IPV4_COMPATIBLE and int(address) > 1:
        return [("IPv4-compatible", ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))]
    return []


def _range_of(address: IPAddress) -> BlockedRange | None:
    table = BLOCKED_V4 if address.version == 4 else BLOCKED_V6
    for blocked in table:
        if address in blocked.network:
            return blocked
    return None


def classify(address: IPAddress) -> str | None:
    """Why a board must not reach this address unasked ("loopback (127.0.0.0/8)"), else None."""
    if address.version == 6:
        address = address.__class__(str(address).split("%", 1)[0])  # a zone id changes nothing
        for spelling, inner in embedded_ipv4(address):
            reason = classify(inner)
            if reason is not None:
                return f"the {spelling} form of {inner}, {reason}"
        if embedded_ipv4(address) and address.ipv4_mapped is not None:
            return None  # a public IPv4 address in its mapped spelling
    blocked = _range_of(address)
    if blocked is not None:
        # Only the IPv4-compatible spelling of a public address is left for ::/96 here: deprecated,
        # routed nowhere sane.
        return blocked.describe()
    if address.version == 6 and address not in _GLOBAL_UNICAST_V6 and address not in _NAT64:
        return f"reserved (outside global unicast {_GLOBAL_UNICAST_V6})"
    return None


def parse_networks(entries: Iterable[str], key: str = "tools.web.allow_networks") -> tuple[IPNetwork, ...]:
    """Networks from config strings ("192.168.1.0/24", "127.0.0.1"); ValueError naming the entry."""
    out: list[IPNetwork] = []
    for i, entry in enumerate(entries):
        try:
            out.append(ipaddress.ip_network(entry.strip(), strict=True))
        except ValueError as e:
            raise ValueError(f"{key}[{i}]: {entry!r} is not a network ({e})") from None
    return tuple(out)


def host_matches(host: str, patterns: Iterable[str]) -> bool:
    """True when the host matches one of the globs ("nas.lan", "*.example.com"), case-insensitively.

    "*.example.com" matches the subdomains, not example.com itself; list both for both.
    """
    host = host.rstrip(".").lower()
    return any(fnmatch.fnmatchcase(host, p.rstrip(".").lower()) for p in patterns)


async def system_resolver(host: str, port: int) -> list[str]:
    """The system's resolver (getaddrinfo), each address once, in the order it gave them."""
    loop = asyncio.get_running_loop()
    try:
        # AI_ADDRCONFIG: no IPv6 answers on a board without an IPv6 address (and the same for IPv4).
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_ADDRCONFIG)
    except socket.gaierror:
        # A board with only loopback up has no "configured" family at all: ask without the filter.
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except socket.gaierror as e:
            raise WebError(f"cannot resolve {host}: {e.strerror}") from None
    addresses: list[str] = []
    for _family, _type, _proto, _canon, sockaddr in infos:
        text = str(sockaddr[0])
        if text not in addresses:
            addresses.append(text)
    return addresses


@dataclass(frozen=True)
class NetworkPolicy:
    """Where one caller's requests may go (built per agent from `[tools.web]`)."""

    allow_networks: tuple[IPNetwork, ...] = ()  # blocked ranges the owner trusts anyway
    allow_hosts: tuple[str, ...] = ()  # host globs whose addresses are not range-checked
    ports: frozenset[int] = DEFAULT_PORTS
    max_redirects: int = DEFAULT_MAX_REDIRECTS
    # None = any host; else the host globs the caller may reach at all (http_request's list),
    # checked on every redirect too.
    allowed_domains: tuple[str, ...] | None = None
    resolver: Resolver = field(default=system_resolver, compare=False)
    # Where the proxy settings are read (None = os.environ), so tests set them without the process's.
    environ: Mapping[str, str] | None = field(default=None, compare=False)
    # None = the default trust store; tests pass one that trusts their own CA.
    ssl_context: ssl.SSLContext | None = field(default=None, compare=False)

    def address_allowed(self, host: str, address: IPAddress) -> bool:
        if self.allow_hosts and host_matches(host, self.allow_hosts):
            return True
        candidates: list[IPAddress] = [address]
        if address.version == 6:
            candidates += [inner for _spelling, inner in embedded_ipv4(address)]
        return any(c in net for c in candidates for net in self.allow_networks)


@dataclass(frozen=True)
class Vetted:
    """A target that passed every check: connect to `address`; send `host` as Host and TLS name."""

    scheme: str
    host: str
    port: int
    address: str
    proxy: str | None = None  # the proxy URL the request goes through, when the environment sets one
    # The name's other addresses, every one checked too: tried in order when `address` does not
    # answer (an AAAA record first on a board without an IPv6 route).
    alternatives: tuple[str, ...] = ()


def normalize_host(host: str) -> str:
    """One spelling per host, for every comparison and for the connection's pin: lower case, no
    trailing dot, brackets off an IPv6 literal."""
    return host.strip("[]").lower().rstrip(".")


def shown_proxy(proxy: str) -> str:
    """A proxy URL without its user name and password, for messages."""
    scheme, _, rest = proxy.partition("://")
    return f"{scheme}://{rest.rsplit('@', 1)[-1]}" if rest else proxy


def _is_literal(host: str) -> IPAddress | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


def check_target(scheme: str, host: str, port: int | None, policy: NetworkPolicy) -> int:
    """The checks that need no lookup (scheme, allowed domains, port); returns the port in use."""
    scheme = scheme.lower()
    if scheme not in SCHEMES:
        raise WebBlocked(f"blocked: scheme {scheme!r} (only http and https)")
    if not host:
        raise WebBlocked("blocked: the URL names no host")
    if policy.allowed_domains is not None and not host_matches(host, policy.allowed_domains):
        shown = ", ".join(policy.allowed_domains) or "none"
        raise WebBlocked(f"blocked: {host} is not in allowed_domains ({shown})")
    port = port if port is not None else _DEFAULT_PORT[scheme]
    if port not in policy.ports:
        shown = ", ".join(str(p) for p in sorted(policy.ports))
        raise WebBlocked(f"blocked: port {port} is not an allowed port ({shown}; tools.web.ports)")
    return port


_ALLOW_HINT = "allow it with tools.web.allow_networks or tools.web.allow_hosts"


async def vet(scheme: str, host: str, port: int | None, policy: NetworkPolicy) -> Vetted:
    """Check a target and resolve it once; WebBlocked names the rule or range that refused it."""
    host = normalize_host(host)
    port = check_target(scheme, host, port, policy)
    literal = _is_literal(host)
    if literal is not None:
        texts = [str(literal)]
    else:
        texts = await policy.resolver(host, port)
        if not texts:
            raise WebError(f"cannot resolve {host}: no addresses")
    addresses: list[IPAddress] = []
    for text in texts:
        try:
            addresses.append(ipaddress.ip_address(text))
        except ValueError:
            raise WebError(f"cannot resolve {host}: the resolver answered {text!r}") from None
    for address in addresses:
        reason = classify(address)
        if reason is not None and not policy.address_allowed(host, address):
            what = f"{address} is" if literal is not None else f"{host} resolves to {address},"
            raise WebBlocked(f"blocked: {what} {reason}; {_ALLOW_HINT}")
    proxy = proxy_for(scheme.lower(), host, policy.environ)
    texts = [str(a) for a in addresses]
    return Vetted(scheme.lower(), host, port, texts[0], proxy, tuple(texts[1:]))


# -- the proxy from the environment ------------------------------------------------------------


def _env(environ: Mapping[str, str], name: str) -> str:
    return environ.get(name.lower()) or environ.get(name.upper()) or ""


def _no_proxy(host: str, rules: str) -> bool:
    """curl's NO_PROXY reading: "*", host names (and their subdomains), ".domain", IPs and CIDRs."""
    literal = _is_literal(host)
    for raw in rules.split(","):
        rule = raw.strip().lower()
        if not rule:
            continue
        if rule == "*":
            return True
        if literal is not None:
            try:
                if literal in ipaddress.ip_network(rule.strip("[]"), strict=False):
                    return True
            except ValueError:
                pass
            continue
        rule = rule.lstrip(".").split(":", 1)[0]
        if host == rule or host.endswith("." + rule):
            return True
    return False


def proxy_for(scheme: str, host: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The proxy URL the environment sets for this target, or None for a direct connection."""
    env = os.environ if environ is None else environ
    proxy = _env(env, f"{scheme}_proxy") or _env(env, "all_proxy")
    if not proxy or _no_proxy(host, _env(env, "no_proxy")):
        return None
    if "://" not in proxy:
        proxy = "http://" + proxy  # curl's reading of a bare host:port
    if not proxy.lower().startswith(("http://", "https://")):
        raise WebError(f"unsupported proxy {proxy.split('://', 1)[0]}:// (only http and https proxies)")
    return proxy
