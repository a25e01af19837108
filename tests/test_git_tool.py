"""The git tool end to end: real git in the real sandbox, a real smart-HTTP server on loopback, and
hostile repositories whose hooks, config and submodules must not make anything run or reach out."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from git_support import GitHttpServer, bare_repo, git
from shell_helpers import ctx, make_runtime

from edgeclaw.daemon.runtime import Runtime
from edgeclaw.tools.vcs import git_rules

pytestmark = pytest.mark.skipif(
    shutil.which("git") is None or not os.path.exists("/usr/bin/firejail"),
    reason="needs git and firejail",
)
TOKEN = "tok-" + "5f3a9c1e7b2d4a6f8e0c"


def runtime_for(tmp_path: Path, port: int = 0, **git_section: Any) -> Runtime:
    web: dict[str, Any] = {"allowed_domains": ["127.0.0.1"], "secrets": {"GIT_TOKEN": {"env": "GIT_TOKEN"}}}
    if port:
        web.update(allow_networks=["127.0.0.1/32"], ports=[port])
    git_section.setdefault("allow_http_hosts", ["127.0.0.1"])
    return make_runtime(tmp_path, environ={"GIT_TOKEN": TOKEN}, tools={"web": web, "git": git_section})


async def call(runtime: Runtime, **args: Any):
    return await runtime.registry.execute("git", args, ctx())


@pytest.fixture
def server(tmp_path: Path):
    root = tmp_path / "srv"
    root.mkdir()
    with GitHttpServer(root, token=TOKEN) as srv:
        yield srv


# -- listing and profiles --------------------------------------------------------------------------


@pytest.mark.parametrize(("profile", "has_git"), [("remote", False), ("device", False), ("coding", True)])
def test_git_is_a_vcs_tool_the_remote_and_device_profiles_leave_out(
    tmp_path: Path, profile: str, has_git: bool
) -> None:
    runtime = make_runtime(tmp_path, tools={"channels": {"mqtt": {"profile": profile}}})
    info = {i.name: i for i in runtime.registry.infos()}["git"]
    assert info.group == "vcs" and "init" in info.parameters["properties"]["action"]["enum"]
    assert ("git" in runtime.registry.policy.allowed(ctx())) is has_git


def test_tools_list_shows_git(run_cli) -> None:
    plain = run_cli("tools", "list")
    assert plain.returncode == 0 and any(
        line.split()[:2] == ["git", "vcs"] for line in plain.stdout.splitlines()
    )
    listed = json.loads(run_cli("tools", "list", "--json").stdout)
    assert [t["group"] for t in listed if t["name"] == "git"] == ["vcs"]


# -- the round trip: commit, push to a loopback http-backend, clone back ---------------------------


async def test_commit_push_and_clone_back_over_http(
    tmp_path: Path, server: GitHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from edgeclaw.tools.vcs.git import GitTool
    from edgeclaw.tools.vcs.git_remote import header_token

    command_lines: list[list[str]] = []
    build = GitTool._command
    monkeypatch.setattr(
        GitTool, "_command", lambda self, plan: command_lines.append(build(self, plan)) or build(self, plan)
    )
    bare_repo(server.root, "project.git")
    runtime = runtime_for(tmp_path, server.port)
    ws = runtime.workspace
    url = f"http://127.0.0.1:{server.port}/project.git"
    try:
        assert (await call(runtime, action="init", repo="proj")).ok
        (ws / "proj" / "notes.txt").write_text("first line\n")
        out = await call(runtime, action="status", repo="proj")
        assert out.ok and "?? notes.txt" in out.for_llm and "sandbox firejail" in out.for_llm
        assert (await call(runtime, action="add", repo="proj", paths=["proj/notes.txt"])).ok
        out = await call(runtime, action="commit", repo="proj", message="Add notes")
        assert out.ok, out.for_llm
        (ws / "proj" / "notes.txt").write_text("first line\nsecond\n")
        out = await call(runtime, action="diff", repo="proj")
        assert out.ok and "+second" in out.for_llm
        out = await call(
            runtime, action="push", repo="proj", remote=url, branch="main", credential="GIT_TOKEN"
        )
        assert out.ok, out.for_llm
        assert TOKEN not in out.for_llm
        assert server.authorizations and all(TOKEN not in a for a in server.authorizations)  # base64 only
        assert git("log", "--format=%s", "main", cwd=server.root / "project.git").strip() == "Add notes"

        out = await call(runtime, action="clone", url=url, path="copy", credential="GIT_TOKEN")
        assert out.ok, out.for_llm
        assert (ws / "copy" / "notes.txt").read_text() == "first line\n"
        out = await call(runtime, action="log", repo="copy")
        assert out.ok and "Add notes" in out.for_llm and "edgeclaw <edgeclaw@localhost>" in out.for_llm
        # Both sides move on: the pull merges, committing as the tool's identity.
        assert (await call(runtime, action="commit", repo="proj", all=True, message="Second line")).ok
        push = {"action": "push", "repo": "proj", "remote": url, "branch": "main", "credential": "GIT_TOKEN"}
        out = await call(runtime, **push)
        assert out.ok, (out.for_llm, server.failures)
        (ws / "copy" / "other.txt").write_text("other\n")
        assert (await call(runtime, action="add", repo="copy", all=True)).ok
        assert (await call(runtime, action="commit", repo="copy", message="Other")).ok
        out = await call(runtime, action="pull", repo="copy", credential="GIT_TOKEN")
        assert out.ok, out.for_llm
        assert (ws / "copy" / "notes.txt").read_text() == "first line\nsecond\n"
        out = await call(runtime, action="log", repo="copy", max_count=1)
        assert "Merge branch" in out.for_llm
        # The credential travelled in the environment only: never on a command line.
        shown = " ".join(" ".join(argv) for argv in command_lines)
        assert "clone" in shown and TOKEN not in shown and header_token("x-access-token", TOKEN) not in shown
    finally:
        await runtime.aclose()


async def test_without_the_credential_the_server_says_no(tmp_path: Path, server: GitHttpServer) -> None:
    bare_repo(server.root, "private.git", {"a.txt": "a\n"})
    runtime = runtime_for(tmp_path, server.port)
    try:
        out = await call(runtime, action="clone", url=f"http://127.0.0.1:{server.port}/private.git")
        assert not out.ok and not out.refused
        assert "could not read Username" in out.for_llm or "Authentication failed" in out.for_llm
        out = await call(
            runtime, action="clone", url=f"http://127.0.0.1:{server.port}/x.git", credential="NOPE"
        )
        assert out.refused and "GIT_TOKEN" in out.error
    finally:
        await runtime.aclose()


# -- refusals ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("https://169.254.169.254/repo.git", "link-local"),
        ("https://10.0.0.7/repo.git", "private"),
        ("https://192.168.1.20:443/repo.git", "private"),
        ("file:///etc/repo", "file://"),
        ("ext::sh -c touch% /tmp/pwned", "space or a control character"),
        ("ext::sh", "remote helper"),
        ("ssh://git@example.org/repo.git", "ssh://"),
        ("git@example.org:repo.git", "scp-like"),
        ("example.org:repo.git", "scp-like"),
        ("git://example.org/repo.git", "git://"),
        ("https://user:pw@example.org/repo.git", "user name or password"),
        ("http://example.org/repo.git", "allow_http_hosts"),
        ("--upload-pack=touch /tmp/x", "begins with '-'"),
    ],
)
async def test_remote_urls_outside_the_rules_are_refused(tmp_path: Path, url: str, said: str) -> None:
    runtime = make_runtime(tmp_path, tools={"web": {"allowed_domains": ["*"]}})
    try:
        out = await call(runtime, action="clone", url=url, path="x")
        assert out.refused and said in out.error, out.error
        assert not (runtime.workspace / "x").exists()
    finally:
        await runtime.aclose()


async def test_a_host_outside_allowed_domains_is_refused(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path, tools={"web": {"allowed_domains": ["git.example.org"]}})
    try:
        out = await call(runtime, action="clone", url="https://evil.example.com/r.git")
        assert out.refused and "allowed_domains" in out.error
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"action": "log", "ref": "--output=/tmp/x"}, "begins with '-'"),
        ({"action": "diff", "ref": "-c"}, "begins with '-'"),
        ({"action": "checkout", "ref": "--exec=touch x"}, "begins with '-'"),
        ({"action": "checkout", "ref": "-b", "create": True}, "begins with '-'"),
        ({"action": "push", "remote": "--receive-pack=touch x"}, "begins with '-'"),
        ({"action": "fetch", "remote": "--upload-pack=touch x"}, "begins with '-'"),
        ({"action": "pull", "remote": "origin", "branch": "--config=core.pager=x"}, "begins with '-'"),
        ({"action": "restore", "paths": ["a.txt"], "source": "--worktree"}, "begins with '-'"),
        ({"action": "log", "ref": "main;touch x"}, "characters a ref does not use"),
        ({"action": "add", "paths": ["../outside.txt"]}, ".."),
        ({"action": "add", "paths": ["/etc/passwd"]}, "outside"),
        ({"action": "add", "paths": [".git/config"]}, "inside .git"),
        ({"action": "commit", "message": ""}, "message"),
        ({"action": "status", "args": ["-c", "core.pager=x"]}, "args"),
    ],
)
async def test_arguments_git_would_read_as_options_are_refused(tmp_path: Path, args: dict, said: str) -> None:
    runtime = make_runtime(tmp_path)
    try:
        assert (await call(runtime, action="init")).ok
        out = await runtime.registry.execute("git", args, ctx())
        assert out.refused and said in out.error, out.error
    finally:
        await runtime.aclose()


# -- hostile repositories ------------------------------------------------------------------------


def _hostile_repo(ws: Path) -> Path:
    """A repository in the workspace with a second branch and hooks that would leave a marker."""
    repo = ws / "hostile"
    git("init", "--quiet", str(repo))
    (repo / "a.txt").write_text("a\n")
    git("add", "a.txt", cwd=repo)
    git("commit", "--quiet", "-m", "one", cwd=repo)
    git("branch", "other", cwd=repo)
    return repo


def _hook(repo: Path, name: str, marker: Path) -> None:
    hook = repo / ".git" / "hooks" / name
    hook.parent.mkdir(exist_ok=True)
    hook.write_text(f"#!/bin/sh\ntouch {marker}\n")
    hook.chmod(0o755)


async def test_hooks_in_the_repository_never_run(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    repo = _hostile_repo(runtime.workspace)
    marker = runtime.workspace / "HOOK-RAN"
    for name in ("post-checkout", "pre-commit", "commit-msg", "post-commit", "pre-push"):
        _hook(repo, name, marker)
    try:
        out = await call(runtime, action="checkout", repo="hostile", ref="other")
        assert out.ok, out.for_llm
        (repo / "b.txt").write_text("b\n")
        assert (await call(runtime, action="add", repo="hostile", paths=["hostile/b.txt"])).ok
        assert (await call(runtime, action="commit", repo="hostile", message="two")).ok
        assert not marker.exists()
    finally:
        await runtime.aclose()


HOSTILE_CONFIG = {
    "core.fsmonitor": "touch {marker}",
    "core.sshCommand": "touch {marker}",
    "core.pager": "touch {marker}",
    "core.hooksPath": "{hooks}",
    "core.worktree": "/",
    "diff.external": "touch {marker}",
    "filter.evil.smudge": "touch {marker}",
    "filter.evil.clean": "touch {marker}",
    "credential.helper": "!touch {marker}",
    "url.http://169.254.169.254/.insteadOf": "https://example.org/",
    "http.proxy": "http://10.0.0.1:3128",
    "include.path": "/etc/edgeclaw/edgeclaw.toml",
}


@pytest.mark.parametrize("key", sorted(HOSTILE_CONFIG))
async def test_a_repository_whose_config_names_a_command_is_refused(tmp_path: Path, key: str) -> None:
    runtime = make_runtime(tmp_path)
    repo = _hostile_repo(runtime.workspace)
    marker = runtime.workspace / "CONFIG-RAN"
    value = HOSTILE_CONFIG[key].format(marker=marker, hooks=repo / "myhooks")
    git("config", key, value, cwd=repo)
    try:
        for action in ("status", "diff", "log", "init"):
            out = await call(runtime, action=action, repo="hostile")
            assert out.refused and key.lower().split(".")[0] in out.error.lower(), out.error
        assert not marker.exists()
    finally:
        await runtime.aclose()


async def test_the_overrides_hold_even_for_a_config_the_check_let_through(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Defence in depth: with the allowlist open, the command line still keeps git from running
    fsmonitor, pager, editor, ssh, hooks or an external diff the repository names."""
    monkeypatch.setattr(git_rules, "ALLOWED_KEYS", _Everything())
    runtime = make_runtime(tmp_path)
    repo = _hostile_repo(runtime.workspace)
    marker = runtime.workspace / "OVERRIDE-FAILED"
    touch = f"touch {marker}"
    (repo / "myhooks").mkdir()
    _hook(repo, "post-checkout", marker)
    for key, value in {
        "core.fsmonitor": touch,
        "core.sshCommand": touch,
        "core.pager": touch,
        "core.editor": touch,
        "core.askPass": touch,
        "diff.external": touch,
        "core.hooksPath": str(repo / ".git" / "hooks"),
        "credential.helper": f"!{touch}",
        "log.showSignature": "true",
        "gpg.program": str(marker),
        "submodule.recurse": "true",
    }.items():
        git("config", key, value, cwd=repo)
    (repo / "a.txt").write_text("changed\n")
    try:
        for args in (
            {"action": "status"},
            {"action": "diff"},
            {"action": "log"},
            {"action": "checkout", "ref": "other"},
            {"action": "add", "paths": ["hostile/a.txt"]},
            {"action": "commit", "message": "x"},
        ):
            out = await call(runtime, repo="hostile", **args)
            assert out.ok or not out.refused, out.for_llm
        assert not marker.exists()
    finally:
        await runtime.aclose()


