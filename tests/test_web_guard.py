"""The SSRF guard and the guarded fetch, against real servers on loopback.

Loopback is itself a blocked range: tests that need a server grant 127.0.0.1 (or a name) in the
policy, and others prove the same server is refused without the grant. Names resolve through
the policy's resolver seam (`Names`), which records every lookup.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import json
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
from web_support import Page, Proxy, Site, make_cert

from edgeclaw.backends.web.client import WebRequest, fetch
from edgeclaw.backends.web.guard import NetworkPolicy, WebBlocked, WebError, classify, vet

LOOPBACK = (ipaddress.ip_network("127.0.0.1/32"),)


class Names:
    """A resolver seam: each name answers from a list of answers, one per lookup (the last repeats)."""

    def __init__(self, **answers: list[str] | list[list[str]]) -> None:
        self.answers = {k.replace("_", "."): v for k, v in answers.items()}
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        answers = self.answers[host]
        if answers and isinstance(answers[0], list):
            n = sum(1 for c in self.calls if c == host) - 1
            return list(answers[min(n, len(answers) - 1)])  # type: ignore[arg-type]
        return list(answers)  # type: ignore[arg-type]


def policy(site: Site | None = None, **kw: object) -> NetworkPolicy:
    ports = {80, 443} | ({site.port} if site is not None else set())
    kw.setdefault("ports", frozenset(ports))
    kw.setdefault("environ", {})  # no proxy unless the test sets one
    return NetworkPolicy(**kw)  # type: ignore[arg-type]


@pytest.fixture
def site():
    with Site() as s:
        s.routes["/"] = lambda seen: Page(body=b"hello from loopback", headers={"Content-Type": "text/plain"})
        yield s


# -- the ranges, in every spelling -------------------------------------------------------------

BLOCKED = [
    # IPv4
    ("127.0.0.1", "loopback (127.0.0.0/8)"),
    ("127.255.255.254", "loopback (127.0.0.0/8)"),
    ("10.0.0.1", "private (10.0.0.0/8, RFC 1918)"),
    ("172.16.5.4", "private (172.16.0.0/12, RFC 1918)"),
    ("172.31.255.255", "private (172.16.0.0/12, RFC 1918)"),
    ("192.168.1.1", "private (192.168.0.0/16, RFC 1918)"),
    ("169.254.169.254", "link-local (169.254.0.0/16, cloud metadata)"),
    ("169.254.1.1", "link-local (169.254.0.0/16"),
    ("100.64.0.1", "carrier-grade NAT (100.64.0.0/10"),
    ("100.100.100.200", "carrier-grade NAT (100.64.0.0/10"),  # Alibaba's metadata address
    ("0.0.0.0", "'this network' (0.0.0.0/8"),
    ("0.1.2.3", "'this network' (0.0.0.0/8"),
    ("224.0.0.1", "multicast (224.0.0.0/4)"),
    ("239.255.255.250", "multicast (224.0.0.0/4)"),
    ("255.255.255.255", "broadcast (255.255.255.255/32)"),
    ("240.0.0.1", "reserved (240.0.0.0/4"),
    ("192.0.2.1", "documentation (192.0.2.0/24"),
    ("198.51.100.1", "documentation (198.51.100.0/24"),
    ("203.0.113.1", "documentation (203.0.113.0/24"),
    ("198.18.0.1", "reserved (198.18.0.0/15, benchmarking)"),
    ("192.0.0.170", "reserved (192.0.0.0/24"),
    # IPv6 natives
    ("::1", "loopback (::1/128)"),
    ("::", "unspecified (::/128)"),
    ("fc00::1", "unique local (fc00::/7"),
    ("fd00:ec2::254", "unique local (fc00::/7"),  # AWS's IPv6 metadata address
    ("fe80::1", "link-local (fe80::/10)"),
    ("fe80::1%2", "link-local (fe80::/10)"),
    ("febf:ffff::1", "link-local (fe80::/10)"),
    ("fec0::1", "site-local (fec0::/10"),
    ("ff02::1", "multicast (ff00::/8)"),
    ("2001:db8::1", "documentation (2001:db8::/32)"),
    ("100::1", "reserved (100::/64, discard-only)"),
    ("64:ff9b:1::a00:1", "local-use NAT64"),
    ("4000::1", "outside global unicast"),
    # IPv4 addresses in IPv6 spellings
    ("::ffff:127.0.0.1", "IPv4-mapped form of 127.0.0.1, loopback"),
    ("::ffff:10.0.0.1", "IPv4-mapped form of 10.0.0.1, private"),
    (
        "::ffff:169.254.169.254",
        "IPv4-mapped form of 169.254.169.254, link-local (169.254.0.0/16, cloud metadata)",
    ),
    ("::ffff:192.168.1.1", "IPv4-mapped form of 192.168.1.1, private"),
    ("::ffff:100.64.0.1", "IPv4-mapped form of 100.64.0.1, carrier-grade NAT"),
    ("::ffff:224.0.0.1", "IPv4-mapped form of 224.0.0.1, multicast"),
    ("::ffff:255.255.255.255", "IPv4-mapped form of 255.255.255.255, broadcast"),
    ("::ffff:0.0.0.0", "IPv4-mapped form of 0.0.0.0, 'this network'"),
    ("64:ff9b::7f00:1", "NAT64 form of 127.0.0.1, loopback"),
    ("64:ff9b::a9fe:a9fe", "NAT64 form of 169.254.169.254, link-local"),
    ("64:ff9b::c0a8:101", "NAT64 form of 192.168.1.1, private"),
    ("64:ff9b::a00:1", "NAT64 form of 10.0.0.1, private"),
    ("2002:7f00:1::1", "6to4 form of 127.0.0.1, loopback"),
    ("2002:a9fe:a9fe::1", "6to4 form of 169.254.169.254, link-local"),
    ("2002:c0a8:101::1", "6to4 form of 192.168.1.1, private"),
    # Teredo: the client address is stored inverted in the last 32 bits (~0a000001 = f5ff:fffe).
    ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "Teredo client form of 10.0.0.1, private"),
    ("::7f00:1", "IPv4-compatible form of 127.0.0.1, loopback"),
    ("::a9fe:a9fe", "IPv4-compatible form of 169.254.169.254, link-local"),
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"]


@pytest.mark.parametrize(("address", "reason"), BLOCKED, ids=[a for a, _ in BLOCKED])
async def test_each_blocked_range_is_refused_with_its_name(address: str, reason: str) -> None:
    with pytest.raises(WebBlocked) as e:
        await vet("http", address, 80, policy())
    assert str(e.value).startswith("blocked: ")
    assert reason in str(e.value)


@pytest.mark.parametrize("address", PUBLIC)
async def test_public_addresses_pass(address: str) -> None:
    assert classify(ipaddress.ip_address(address)) is None
    target = await vet("https", address, None, policy())
    assert (target.address, target.port) == (str(ipaddress.ip_address(address)), 443)


@pytest.mark.parametrize(
    "url",
    [
        "http://2130706433/",
        "http://0x7f.1/",
        "http://127.1/",
        "http://017700000001/",
        "http://[::ffff:7f00:1]/",
        "http://LOCALHOST/",
        "http://localhost./",
        "http://169.254.169.254./",
    ],
)
async def test_odd_spellings_of_blocked_addresses_are_refused(url: str) -> None:
    """Through the system's resolver (numeric forms and /etc/hosts need no DNS)."""
    with pytest.raises(WebBlocked, match=r"(loopback \(127\.0\.0\.0/8\)|cloud metadata)"):
        await fetch(WebRequest(url, timeout_s=5), NetworkPolicy(environ={}))


