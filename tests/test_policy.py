"""The policy pipeline, step by step: what each configured list does to the tool set."""

from __future__ import annotations

import pytest

from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.policy import (
    SUBAGENT_ALWAYS_DENY,
    AgentLayer,
    PolicyEngine,
    PolicyLayer,
    PolicyRules,
)

# A realistic inventory: name -> group.
TOOLS = {
    "read_file": "fs",
    "write_file": "fs",
    "list_files": "fs",
    "exec": "runtime",
    "process": "runtime",
    "web_fetch": "web",
    "memory_search": "memory",
    "sessions_list": "sessions",
    "sessions_history": "sessions",
    "sessions_spawn": "sessions",
    "subagents": "sessions",
    "session_status": "sessions",
    "message": "messaging",
    "i2c": "hardware",
    "gpio": "hardware",
    "cron": "automation",
    "image": "media",
}


# What the coding profile leaves of TOOLS.
CODING = {
    "read_file",
    "write_file",
    "list_files",
    "exec",
    "process",
    "memory_search",
    "sessions_list",
    "sessions_history",
    "sessions_spawn",
    "subagents",
    "session_status",
    "image",
}


def engine(**rules) -> PolicyEngine:
    e = PolicyEngine(PolicyRules(**rules))
    e.set_tools(TOOLS)
    assert e.validate() == []
    return e


def allowed(e: PolicyEngine, **ctx) -> set[str]:
    return set(e.allowed(ToolContext(**ctx)))


# What MQTT callers get when the config says nothing about them: reading and the hardware, no
# shell, no background processes, no file writes.
REMOTE = {"read_file", "list_files", "i2c", "gpio", "session_status"}

