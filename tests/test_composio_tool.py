"""The composio tool through the real registry against a loopback server that answers as Composio's v3
REST API does (the shapes its docs and SDK publish): the platform itself cannot be reached from here."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from web_support import Page, Seen, Site

from edgeclaw.config.loader import config_from_dict
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.tools.base import ToolContext

KEY = "ak_composio-9c2f7e1b4d"
TOOLS = {
    "items": [
        {
            "slug": "GITHUB_GET_REPOS",
            "name": "Get repositories",
            "description": "List the repositories of an owner",
            "input_parameters": {"type": "object", "properties": {"owner": {"type": "string"}}},
        },
        {
            "slug": "GITHUB_STAR_REPO",
            "name": "Star",
            "description": "Star a repository",
            "input_parameters": {},
        },
    ],
    "next_cursor": None,
}


def composio_api(seen: Seen) -> Page:
    """The v3 API as published: the key in `x-api-key`, JSON in and out."""
    if seen.headers.get("x-api-key") != KEY:
        return Page(401, b'{"error": {"message": "Invalid API key"}}', {"Content-Type": "application/json"})
    if seen.method == "GET" and seen.path.startswith("/api/v3/tools?"):
        return Page(body=json.dumps(TOOLS).encode(), headers={"Content-Type": "application/json"})
    if seen.method == "POST" and seen.path.startswith("/api/v3/tools/execute/"):
        request = json.loads(seen.body)
        slug = seen.path.rsplit("/", 1)[1]
        if slug == "GITHUB_GET_REPOS":
            data = {"repos": [f"{request['arguments']['owner']}/edgeclaw"], "user": request["user_id"]}
            answer = {"data": data, "error": None, "successful": True, "log_id": "log_1"}
        else:
            answer = {"data": {}, "error": "no connected account for GITHUB", "successful": False}
        return Page(body=json.dumps(answer).encode(), headers={"Content-Type": "application/json"})
    return Page(404, b'{"error": "not found"}', {"Content-Type": "application/json"})


@pytest.fixture
def site():
    with Site() as s:
        s.routes["/api/v3/tools"] = composio_api
        s.routes["/api/v3/tools/execute/GITHUB_GET_REPOS"] = composio_api
        s.routes["/api/v3/tools/execute/GITHUB_STAR_REPO"] = composio_api
        yield s


@pytest.fixture
def runtime_for(tmp_path: Path):
    made = []

    def build(site: Site, key: str = KEY, **composio: Any):
        web = {
            "allow_networks": ["127.0.0.1/32"],
            "ports": [site.port],
            "allowed_domains": ["127.0.0.1"],
            "secrets": {"composio": {"env": "COMPOSIO_KEY"}},
        }
        settings = {
            "base_url": site.url("/api/v3"),
            "api_key_secret": "composio",
            "user_id": "ops",
            **composio,
        }
        data = {
            "board": "sim",
            "state_dir": str(tmp_path / "state"),
            "tools": {"web": web, "composio": settings},
        }
        runtime = build_runtime(config_from_dict(data, "test.toml"), environ={"COMPOSIO_KEY": key})
        made.append(runtime)
        return runtime

    yield build


async def call(runtime: Any, args: dict[str, Any]) -> Any:
    return await runtime.registry.execute("composio", args, ToolContext(channel="cli"))


async def test_list_and_execute_as_the_v3_api_answers(site: Site, runtime_for, caplog) -> None:
    runtime = runtime_for(site)
    with caplog.at_level(logging.DEBUG):
        listed = await call(runtime, {"action": "list", "toolkit": "GITHUB"})
        done = await call(
            runtime, {"action": "execute", "tool": "GITHUB_GET_REPOS", "arguments": {"owner": "x"}}
        )
    assert listed.ok, listed.error
    assert [t["slug"] for t in listed.data["tools"]] == ["GITHUB_GET_REPOS", "GITHUB_STAR_REPO"]
    assert "GITHUB_GET_REPOS: List the repositories of an owner (arguments: owner)" in listed.for_llm
    assert done.ok, done.error
    assert done.data["data"] == {"repos": ["x/edgeclaw"], "user": "ops"}
    get, post = site.seen
    assert get.path == "/api/v3/tools?toolkit_slug=GITHUB&limit=20" and get.headers["x-api-key"] == KEY
    assert json.loads(post.body) == {"arguments": {"owner": "x"}, "user_id": "ops"}
    # The key went to the server and nowhere else: not in what the model or the audit sees, not in a log.
    for shown in (json.dumps(listed.as_dict()), json.dumps(done.as_dict()), caplog.text):
        assert KEY not in shown


async def test_a_failed_action_and_a_refused_key_are_clear_errors(site: Site, runtime_for) -> None:
    failed = await call(runtime_for(site), {"action": "execute", "tool": "GITHUB_STAR_REPO"})
    assert not failed.ok and "GITHUB_STAR_REPO failed: no connected account for GITHUB" in failed.error
    refused = await call(runtime_for(site, key="ak_wrong-key-000"), {"action": "list", "toolkit": "GITHUB"})
    assert not refused.ok and "the API key was refused (HTTP 401)" in refused.error
    assert "ak_wrong-key-000" not in refused.error


async def test_a_host_the_web_rules_do_not_list_is_never_asked(site: Site, runtime_for) -> None:
    runtime = runtime_for(site, base_url=site.url("/api/v3", host="localhost"))
    out = await call(runtime, {"action": "list", "toolkit": "GITHUB"})
    assert out.refused and "allowed_domains" in out.error
    assert site.seen == [] and site.connections == 0


async def test_bad_arguments_and_a_missing_key_are_refused_naming_them(site: Site, runtime_for) -> None:
    runtime = runtime_for(site)
    bad = await call(runtime, {"action": "execute", "tool": "GITHUB GET; rm"})
    assert bad.refused and "'tool'" in bad.error
    no_tool = await call(runtime, {"action": "execute"})
    assert no_tool.refused and "needs 'tool'" in no_tool.error
    off = await call(runtime_for(site, api_key_secret=""), {"action": "list", "toolkit": "GITHUB"})
    assert not off.ok and "[tools.composio] api_key_secret" in off.error
    unknown = await call(runtime_for(site, api_key_secret="nope"), {"action": "list", "toolkit": "GITHUB"})
    assert unknown.refused and "'nope'" in unknown.error
    assert site.seen == []


def test_doctor_says_whether_composio_can_reach_the_platform(site: Site, runtime_for) -> None:
    from edgeclaw.cli.doctor_tools import composio_finding

    assert composio_finding(runtime_for(site))[0] == "ok"
    off = composio_finding(runtime_for(site, api_key_secret=""))
    assert off[0] == "ok" and "not configured" in off[2]
    assert composio_finding(runtime_for(site, api_key_secret="nope"))[0] == "FAIL"
    elsewhere = composio_finding(runtime_for(site, base_url="https://backend.composio.dev/api/v3"))
    assert (
        elsewhere[0] == "warn" and "backend.composio.dev is not in tools.web.allowed_domains" in elsewhere[2]
    )