async def test_a_name_resolving_into_the_lan_is_refused_naming_name_address_and_range() -> None:
    names = Names(printer_lan=["10.0.0.1"])
    with pytest.raises(WebBlocked) as e:
        await vet("http", "printer.lan", 80, policy(resolver=names))
    assert str(e.value).startswith(
        "blocked: printer.lan resolves to 10.0.0.1, private (10.0.0.0/8, RFC 1918)"
    )


async def test_one_blocked_address_among_public_ones_refuses_the_name() -> None:
    names = Names(mixed_test=["93.184.216.34", "127.0.0.1"])
    with pytest.raises(WebBlocked, match=r"mixed\.test resolves to 127\.0\.0\.1, loopback"):
        await vet("http", "mixed.test", 80, policy(resolver=names))


# -- allowances ---------------------------------------------------------------------------------


async def test_loopback_is_refused_by_default_and_never_reached(site: Site) -> None:
    with pytest.raises(WebBlocked, match=r"blocked: 127\.0\.0\.1 is loopback \(127\.0\.0\.0/8\)"):
        await fetch(WebRequest(site.url()), policy(site))
    assert site.connections == 0


async def test_loopback_works_when_the_owner_allows_it(site: Site) -> None:
    response = await fetch(WebRequest(site.url()), policy(site, allow_networks=LOOPBACK))
    assert (response.status, response.body, response.truncated) == (200, b"hello from loopback", False)
    assert response.content_type == "text/plain"


