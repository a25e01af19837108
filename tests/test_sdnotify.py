"""sd_notify and the loop watchdog, against a datagram socket the test binds itself (systemd's side)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
import uuid
from collections.abc import Iterator

import pytest

from edgeclaw.daemon.sdnotify import LoopWatchdog, SystemdNotifier, watchdog_interval

LOGGER = "edgeclaw.sdnotify"


class Receiver:
    """systemd's end of NOTIFY_SOCKET: a bound, non-blocking AF_UNIX datagram socket."""

    def __init__(self, notify_socket: str) -> None:
        self.notify_socket = notify_socket
        bind_to = "\0" + notify_socket[1:] if notify_socket.startswith("@") else notify_socket
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(bind_to)
        self.sock.setblocking(False)

    def recv(self, timeout: float = 2.0) -> bytes:
        """One datagram, waiting for it (for synchronous sends it is already queued)."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(65536)
        finally:
            self.sock.setblocking(False)

    def drain(self) -> list[bytes]:
        """Everything queued so far, without waiting."""
        out = []
        while True:
            try:
                out.append(self.sock.recv(65536))
            except BlockingIOError:
                return out


def _bind(kind: str, tmp_path_factory: pytest.TempPathFactory) -> Receiver:
    if kind == "path":
        # A short base directory: AF_UNIX paths are limited to 107 bytes and
        # tmp_path embeds the (long) test name.
        return Receiver(str(tmp_path_factory.mktemp("n") / "notify.sock"))
    return Receiver(f"@edgeclaw-test-{os.getpid()}-{uuid.uuid4().hex}")


@pytest.fixture(params=["path", "abstract"])
def any_receiver(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Receiver]:
    """Both kinds of NOTIFY_SOCKET; used by the protocol tests."""
    r = _bind(request.param, tmp_path_factory)
    yield r
    r.sock.close()


@pytest.fixture
def receiver(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Receiver]:
    """A filesystem-path socket; the watchdog tests need not run twice (keeps the suite fast)."""
    r = _bind("path", tmp_path_factory)
    yield r
    r.sock.close()


@pytest.fixture
def notifier(receiver: Receiver) -> Iterator[SystemdNotifier]:
    with SystemdNotifier.from_env({"NOTIFY_SOCKET": receiver.notify_socket}) as n:
        yield n


def test_disabled_when_notify_socket_unset() -> None:
    n = SystemdNotifier.from_env({})
    assert not n.enabled
    assert n.address is None
    assert n.notify("READY=1") is False
    assert n.ready() is False
    assert n.watchdog() is False
    n.close()


def test_from_env_reads_os_environ_and_can_unset_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", "@edgeclaw-x")
    assert SystemdNotifier.from_env().address == "@edgeclaw-x"
    n = SystemdNotifier.from_env(unset_environment=True)
    assert n.enabled
    assert "NOTIFY_SOCKET" not in os.environ


def test_relative_socket_path_disables_with_a_log(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    n = SystemdNotifier.from_env({"NOTIFY_SOCKET": "relative/sock"})
    assert not n.enabled
    assert any("NOTIFY_SOCKET" in r.getMessage() for r in caplog.records)


@pytest.mark.arm_smoke
def test_exact_datagrams(any_receiver: Receiver) -> None:
    receiver = any_receiver
    notifier = SystemdNotifier.from_env({"NOTIFY_SOCKET": receiver.notify_socket})
    assert notifier.enabled
    assert notifier.address == receiver.notify_socket

    assert notifier.ready() is True
    assert receiver.recv() == b"READY=1"
    assert notifier.status("serving\non mqtt\r\nand console") is True
    assert receiver.recv() == b"STATUS=serving on mqtt and console"
    assert notifier.last_status == "serving on mqtt and console"
    assert notifier.watchdog() is True
    assert receiver.recv() == b"WATCHDOG=1"
    assert notifier.stopping() is True
    assert receiver.recv() == b"STOPPING=1"
    assert notifier.notify("READY=1", "STATUS=serving") is True
    assert receiver.recv() == b"READY=1\nSTATUS=serving"
    assert notifier.ready("up") is True
    assert receiver.recv() == b"READY=1\nSTATUS=up"
    assert notifier.stopping("draining\n3 calls") is True
    assert receiver.recv() == b"STOPPING=1\nSTATUS=draining 3 calls"
    assert receiver.drain() == []
    notifier.close()


def test_reloading_carries_a_monotonic_timestamp(receiver: Receiver, notifier: SystemdNotifier) -> None:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC) // 1000
    assert notifier.reloading() is True
    first, second = receiver.recv().split(b"\n")
    assert first == b"RELOADING=1"
    key, _, value = second.partition(b"=")
    assert key == b"MONOTONIC_USEC"
    assert before <= int(value) <= before + 60_000_000


def test_malformed_fields_are_a_caller_bug() -> None:
    # Checked even when disabled, so the bug shows up outside systemd too.
    n = SystemdNotifier(None)
    for bad in ("READY", "=1", "STATUS=a\nREADY=1", "STATUS=a\0b"):
        with pytest.raises(ValueError):
            n.notify(bad)
    with pytest.raises(ValueError):
        n.notify()


def test_send_failure_returns_false_and_logs(tmp_path_factory: pytest.TempPathFactory, caplog) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    missing = str(tmp_path_factory.mktemp("n") / "missing" / "notify.sock")
    with SystemdNotifier.from_env({"NOTIFY_SOCKET": missing}) as n:
        assert n.enabled
        assert n.ready() is False
        warnings = [r for r in caplog.records if r.name == LOGGER and r.levelno == logging.WARNING]
        assert len(warnings) == 1
        assert missing in warnings[0].getMessage()
        # A repeat of the same failure is still logged, but not as another warning.
        caplog.clear()
        assert n.watchdog() is False
        assert [r.levelno for r in caplog.records if r.name == LOGGER] == [logging.DEBUG]


def test_send_recovers_after_failure(tmp_path_factory: pytest.TempPathFactory, caplog) -> None:
    caplog.set_level(logging.INFO, logger=LOGGER)
    path = str(tmp_path_factory.mktemp("n") / "notify.sock")
    with SystemdNotifier.from_env({"NOTIFY_SOCKET": path}) as n:
        assert n.watchdog() is False  # nobody bound yet
        r = Receiver(path)
        try:
            assert n.watchdog() is True
            assert r.recv() == b"WATCHDOG=1"
        finally:
            r.sock.close()
    assert any("works again" in rec.getMessage() for rec in caplog.records)


def test_close_then_send_reopens(any_receiver: Receiver) -> None:
    with SystemdNotifier(any_receiver.notify_socket) as notifier:
        assert notifier.watchdog() is True
    notifier.close()  # idempotent
    assert notifier.watchdog() is True
    notifier.close()
    assert any_receiver.drain() == [b"WATCHDOG=1", b"WATCHDOG=1"]


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"WATCHDOG_USEC": "200000"}, 0.1),
        ({"WATCHDOG_USEC": "30000000"}, 15.0),
        ({"WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid())}, 0.1),
        ({"WATCHDOG_USEC": "200000", "WATCHDOG_PID": str(os.getpid() + 1)}, None),
        ({"WATCHDOG_USEC": "200000", "WATCHDOG_PID": "nope"}, None),
        ({}, None),
        ({"WATCHDOG_USEC": ""}, None),
        ({"WATCHDOG_USEC": "0"}, None),
        ({"WATCHDOG_USEC": "lots"}, None),
    ],
)
def test_watchdog_interval(environ: dict[str, str], expected: float | None) -> None:
    assert watchdog_interval(environ) == (pytest.approx(expected) if expected is not None else None)


def test_loop_watchdog_from_env() -> None:
    enabled = SystemdNotifier("@edgeclaw-x")
    wd = LoopWatchdog.from_env(enabled, {"WATCHDOG_USEC": "200000"})
    assert wd is not None
    assert wd.interval == pytest.approx(0.1)
    assert wd.max_lag == pytest.approx(0.1)
    assert LoopWatchdog.from_env(enabled, {}) is None
    assert LoopWatchdog.from_env(SystemdNotifier(None), {"WATCHDOG_USEC": "200000"}) is None


def test_beat_judges_lag_and_checks(receiver: Receiver, notifier: SystemdNotifier) -> None:
    notifier.status("serving")
    receiver.drain()
    wd = LoopWatchdog(notifier, 1.0, max_lag=0.5)
    assert wd.beat(0.4) is True
    assert receiver.drain() == [b"WATCHDOG=1"]
    assert wd.beat(0.6) is False
    [status] = receiver.drain()
    assert status.startswith(b"STATUS=unhealthy: event loop lagged 0.600 s")
    # Back to healthy: the daemon's own status is restored, then the ping.
    assert wd.beat(0.0) is True
    assert receiver.drain() == [b"STATUS=serving", b"WATCHDOG=1"]
    assert (wd.pings, wd.skipped) == (2, 1)


def test_check_results(receiver: Receiver, notifier: SystemdNotifier, caplog) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    wd = LoopWatchdog(notifier, 1.0)
    wd.add_check("ok", lambda: True)
    with pytest.raises(ValueError):
        wd.add_check("ok", lambda: True)
    wd.add_check("flag", lambda: False)
    wd.add_check("why", lambda: "disk full\nreally")

    def boom() -> bool:
        raise RuntimeError("kaput")

    wd.add_check("boom", boom)
    assert wd.beat() is False
    [status] = receiver.drain()
    assert status == (
        b"STATUS=unhealthy: flag failed; why: disk full really; boom: raised RuntimeError: kaput"
    )
    for name in ("flag", "why", "boom"):
        wd.remove_check(name)
    wd.remove_check("never-registered")
    assert wd.beat() is True
    assert receiver.drain() == [b"STATUS=healthy", b"WATCHDOG=1"]


def test_async_check_is_not_mistaken_for_healthy(receiver: Receiver, notifier: SystemdNotifier) -> None:
    async def not_like_this() -> bool:
        return True

    wd = LoopWatchdog(notifier, 1.0)
    wd.add_check("async", not_like_this)  # type: ignore[arg-type]
    assert wd.beat() is False
    assert b"coroutine" in receiver.drain()[0]


async def test_pings_repeatedly_on_a_healthy_loop(receiver: Receiver, notifier: SystemdNotifier) -> None:
    # A generous max_lag: this test is about repetition, not lag, and CI machines stall.
    async with LoopWatchdog(notifier, 0.02, max_lag=5.0) as wd:
        await asyncio.sleep(0.15)
    got = receiver.drain()
    assert len(got) >= 3
    assert set(got) == {b"WATCHDOG=1"}
    assert wd.pings == len(got)
    assert wd.skipped == 0


async def test_failing_check_stops_pings_and_sets_status(
    receiver: Receiver, notifier: SystemdNotifier, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    broker_up = True
    wd = LoopWatchdog(notifier, 0.02, max_lag=5.0)
    wd.add_check("mqtt", lambda: True if broker_up else "broker unreachable")
    wd.start()
    try:
        await asyncio.sleep(0.05)
        assert set(receiver.drain()) == {b"WATCHDOG=1"}
        # Single-threaded: every tick from here on sees the broken check.
        broker_up = False
        await asyncio.sleep(0.07)
        sick = receiver.drain()
        assert sick
        assert b"WATCHDOG=1" not in sick
        assert set(sick) == {b"STATUS=unhealthy: mqtt: broker unreachable"}
        assert any("mqtt: broker unreachable" in r.getMessage() for r in caplog.records)
        broker_up = True
        await asyncio.sleep(0.07)
        assert b"WATCHDOG=1" in receiver.drain()
    finally:
        await wd.stop()
    await wd.stop()  # idempotent


async def test_blocked_loop_skips_a_ping(
    receiver: Receiver, notifier: SystemdNotifier, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    async with LoopWatchdog(notifier, 0.03, max_lag=0.1) as wd:
        await asyncio.sleep(0.01)
        assert wd.pings >= 1  # the immediate first ping
        # Block the whole loop well past max_lag: the watchdog's sleep wakes ~0.27 s late.
        time.sleep(0.3)  # noqa: ASYNC251 - blocking the loop is the point of this test
        await asyncio.sleep(0.12)
    assert wd.skipped >= 1
    assert any("event loop lagged" in r.getMessage() for r in caplog.records)
    got = receiver.drain()
    lagged = [i for i, d in enumerate(got) if d.startswith(b"STATUS=unhealthy: event loop lagged")]
    assert lagged
    # Pings resume once the loop is responsive again.
    assert b"WATCHDOG=1" in got[lagged[-1] :]


async def test_start_twice_is_refused(notifier: SystemdNotifier) -> None:
    wd = LoopWatchdog(notifier, 1.0)
    wd.start()
    try:
        with pytest.raises(RuntimeError):
            wd.start()
    finally:
        await wd.stop()


def test_bad_intervals() -> None:
    n = SystemdNotifier(None)
    with pytest.raises(ValueError):
        LoopWatchdog(n, 0)
    with pytest.raises(ValueError):
        LoopWatchdog(n, 1.0, max_lag=0)