class _Everything(frozenset):
    def __contains__(self, item: object) -> bool:
        return True


async def test_a_submodule_with_a_file_url_is_not_fetched(tmp_path: Path, server: GitHttpServer) -> None:
    secret = tmp_path / "secret"
    git("init", "--quiet", str(secret))
    (secret / "SECRET.txt").write_text("do not fetch\n")
    git("add", "-A", cwd=secret)
    git("commit", "--quiet", "-m", "s", cwd=secret)
    bare = bare_repo(server.root, "withsub.git")
    work = tmp_path / "withsub-work"
    git("clone", "--quiet", str(bare), str(work))
    git(
        "-c", "protocol.file.allow=always", "submodule", "add", "--quiet", f"file://{secret}", "sub", cwd=work
    )
    git("commit", "--quiet", "-m", "sub", cwd=work)
    git("push", "--quiet", "origin", "HEAD:main", cwd=work)
    runtime = runtime_for(tmp_path, server.port)
    url = f"http://127.0.0.1:{server.port}/withsub.git"
    try:
        out = await call(runtime, action="clone", url=url, path="ws-sub", credential="GIT_TOKEN")
        assert out.ok, out.for_llm
        out = await call(runtime, action="pull", repo="ws-sub", credential="GIT_TOKEN")
        assert out.ok, out.for_llm
        assert (runtime.workspace / "ws-sub" / ".gitmodules").exists()
        assert not list((runtime.workspace / "ws-sub" / "sub").iterdir())
        assert not list(runtime.workspace.rglob("SECRET.txt"))
        assert not any("secret" in p for p in server.paths)
    finally:
        await runtime.aclose()