async def test_allow_networks_lifts_only_the_listed_network() -> None:
    lan = policy(allow_networks=(ipaddress.ip_network("192.168.1.0/24"),))
    assert (await vet("http", "192.168.1.7", 80, lan)).address == "192.168.1.7"
    assert (await vet("http", "::ffff:192.168.1.7", 80, lan)).address == "::ffff:c0a8:107"
    for other in ("192.168.2.1", "10.0.0.1", "127.0.0.1", "169.254.169.254"):
        with pytest.raises(WebBlocked):
            await vet("http", other, 80, lan)


async def test_allow_hosts_trusts_the_names_listed_and_no_other(site: Site) -> None:
    names = Names(nas_lan=["127.0.0.1"], other_lan=["127.0.0.1"])
    trusted = policy(site, allow_hosts=("nas.lan", "*.home.arpa"), resolver=names)
    response = await fetch(WebRequest(site.url(host="NAS.lan")), trusted)
    assert response.body == b"hello from loopback"
    assert site.seen[-1].headers["host"] == f"nas.lan:{site.port}"  # the name, not the address
    with pytest.raises(WebBlocked, match=r"other\.lan resolves to 127\.0\.0\.1, loopback"):
        await fetch(WebRequest(site.url(host="other.lan")), trusted)
    assert len(site.seen) == 1


async def test_one_spelling_per_host_for_the_check_and_the_connection(site: Site) -> None:
    """A trailing dot or capitals name the same host: allowed once, connected to the same pin."""
    names = Names(nas_lan=["127.0.0.1"])
    trusted = policy(site, allow_hosts=("nas.lan",), resolver=names)
    for host in ("nas.lan.", "NAS.LAN"):
        assert (await fetch(WebRequest(site.url(host=host)), trusted)).status == 200


async def test_ipv6_loopback_is_refused_by_default_and_works_when_allowed() -> None:
    try:
        six = Site("::1")
    except OSError:
        pytest.skip("no IPv6 loopback here")
    with six:
        six.routes["/"] = lambda seen: Page(body=b"over IPv6")
        with pytest.raises(WebBlocked, match=r"::1 is loopback \(::1/128\)"):
            await fetch(WebRequest(six.url()), policy(six))
        assert six.connections == 0
        allowed = policy(six, allow_networks=(ipaddress.ip_network("::1/128"),))
        assert (await fetch(WebRequest(six.url()), allowed)).body == b"over IPv6"
        # The IPv4-mapped spelling of 127.0.0.1 is not covered by an allowance for ::1.
        with pytest.raises(WebBlocked, match=r"IPv4-mapped form of 127\.0\.0\.1"):
            await vet("http", "::ffff:127.0.0.1", six.port, allowed)


async def test_ports_outside_the_set_are_refused(site: Site) -> None:
    open_policy = policy(allow_networks=LOOPBACK)  # 80 and 443 only
    with pytest.raises(WebBlocked, match=f"blocked: port {site.port} is not an allowed port"):
        await fetch(WebRequest(site.url()), open_policy)
    assert site.connections == 0
    with pytest.raises(WebBlocked, match="port 22"):
        await vet("http", "93.184.216.34", 22, policy())


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://93.184.216.34/x", "gopher://93.184.216.34/"])
async def test_only_http_and_https(url: str) -> None:
    with pytest.raises(WebBlocked, match="only http and https"):
        await fetch(WebRequest(url), policy())


# -- resolve once, connect to what was checked --------------------------------------------------


async def test_rebinding_answer_is_never_connected_to(site: Site) -> None:
    """The name answers a public address, then loopback: the connection goes to the first answer."""
    names = Names(rebind_test=[["93.184.216.34"], ["127.0.0.1"]])
    with pytest.raises(WebError) as e:
        await fetch(WebRequest(site.url(host="rebind.test"), timeout_s=1.5), policy(site, resolver=names))
    assert not isinstance(e.value, WebBlocked)
    assert names.calls == ["rebind.test"]  # looked up once
    assert site.connections == 0  # and loopback never reached


