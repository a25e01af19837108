"""The browser's chromium in the daemon's sandbox, against the real chromium and the real firejail:
the profile directory is all it sees of the host's files, its memory is bounded by its own cgroup (a
page allocating without end stops the browser, not the daemon), the sandbox is required (fail
closed), and the same holds for an unprivileged daemon."""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path

import pytest

from edgeclaw.errors import ToolError
from edgeclaw.sandbox.base import SandboxSpec
from edgeclaw.sandbox.firejail import FirejailBackend
from edgeclaw.sandbox.manager import SandboxSettings
from edgeclaw.tools.ui.browser import BrowserTool
from edgeclaw.tools.ui.browser_sandbox import BrowserSandbox
from tests import test_browser
from tests.test_browser import call, html, make_tool
from tests.web_support import Site

pytestmark = pytest.mark.skipif(
    shutil.which("chromium") is None or shutil.which("firejail") is None,
    reason="needs chromium and firejail",
)

# The same loopback sites (fixtures) as the browser's other tests.
site = test_browser.site
forbidden = test_browser.forbidden

# Off-heap memory (typed arrays), touched so it is really used, without end.
GREEDY = b"""<!doctype html><title>greedy</title><p>growing</p><script>
const keep = [];
function grow() {
  for (let i = 0; i < 8; i++) keep.push(new Float64Array(1 << 20).fill(Math.random()));
  setTimeout(grow, 5);
}
setTimeout(grow, 50);
</script>"""


def chromium_pids(tool: BrowserTool, identity: str = "cli:test") -> list[int]:
    """The chromium processes of the caller's browser (not the guard shell or firejail around them)."""
    child = tool._instances[identity].session.chromium.child
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found = []
    for pid in sorted(parents):
        up = pid
        while up > 1 and up != child.pid:
            up = parents.get(up, 0)
        if up == child.pid:
            try:
                if os.readlink(f"/proc/{pid}/exe").endswith("/chromium"):
                    found.append(pid)
            except OSError:
                continue
    assert found, "no chromium process under the browser's launch"
    return found


def socket_inodes(pid: int) -> set[str]:
    out: set[str] = set()
    with contextlib.suppress(OSError):
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    out.add(target[8:-1])
    return out


def listening_inodes() -> set[str]:
    """The socket inodes of every TCP socket listening in this network namespace."""
    out: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                if fields[3] == "0A":  # LISTEN
                    out.add(fields[9])
    return out


