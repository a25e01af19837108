"""Rate limits keyed on who calls: a token bucket per caller under a ceiling per channel.

The limits are the shipped defaults (`ToolsConfig()`), driven by a fake clock through the real
registry, so these tests say what a backend on the wire would notice: a steady poller is never
refused, a flood is stopped after the burst and let back in within seconds, and neither session
names nor invented sender names multiply the limit.
"""

from __future__ import annotations

import pytest

from edgeclaw.config.loader import config_from_dict
from edgeclaw.config.schema import ToolsConfig
from edgeclaw.errors import ConfigErrors
from edgeclaw.tools import audit
from edgeclaw.tools.audit import ToolStats
from edgeclaw.tools.base import Tool, ToolContext, ToolResult
from edgeclaw.tools.policy import PolicyEngine, PolicyLayer, PolicyRules
from edgeclaw.tools.ratelimit import MAX_TRACKED, RateLimiter
from edgeclaw.tools.registry import Registry
from edgeclaw.tools.sessions.status import SessionStatusTool

DEFAULTS = ToolsConfig()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Read(Tool):
    name = "i2c"  # a hardware read, as a sensor poller makes
    group = "hardware"
    description = "read"

    def __init__(self) -> None:
        self.calls = 0

    async def execute(self, args, ctx):
        self.calls += 1
        return ToolResult("21.5")


def shipped_limiter(clock: Clock, **overrides) -> RateLimiter:
    t = DEFAULTS
    values = {
        "burst": t.rate_limit,
        "per_minute": t.rate_per_minute,
        "channel_burst": t.channel_rate_limit,
        "channel_per_minute": t.channel_rate_per_minute,
        **overrides,
    }
    return RateLimiter(**values, clock=clock)


def make(clock: Clock, **overrides) -> tuple[Registry, Read]:
    rules = PolicyRules(channels={"mqtt": PolicyLayer(profile="full")})
    reg = Registry(PolicyEngine(rules), limiter=shipped_limiter(clock, **overrides))
    tool = Read()
    reg.register(tool)
    reg.register(SessionStatusTool(reg.stats, reg.limiter))
    return reg, tool


def backend(name: str = "backend-1", session: str = "greenhouse") -> ToolContext:
    return ToolContext(channel="mqtt", session_key=f"mqtt:{session}", caller=f"mqtt:sender:{name}")


async def test_a_10s_poller_with_occasional_commands_is_never_refused_in_24_hours():
    clock = Clock()
    reg, tool = make(clock)
    ctx = backend()
    refused = 0
    for tick in range(24 * 360):  # every 10 s for 24 h
        if tick % 360 == 180:  # once an hour, a person's burst of 20 commands on top
            for _ in range(20):
                refused += (await reg.execute("i2c", {}, ctx)).refused
        refused += (await reg.execute("i2c", {}, ctx)).refused
        clock.now += 10.0
    assert refused == 0
    assert tool.calls == 24 * 360 + 24 * 20


async def test_a_200_call_flood_is_stopped_after_the_burst_and_recovers_within_minutes():
    clock = Clock()
    reg, tool = make(clock)
    flood = backend("flooder")
    outcomes = [await reg.execute("i2c", {}, flood) for _ in range(200)]
    ok = [o.ok for o in outcomes]
    assert ok == [True] * DEFAULTS.rate_limit + [False] * (200 - DEFAULTS.rate_limit)
    last = outcomes[-1]
    assert last.refused and last.stage == "rate_limit" and tool.calls == DEFAULTS.rate_limit
    assert "caller 'mqtt:sender:flooder' may make 60 tool calls at once, then 30 per minute" in last.error
    assert "try again in 2 s" in last.error  # a lockout of seconds, not of an hour
    # Another backend on the same broker is not locked out by the flood.
    assert (await reg.execute("i2c", {}, backend("backend-2"))).ok
    clock.now += 2.0
    assert (await reg.execute("i2c", {}, flood)).ok
    assert (await reg.execute("i2c", {}, flood)).refused
    clock.now += 120.0  # two minutes later the whole burst is back
    assert all([(await reg.execute("i2c", {}, flood)).ok for _ in range(DEFAULTS.rate_limit)])


async def test_1000_session_names_do_not_multiply_a_callers_limit():
    clock = Clock()
    reg, _ = make(clock)
    outcomes = [await reg.execute("i2c", {}, backend(session=f"s{i}")) for i in range(1000)]
    assert sum(o.ok for o in outcomes) == DEFAULTS.rate_limit