async def test_the_connection_goes_to_the_vetted_address_with_the_name_as_host(site: Site) -> None:
    names = Names(device_lan=["127.0.0.1"])
    response = await fetch(
        WebRequest(site.url(host="device.lan")), policy(site, allow_networks=LOOPBACK, resolver=names)
    )
    assert response.status == 200
    assert site.seen[0].headers["host"] == f"device.lan:{site.port}"


async def test_a_vetted_address_that_does_not_answer_gives_way_to_the_next(site: Site) -> None:
    """127.0.0.2 has nothing on the port (refused at once): the name's second address serves."""
    names = Names(twice_lan=["127.0.0.2", "127.0.0.1"], bad_lan=["127.0.0.2", "10.0.0.1"])
    p = policy(site, allow_networks=(ipaddress.ip_network("127.0.0.0/30"),), resolver=names)
    response = await fetch(WebRequest(site.url(host="twice.lan")), p)
    assert response.status == 200 and site.seen[0].headers["host"] == f"twice.lan:{site.port}"
    with pytest.raises(WebBlocked, match=r"bad\.lan resolves to 10\.0\.0\.1"):
        await fetch(WebRequest(site.url(host="bad.lan")), p)  # every address is checked, not just the first


async def test_tls_keeps_the_host_name_for_sni_and_the_certificate(tmp_path: Path) -> None:
    server_ctx, client_ctx = make_cert(tmp_path, "device.test")
    with Site(tls=server_ctx) as tls_site:
        tls_site.routes["/"] = lambda seen: Page(body=b"secure hello")
        names = Names(device_test=["127.0.0.1"], other_test=["127.0.0.1"])
        p = policy(tls_site, allow_networks=LOOPBACK, resolver=names, ssl_context=client_ctx)
        response = await fetch(WebRequest(tls_site.url(host="device.test")), p)
        assert response.body == b"secure hello"
        assert tls_site.sni == ["device.test"]
        assert tls_site.seen[0].headers["host"] == f"device.test:{tls_site.port}"
        # The same address under a name the certificate does not carry: the check fails.
        with pytest.raises(WebError, match=r"CERTIFICATE_VERIFY_FAILED|certificate"):
            await fetch(WebRequest(tls_site.url(host="other.test")), p)
        assert len(tls_site.seen) == 1


# -- redirects --------------------------------------------------------------------------------


async def test_a_redirect_into_a_blocked_range_is_refused_before_it_is_followed(site: Site) -> None:
    with Site("127.0.0.2") as inner:
        inner.routes["/admin"] = lambda seen: Page(body=b"router admin page")
        site.routes["/go"] = lambda seen: Page(302, headers={"Location": inner.url("/admin")})
        site.routes["/meta"] = lambda seen: Page(302, headers={"Location": "http://169.254.169.254/latest/"})
        p = policy(site, allow_networks=LOOPBACK, ports=frozenset({site.port, inner.port, 80}))
        with pytest.raises(WebBlocked, match=r"blocked: 127\.0\.0\.2 is loopback"):
            await fetch(WebRequest(site.url("/go")), p)
        assert inner.connections == 0
        with pytest.raises(
            WebBlocked, match=r"169\.254\.169\.254 is link-local \(169\.254\.0\.0/16, cloud metadata\)"
        ):
            await fetch(WebRequest(site.url("/meta")), p)
        # With the second host allowed too, the same redirect is followed.
        both = policy(
            allow_networks=(ipaddress.ip_network("127.0.0.0/30"),), ports=frozenset({site.port, inner.port})
        )
        response = await fetch(WebRequest(site.url("/go")), both)
        assert (response.body, response.redirects, response.url) == (
            b"router admin page",
            [inner.url("/admin")],
            inner.url("/admin"),
        )


async def test_a_redirect_to_a_refused_port_or_scheme_is_refused(site: Site) -> None:
    site.routes["/ssh"] = lambda seen: Page(301, headers={"Location": "http://127.0.0.1:22/"})
    site.routes["/file"] = lambda seen: Page(301, headers={"Location": "file:///etc/passwd"})
    p = policy(site, allow_networks=LOOPBACK)
    with pytest.raises(WebBlocked, match="port 22"):
        await fetch(WebRequest(site.url("/ssh")), p)
    with pytest.raises(WebBlocked, match="scheme 'file'"):
        await fetch(WebRequest(site.url("/file")), p)