BACKENDS = [
    "firejail",
    pytest.param(
        "bubblewrap",
        marks=pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed"),
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
async def test_chromium_sees_its_profile_and_not_the_hosts_files(
    tmp_path: Path, site: Site, forbidden: Site, backend: str
) -> None:
    secret = tmp_path / "private" / "key.txt"
    secret.parent.mkdir()
    secret.write_text("the host's secret")
    confinement = BrowserSandbox(SandboxSettings(backend=backend), hidden=[secret.parent])
    site.routes["/"] = lambda _seen: html(b"<p>hello from loopback</p>")
    tool = make_tool(tmp_path, site, forbidden, confinement)
    try:
        page = await call(tool, {"action": "open", "url": site.url("/")})
        assert (await call(tool, {"action": "read", "tab": page.data["tab"]})).data[
            "text"
        ] == "hello from loopback"
        root = Path(f"/proc/{chromium_pids(tool)[0]}/root")
        profile = Path(tool._instances["cli:test"].session.chromium.profile_dir)
        # What chromium sees at those paths: its profile, written by it ...
        assert "Local State" in {p.name for p in (root / profile.relative_to("/")).iterdir()}
        # ... and not the host's file, nor the workspace, nor a home.
        for path in (secret, tmp_path / "ws", Path("/root")):
            seen = root / path.relative_to("/")
            try:
                shown = sorted(p.name for p in seen.iterdir()) if seen.is_dir() else seen.read_text()
            except OSError:
                continue
            assert not shown, f"chromium sees {path}: {shown}"
    finally:
        await tool.aclose()


@pytest.mark.parametrize("backend", BACKENDS)
async def test_devtools_goes_over_a_pipe_not_a_port(
    tmp_path: Path, site: Site, forbidden: Site, backend: str
) -> None:
    """No chromium process listens on a TCP port: no local process can drive the browser but the daemon."""
    site.routes["/"] = lambda _seen: html(b"<p>hi</p>")
    tool = make_tool(tmp_path, site, forbidden, BrowserSandbox(SandboxSettings(backend=backend)))
    try:
        await call(tool, {"action": "open", "url": site.url("/")})
        listening = listening_inodes()
        for pid in chromium_pids(tool):
            assert not socket_inodes(pid) & listening, f"chromium {pid} listens on a TCP port"
    finally:
        await tool.aclose()


async def test_the_browser_has_its_own_memory_and_process_bounds(
    tmp_path: Path, site: Site, forbidden: Site, caplog: pytest.LogCaptureFixture
) -> None:
    site.routes["/"] = lambda _seen: html(b"<p>hi</p>")
    tool = make_tool(tmp_path, site, forbidden, memory_mb=300, max_processes=400)
    try:
        await call(tool, {"action": "open", "url": site.url("/")})
        cgroup = tool._instances["cli:test"].session.chromium.child.launch.cgroup
        if cgroup is None or cgroup.memory_dir is None:
            # No writable cgroup (an unprivileged daemon on cgroup v1): it says so rather than pretend.
            assert "the browser runs without a memory bound" in caplog.text
        if cgroup is None:
            return
        # Its own processes and threads: far above exec's 64, which chromium does not start under.
        assert (cgroup.pids_dir / "pids.max").read_text().strip() == str(400 + 5)
        if cgroup.memory_dir is None:
            return
        limit = "memory.max" if cgroup.v2 else "memory.limit_in_bytes"
        assert int((cgroup.memory_dir / limit).read_text()) == 300 * 1024 * 1024
    finally:
        await tool.aclose()


async def test_a_page_allocating_without_end_stops_the_browser_not_the_daemon(
    tmp_path: Path, site: Site, forbidden: Site
) -> None:
    confinement = BrowserSandbox(SandboxSettings())
    if not confinement.memory_bounded():
        pytest.skip("no memory cgroup here: the browser runs without a memory bound (doctor says so)")
    site.routes["/"] = lambda _seen: html(GREEDY)
    site.routes["/calm"] = lambda _seen: html(b"<p>calm page</p>")
    tool = make_tool(tmp_path, site, forbidden, confinement, memory_mb=256)
    try:
        with pytest.raises(ToolError, match=r"the browser ran out of its 256 MiB and was stopped"):
            await call(tool, {"action": "open", "url": site.url("/")})
            await call(tool, {"action": "wait", "text": "never there", "timeout_s": 60})
        assert not tool.running_for("cli:test")  # dropped
        # The next call starts a fresh browser.
        page = await call(tool, {"action": "open", "url": site.url("/calm")})
        assert (await call(tool, {"action": "read", "tab": page.data["tab"]})).data["text"] == "calm page"
    finally:
        await tool.aclose()


async def test_without_a_working_sandbox_the_browser_refuses(
    tmp_path: Path, site: Site, forbidden: Site
) -> None:
    missing = BrowserSandbox(SandboxSettings(backend="firejail", firejail_path="/nonexistent/firejail"))
    site.routes["/"] = lambda _seen: html(b"<p>hi</p>")
    tool = make_tool(tmp_path, site, forbidden, missing)
    try:
        with pytest.raises(ToolError, match="refused to start chromium unconfined"):
            await call(tool, {"action": "open", "url": site.url("/")})
        assert not tool.running_for("cli:test")
        assert site.seen == []
    finally:
        await tool.aclose()


async def test_bounds_too_small_for_chromium_are_refused_naming_the_key(
    tmp_path: Path, site: Site, forbidden: Site
) -> None:
    for key, value in (("memory_mb", 10), ("max_processes", 8)):
        tool = make_tool(tmp_path, site, forbidden, **{key: value})
        with pytest.raises(ToolError, match=f"tools.browser.{key} is {value}, under 64"):
            await call(tool, {"action": "open", "url": site.url("/")})
        assert not tool.running_for("cli:test")


async def test_a_chromium_that_dies_at_start_is_a_clear_error(
    tmp_path: Path, site: Site, forbidden: Site
) -> None:
    tool = make_tool(tmp_path, site, forbidden, executable="/bin/false")
    try:
        with pytest.raises(ToolError, match=r"chromium exited at start \(status 1, firejail\)"):
            await call(tool, {"action": "open", "url": site.url("/")})
        assert not tool.running_for("cli:test")
    finally:
        await tool.aclose()


def test_only_the_browser_may_make_unix_sockets(tmp_path: Path) -> None:
    """exec's commands keep firejail's protocol filter without unix sockets; the browser asks for them."""
    spec = SandboxSpec(workspace=tmp_path, cwd=tmp_path)
    assert "--protocol=inet,inet6,netlink" in FirejailBackend().wrap(["/bin/true"], spec)
    browser = SandboxSpec(workspace=tmp_path, cwd=tmp_path, unix_sockets=True)
    assert "--protocol=unix,inet,inet6,netlink" in FirejailBackend().wrap(["/bin/true"], browser)


async def test_wait_for_an_element_by_reference(tmp_path: Path, site: Site, forbidden: Site) -> None:
    site.routes["/"] = lambda _seen: html(
        b"<button id=b disabled>Send</button><script>setTimeout(() => b.disabled = false, 600)</script>"
    )
    tool = make_tool(tmp_path, site, forbidden)
    try:
        tab = (await call(tool, {"action": "open", "url": site.url("/")})).data["tab"]
        outline = (await call(tool, {"action": "read", "tab": tab})).data["outline"]
        ref = outline.split("]")[0][1:]
        assert "Send" in outline
        await call(tool, {"action": "wait", "tab": tab, "ref": ref, "timeout_s": 10})
        with pytest.raises(ToolError, match="e99 is not on the page"):
            await call(tool, {"action": "wait", "tab": tab, "ref": "e99", "timeout_s": 2})
        with pytest.raises(ToolError, match="one of text, selector and ref"):
            await call(tool, {"action": "wait", "tab": tab, "ref": ref, "text": "x"})
    finally:
        await tool.aclose()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as the service user")
def test_the_same_as_an_unprivileged_daemon() -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).parent))
    from shell_helpers import SERVICE_USER, pytest_as_service_user

    files = ["-rA", "tests/test_browser_sandbox.py", "tests/test_browser.py"]
    status, output = pytest_as_service_user(files, "edgeclaw-svc-browser-")
    assert status == 0, f"as {SERVICE_USER}:\n{output}"
    for name in (
        "test_browser_sandbox.py::test_chromium_sees_its_profile_and_not_the_hosts_files[firejail]",
        "test_browser_sandbox.py::test_the_browser_has_its_own_memory_and_process_bounds",
        "test_browser_sandbox.py::test_without_a_working_sandbox_the_browser_refuses",
        "test_browser_sandbox.py::test_devtools_goes_over_a_pipe_not_a_port[firejail]",
        "test_browser.py::test_form_type_click_read",
        "test_browser.py::test_page_fetching_forbidden_address_is_refused",
        "test_browser.py::test_redirect_chain_to_forbidden_address",
        "test_browser.py::test_download_lands_in_workspace",
    ):
        assert f"PASSED tests/{name}" in output, f"as {SERVICE_USER}, {name} did not pass:\n{output}"


