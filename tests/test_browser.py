"""The browser tool against the real headless chromium and pages served on loopback.

Loopback 127.0.0.1 is allowed in each test's policy; 127.0.0.2 is loopback too but not allowed, so a
server the test owns there stands for a LAN or metadata address: what it saw is asserted empty.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from edgeclaw.backends.web.guard import NetworkPolicy, parse_networks
from edgeclaw.config.tools_schema import BrowserConfig
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.ui.browser import BrowserTool
from edgeclaw.tools.ui.browser_sandbox import BrowserSandbox
from tests.web_support import Page, Site

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")

FORM = b"""<!doctype html><title>Form</title>
<form onsubmit="event.preventDefault(); document.getElementById('out').textContent = 'Hello, ' +
  document.getElementById('name').value;">
<input id="name" name="name" placeholder="your name"><button type="submit">Greet</button></form>
<p id="out"></p>"""


def html(body: bytes) -> Page:
    return Page(body=body, headers={"Content-Type": "text/html"})


@pytest.fixture
def site() -> Iterator[Site]:
    with Site("127.0.0.1") as s:
        yield s


@pytest.fixture
def forbidden() -> Iterator[Site]:
    with Site("127.0.0.2") as s:
        s.routes["/secret"] = lambda _seen: html(b"<p>metadata</p>")
        yield s


def make_tool(
    tmp_path: Path, site: Site, forbidden: Site, confinement: BrowserSandbox | None = None, **settings: object
) -> BrowserTool:
    """A browser tool whose pages may reach `site`, not `forbidden`; chromium in the built-in sandbox
    settings (firejail or bubblewrap, required) unless `confinement` says otherwise."""
    policy = NetworkPolicy(
        allow_networks=parse_networks(["127.0.0.1/32"]), ports=frozenset({site.port, forbidden.port})
    )
    config = BrowserConfig(**settings)  # type: ignore[arg-type]
    root = tmp_path / "ws"
    root.mkdir(exist_ok=True)
    return BrowserTool(config, policy, Workspace(root), confinement)


async def call(tool: BrowserTool, args: dict, ctx: ToolContext | None = None):
    return await tool.execute(args, ctx or ToolContext(caller="cli:test"))


async def test_form_type_click_read(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/"] = lambda _seen: html(FORM)
    tool = make_tool(tmp_path, site, forbidden)
    try:
        opened = await call(tool, {"action": "open", "url": site.url("/")})
        tab = opened.data["tab"]
        page = await call(tool, {"action": "read", "tab": tab})
        outline = page.data["outline"]
        field = next(line.split("]")[0][1:] for line in outline.splitlines() if "input:text" in line)
        button = next(line.split("]")[0][1:] for line in outline.splitlines() if "Greet" in line)
        await call(tool, {"action": "type", "tab": tab, "ref": field, "text": "Ada"})
        await call(tool, {"action": "click", "tab": tab, "ref": button})
        await call(tool, {"action": "wait", "tab": tab, "text": "Hello, Ada", "timeout_s": 5})
        page = await call(tool, {"action": "read", "tab": tab})
        assert "Hello, Ada" in page.data["text"]
        tabs = await call(tool, {"action": "tabs"})
        assert [t["tab"] for t in tabs.data["tabs"]] == [tab]
        shot = await call(tool, {"action": "screenshot", "tab": tab})
        assert (tmp_path / "ws" / shot.data["path"]).read_bytes().startswith(b"\x89PNG")
    finally:
        await tool.aclose()
    assert not tool.running_for("cli:test")


async def test_page_fetching_forbidden_address_is_refused(
    tmp_path: Path, site: Site, forbidden: Site
) -> None:
    target = forbidden.url("/secret")
    site.routes["/"] = lambda _seen: html(
        b"<p id=s>start</p><script>fetch('%s').then(r => r.text()).then(t => s.textContent = 'got ' + t,"
        b" e => s.textContent = 'failed')</script>" % target.encode()
    )
    tool = make_tool(tmp_path, site, forbidden)
    try:
        opened = await call(tool, {"action": "open", "url": site.url("/")})
        await call(tool, {"action": "wait", "tab": opened.data["tab"], "text": "failed", "timeout_s": 10})
    finally:
        await tool.aclose()
    assert forbidden.seen == []
    assert forbidden.connections == 0


async def test_opening_forbidden_address_is_refused(tmp_path: Path, site: Site, forbidden: Site) -> None:
    tool = make_tool(tmp_path, site, forbidden)
    try:
        with pytest.raises(ToolError, match="blocked"):
            await call(tool, {"action": "open", "url": forbidden.url("/secret")})
    finally:
        await tool.aclose()
    assert forbidden.connections == 0


async def test_redirect_chain_to_forbidden_address(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/a"] = lambda _seen: Page(302, headers={"Location": site.url("/b")})
    site.routes["/b"] = lambda _seen: Page(302, headers={"Location": forbidden.url("/secret")})
    tool = make_tool(tmp_path, site, forbidden)
    try:
        with pytest.raises(ToolError, match="blocked"):
            await call(tool, {"action": "open", "url": site.url("/a")})
    finally:
        await tool.aclose()
    assert [s.path for s in site.seen] == ["/a", "/b"]
    assert forbidden.connections == 0


async def test_download_lands_in_workspace(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/"] = lambda _seen: html(b'<a href="/file.bin" download>get</a>')
    site.routes["/file.bin"] = lambda _seen: Page(
        body=b"payload",
        headers={
            "Content-Type": "application/octet-stream",
            "Content-Disposition": "attachment; filename=file.bin",
        },
    )
    tool = make_tool(tmp_path, site, forbidden)
    try:
        opened = await call(tool, {"action": "open", "url": site.url("/")})
        page = await call(tool, {"action": "read", "tab": opened.data["tab"]})
        link = page.data["outline"].splitlines()[0].split("]")[0][1:]
        await call(tool, {"action": "click", "tab": opened.data["tab"], "ref": link})
        target = tmp_path / "ws" / "downloads" / "file.bin"
        for _ in range(100):
            if target.exists() and target.read_bytes() == b"payload":
                break
            await asyncio.sleep(0.1)
        assert target.read_bytes() == b"payload"
    finally:
        await tool.aclose()


async def test_page_that_never_loads_is_bounded(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/"] = lambda _seen: html(b'<p>here</p><img src="/slow.png">')
    site.routes["/slow.png"] = lambda _seen: Page(hang_s=8, body=b"")
    tool = make_tool(tmp_path, site, forbidden)
    try:
        with pytest.raises(ToolError, match="did not finish loading within 1 s"):
            await call(tool, {"action": "open", "url": site.url("/"), "timeout_s": 1})
        with pytest.raises(ToolError, match=r"did not appear .* within 0\.5 s"):
            await call(tool, {"action": "wait", "text": "never there", "timeout_s": 0.5})
    finally:
        await tool.aclose()


async def test_idle_timeout_closes_chromium(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/"] = lambda _seen: html(b"<p>hi</p>")
    tool = make_tool(tmp_path, site, forbidden, idle_timeout_s=1.0)
    try:
        await call(tool, {"action": "open", "url": site.url("/")})
        process = tool._instances["cli:test"].session.chromium.child.proc
        for _ in range(80):
            if process.returncode is not None:
                break
            await asyncio.sleep(0.1)
        assert not tool.running_for("cli:test")
        assert process.returncode is not None
    finally:
        await tool.aclose()


async def test_one_instance_per_caller_and_limit(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/"] = lambda _seen: html(b"<p>hi</p>")
    tool = make_tool(tmp_path, site, forbidden, max_instances=1)
    a, b = ToolContext(caller="mqtt:a"), ToolContext(caller="mqtt:b")
    try:
        await call(tool, {"action": "open", "url": site.url("/")}, a)
        await call(tool, {"action": "open", "url": site.url("/")}, a)  # the same instance, a second tab
        assert len((await call(tool, {"action": "tabs"}, a)).data["tabs"]) == 2
        with pytest.raises(ToolRefused, match="max_instances"):
            await call(tool, {"action": "open", "url": site.url("/")}, b)
        with pytest.raises(ToolError, match="no browser is running"):
            await call(tool, {"action": "tabs"}, b)  # b cannot see a's tabs
        await call(tool, {"action": "close"}, a)
        await call(tool, {"action": "open", "url": site.url("/")}, b)
        assert len((await call(tool, {"action": "tabs"}, b)).data["tabs"]) == 1
    finally:
        await tool.aclose()


async def test_evaluate_is_off_by_default(tmp_path: Path, site: Site, forbidden: Site) -> None:
    tool = make_tool(tmp_path, site, forbidden)
    with pytest.raises(ToolRefused, match="allow_evaluate"):
        await call(tool, {"action": "evaluate", "expression": "1+1"})
    site.routes["/"] = lambda _seen: html(b"<p>hi</p>")
    allowed = make_tool(tmp_path, site, forbidden, allow_evaluate=True)
    try:
        await call(allowed, {"action": "open", "url": site.url("/")})
        assert (await call(allowed, {"action": "evaluate", "expression": "1+1"})).data["value"] == 2
    finally:
        await allowed.aclose()


def test_device_and_remote_profiles_leave_the_browser_out() -> None:
    from edgeclaw.config.policy_rules import PolicyRules
    from edgeclaw.tool_groups import GROUP_OF
    from edgeclaw.tools.policy import PolicyEngine

    engine = PolicyEngine(PolicyRules())
    engine.set_tools(GROUP_OF)
    assert "browser" in engine.profile_members("full")
    assert {"canvas", "screenshot"} <= engine.profile_members("device")
    assert "browser" not in engine.profile_members("device")
    assert "browser" not in engine.profile_members("remote")


def test_doctor_says_whether_chromium_is_present(tmp_path: Path) -> None:
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-m", "edgeclaw", "doctor", "--board", "sim"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**__import__("os").environ, "HOME": str(tmp_path)},
    ).stdout
    assert f"browser: chromium at {shutil.which('chromium')}" in out


def test_every_way_out_of_a_page_goes_through_the_guarded_proxy() -> None:
    """Loopback is not bypassed, names are not prefetched past the proxy, and WebRTC's UDP, which an HTTP
    proxy cannot carry, is not sent at all."""
    from edgeclaw.backends.browser.chromium import chromium_args

    args = chromium_args("chromium", "/tmp/profile", "http://127.0.0.1:1")
    for flag in (
        "--proxy-server=http://127.0.0.1:1",
        "--proxy-bypass-list=<-loopback>",
        "--dns-prefetch-disable",
        "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    ):
        assert flag in args