@pytest.mark.parametrize(
    ("location", "problem"),
    [
        (
            "http:127.0.0.1:{port}/",
            r"Location 'http:127\.0\.0\.1:\d+/' has a scheme but no '//' before the host",
        ),
        ("https:/127.0.0.1:{port}/", r"has a scheme but no '//' before the host"),
        (
            "data:text/plain,hello",
            r"scheme 'data' \(only http and https\): the 302 redirect to 'data:text/plain",
        ),
        ("jar:http://127.0.0.1/x.jar!/a", r"scheme 'jar' \(only http and https\)"),
        ("javascript:alert(1)", r"scheme 'javascript' \(only http and https\)"),
        ("http://", r"Location 'http://' names no host"),
        ("//user@:{port}/", r"names no host"),
        ("http://[::1", r"Location 'http://\[::1' is not a valid URL"),
    ],
)
async def test_an_unusable_location_is_a_refusal_naming_it(site: Site, location: str, problem: str) -> None:
    site.routes["/go"] = lambda seen: Page(302, headers={"Location": location.format(port=site.port)})
    site.routes["/"] = lambda seen: Page(body=b"followed")
    with pytest.raises(WebBlocked, match=problem):
        await fetch(WebRequest(site.url("/go")), policy(site, allow_networks=LOOPBACK))
    assert [seen.path for seen in site.seen] == ["/go"]  # nothing was followed


async def test_at_most_five_redirects(site: Site) -> None:
    for i in range(7):
        site.routes[f"/r{i}"] = lambda seen, i=i: Page(302, headers={"Location": f"/r{i + 1}"})
    site.routes["/r7"] = lambda seen: Page(body=b"the end")
    site.routes["/five"] = lambda seen: Page(302, headers={"Location": "/r3"})  # 5 hops to /r7
    p = policy(site, allow_networks=LOOPBACK)
    response = await fetch(WebRequest(site.url("/five")), p)
    assert (response.body, len(response.redirects)) == (b"the end", 5)
    with pytest.raises(WebError, match=r"too many redirects \(more than 5\)"):
        await fetch(WebRequest(site.url("/r0")), p)


async def test_headers_set_for_one_origin_do_not_follow_a_redirect_elsewhere(site: Site) -> None:
    with Site("127.0.0.2") as other:
        other.routes["/"] = lambda seen: Page(body=b"other")
        site.routes["/same"] = lambda seen: Page(302, headers={"Location": "/"})
        site.routes["/away"] = lambda seen: Page(307, headers={"Location": other.url("/")})
        p = policy(
            allow_networks=(ipaddress.ip_network("127.0.0.0/30"),), ports=frozenset({site.port, other.port})
        )
        headers = {"Authorization": "Bearer t0ken", "X-Api-Key": "k3y", "Accept": "text/plain"}
        await fetch(WebRequest(site.url("/same"), headers=headers), p)
        assert site.seen[-1].headers["authorization"] == "Bearer t0ken"
        await fetch(WebRequest(site.url("/away"), headers=headers), p)
        sent = other.seen[-1].headers
        assert "authorization" not in sent and "x-api-key" not in sent
        assert sent["accept"] == "text/plain"
        with pytest.raises(WebError, match="would send the request body to another origin"):
            await fetch(WebRequest(site.url("/away"), method="POST", body=b"secret=1"), p)
        assert all(s.body == b"" for s in other.seen)


# -- the body -----------------------------------------------------------------------------------


async def test_gzip_and_deflate_bodies_are_decoded(site: Site) -> None:
    original = b"".join(f"line of text {i}\n".encode() for i in range(20000))
    raw_deflate = zlib.compressobj(wbits=-zlib.MAX_WBITS)
    site.routes["/gz"] = lambda s: Page(body=gzip.compress(original), headers={"Content-Encoding": "gzip"})
    site.routes["/zlib"] = lambda s: Page(
        body=zlib.compress(original), headers={"Content-Encoding": "deflate"}
    )
    site.routes["/raw"] = lambda s: Page(
        body=raw_deflate.compress(original) + raw_deflate.flush(), headers={"Content-Encoding": "deflate"}
    )
    site.routes["/br"] = lambda s: Page(body=b"\x00\x01", headers={"Content-Encoding": "br"})
    site.routes["/bad"] = lambda s: Page(body=b"not gzip at all", headers={"Content-Encoding": "gzip"})
    p = policy(site, allow_networks=LOOPBACK)
    for path in ("/gz", "/zlib", "/raw"):
        response = await fetch(WebRequest(site.url(path)), p)
        assert (response.body, response.truncated) == (original, False), path
    assert site.seen[0].headers["accept-encoding"] == "gzip, deflate"
    with pytest.raises(WebError, match="encoding this client does not read: 'br'"):
        await fetch(WebRequest(site.url("/br")), p)
    with pytest.raises(WebError, match="does not decode as gzip"):
        await fetch(WebRequest(site.url("/bad")), p)


