"""Scheduled jobs: schedules, the scheduler's timing on a clock turned by hand, the tools' rules.

The scheduler runs on `FakeClock` (tests/automation_support.py): wall and
monotonic time are separate, timers fire only when the test moves time, and
`armed` counts every timer ever set, so "no polling" is something a test can
see.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime
from zoneinfo import ZoneInfo

import pytest
from automation_support import FakeClock, FakeSync, RecordingExecutor

from edgeclaw.agent.scheduler import Scheduler, SchedulerSettings
from edgeclaw.channels.mqtt.topics import DEVICE_LEVELS
from edgeclaw.store.db import Database
from edgeclaw.store.jobs import Job, JobStore, Owner, new_job_id
from edgeclaw.tools.automation.targets import RESERVED_LEVELS, TargetError, parse_target
from edgeclaw.tools.automation.when import (
    Schedule,
    ScheduleError,
    parse_at,
    parse_cron,
    parse_duration,
    parse_schedule,
)

BERLIN = ZoneInfo("Europe/Berlin")
OWNER = Owner("cli:alice", "cli")


def utc(*args: int) -> float:
    return datetime(*args, tzinfo=UTC).timestamp()


# -- schedules ---------------------------------------------------------------------------------------
def test_durations_and_their_refusals():
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2 hours") == 7200
    assert parse_duration("10 minutes") == 600
    with pytest.raises(ScheduleError, match="unknown unit 'fortnights'"):
        parse_duration("2 fortnights")
    with pytest.raises(ScheduleError, match="expected a number and a unit"):
        parse_duration("soon")
    with pytest.raises(ScheduleError, match="between 1 s and 366 days"):
        parse_schedule(every="0.5s", now=0)


def test_cron_aliases_and_bad_expressions():
    assert parse_cron("@hourly") == "0 * * * *"
    assert parse_cron("@daily") == "0 0 * * *"
    with pytest.raises(ScheduleError, match="unknown cron alias"):
        parse_cron("@sometimes")
    with pytest.raises(ScheduleError, match="five fields"):
        parse_cron("0 0 * *")
    with pytest.raises(ScheduleError, match="Bad minute"):
        parse_cron("61 * * * *")
    with pytest.raises(ScheduleError, match="Bad day-of-month"):
        parse_schedule(cron="0 0 30 2 *", now=utc(2025, 1, 1))
    with pytest.raises(ScheduleError, match="unknown time zone"):
        parse_schedule(cron="@daily", tz="Mars/Olympus", now=0)


def test_one_shot_times():
    now = datetime(2025, 6, 1, 12, 0, tzinfo=BERLIN).timestamp()
    assert parse_at("in 10 minutes", now, BERLIN) == (now + 600, "elapsed")
    assert parse_at("tomorrow 07:00", now, BERLIN)[0] == datetime(2025, 6, 2, 7, 0, tzinfo=BERLIN).timestamp()
    assert parse_at("today 18:30", now, BERLIN)[0] == datetime(2025, 6, 1, 18, 30, tzinfo=BERLIN).timestamp()
    # A bare time of day that has passed today is tomorrow's.
    assert parse_at("07:00", now, BERLIN)[0] == datetime(2025, 6, 2, 7, 0, tzinfo=BERLIN).timestamp()
    assert parse_at("2025-06-03T08:00", now, BERLIN) == (
        datetime(2025, 6, 3, 8, 0, tzinfo=BERLIN).timestamp(),
        "wall",
    )
    assert parse_at("2025-06-03T08:00Z", now, BERLIN)[0] == utc(2025, 6, 3, 8, 0)
    with pytest.raises(ScheduleError, match="in the past"):
        parse_schedule(at="2020-01-01T00:00", now=now)
    with pytest.raises(ScheduleError, match="expected ISO 8601"):
        parse_at("next tuesday-ish", now, BERLIN)
    # 02:30 does not exist on the spring-forward night: the first minute after the gap.
    spring = datetime(2025, 3, 29, 12, 0, tzinfo=BERLIN).timestamp()
    assert parse_at("tomorrow 02:30", spring, BERLIN)[0] == utc(2025, 3, 30, 1, 0)


def test_cron_across_daylight_saving_in_a_time_zone():
    daily = Schedule("cron", "30 2 * * *", "Europe/Berlin")
    # Spring forward (2025-03-30, 02:00 -> 03:00): the 02:30 job runs at 03:00 CEST, once.
    before = datetime(2025, 3, 29, 12, 0, tzinfo=BERLIN).timestamp()
    assert daily.next_after(before) == utc(2025, 3, 30, 1, 0)
    # Fall back (2025-10-26, 03:00 -> 02:00): 02:30 happens twice on the clock, the job runs once.
    first = daily.next_after(datetime(2025, 10, 25, 12, 0, tzinfo=BERLIN).timestamp())
    assert first == utc(2025, 10, 26, 0, 30)  # 02:30 CEST
    assert daily.next_after(first) == utc(2025, 10, 27, 1, 30)  # the next day's 02:30 CET
    hourly = Schedule("cron", "0 * * * *", "Europe/Berlin")
    short_day = datetime(2025, 3, 30, 0, 0, tzinfo=BERLIN).timestamp()
    long_day = datetime(2025, 10, 26, 0, 0, tzinfo=BERLIN).timestamp()
    assert hourly.slots_between(short_day - 1, short_day + 23 * 3600 - 1) == 23
    assert hourly.slots_between(long_day - 1, long_day + 25 * 3600 - 1) == 25


def test_targets_refuse_the_devices_own_topics():
    assert str(parse_target("mqtt:sensors/air")) == "mqtt:sensors/air"
    for bad in (
        "mqtt:status",
        "mqtt:tool/result",
        "mqtt:sensors/#",
        "mqtt:",
        "mqtt:/x",
        "pager:1",
        "memory:x",
    ):
        with pytest.raises(TargetError):
            parse_target(bad)
    # Every level the MQTT contract gives a device is reserved (and `message/`, the message tool's).
    assert DEVICE_LEVELS <= RESERVED_LEVELS


# -- the scheduler on a clock turned by hand ---------------------------------------------------------
def make_job(store: JobStore, clock: FakeClock, **kw) -> Job:
    every = kw.pop("every", None)
    cron = kw.pop("cron", None)
    sched = parse_schedule(every=every, cron=cron, tz=kw.pop("tz", "UTC"), now=clock.wall())
    job = Job(
        id=new_job_id(),
        name=kw.pop("name", ""),
        kind="tool",
        tool="i2c",
        schedule_kind=sched.kind,
        schedule_spec=sched.spec,
        tz=sched.tz,
        anchor=sched.anchor,
        owner=OWNER,
        catch_up=kw.pop("catch_up", "skip"),
        targets=("none",),
        next_run=sched.first(clock.wall()),
        **kw,
    )
    return store.add(job)


@pytest.fixture
def world(tmp_path):
    clock = FakeClock()
    store = JobStore(Database(tmp_path / "jobs.db"), clock=clock.wall)
    return clock, store


async def started(store, clock, executor, **settings) -> Scheduler:
    sync = settings.pop("sync", None)
    sched = Scheduler(store, executor, clock=clock, sync=sync, settings=SchedulerSettings(**settings))
    await sched.start()
    for _ in range(5):  # let the first clock-sync question be asked
        await asyncio.sleep(0)
    return sched


async def test_one_timer_and_no_wakeups_while_idle(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    sched = await started(store, clock, ex)
    await clock.advance(3600)
    assert clock.armed == 0, "no jobs: no timer at all"
    job = make_job(store, clock, every="1m")
    sched.changed(job.id)
    assert len(clock.pending) == 1
    await clock.advance(600)
    assert [r.job for r in ex.runs] == [job.id] * 10
    # One timer per wake-up and one when the job was added: nothing polls.
    assert clock.armed == 11
    assert len(clock.pending) == 1
    assert sched.lateness and max(sched.lateness) < 0.01
    await sched.aclose()


async def test_runs_are_recorded_and_the_next_slot_is_stored_first(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    job = make_job(store, clock, every="30s")
    sched = await started(store, clock, ex)
    await clock.advance(30)
    await sched.idle()
    runs = store.runs(job.id)
    assert [r.outcome for r in runs] == ["ok"]
    assert store.get(job.id).next_run == pytest.approx(runs[0].scheduled_at + 30)
    await sched.aclose()


@pytest.mark.parametrize("catch_up", ["skip", "once"])
async def test_catch_up_after_an_outage_never_bursts(world, catch_up):
    clock, store = world
    ex = RecordingExecutor(clock)
    job = make_job(store, clock, every="1m", catch_up=catch_up)
    first_slot = store.get(job.id).next_run
    # The device is off for an hour: the clocks move on, no scheduler runs.
    await clock.advance(3600)
    sched = await started(store, clock, ex)
    await clock.advance(0.01)
    await sched.idle()
    runs = store.runs(job.id)
    if catch_up == "skip":
        assert ex.runs == []
        assert [r.outcome for r in runs] == ["missed"]
        assert "60 slots missed" in runs[0].detail
    else:
        assert [(r.trigger, r.slot) for r in ex.runs] == [("catch_up", first_slot)]
    # Back on its series: the next slot after now, on the minute of the original series.
    nxt = store.get(job.id).next_run
    assert clock.wall() < nxt <= clock.wall() + 60
    assert (nxt - first_slot) % 60 == pytest.approx(0)
    await clock.advance(60)
    assert len(ex.runs) == (1 if catch_up == "skip" else 2)
    await sched.aclose()


async def test_a_clock_step_forward_moves_intervals_and_never_bursts(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    every = make_job(store, clock, every="1m", name="every")
    hourly = make_job(store, clock, cron="0 * * * *", name="hourly", catch_up="once")
    sched = await started(store, clock, ex)
    await clock.advance(30)
    await clock.step(6 * 3600)  # NTP sets a stale clock: six hours at once
    await clock.advance(0.01)
    # The hourly job's slots in those six hours: one catch-up run, not six.
    assert [r.job for r in ex.runs] == [hourly.id]
    assert ex.runs[0].trigger == "catch_up"
    # The interval job keeps its elapsed-time rhythm: 30 s after the step, not at once.
    await clock.advance(29.9)
    assert [r.job for r in ex.runs].count(every.id) == 0
    await clock.advance(0.2)
    assert [r.job for r in ex.runs].count(every.id) == 1
    assert sched.steps == 1
    await sched.aclose()


async def test_a_clock_step_backward_neither_stalls_intervals_nor_repeats_slots(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    every = make_job(store, clock, every="1m")
    hourly = make_job(store, clock, cron="0 * * * *")
    sched = await started(store, clock, ex)
    until_hour = store.get(hourly.id).next_run - clock.wall()
    await clock.advance(until_hour + 1)
    assert [r.job for r in ex.runs].count(hourly.id) == 1
    before = len([r for r in ex.runs if r.job == every.id])
    await clock.step(-1800)  # the clock goes back half an hour, past the slot that just ran
    await clock.advance(600)
    # Still every minute of elapsed time (not stalled for half an hour) ...
    assert len([r for r in ex.runs if r.job == every.id]) - before == 10
    # ... and the hourly slot that ran is not run again when the clock passes it a second time.
    await clock.advance(1800)
    assert [r.job for r in ex.runs].count(hourly.id) == 1
    await sched.aclose()


async def test_a_step_is_noticed_at_the_next_wakeup_without_the_kernel_watcher(world, tmp_path):
    clock = FakeClock(watch=False)
    store = JobStore(Database(tmp_path / "other.db"), clock=clock.wall)
    ex = RecordingExecutor(clock)
    every = make_job(store, clock, every="1m")
    sched = await started(store, clock, ex)
    await clock.step(-3600)
    await clock.advance(60)
    assert [r.job for r in ex.runs] == [every.id]  # ran on time by elapsed time
    assert sched.steps == 1
    await sched.aclose()


async def test_jobs_wait_for_clock_sync_then_run_without_a_burst(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    sync = FakeSync(False)
    job = make_job(store, clock, every="1m")
    sched = await started(store, clock, ex, sync=sync, sync_max_wait_s=0)
    await clock.advance(600)
    assert ex.runs == []
    assert sync.asked >= 2  # re-asked on the one timer while waiting
    assert sched.job_state(job.id) == "waiting for clock sync"
    sync.synced = True
    await clock.advance(15)
    await sched.idle()
    # The ten slots that passed while waiting: missed (catch_up = skip), then on schedule again.
    assert ex.runs == []
    assert [r.outcome for r in store.runs(job.id)] == ["missed"]
    await clock.advance(60)
    assert len(ex.runs) == 1
    await sched.aclose()


async def test_sync_wait_has_a_configurable_limit(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    make_job(store, clock, every="1m", catch_up="once")
    sched = await started(store, clock, ex, sync=FakeSync(False), sync_max_wait_s=120)
    await clock.advance(100)
    assert ex.runs == []
    await clock.advance(60)
    assert len(ex.runs) == 1
    await sched.aclose()


async def test_overlapping_runs_of_one_job_are_skipped_and_recorded(world):
    clock, store = world
    ex = RecordingExecutor(clock, hold=asyncio.Event())
    job = make_job(store, clock, every="1m")
    sched = await started(store, clock, ex)
    await clock.advance(60)
    await clock.advance(60)
    await clock.advance(60)
    assert len(ex.runs) == 1
    assert sched.job_state(job.id) == "running"
    assert [r.outcome for r in store.runs(job.id)][:2] == ["skipped", "skipped"]
    ex.hold.set()
    await sched.idle()
    outcomes = sorted(r.outcome for r in store.runs(job.id))
    assert outcomes == ["ok", "skipped", "skipped"]
    await sched.aclose()


async def test_jitter_is_bounded_and_the_same_on_every_start(world):
    clock, store = world
    job = make_job(store, clock, every="1h", jitter_s=30.0)
    a = Scheduler(store, RecordingExecutor(clock), clock=clock, settings=SchedulerSettings(device_id="dev-1"))
    b = Scheduler(store, RecordingExecutor(clock), clock=clock, settings=SchedulerSettings(device_id="dev-1"))
    c = Scheduler(store, RecordingExecutor(clock), clock=clock, settings=SchedulerSettings(device_id="dev-2"))
    slots = [clock.wall() + i * 3600 for i in range(20)]
    delays = [a.jitter(job, s) for s in slots]
    assert all(0 <= d < 30 for d in delays)
    assert delays == [b.jitter(job, s) for s in slots]
    assert delays != [c.jitter(job, s) for s in slots]


async def test_runs_left_unfinished_by_a_crash_are_reported_interrupted(world):
    clock, store = world
    job = make_job(store, clock, every="1m")
    store.start_run(job.id, "schedule", clock.wall(), clock.wall() + 60, advance=True)
    sched = await started(store, clock, RecordingExecutor(clock))
    assert [r.outcome for r in store.runs(job.id)] == ["interrupted"]
    assert store.get(job.id).last_outcome == "interrupted"
    await sched.aclose()


async def test_run_now_and_a_removed_job(world):
    clock, store = world
    ex = RecordingExecutor(clock)
    job = make_job(store, clock, every="1h")
    sched = await started(store, clock, ex)
    report = await sched.run_now(job.id)
    assert report["outcome"] == "ok" and ex.runs[0].trigger == "manual"
    assert store.get(job.id).next_run == pytest.approx(clock.wall() + 3600)  # its schedule untouched
    store.remove(job.id)
    sched.removed(job.id)
    await clock.advance(7200)
    assert len(ex.runs) == 1
    assert clock.pending == []
    await sched.aclose()


async def test_daylight_saving_on_the_scheduler(world):
    clock, store = world
    clock._wall = datetime(2025, 3, 29, 12, 0, tzinfo=BERLIN).timestamp()
    ex = RecordingExecutor(clock)
    make_job(store, clock, cron="30 2 * * *", tz="Europe/Berlin")
    sched = await started(store, clock, ex)
    await clock.advance(3 * 86400)
    ran = [datetime.fromtimestamp(r.wall, BERLIN).strftime("%m-%d %H:%M") for r in ex.runs]
    assert ran == ["03-30 03:00", "03-31 02:30", "04-01 02:30"]
    await sched.aclose()


# -- the tools, as callers on different channels see them ----------------------------------------------
@pytest.fixture
def runtime(tmp_path):
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.runtime import build_runtime

    config = config_from_dict(
        {"board": "sim", "state_dir": str(tmp_path / "state"), "tools": {"rate_limit": 0}}, "test.toml"
    )
    rt = build_runtime(config, require_secrets=False)
    yield rt


def ctx(channel: str, caller: str, **kw):
    from edgeclaw.tools.base import ToolContext

    return ToolContext(channel=channel, caller=caller, session_key=f"{channel}:{caller}", **kw)


READ = {"action": "read_word", "bus": 1, "address": 72, "register": 0}


async def test_jobs_belong_to_their_owner_and_administrators_see_all(runtime):
    reg = runtime.registry
    alice, bob, admin = (
        ctx("console", "console:/dev/ttyA"),
        ctx("console", "console:/dev/ttyB"),
        ctx("cli", "cli:root"),
    )
    made = await reg.execute(
        "cron", {"action": "add", "every": "5m", "tool": "i2c", "args": READ, "to": "none"}, alice
    )
    assert made.ok, made.error
    job = made.data["job"]
    assert job["owner"] == "console:/dev/ttyA" and job["owner_channel"] == "console"
    # Another caller neither sees it nor can touch it, and is told the same as for no job at all.
    listed = await reg.execute("cron", {"action": "list"}, bob)
    assert listed.data == {"jobs": []}
    gone = await reg.execute("cron", {"action": "remove", "id": job["id"]}, bob)
    assert not gone.ok and "no job" in gone.error
    assert runtime.automation.store.get(job["id"]) is not None
    # The device's administrators see every job; switching it off keeps its owner ...
    listed = await reg.execute("cron", {"action": "list"}, admin)
    assert [j["id"] for j in listed.data["jobs"]] == [job["id"]]
    off = await reg.execute("cron", {"action": "update", "id": job["id"], "enabled": False}, admin)
    assert off.ok and off.data["job"]["owner"] == "console:/dev/ttyA"
    # ... changing what it does makes the one who changed it its owner.
    redefined = await reg.execute(
        "cron", {"action": "update", "id": job["id"], "args": {**READ, "register": 1}}, admin
    )
    assert redefined.ok and redefined.data["job"]["owner"] == "cli:root"
    assert runtime.automation.store.get(job["id"]).owner.channel == "cli"


async def test_a_job_is_refused_when_its_owner_could_not_make_the_call(runtime):
    reg = runtime.registry
    # MQTT callers get the remote profile: no shell. A job cannot lend them one.
    mqtt = ctx("mqtt", "mqtt:sender:backend", peer_kind="device")
    import dataclasses

    from edgeclaw.config.policy_rules import PolicyLayer

    narrowed = {"mqtt": PolicyLayer(allow=("cron", "read_file", "i2c"))}
    reg.policy.replace_rules(dataclasses.replace(reg.policy.rules, channels=narrowed))
    made = await reg.execute(
        "cron",
        {"action": "add", "every": "1m", "tool": "exec", "args": {"command": "ls"}, "to": "none"},
        mqtt,
    )
    assert not made.ok and made.refused and "would be refused" in made.error and "not allowed" in made.error
    ok = await reg.execute(
        "cron", {"action": "add", "every": "1m", "tool": "i2c", "args": READ, "to": "none"}, mqtt
    )
    assert ok.ok, ok.error
    bad_args = await reg.execute(
        "cron",
        {"action": "add", "every": "1m", "tool": "i2c", "args": {"action": "nope"}, "to": "none"},
        mqtt,
    )
    assert not bad_args.ok and "argument 'action'" in bad_args.error


async def test_subagents_and_the_device_profile_get_no_automation_tools(runtime):
    reg = runtime.registry
    child = ctx("console", "console:/dev/ttyA", subagent_depth=1)
    calls = {"cron": {"action": "list"}, "schedule": {"when": "in 1m"}, "gateway": {"action": "status"}}
    for name, args in calls.items():
        outcome = await reg.execute(name, args, child)
        assert not outcome.ok and outcome.stage == "policy", name
    device = reg.policy.profile_members("device")
    assert not device & {"cron", "schedule", "gateway"}
    assert "gateway" not in reg.policy.profile_members("remote")


async def test_schedule_makes_a_one_shot_job_that_runs_once(runtime):
    reg = runtime.registry
    owner = ctx("cli", "cli:root")
    made = await reg.execute("schedule", {"when": "in 10 minutes", "tool": "i2c", "args": READ}, owner)
    assert made.ok, made.error
    job = runtime.automation.store.get(made.data["job"]["id"])
    assert job.schedule_kind == "at" and job.targets == ("memory",) and job.catch_up == "once"
    assert job.anchor == "elapsed"  # "in 10 minutes" moves with a clock step
    clock = FakeClock(wall=job.next_run - 600)
    ex = RecordingExecutor(clock)
    sched = Scheduler(runtime.automation.store, ex, clock=clock)
    await sched.start()
    await clock.advance(601)
    await clock.advance(3600)
    assert len(ex.runs) == 1
    assert runtime.automation.store.get(job.id).next_run is None
    await sched.aclose()


async def test_message_targets_go_through_the_message_tool_as_the_owner(runtime):
    from edgeclaw.agent.job_runner import JobRunner
    from edgeclaw.tools.automation.targets import JobOutlets

    reg = runtime.registry
    events = []
    reg.add_audit_sink(events.append)
    made = await reg.execute(
        "cron",
        {
            "action": "add",
            "every": "1h",
            "tool": "i2c",
            "args": READ,
            "to": ["message:console:/dev/ttyA", "none"],
        },
        ctx("cli", "cli:root"),
    )
    job = runtime.automation.store.get(made.data["job"]["id"])
    outcome, detail = await JobRunner(reg, JobOutlets(), lambda name: None).run(job, 1, "manual", None)
    # No console runs in this process: the message tool says so, and the run records it.
    assert outcome == "undelivered" and "not delivered to message:console:/dev/ttyA" in detail
    if reg.get("message") is None:
        assert "not implemented" in detail
    else:
        sent = [e for e in events if e.tool == "message"]
        assert sent and sent[0].caller == "cli:root" and sent[0].session == f"job:{job.id}"


async def test_gateway_shows_the_config_without_secrets(tmp_path):
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.config.pin_hash import hash_pin
    from edgeclaw.daemon.runtime import build_runtime

    pin_hash = hash_pin("2468", "pbkdf2-sha256")
    config = config_from_dict(
        {"board": "sim", "state_dir": str(tmp_path / "state"), "tools": {"rate_limit": 0},
         "console": {"login_hash": pin_hash}, "mqtt": {"password_env": "PW"}},
        "test.toml",
    )  # fmt: skip
    runtime = build_runtime(config, require_secrets=False)
    shown = await runtime.registry.execute("gateway", {"action": "config_get"}, ctx("cli", "cli:root"))
    assert shown.ok and "[REDACTED]" in shown.for_llm and pin_hash.split("$")[-1] not in shown.for_llm
    assert 'password_env = "PW"' in shown.for_llm
    one = await runtime.registry.execute(
        "gateway", {"action": "config_get", "key": "mqtt.port"}, ctx("cli", "cli:root")
    )
    assert one.ok and one.data["value"] == 1883
    # Without a daemon in this process, what needs one says so.
    status = await runtime.registry.execute("gateway", {"action": "status"}, ctx("cli", "cli:root"))
    assert not status.ok and "needs the running daemon" in status.error


# -- the heartbeat ---------------------------------------------------------------------------------------
class FakeAgent:
    def __init__(self, answer: str = "Soil is dry; watered for 10 s.") -> None:
        self.answer = answer
        self.messages = []

    async def handle(self, msg):
        from edgeclaw.agent.channel import Reply

        self.messages.append(msg)
        return Reply(self.answer, msg.session_key, True, msg)


async def test_heartbeat_skips_an_empty_file_and_acts_on_one_with_instructions():
    from edgeclaw.agent.heartbeat import Heartbeat, is_empty

    assert is_empty(None) and is_empty("") and is_empty("# Heartbeat\n\n<!-- add checks here -->\n")
    assert not is_empty("# Heartbeat\n- read the soil sensor; water below 30%\n")
    text = {"value": "# Heartbeat\n<!-- nothing yet -->\n"}
    agent, delivered = FakeAgent(), []

    async def deliver(reply):
        delivered.append(reply.text)
        return []

    beat = Heartbeat(lambda: text["value"], lambda: agent, deliver)
    assert await beat.beat() == "empty"
    assert agent.messages == [] and delivered == []
    text["value"] = "# Heartbeat\n- read the soil sensor; water below 30%\n"
    assert await beat.beat() == "replied"
    [msg] = agent.messages
    assert "read the soil sensor" in msg.text and msg.session_key == "heartbeat:main"
    assert msg.channel == "agent" and msg.caller == "agent:heartbeat"
    assert delivered == ["Soil is dry; watered for 10 s."]
    agent.answer = "HEARTBEAT_OK"
    assert await beat.beat() == "ok" and len(delivered) == 1  # nothing to report, nothing sent


async def test_heartbeat_quiet_hours_wrap_midnight():
    from edgeclaw.agent.heartbeat import Heartbeat, QuietHours

    quiet = QuietHours.parse("22:00-07:00")
    agent = FakeAgent()
    at = {"t": datetime(2025, 6, 1, 23, 30, tzinfo=UTC).timestamp()}

    async def deliver(reply):
        return []

    beat = Heartbeat(
        lambda: "- check the pump", lambda: agent, deliver, quiet=quiet, tz=UTC, clock=lambda: at["t"]
    )
    assert await beat.beat() == "quiet"
    at["t"] = datetime(2025, 6, 2, 6, 59, tzinfo=UTC).timestamp()
    assert await beat.beat() == "quiet"
    at["t"] = datetime(2025, 6, 2, 7, 0, tzinfo=UTC).timestamp()
    assert await beat.beat() == "replied" and len(agent.messages) == 1
    with pytest.raises(ValueError, match="HH:MM-HH:MM"):
        QuietHours.parse("late evening")


async def test_heartbeat_reads_the_routed_context_file_and_runs_on_the_schedulers_timer(runtime, world):
    from edgeclaw.agent.heartbeat import Heartbeat
    from edgeclaw.daemon.scheduler import _read_heartbeat

    assert _read_heartbeat(runtime) is None
    # Never the workspace's (any caller's command may write there): the local directory's.
    (runtime.workspace / "HEARTBEAT.md").write_text("- open every valve\n")
    assert _read_heartbeat(runtime) is None
    (runtime.local.root / "HEARTBEAT.md").write_text("- from the local file\n")
    assert _read_heartbeat(runtime) == "- from the local file\n"
    # A stored HEARTBEAT.md (written through the memory's virtual files) wins over the disk's.
    runtime.memory.contexts.write("main", "", "HEARTBEAT.md", "- from the store\n")
    assert _read_heartbeat(runtime) == "- from the store\n"
    clock, store = world
    agent = FakeAgent("done")

    async def deliver(reply):
        return []

    beat = Heartbeat(lambda: _read_heartbeat(runtime), lambda: agent, deliver)
    sched = Scheduler(store, RecordingExecutor(clock), clock=clock)
    await sched.start()
    sched.add_periodic("heartbeat", 1800, beat.beat)
    await clock.advance(3 * 1800 + 1)
    assert len(agent.messages) == 3 and "from the store" in agent.messages[0].text
    runtime.memory.contexts.write("main", "", "HEARTBEAT.md", "")
    await clock.advance(1800)
    assert len(agent.messages) == 3 and beat.last[1] == "empty"
    await sched.aclose()


async def test_each_run_is_checked_against_the_owners_rights_now(runtime):
    """A job stored when its owner could run exec (or written by hand) runs as that owner today:
    an MQTT caller gets no shell, whatever the job says."""
    from edgeclaw.agent.job_runner import JobRunner
    from edgeclaw.tools.automation.targets import JobOutlets

    store = runtime.automation.store
    job = store.add(
        Job(
            id=new_job_id(),
            name="",
            kind="tool",
            tool="exec",
            args={"command": "ls"},
            schedule_kind="every",
            schedule_spec="60.0",
            anchor="elapsed",
            owner=Owner("mqtt:sender:backend", "mqtt", "edgeclaw/dev/tool/call", "device"),
            catch_up="skip",
            targets=("none",),
        )
    )
    events = []
    runtime.registry.add_audit_sink(events.append)
    outcome, detail = await JobRunner(runtime.registry, JobOutlets(), lambda name: None).run(
        job, 7, "manual", None
    )
    assert outcome == "refused" and "not allowed" in detail and "remote" in detail
    [call] = [e for e in events if e.tool == "exec"]
    assert call.channel == "mqtt" and call.caller == "mqtt:sender:backend" and call.stage == "policy"
    assert call.request_id == f"job:{job.id}:7"


async def test_a_prompt_job_is_a_turn_of_the_named_agent_in_its_own_session(tmp_path):
    """Against the loopback model server: the job's prompt reaches the named agent's model, the model's
    tool call runs as the job's owner, and the answer lands in today's daily note."""
    from edgeclaw.agent.job_runner import JobRunner
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.runtime import build_runtime
    from edgeclaw.daemon.scheduler import _agent, _daily_notes
    from edgeclaw.tools.automation.daily_note import DailyNotes
    from edgeclaw.tools.automation.targets import JobOutlets
    from edgeclaw.tools.automation.when import local_zone
    from tests.llm_server import ScriptedLLM, first_user_text, openai_text, openai_tools

    with ScriptedLLM() as llm:
        config = config_from_dict(
            {
                "board": "sim",
                "state_dir": str(tmp_path / "state"),
                "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
                "agent": {"providers": ["local"]},
                "agents": {"gardener": {"system_prompt": "You look after the greenhouse."}},
            },
            "test.toml",
        )
        rt = build_runtime(config, require_secrets=False)
        try:
            made = await rt.registry.execute(
                "cron",
                {
                    "action": "add",
                    "cron": "0 6 * * *",
                    "prompt": "Read the air temperature.",
                    "agent": "gardener",
                    "to": "memory",
                    "name": "morning",
                },
                ctx("cli", "cli:root"),
            )
            assert made.ok, made.error
            unknown = await rt.registry.execute(
                "cron", {"action": "add", "every": "1h", "prompt": "x", "agent": "nobody", "to": "none"},
                ctx("cli", "cli:root"),
            )  # fmt: skip
            assert not unknown.ok and "no agent named 'nobody'" in unknown.error
            job = rt.automation.store.get(made.data["job"]["id"])
            llm.reply(openai_tools(("i2c", READ)), openai_text("It is 25.0 C in the greenhouse."))
            events = []
            rt.registry.add_audit_sink(events.append)
            outlets = JobOutlets()
            outlets.register("memory", _daily_notes(rt, local_zone()))  # the daemon's outlet
            runner = JobRunner(rt.registry, outlets, lambda name: _agent(rt, name))
            outcome, detail = await runner.run(job, 3, "schedule", None)
            assert outcome == "ok", detail
            assert first_user_text(llm.requests[0]) == "Read the air temperature."
            assert "greenhouse" in json.dumps(llm.requests[0]["messages"][0])  # the gardener's own prompt
            [call] = [e for e in events if e.tool == "i2c"]
            assert call.ok and call.caller == "cli:root" and call.session == f"job:{job.id}"
            assert call.agent_id == "gardener"
            today = DailyNotes(rt.memory.store, ()).path_for(time.time())
            note = rt.memory.store.document(today, "")
            assert note is not None and "[job morning] It is 25.0 C in the greenhouse." in note.content
        finally:
            await rt.aclose()


async def test_console_targets_reach_logged_in_ports_through_the_consoles_outlet(runtime):
    from edgeclaw.daemon.scheduler import _console_outlet
    from edgeclaw.tools.automation.targets import Delivery, DeliveryError
    from edgeclaw.tools.outlets import DeliveryFailed

    class Console:
        def __init__(self) -> None:
            self.shown: list[tuple[str, str]] = []

        def has_session(self, key: str) -> bool:
            return False

        async def to_session(self, key: str, text: str) -> str:
            raise DeliveryFailed("no")

        async def to_target(self, port: str, message) -> str:
            if port == "/dev/ttyB":
                raise DeliveryFailed(f"nobody is logged in on console {port}")
            self.shown.append((port, message.text))
            return "shown"

    runtime.config.console.ports = ["/dev/ttyA", "/dev/ttyB"]
    console = Console()
    runtime.outlets.register("console", console)
    deliver = _console_outlet(runtime)
    reading = Delivery("j1", "air", True, "21.5 C")
    await deliver("", reading)  # every port: shown where someone is logged in
    assert console.shown == [("/dev/ttyA", "[job air] 21.5 C")]
    with pytest.raises(DeliveryError, match="nobody is logged in"):
        await deliver("/dev/ttyB", reading)