async def test_a_symlink_leading_out_of_the_workspace_stays_a_plain_file(
    tmp_path: Path, server: GitHttpServer
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.txt").write_text("private\n")
    work = tmp_path / "links-work"
    git("init", "--quiet", str(work))
    os.symlink(str(outside), work / "escape")
    os.symlink("../../../../../../../../etc", work / "etc")
    git("add", "-A", cwd=work)
    git("commit", "--quiet", "-m", "links", cwd=work)
    bare = bare_repo(server.root, "links.git")
    git("push", "--quiet", str(bare), "main", cwd=work)
    runtime = runtime_for(tmp_path, server.port)
    ws = runtime.workspace
    try:
        out = await call(
            runtime, action="clone", url=f"http://127.0.0.1:{server.port}/links.git", credential="GIT_TOKEN"
        )
        assert out.ok, out.for_llm
        for name in ("escape", "etc"):
            assert not (ws / "links" / name).is_symlink() and (ws / "links" / name).is_file()
        read = await runtime.registry.execute("read_file", {"path": "links/escape/private.txt"}, ctx())
        assert not read.ok
        # A real symlink out of the workspace: the fs tools refuse it, and so does git add.
        os.symlink(str(outside), ws / "links" / "real-escape")
        read = await runtime.registry.execute("read_file", {"path": "links/real-escape/private.txt"}, ctx())
        assert read.refused
        wrote = await runtime.registry.execute(
            "write_file", {"path": "links/real-escape/new.txt", "content": "x"}, ctx()
        )
        assert wrote.refused and not (outside / "new.txt").exists()
        out = await call(runtime, action="add", repo="links", paths=["links/real-escape/private.txt"])
        assert out.refused and "outside" in out.error
        out = await call(runtime, action="checkout", repo="links", ref="main", paths=["links/escape"])
        assert out.ok and (outside / "private.txt").read_text() == "private\n"
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(("link", "said"), [(os.symlink, "not a plain file"), (os.link, "hard link")])
async def test_a_linked_config_is_refused_unread(tmp_path: Path, link: Any, said: str) -> None:
    runtime = make_runtime(tmp_path)
    repo = _hostile_repo(runtime.workspace)
    secret = tmp_path / "daemon.toml"
    secret.write_text('[core]\n\tfsmonitor = "touch /tmp/x"\n[mqtt]\n\tpassword = "hunter2-hunter2"\n')
    (repo / ".git" / "config").unlink()
    link(secret, repo / ".git" / "config")
    try:
        out = await call(runtime, action="status", repo="hostile")
        assert out.refused and said in out.error and "mqtt" not in out.error, out.error
    finally:
        await runtime.aclose()


def test_the_command_line_runs_git_in_the_workspace(run_cli, state_env) -> None:
    assert run_cli("tool", "call", "git", '{"action": "init"}').returncode == 0
    workspace = Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace"
    (workspace / "readme.txt").write_text("hello\n")
    out = run_cli("tool", "call", "git", '{"action": "status"}')
    assert out.returncode == 0 and "?? readme.txt" in out.stdout
    refused = run_cli("tool", "call", "git", '{"action": "log", "ref": "--output=/tmp/x"}')
    assert refused.returncode == 2 and "begins with '-'" in (refused.stdout + refused.stderr)


async def test_a_repository_around_the_workspace_is_never_used(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    git("init", "--quiet", str(tmp_path))  # the directory holding the state and the workspace
    try:
        out = await call(runtime, action="status")
        assert not out.ok and "not a git repository" in out.error
        (runtime.workspace / "sub").mkdir()
        out = await call(runtime, action="log", repo="sub")
        assert not out.ok and "not a git repository" in out.error
    finally:
        await runtime.aclose()


async def test_a_git_file_pointing_elsewhere_is_refused(tmp_path: Path) -> None:
    runtime = make_runtime(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    git("init", "--quiet", str(elsewhere))
    repo = runtime.workspace / "pointer"
    repo.mkdir()
    (repo / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")
    try:
        out = await call(runtime, action="status", repo="pointer")
        assert out.refused and "plain .git directory" in out.error
    finally:
        await runtime.aclose()


async def test_git_connects_to_the_address_the_guard_vetted(tmp_path: Path, server: GitHttpServer) -> None:
    """The name is resolved once, by the guard; git is handed that address (it could not resolve a
    .invalid name itself), so a second DNS answer cannot send it elsewhere."""
    from edgeclaw.tools.vcs.git import GitTool
    from edgeclaw.tools.web.settings import WebSettings

    bare_repo(server.root, "pinned.git", {"a.txt": "pinned\n"})
    runtime = runtime_for(tmp_path, server.port)
    asked: list[str] = []

    async def resolver(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]

    config = runtime.config
    web = config.tools.web
    web.allowed_domains = ["git.invalid"]
    web.allow_hosts = ["git.invalid"]
    settings = WebSettings(web, {}, {"tools.web.secrets.GIT_TOKEN": TOKEN}, resolver=resolver)
    shell_runner = runtime.registry.get("git").runner  # type: ignore[union-attr]
    tool = GitTool(shell_runner, settings, allow_http_hosts=["git.invalid"])
    runtime.registry.register(tool, replace=True)
    try:
        url = f"http://git.invalid:{server.port}/pinned.git"
        out = await call(runtime, action="clone", url=url, path="pinned", credential="GIT_TOKEN")
        assert out.ok, out.for_llm
        assert set(asked) == {"git.invalid"}  # by the guard (the check, then the run)
        assert (runtime.workspace / "pinned" / "a.txt").read_text() == "pinned\n"
    finally:
        await runtime.aclose()


def test_doctor_says_whether_git_is_there(run_cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeclaw.cli.doctor_tools import git_finding

    out = run_cli("doctor")
    assert any(line.startswith("ok    git: git version") for line in out.stdout.splitlines()), out.stdout
    runtime = make_runtime(tmp_path)
    monkeypatch.setattr("shutil.which", lambda name: None)
    finding = git_finding(runtime)
    assert finding is not None and finding[0] == "warn" and "not installed" in finding[2]


async def test_without_git_every_call_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = make_runtime(tmp_path)
    monkeypatch.setattr("shutil.which", lambda name: None)
    try:
        out = await call(runtime, action="status")
        assert out.refused and "git is not installed" in out.error
    finally:
        await runtime.aclose()


def test_each_named_host_is_pinned_to_its_vetted_address() -> None:
    from edgeclaw.tools.vcs.git_remote import RemoteTarget, allowed_protocols, network_overrides

    named = RemoteTarget(
        "https://git.example.org/r.git", "https", "git.example.org", 443, "2001:db8::7", None
    )
    literal = RemoteTarget("http://127.0.0.1:8080/r.git", "http", "127.0.0.1", 8080, "127.0.0.1", None)
    assert network_overrides([named, literal]) == [
        ("http.curloptResolve", "git.example.org:443:[2001:db8::7]"),
        ("protocol.http.allow", "always"),
        ("http.proxy", ""),
    ]
    assert allowed_protocols([named]) == "https" and allowed_protocols([named, literal]) == "http:https"
