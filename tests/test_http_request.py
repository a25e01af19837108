"""http_request through the real registry (policy, scrubber, caps) against a server on loopback."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from web_support import Page, Site, echo

from edgeclaw.config.checks import check_config
from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.policy_rules import BUILTIN_GROUPS, PolicyRules
from edgeclaw.daemon.runtime import build_runtime
from edgeclaw.errors import ConfigErrors
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.policy import PolicyEngine

TOKEN = "tok-7f3a9c2e51b84d06"


@pytest.fixture
def site():
    with Site() as s:
        s.routes["/echo"] = echo
        s.routes["/json"] = lambda seen: Page(
            body=b'{"temp":21.5,"ok":true}', headers={"Content-Type": "application/json"}
        )
        s.routes["/missing"] = lambda seen: Page(404, b"no such sensor", {"Content-Type": "text/plain"})
        s.routes["/big"] = lambda seen: Page(body=b"y" * 50_000, headers={"Content-Type": "text/plain"})
        yield s


@pytest.fixture
def runtime_for(tmp_path: Path):
    made = []

    def build(
        web: dict[str, Any], agents: dict[str, Any] | None = None, environ: dict[str, str] | None = None
    ):
        tools: dict[str, Any] = {"web": web}
        if agents:
            tools["agents"] = agents
        data = {"board": "sim", "state_dir": str(tmp_path / "state"), "tools": tools}
        runtime = build_runtime(
            config_from_dict(data, "test.toml"), environ={"API_TOKEN": TOKEN, **(environ or {})}
        )
        made.append(runtime)
        return runtime

    yield build


def web_for(site: Site, **extra: Any) -> dict[str, Any]:
    return {
        "allow_networks": ["127.0.0.1/32"],
        "ports": [site.port],
        "allowed_domains": ["127.0.0.1"],
        "secrets": {"api": {"env": "API_TOKEN"}},
        **extra,
    }


async def call(runtime, args: dict[str, Any], agent: str = "main"):
    return await runtime.registry.execute("http_request", args, ToolContext(channel="cli", agent_id=agent))


async def test_a_secret_by_name_is_sent_and_never_shown(site: Site, runtime_for) -> None:
    runtime = runtime_for(web_for(site))
    out = await call(
        runtime,
        {
            "url": site.url("/echo"),
            "method": "POST",
            "headers": {"Authorization": "Bearer {{secret:api}}", "Content-Type": "application/json"},
            "body": '{"key": "{{secret:api}}"}',
        },
    )
    assert out.ok, out.error
    assert site.seen[0].headers["authorization"] == f"Bearer {TOKEN}"  # the server got the value
    assert json.loads(site.seen[0].body) == {"key": TOKEN}
    shown = json.dumps(out.as_dict())
    assert TOKEN not in shown  # the echo came back redacted, in the text and in the data
    echoed = json.loads(out.for_llm.split("\n\n", 1)[1].split("\n", 1)[1])
    assert "[REDACTED]" in echoed["headers"]["authorization"] and echoed["body"] == '{"key": "[REDACTED]"}'
    assert out.data is not None and out.data["status"] == 200


async def test_secrets_are_refused_where_they_do_not_belong(site: Site, runtime_for) -> None:
    runtime = runtime_for(web_for(site), agents={"poller": {"web": {"secrets": []}}})
    in_url = await call(runtime, {"url": site.url("/echo?k={{secret:api}}")})
    assert in_url.refused and "never the URL" in in_url.error
    unknown = await call(runtime, {"url": site.url("/echo"), "headers": {"X-Key": "{{secret:nope}}"}})
    assert unknown.refused and "'nope'" in unknown.error and "(api)" in unknown.error
    narrowed = await call(
        runtime, {"url": site.url("/echo"), "headers": {"X-Key": "{{secret:api}}"}}, agent="poller"
    )
    assert narrowed.refused and "none configured" in narrowed.error
    assert site.seen == []


async def test_allowed_domains_per_agent_and_after_redirects(site: Site, runtime_for) -> None:
    site.routes["/away"] = lambda seen: Page(302, headers={"Location": site.url("/echo", host="localhost")})
    runtime = runtime_for(
        web_for(site, allowed_domains=[]),
        agents={"poller": {"web": {"allowed_domains": ["127.0.0.1"]}}},
    )
    main = await call(runtime, {"url": site.url("/echo")})
    assert main.refused and "127.0.0.1 is not in allowed_domains (none)" in main.error
    poller = await call(runtime, {"url": site.url("/echo")}, agent="poller")
    assert poller.ok
    redirected = await call(runtime, {"url": site.url("/away")}, agent="poller")
    assert redirected.refused and "localhost is not in allowed_domains" in redirected.error
    assert [s.path for s in site.seen] == ["/echo", "/away"]


async def test_an_allowed_domain_is_still_guarded(site: Site, runtime_for) -> None:
    runtime = runtime_for(web_for(site, allow_networks=[], allowed_domains=["*"], ports=[80, site.port]))
    for url, rule in (
        (site.url("/echo"), "127.0.0.1 is loopback"),
        (
            "http://169.254.169.254/latest/meta-data/",
            "169.254.169.254 is link-local (169.254.0.0/16, cloud metadata)",
        ),
        (f"http://localhost:{site.port}/", "localhost resolves to"),
    ):
        out = await call(runtime, {"url": url})
        assert out.refused and rule in out.error, out.error
    assert site.connections == 0


async def test_status_headers_and_body_come_back(site: Site, runtime_for) -> None:
    runtime = runtime_for(web_for(site, max_response_size=1000))
    ok = await call(runtime, {"url": site.url("/json")})
    assert ok.ok and ok.for_llm.startswith(f"HTTP 200 (GET {site.url('/json')})")
    assert '"temp": 21.5' in ok.for_llm  # JSON pretty-printed
    assert ok.data["headers"]["content-type"] == "application/json"
    missing = await call(runtime, {"url": site.url("/missing"), "method": "DELETE"})
    assert missing.ok and missing.data["status"] == 404 and "no such sensor" in missing.for_llm
    assert site.seen[-1].method == "DELETE"
    big = await call(runtime, {"url": site.url("/big")})
    assert big.data["truncated"] is True and big.data["body_bytes"] == 1000
    assert "[body cut at 1000 bytes (tools.web.max_response_size)]" in big.for_llm


async def test_headers_the_client_owns_are_refused(site: Site, runtime_for) -> None:
    runtime = runtime_for(web_for(site))
    for headers in ({"Host": "elsewhere"}, {"Content-Length": "0"}, {"X-A": "1\r\nX-B: 2"}):
        out = await call(runtime, {"url": site.url("/echo"), "headers": headers})
        assert out.refused, headers
    assert site.seen == []


def test_a_missing_secret_stops_the_start(tmp_path: Path) -> None:
    data = {
        "board": "sim",
        "state_dir": str(tmp_path),
        "tools": {"web": {"secrets": {"hook": {"env": "NOT_SET"}}}},
    }
    with pytest.raises(ConfigErrors, match=r"tools\.web\.secrets\.hook\.env.*NOT_SET is not set"):
        build_runtime(config_from_dict(data, "test.toml"), environ={})


@pytest.mark.parametrize(
    ("web", "agents", "key", "problem"),
    [
        ({"allow_networks": ["192.168.1.5/24"]}, {}, "tools.web.allow_networks[0]", "has host bits set"),
        ({"allow_networks": ["lan"]}, {}, "tools.web.allow_networks[0]", "expected a network"),
        ({"ports": [0]}, {}, "tools.web.ports[0]", "1-65535"),
        ({"ports": []}, {}, "tools.web.ports", "at least one port"),
        ({"secrets": {"x": {"env": "A", "file": "/f"}}}, {}, "tools.web.secrets.x", "one of them"),
        ({"secrets": {"x": {}}}, {}, "tools.web.secrets.x", "one of them"),
        ({"allowed_domains": ["http://x.com"]}, {}, "tools.web.allowed_domains[0]", "host name or a glob"),
        (
            {},
            {"a": {"web": {"secrets": ["ghost"]}}},
            "tools.agents.a.web.secrets[0]",
            "no [tools.web.secrets.ghost]",
        ),
        (
            {},
            {"a": {"web": {"allow_networks": ["10.0.0.0/33"]}}},
            "tools.agents.a.web.allow_networks[0]",
            "network",
        ),
        ({"max_redirects": 50}, {}, "tools.web.max_redirects", "0-20"),
    ],
)
def test_bad_web_config_is_refused_naming_the_key(web, agents, key, problem) -> None:
    tools: dict[str, Any] = {"web": web}
    if agents:
        tools["agents"] = agents
    with pytest.raises(ConfigErrors) as e:
        check_config(config_from_dict({"tools": tools}, "test.toml"))
    assert any(err.key == key and problem in str(err) for err in e.value.errors), [
        str(x) for x in e.value.errors
    ]


def test_the_web_group_and_the_profiles_that_leave_it_out() -> None:
    web = {"web_search", "web_fetch", "http_request"}
    assert set(BUILTIN_GROUPS["web"]) == web
    engine = PolicyEngine(PolicyRules())
    engine.set_tools({name: "web" for name in web} | {"read_file": "fs", "i2c": "hardware"})
    assert engine.profile_members("full") >= web
    for profile in ("device", "remote", "minimal", "messaging", "coding"):
        assert not engine.profile_members(profile) & web, profile
    # An MQTT caller gets the remote profile by default: no web tools.
    assert not engine.allowed(ToolContext(channel="mqtt")) & web
    assert engine.allowed(ToolContext(channel="cli")) >= web