def test_doctor_says_whether_the_browser_is_sandboxed_and_bounded(tmp_path: Path) -> None:
    from edgeclaw.cli.doctor_tools import browser_confinement_finding
    from tests.hw_support import make_runtime

    bounded = BrowserSandbox(SandboxSettings()).memory_bounded()
    runtime = make_runtime(tmp_path / "a")
    level, check, said = browser_confinement_finding(runtime)  # type: ignore[misc]
    assert check == "browser sandbox" and said.startswith("sandboxed (auto, required)")
    if bounded:
        assert level == "ok" and "memory bounded to 512 MiB by its own cgroup" in said
    else:
        assert level == "warn" and "NOT memory-bounded" in said
    host = make_runtime(tmp_path / "b", sandbox={"backend": "none", "required": False})
    level, _, said = browser_confinement_finding(host)  # type: ignore[misc]
    assert level == "warn" and "not sandboxed" in said
    missing = make_runtime(
        tmp_path / "c", sandbox={"backend": "firejail", "firejail_path": "/nonexistent/fj"}
    )
    level, _, said = browser_confinement_finding(missing)  # type: ignore[misc]
    assert level == "FAIL" and "browser refuses" in said


def test_the_browser_starts_through_the_same_sandbox_as_exec(tmp_path: Path) -> None:
    """One sandbox, so one run cgroup: sandbox.max_total_memory_mb bounds exec's commands and the
    browser together, not each apart."""
    from tests.shell_helpers import make_runtime

    runtime = make_runtime(tmp_path)
    exec_sandbox = runtime.registry.get("exec").shell.runner.sandbox
    browser = runtime.registry.get("browser")
    assert browser._confinement.sandbox is exec_sandbox