async def test_invented_sender_names_stop_at_the_channels_ceiling():
    clock = Clock()
    reg, _ = make(clock)
    outcomes = [await reg.execute("i2c", {}, backend(f"made-up-{i}")) for i in range(1000)]
    assert sum(o.ok for o in outcomes) == DEFAULTS.channel_rate_limit
    assert "all mqtt callers together may make 300 tool calls at once" in outcomes[-1].error
    # Each channel has its own ceiling: the console is not locked out by an MQTT flood.
    console = ToolContext(channel="console", session_key="console:x", caller="console:/dev/ttyGS0")
    assert (await reg.execute("i2c", {}, console)).ok


async def test_session_status_reports_the_calls_left():
    clock = Clock()
    reg, _ = make(clock)
    ctx = backend()
    for _ in range(9):
        await reg.execute("i2c", {}, ctx)
    status = await reg.execute("session_status", {}, ctx)
    assert '"rate_limit_remaining": 50' in status.for_llm  # 60 - 9 reads - this call
    assert "caller: mqtt:sender:backend-1" in status.for_user
    assert "rate_limit: 60 calls at once, then 30 per minute per caller" in status.for_user


async def test_dry_runs_take_nothing_but_are_refused_when_the_bucket_is_empty():
    clock = Clock()
    reg, tool = make(clock, burst=2)
    ctx = backend()
    for _ in range(5):
        assert (await reg.execute("i2c", {}, ctx, dry_run=True)).ok
    assert (await reg.execute("i2c", {}, ctx)).ok and (await reg.execute("i2c", {}, ctx)).ok
    assert (await reg.execute("i2c", {}, ctx, dry_run=True)).stage == "rate_limit"
    assert tool.calls == 2


def test_zero_burst_means_no_limits_and_a_bucket_that_never_refills_is_refused():
    clock = Clock()
    off = shipped_limiter(clock, burst=0)
    assert all(off.acquire("a", "mqtt") is None for _ in range(10_000))
    assert off.remaining("a", "mqtt") is None and off.describe() == "unlimited"
    with pytest.raises(ValueError, match="per_minute must be > 0"):
        RateLimiter(10, 0.0)


def test_an_empty_bucket_never_reads_as_go():
    # Float rounding must not turn "almost one token back" into a wait of 0 with nothing taken.
    clock = Clock()
    limiter = RateLimiter(1, 30.0, 0, 1.0, clock=clock)
    assert limiter.acquire("a", "mqtt") is None
    clock.now += 2.0 - 1e-12
    first = limiter.acquire("a", "mqtt")
    assert first is not None and first.wait_s > 0
    clock.now += 1e-9
    assert limiter.acquire("a", "mqtt") is None
    assert limiter.acquire("a", "mqtt") is not None


def test_the_tables_are_bounded_and_forget_refilled_callers():
    clock = Clock()
    limiter = shipped_limiter(clock)
    for i in range(10_000):
        clock.now += 0.001
        limiter.acquire(f"mqtt:sender:invented-{i}", "mqtt")
    assert len(limiter.callers) <= MAX_TRACKED and len(limiter.channels) == 1
    clock.now += 60.0 * DEFAULTS.channel_rate_limit / DEFAULTS.channel_rate_per_minute + 1.0
    limiter.acquire("mqtt:key:ops", "mqtt")
    # Every bucket that filled up again is gone: the same as never having been seen.
    assert len(limiter.callers) == 1 and len(limiter.channels) == 1


def test_per_session_statistics_are_bounded_and_expire():
    stats = ToolStats()
    now = 1_000_000.0
    for i in range(10_000):
        stats.record("i2c", f"mqtt:invented-{i}", True, False, 1.0, now + i * 0.01)
    assert len(stats.sessions) == audit.MAX_SESSIONS_TRACKED
    assert "mqtt:invented-9999" in stats.sessions and "mqtt:invented-0" not in stats.sessions
    stats.record("i2c", "mqtt:invented-9999", True, False, 1.0, now + 200)  # the newest stays newest
    later = now + audit.SESSION_IDLE_FORGET_S + 1000
    stats.record("i2c", "mqtt:poller", True, False, 1.0, later)
    assert list(stats.sessions) == ["mqtt:poller"]
    assert stats.tools["i2c"].calls == 10_002


def test_the_limits_come_from_the_config_and_bad_values_are_named():
    from edgeclaw.daemon.runtime import build_runtime

    config = config_from_dict(
        {"board": "sim", "tools": {"rate_limit": 5, "rate_per_minute": 6, "channel_rate_limit": 0}}, "t.toml"
    )
    limiter = build_runtime(config).registry.limiter
    assert limiter.describe() == "5 calls at once, then 6 per minute per caller"
    with pytest.raises(ConfigErrors) as e:
        config_from_dict({"tools": {"rate_per_minute": 0, "channel_rate_per_minute": -1}}, "t.toml")
    assert "t.toml: tools.rate_per_minute: expected a number > 0, got 0" in str(e.value)
    assert "t.toml: tools.channel_rate_per_minute: expected a number > 0, got -1" in str(e.value)