PIPELINE_CASES = [
    pytest.param({}, {}, set(TOOLS), id="full-profile-everything"),
    pytest.param({"profile": "minimal"}, {}, {"session_status"}, id="minimal"),
    pytest.param(
        {"profile": "coding"},
        {},
        CODING,
        id="coding",
    ),
    pytest.param(
        {"profile": "messaging"},
        {},
        {"message", "sessions_list", "sessions_history", "session_status"},
        id="messaging",
    ),
    pytest.param(
        {"profile": "device"},
        {},
        {"read_file", "write_file", "list_files", "i2c", "gpio", "message", "session_status"},
        id="device-has-no-shell",
    ),
    pytest.param(
        {"profile": "minimal", "providers": {"local": PolicyLayer(profile="coding")}},
        {"provider": "local"},
        CODING,
        id="provider-profile-replaces-global",
    ),
    pytest.param(
        {"profile": "minimal", "providers": {"local": PolicyLayer(profile="coding")}},
        {"provider": "cloud"},
        {"session_status"},
        id="provider-profile-only-for-that-provider",
    ),
    pytest.param(
        {"allow": ["group:fs", "exec"]},
        {},
        {"read_file", "write_file", "list_files", "exec"},
        id="global-allow-narrows",
    ),
    pytest.param(
        {"allow": ["group:fs", "exec"], "providers": {"cloud": PolicyLayer(allow=["read_file", "exec"])}},
        {"provider": "cloud"},
        {"read_file", "exec"},
        id="provider-allow-narrows-further",
    ),
    pytest.param(
        {"agents": {"helper": AgentLayer(allow=("group:hardware",))}},
        {"agent_id": "helper"},
        {"i2c", "gpio"},
        id="agent-allow",
    ),
    pytest.param(
        {
            "agents": {
                "helper": AgentLayer(
                    allow=("group:hardware", "read_file"),
                    providers={"cloud": PolicyLayer(allow=["read_file"])},
                )
            }
        },
        {"agent_id": "helper", "provider": "cloud"},
        {"read_file"},
        id="agent-provider-allow",
    ),
    pytest.param(
        {"channels": {"mqtt": PolicyLayer(profile="device")}},
        {"channel": "mqtt"},
        {"read_file", "write_file", "list_files", "i2c", "gpio", "message", "session_status"},
        id="channel-profile",
    ),
    pytest.param(
        {"channels": {"mqtt": PolicyLayer(allow=["i2c"])}}, {"channel": "mqtt"}, {"i2c"}, id="channel-allow"
    ),
    pytest.param(
        {"channels": {"mqtt": PolicyLayer(allow=["i2c"])}},
        {"channel": "console"},
        set(TOOLS),
        id="channel-rule-only-for-that-channel",
    ),
    pytest.param({}, {"channel": "mqtt"}, REMOTE, id="mqtt-callers-get-the-remote-profile-by-default"),
    pytest.param(
        {"channels": {"mqtt": PolicyLayer()}},
        {"channel": "mqtt"},
        REMOTE,
        id="an-empty-mqtt-table-is-no-rule",
    ),
    pytest.param(
        {"channels": {"mqtt": PolicyLayer(profile="full")}},
        {"channel": "mqtt"},
        set(TOOLS),
        id="one-line-widens-mqtt-to-full",
    ),
    pytest.param(
        {"channels": {"mqtt": PolicyLayer(allow=["exec", "i2c"])}},
        {"channel": "mqtt"},
        {"exec", "i2c"},
        id="an-mqtt-allow-list-replaces-the-default",
    ),
    pytest.param(
        {"profile": "minimal", "channels": {"mqtt": PolicyLayer(profile="full")}},
        {"channel": "mqtt"},
        {"session_status"},
        id="widening-mqtt-never-exceeds-the-global-steps",
    ),
    pytest.param({}, {"channel": "console"}, set(TOOLS), id="the-console-keeps-every-tool"),
    pytest.param({"deny": ["group:runtime"]}, {}, set(TOOLS) - {"exec", "process"}, id="global-deny"),
    pytest.param(
        {"agents": {"main": AgentLayer(deny=("web_fetch",))}}, {}, set(TOOLS) - {"web_fetch"}, id="agent-deny"
    ),
    pytest.param(
        {"profile": "minimal", "also_allow": ["i2c"]}, {}, {"session_status", "i2c"}, id="also-allow-adds"
    ),
    pytest.param(
        {"profile": "minimal", "agents": {"main": AgentLayer(also_allow=("gpio",))}},
        {},
        {"session_status", "gpio"},
        id="agent-also-allow",
    ),
    pytest.param(
        {"profile": "minimal", "deny": ["exec"], "also_allow": ["exec", "i2c"]},
        {},
        {"session_status", "i2c"},
        id="deny-beats-also-allow",
    ),
    pytest.param(
        {"profile": "minimal", "agents": {"main": AgentLayer(deny=("exec",), also_allow=("exec",))}},
        {},
        {"session_status"},
        id="agent-deny-beats-also-allow",
    ),
    pytest.param({"allow": ["*"], "deny": ["*"]}, {}, set(), id="deny-star"),
]


@pytest.mark.parametrize(("rules", "ctx", "expected"), PIPELINE_CASES)
def test_pipeline_step(rules, ctx, expected):
    assert allowed(engine(**rules), **ctx) == expected


def test_subagent_loses_always_denied_tools():
    e = engine()
    assert "session_status" in allowed(e, subagent_depth=0)
    child = allowed(e, subagent_depth=1)
    for name in SUBAGENT_ALWAYS_DENY:
        assert name not in child
    assert "read_file" in child


def test_leaf_subagent_cannot_spawn_but_middle_one_can():
    e = engine(subagent_max_depth=2)
    middle = allowed(e, subagent_depth=1)
    leaf = allowed(e, subagent_depth=2)
    assert {"sessions_spawn", "subagents"} <= middle
    assert not {"sessions_spawn", "subagents", "sessions_list", "sessions_history"} & leaf
    assert allowed(e, subagent_depth=7) == leaf


