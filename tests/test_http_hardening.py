"""The HTTP endpoints under hostile clients: real sockets on loopback, real servers.

A second source address is a second loopback address (127.0.0.2): the server sees a different peer.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import httpx
import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.errors import ConfigErrors
from edgeclaw.net.httpd import Exchange, HttpServer, Request
from tests.test_mcp_server import TOKEN, http_daemon

OTHER = "127.0.0.2"  # another source on loopback


async def _ok(request: Request, exchange: Exchange) -> None:
    await exchange.respond(200, b"ok\n", content_type="text/plain")


async def _get(port: int, *, source: str = OTHER, host: str = "127.0.0.1") -> bytes:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    try:
        writer.write(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        return await asyncio.wait_for(reader.read(65536), 5)
    finally:
        writer.close()


async def _idle_keep_alive(port: int) -> asyncio.StreamWriter:
    """A connection that made one request and now idles, kept alive (or was refused: over the limit)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
        await writer.drain()
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    return writer


async def _half_sent(port: int) -> asyncio.StreamWriter:
    _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
    with contextlib.suppress(ConnectionError):
        await writer.drain()
    return writer


async def test_idle_and_half_sent_connections_from_one_source_do_not_starve_another():
    async with HttpServer(_ok, "127.0.0.1", 0, max_connections=64) as http:
        port = http.bound_port
        held = [await _idle_keep_alive(port) for _ in range(35)]
        held += [await _half_sent(port) for _ in range(35)]
        started = time.monotonic()
        answer = await _get(port)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        assert time.monotonic() - started < 2.0
        for writer in held:
            writer.close()


async def test_seventy_half_sent_heads_from_one_source_do_not_starve_another():
    async with HttpServer(_ok, "127.0.0.1", 0, max_connections=64) as http:
        held = [await _half_sent(http.bound_port) for _ in range(70)]
        answer = await _get(http.bound_port)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        for writer in held:
            writer.close()


async def test_idle_keep_alives_make_room_when_every_slot_is_taken():
    async with HttpServer(_ok, "127.0.0.1", 0, max_connections=20, max_per_source=100) as http:
        held = [await _idle_keep_alive(http.bound_port) for _ in range(20)]
        assert len(http._idle) == 20  # every slot is held by an idle keep-alive
        answer = await _get(http.bound_port)
        assert answer.startswith(b"HTTP/1.1 200"), answer
        for writer in held:
            writer.close()


async def test_a_client_that_trickles_its_headers_is_let_go_after_the_head_timeout():
    async with HttpServer(_ok, "127.0.0.1", 0, head_timeout_s=1.0) as http:
        reader, writer = await asyncio.open_connection("127.0.0.1", http.bound_port)
        writer.write(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        await writer.drain()
        started = time.monotonic()
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed, unanswered
        assert time.monotonic() - started < 3.0
        writer.close()


async def test_a_foreign_host_is_refused_and_the_listeners_own_names_are_served():
    async with HttpServer(_ok, "127.0.0.1", 0, allowed_hosts=["board.lan"]) as http:
        port = http.bound_port
        refused = await _get(port, host="evil.example:80")
        assert refused.startswith(b"HTTP/1.1 421") and b"allowed_hosts" in refused
        for host in (f"127.0.0.1:{port}", "localhost", f"board.lan:{port}"):
            assert (await _get(port, host=host)).startswith(b"HTTP/1.1 200"), host


async def _mcp_post(client: httpx.AsyncClient, url: str, token: str, host: str = "") -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    if host:
        headers["Host"] = host
    body = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    return await client.post(url, json=body, headers=headers)


async def test_wrong_bearer_tokens_lock_out_their_source_alone(tmp_path: Path):
    other = httpx.AsyncHTTPTransport(local_address=OTHER)
    async with (
        http_daemon(tmp_path) as served,
        httpx.AsyncClient(timeout=20) as attacker,
        httpx.AsyncClient(timeout=20, transport=other) as owner,
    ):
        served.service.endpoint.lockout.failure_delay_s = 0.0
        for _ in range(served.service.endpoint.lockout.max_failures):
            assert (await _mcp_post(attacker, served.url, "wrong-" + TOKEN)).status_code == 401
        locked = await _mcp_post(attacker, served.url, TOKEN)  # even the right token, from there
        assert locked.status_code == 429 and "try again" in locked.text
        assert (await _mcp_post(owner, served.url, TOKEN)).status_code not in (401, 429)


async def test_the_mcp_endpoint_refuses_a_foreign_host(tmp_path: Path):
    async with (
        http_daemon(tmp_path, allowed_hosts=["board.lan"]) as served,
        httpx.AsyncClient(timeout=20) as c,
    ):
        refused = await _mcp_post(c, served.url, TOKEN, host="rebound.example")
        assert refused.status_code == 421 and "allowed_hosts" in refused.text
        assert (await _mcp_post(c, served.url, TOKEN, host="board.lan")).status_code not in (401, 421)


# -- config check ---------------------------------------------------------------------------------


def _problems(section: dict[str, object], *, fleet: dict[str, object] | None = None) -> str:
    config: dict[str, object] = {"board": "sim", "mcp": {"server": section}}
    if fleet is not None:
        config["fleet_page"] = fleet
    try:
        config_from_dict(config, "test.toml")
    except ConfigErrors as e:
        return str(e)
    return ""


@pytest.fixture
def strong(tmp_path: Path) -> str:
    path = tmp_path / "ops.token"
    path.write_text(TOKEN)
    return str(path)


def test_plain_http_off_loopback_is_refused_unless_allowed(strong: str):
    problem = _problems({"listen": "0.0.0.0:8765", "token_file": strong})
    assert "mcp.server.listen" in problem and "allow_plain_http" in problem
    assert _problems({"listen": "0.0.0.0:8765", "token_file": strong, "allow_plain_http": True}) == ""
    assert _problems({"listen": "127.0.0.1:8765", "token_file": strong}) == ""
    assert _problems({"listen": "[::1]:8765", "token_file": strong}) == ""
    fleet = _problems({}, fleet={"listen": "0.0.0.0:8088"})
    assert "fleet_page.listen" in fleet and "fleet_page.allow_plain_http" in fleet
    assert _problems({}, fleet={"listen": "0.0.0.0:8088", "allow_plain_http": True}) == ""


@pytest.mark.parametrize(
    ("token", "weak"),
    [
        ("abcdefgh", True),
        ("0123456789abcdef0123456789abcde", True),  # 31 hex digits: 124 bits
        ("0123456789abcdef0123456789abcdef", False),
        ("Zx-_9aQ7rT2mK8pL0nB4vW", False),  # 22 base64url characters
        ("Zx-_9aQ7rT2mK8pL0nB4v", True),
        ("correct horse battery staple", True),  # spaces: not counted as random
    ],
)
def test_a_bearer_token_needs_128_bits(tmp_path: Path, token: str, weak: bool):
    path = tmp_path / "t.token"
    path.write_text(token)
    problem = _problems({"listen": "127.0.0.1:8765", "token_file": str(path)})
    fleet = _problems({}, fleet={"token_file": str(path)})
    if weak:
        assert "mcp.server.token_file" in problem and "128 bits" in problem and "token_urlsafe" in problem
        assert "fleet_page.token_file" in fleet
    else:
        assert problem == "" and fleet == ""