async def test_a_body_is_cut_at_max_bytes(site: Site) -> None:
    big = b"x" * (5 * 1024 * 1024)
    site.routes["/big"] = lambda s: Page(body=big)
    response = await fetch(
        WebRequest(site.url("/big"), max_bytes=100_000), policy(site, allow_networks=LOOPBACK)
    )
    assert (len(response.body), response.truncated) == (100_000, True)
    exact = await fetch(
        WebRequest(site.url("/big"), max_bytes=len(big)), policy(site, allow_networks=LOOPBACK)
    )
    assert (len(exact.body), exact.truncated) == (len(big), False)


async def test_a_decompression_bomb_costs_no_more_than_the_cap(site: Site) -> None:
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)  # 64 MB of zeros in ~64 KB
    site.routes["/bomb"] = lambda s: Page(body=bomb, headers={"Content-Encoding": "gzip"})
    tracemalloc.start()
    try:
        response = await fetch(
            WebRequest(site.url("/bomb"), max_bytes=1024 * 1024), policy(site, allow_networks=LOOPBACK)
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (len(response.body), response.truncated) == (1024 * 1024, True)
    assert peak < 16 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB for a 1 MB cap"


async def test_a_slow_server_hits_the_deadline(site: Site) -> None:
    site.routes["/drip"] = lambda s: Page(body=b"x" * 100, drip_s=0.2)  # 20 s for the whole body
    site.routes["/hang"] = lambda s: Page(body=b"late", hang_s=30)
    p = policy(site, allow_networks=LOOPBACK)
    for path in ("/drip", "/hang"):
        started = time.monotonic()
        with pytest.raises(WebError, match=r"within 1 s"):
            await fetch(WebRequest(site.url(path), timeout_s=1.0), p)
        assert time.monotonic() - started < 10, path  # the 1 s deadline, not the server's 20-30 s


# -- the proxy from the environment -------------------------------------------------------------


async def test_an_environment_proxy_is_used_but_the_target_is_still_vetted(site: Site) -> None:
    names = Names(public_test=["93.184.216.34"], intranet_test=["10.0.0.1"])
    with Proxy() as proxy:
        env = {"HTTP_PROXY": proxy.url, "https_proxy": proxy.url}
        p = policy(resolver=names, environ=env)
        response = await fetch(WebRequest("http://public.test/page"), p)
        assert response.body == b"via proxy: GET http://public.test/page"
        assert proxy.requests == [("GET", "http://public.test/page", "public.test")]
        for url, rule in (
            ("http://intranet.test/", "intranet.test resolves to 10.0.0.1, private"),
            ("http://169.254.169.254/latest/meta-data/", "169.254.169.254 is link-local"),
            ("https://intranet.test/", "intranet.test resolves to 10.0.0.1"),
            ("http://public.test:22/", "port 22"),
        ):
            with pytest.raises(WebBlocked, match=rule):
                await fetch(WebRequest(url), p)
        assert len(proxy.requests) == 1  # none of the refused targets reached the proxy
        # An allowed https target is tunnelled: CONNECT to the name (TLS stays end to end).
        with pytest.raises(WebError, match=r"ProxyError|403"):
            await fetch(WebRequest("https://public.test/"), p)
        assert proxy.requests[-1][:2] == ("CONNECT", "public.test:443")
        # NO_PROXY sends an allowed target directly.
        direct = policy(site, allow_networks=LOOPBACK, environ={**env, "NO_PROXY": "example.org,127.0.0.1"})
        assert (await fetch(WebRequest(site.url()), direct)).body == b"hello from loopback"
        assert len(proxy.requests) == 2


async def test_a_proxy_that_cannot_be_reached_is_named_without_its_password() -> None:
    names = Names(public_test=["93.184.216.34"])
    with Proxy() as gone:
        url = gone.url
    env = {"HTTP_PROXY": url.replace("http://", "http://user:pr0xy-pass@")}
    with pytest.raises(WebError) as e:
        await fetch(WebRequest("http://public.test/", timeout_s=3), policy(resolver=names, environ=env))
    assert f"through the proxy {url}" in str(e.value) and "pr0xy-pass" not in str(e.value)


async def test_the_process_environment_proxy_is_read(site: Site, monkeypatch: pytest.MonkeyPatch) -> None:
    with Proxy() as proxy:
        monkeypatch.setenv("http_proxy", proxy.url)
        monkeypatch.delenv("no_proxy", raising=False)
        monkeypatch.delenv("NO_PROXY", raising=False)
        p = NetworkPolicy(allow_networks=LOOPBACK, ports=frozenset({site.port}))
        response = await fetch(WebRequest(site.url()), p)
        assert response.body.startswith(b"via proxy: GET http://127.0.0.1:")
        assert site.connections == 0
        with pytest.raises(WebBlocked, match=r"10\.0\.0\.1 is private"):
            await fetch(WebRequest(f"http://10.0.0.1:{site.port}/"), p)
        assert len(proxy.requests) == 1


async def test_fetches_run_concurrently(site: Site) -> None:
    site.routes["/slow"] = lambda s: Page(body=b"ok", hang_s=2.0)
    p = policy(site, allow_networks=LOOPBACK)
    started = time.monotonic()
    results = await asyncio.gather(*(fetch(WebRequest(site.url("/slow")), p) for _ in range(4)))
    assert [r.body for r in results] == [b"ok"] * 4
    assert time.monotonic() - started < 6.0  # one after the other would take 8 s


# -- the command line: `edgeclaw tool call web_fetch` -------------------------------------------


def _json_out(proc) -> dict:
    return json.loads(proc.stdout)


def test_cli_web_fetch_of_the_metadata_address_exits_2_naming_the_range(run_cli) -> None:
    proc = run_cli(
        "tool", "call", "web_fetch", '{"url": "http://169.254.169.254/latest/meta-data/"}', "--json"
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "169.254.169.254 is link-local (169.254.0.0/16, cloud metadata)" in _json_out(proc)["error"]


def test_cli_web_fetch_of_a_name_resolving_to_10_0_0_1_exits_2(run_cli, state_env, tmp_path: Path) -> None:
    """The name resolves through the system's resolver: /etc/hosts, replaced in a mount namespace."""
    import subprocess
    import sys

    hosts = tmp_path / "hosts"
    hosts.write_text("127.0.0.1 localhost\n10.0.0.1 printer.lan\n")
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", f"mount --bind {hosts} /etc/hosts && getent hosts printer.lan"],
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        pytest.skip(f"no mount namespace here: {probe.stderr.strip()}")
    args = '{"url": "http://printer.lan/status"}'
    proc = subprocess.run(
        [
            *("unshare", "-m", "sh", "-c", f'mount --bind {hosts} /etc/hosts && exec "$@"', "sh"),
            *(sys.executable, "-m", "edgeclaw", "tool", "call", "web_fetch", args, "--json"),
        ],
        capture_output=True,
        text=True,
        env=state_env,
        timeout=60,
    )
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "printer.lan resolves to 10.0.0.1, private (10.0.0.0/8, RFC 1918)" in _json_out(proc)["error"]


def test_cli_web_fetch_of_loopback_works_only_when_allowed(run_cli, state_env, site: Site) -> None:
    site.routes["/page"] = lambda seen: Page(
        body=b"<html><head><title>Board</title></head><body><main><h1>Sensor log</h1>"
        b"<p>Temperature is 21.5 C.</p></main></body></html>",
        headers={"Content-Type": "text/html; charset=utf-8"},
    )
    config = Path(state_env["EDGECLAW_CONFIG"])
    config.write_text(f'board = "sim"\n[tools.web]\nports = [{site.port}]\n')
    args = json.dumps({"url": site.url("/page")})
    refused = run_cli("tool", "call", "web_fetch", args, "--json")
    assert refused.returncode == 2 and "127.0.0.1 is loopback (127.0.0.0/8)" in _json_out(refused)["error"]
    assert site.connections == 0
    config.write_text(
        f'board = "sim"\n[tools.web]\nports = [{site.port}]\nallow_networks = ["127.0.0.1/32"]\n'
    )
    allowed = run_cli("tool", "call", "web_fetch", args, "--json")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "Temperature is 21.5 C." in _json_out(allowed)["for_llm"]