def test_configured_subagent_deny_lists_add_to_builtin_ones():
    e = engine(subagent_deny=("exec",), subagent_leaf_deny=("read_file",))
    assert "exec" not in allowed(e, subagent_depth=1)
    assert "read_file" not in allowed(e, subagent_depth=1)  # max depth 1: depth 1 is the leaf
    assert "exec" in allowed(e, subagent_depth=0)


def test_also_allow_cannot_resurrect_a_subagent_deny():
    e = engine(also_allow=["cron"])
    assert "cron" not in allowed(e, subagent_depth=1)


@pytest.mark.parametrize(
    "channel",
    [PolicyLayer(profile="device"), PolicyLayer(allow=("group:fs",)), PolicyLayer("full", ("read_file",))],
)
def test_also_allow_cannot_widen_the_callers_channel(channel):
    e = engine(profile="minimal", also_allow=["exec", "read_file"], channels={"mqtt": channel})
    assert "exec" not in allowed(e, channel="mqtt")
    assert "read_file" in allowed(e, channel="mqtt")  # what the channel admits is still added back
    assert {"exec", "read_file"} <= allowed(e, channel="cli")  # other channels keep the addition


def test_the_cache_follows_the_tools_that_exist():
    e = engine()
    assert "camera" not in allowed(e)
    e.set_tools({**TOOLS, "camera": "media"})
    assert "camera" in allowed(e)
    e.set_tools(TOOLS)
    assert "camera" not in allowed(e)


@pytest.mark.parametrize(
    ("rules", "key"),
    [
        ({"profile": "admin"}, "tools.profile"),
        ({"allow": ["group:nonsense"]}, "tools.allow[0]"),
        ({"deny": ["exce"]}, "tools.deny[0]"),
        ({"also_allow": ["read_file", "rm_rf"]}, "tools.also_allow[1]"),
        ({"providers": {"local": PolicyLayer(profile="root")}}, "tools.providers.local.profile"),
        ({"channels": {"mqtt": PolicyLayer(allow=["group:"])}}, "tools.channels.mqtt.allow[0]"),
        ({"agents": {"a": AgentLayer(deny=("nope",))}}, "tools.agents.a.deny[0]"),
        ({"subagent_deny": ("x",)}, "tools.subagents.deny[0]"),
    ],
)
def test_unknown_names_are_errors_naming_the_key(rules, key):
    e = PolicyEngine(PolicyRules(**rules))
    e.set_tools(TOOLS)
    problems = e.validate()
    assert [k for k, _ in problems] == [key]


def test_runtime_groups_can_be_registered():
    e = engine(profile="minimal", also_allow=["group:mcp:weather"])
    e.set_tools({**TOOLS, "weather__forecast": "mcp:weather", "weather__alerts": "mcp:weather"})
    assert {"weather__forecast", "weather__alerts"} <= allowed(e)
    e.register_group("custom", ["image"])
    e2 = engine(allow=["group:custom"])
    e2.register_group("custom", ["image"])
    assert allowed(e2) == {"image"}


def test_explain_names_the_step_that_removed_a_tool():
    e = engine(deny=["exec"], channels={"mqtt": PolicyLayer(profile="device")})
    assert "tools.deny" in e.explain("exec", ToolContext())
    assert "tools.channels.mqtt.profile" in e.explain("exec", ToolContext(channel="mqtt"))
    assert e.explain("read_file", ToolContext()) == "allowed"
    assert "subagent" in e.explain("cron", ToolContext(subagent_depth=1))


def test_explain_says_how_to_widen_the_mqtt_default():
    e = engine()
    why = e.explain("write_file", ToolContext(channel="mqtt"))
    assert why == (
        "removed by the mqtt channel's default profile 'remote' "
        '(widen with [tools.channels.mqtt] profile = "full")'
    )
    assert e.explain("i2c", ToolContext(channel="mqtt")) == "allowed"
