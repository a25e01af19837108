"""Delivery under faults: the broker or the daemon killed (SIGKILL), or the link between them cut, in
the middle of a burst.

Against a real mosquitto started here and the real `edgeclaw run` as a subprocess. Every call has
a visible side effect -- `file_append` writes one line to a file named after the request id -- so
the test can count, per request, how often it really ran. No caller retries anything (the test's
client publishes each request exactly once), so each request sent gets exactly one answer; these
figures must be 0:

* lost: a request that never got an answer -- the broker's loss included: a broker killed before
  its next save to disk forgets answers it had acknowledged, which the daemon publishes again;
* answered twice: a request that got two different answers (a result and `interrupted`, or two
  results);
* replays: a `replay` answer, which only a caller's own retry (a new publish of the same request)
  gets -- never a copy the broker delivered again (DUP) because the daemon had not acknowledged it;
* executed twice: a request whose side effect happened twice.

Copies of the same answer, byte for byte, are what QoS 1 allows -- an answer published again when
its PUBACK was lost in the kill, or because the broker may have lost it -- and are counted apart.

And every answer must agree with the side effect: `ok` exactly when it ran once, `interrupted`
with `may_have_run: false` only when it did not run.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sqlite3
import subprocess
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiomqtt
import pytest
from paho.mqtt.packettypes import PacketTypes
from paho.mqtt.properties import Properties

from tests.mqtt_support import (
    Caller,
    Mosquitto,
    Received,
    daemon_env,
    needs_mosquitto,
    poll,
    run_daemon,
    stop_daemon,
)

pytestmark = needs_mosquitto

DEV = "fault-dev"
BASE = f"edgeclaw/{DEV}"
ANSWERS = f"reply/{DEV}/answers"
BURST = 500


class DaemonProcess:
    """`edgeclaw run` on the sim board with its own config and state directory."""

    def __init__(self, workdir: Path, port: int, **mqtt: Any) -> None:
        self.workdir = workdir
        self.state = workdir / "state"
        self.log = workdir / "daemon.log"
        mqtt_lines = [f"{k} = {json.dumps(v)}" for k, v in mqtt.items()]
        (workdir / "edgeclaw.toml").write_text(
            "\n".join(
                [
                    'board = "sim"',
                    f'device_id = "{DEV}"',
                    "[tools]",
                    "rate_limit = 0",
                    "[tools.channels.mqtt]",
                    'allow = ["file_append", "gpio", "read_file"]',
                    "[mqtt]",
                    "enabled = true",
                    f"port = {port}",
                    "telemetry_interval_s = 0",
                    "session_expiry_s = 600",
                    *mqtt_lines,
                ]
            )
            + "\n"
        )
        self.env = daemon_env(self.state, workdir / "edgeclaw.toml")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> DaemonProcess:
        self.proc = run_daemon(self.env, self.log, "--board", "sim")
        return self

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def stop(self) -> None:
        stop_daemon(self.proc)

    def executions(self) -> Counter[str]:
        """How often each request's side effect happened (one line per run)."""
        ran = self.state / "workspace" / "ran"
        if not ran.is_dir():
            return Counter()
        return Counter({p.stem: p.read_text().count("\n") for p in ran.glob("*.log")})

    def waiting_answers(self) -> set[str]:
        """The correlation of every answer still in the outbox (not acknowledged by the broker)."""
        db = self.state / "edgeclaw.db"
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
            rows = conn.execute("SELECT correlation FROM mqtt_outbox WHERE correlation IS NOT NULL")
            return {bytes(r[0]).decode(errors="replace") for r in rows}

    def ledger_states(self) -> dict[str, str]:
        db = self.state / "edgeclaw.db"
        if not db.exists():
            return {}
        with contextlib.closing(sqlite3.connect(db, timeout=5)) as conn:
            try:
                rows = conn.execute("SELECT key, state FROM mqtt_requests").fetchall()
            except sqlite3.OperationalError:
                return {}
            try:
                journal = conn.execute(
                    "SELECT request_id, state FROM mqtt_requests WHERE key LIKE '~%'"
                ).fetchall()
            except sqlite3.OperationalError:  # a daemon that keeps no journal
                journal = []
        # Keys are kind:id:digest; requests recorded without deduplication carry their id in a column.
        states = {key.split(":", 1)[1].rsplit(":", 1)[0]: state for key, state in rows if key[0] != "~"}
        states.update({i: state for i, state in journal if i is not None})
        return states


@contextlib.contextmanager
def daemon(workdir: Path, port: int, **mqtt: Any) -> Iterator[DaemonProcess]:
    d = DaemonProcess(workdir, port, **mqtt)
    try:
        yield d
    finally:
        d.stop()


async def online(c: Caller, since: int = 0) -> None:
    status = f"{BASE}/status"
    await c.wait_for(
        lambda: any(m.json["state"] == "online" for m in c.on(status)[since:]), 40, "the device online"
    )


def append_call(request_id: str) -> dict[str, Any]:
    return {
        "id": request_id,
        "tool": "file_append",
        "args": {"path": f"ran/{request_id}.log", "content": "ran\n"},
    }


async def send_burst(c: Caller, ids: list[str]) -> None:
    """Every request exactly once, unpaced: all publishes at once, none waiting for another's PUBACK."""
    await asyncio.gather(
        *(
            c.publish(f"{BASE}/tool/call", append_call(i), response_topic=ANSWERS, correlation=i.encode())
            for i in ids
        )
    )


async def every_answer(c: Caller, ids: list[str], within: float) -> None:
    """Wait until each request has an answer, or `within` s passed (the tally then says what is lost)."""
    with contextlib.suppress(AssertionError):
        await c.wait_for(
            lambda: {(m.correlation or b"").decode() for m in c.on(ANSWERS)} >= set(ids),
            within,
            "every request answered",
        )


@dataclass
class Tally:
    lost: list[str] = field(default_factory=list)
    answered_twice: list[str] = field(default_factory=list)
    executed_twice: list[str] = field(default_factory=list)
    disagreeing: list[str] = field(default_factory=list)  # the answer says otherwise than the side effect
    copies: int = 0  # the same answer delivered again (QoS 1)
    replays: int = 0  # `replay` answers to a copy of a request
    interrupted: Counter[bool] = field(default_factory=Counter)  # by may_have_run

    def __str__(self) -> str:
        return (
            f"lost {len(self.lost)}, answered twice {len(self.answered_twice)}, executed twice "
            f"{len(self.executed_twice)}, disagreeing {len(self.disagreeing)}; same answer again "
            f"{self.copies}, replays {self.replays}, interrupted {dict(self.interrupted)}"
        )


def tally(ids: list[str], received: list[Received], executions: Counter[str]) -> Tally:
    t = Tally()
    by_id: dict[str, list[Received]] = {}
    for m in received:
        by_id.setdefault((m.correlation or b"").decode(), []).append(m)
    for i in ids:
        got = by_id.get(i, [])
        if not got:
            t.lost.append(i)
            continue
        bodies = [m.json for m in got]
        t.replays += sum(1 for b in bodies if b.get("replay"))
        t.copies += len(got) - len({m.payload for m in got})
        # What the answers say, a replay's flag aside: one content per request.
        contents = {json.dumps({k: v for k, v in b.items() if k != "replay"}, sort_keys=True) for b in bodies}
        if len(contents) > 1:
            t.answered_twice.append(i)
        ran = executions.get(i, 0)
        if ran > 1:
            t.executed_twice.append(i)
        answer = json.loads(next(iter(contents)))
        assert answer["id"] == i, answer
        if answer["ok"]:
            agrees = ran == 1
        elif answer.get("code") == "interrupted":
            t.interrupted[answer["may_have_run"]] += 1
            agrees = ran <= 1 if answer["may_have_run"] else ran == 0
        else:
            agrees = ran == 0
        if not agrees:
            t.disagreeing.append(i)
    return t


def assert_clean(t: Tally, d: DaemonProcess) -> None:
    if t.lost:
        # Whether the daemon had made the answer (then lost it) or never answered the request.
        states = Counter(d.ledger_states().get(i, "not recorded") for i in t.lost)
        raise AssertionError(f"{t}: lost {t.lost[:10]}; their ledger states: {dict(states)}")
    assert t.answered_twice == [], f"{t}: answered twice {t.answered_twice[:10]}"
    assert t.replays == 0, f"{t}: answered again from the ledger, though no caller sent anything twice"
    assert t.executed_twice == [], f"{t}: executed twice {t.executed_twice[:10]}"
    assert t.disagreeing == [], f"{t}: answer and side effect disagree for {t.disagreeing[:10]}"


class Link:
    """The daemon's TCP link to the broker, which the test can cut: every connection through it is
    reset (RST both ways, whatever was in flight lost) and nothing connects until it is restored.
    The broker lives on, so whatever it acknowledged stays acknowledged: a lost answer can only be
    the daemon's."""

    def __init__(self, broker_port: int) -> None:
        from tests.mqtt_support import free_port

        self.broker_port = broker_port
        self.port = free_port()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.swallowing = False

    def swallow(self) -> None:
        """From now until the next `cut`, what the daemon sends is dropped on the way: the broker
        sees no PUBACK for the commands it delivers, nor the answers (the stream is cut after)."""
        self.swallowing = True

    async def restore(self) -> None:
        self.swallowing = False
        self._server = await asyncio.start_server(self._join, "127.0.0.1", self.port, reuse_address=True)

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for w in list(self._writers):
            w.transport.abort()
        self._writers.clear()
        await self._server.wait_closed()

    async def _join(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.broker_port)
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, upstream: bool) -> None:
            with contextlib.suppress(OSError, ConnectionError):
                while data := await src.read(65536):
                    if upstream and self.swallowing:
                        continue
                    dst.write(data)
                    await dst.drain()
            for w in (writer, up_writer):
                w.transport.abort()

        await asyncio.gather(pump(reader, up_writer, True), pump(up_reader, writer, False))


async def call(c: Caller, request_id: str, tool: str, args: dict[str, Any], correlation: str = "") -> None:
    await c.publish(
        f"{BASE}/tool/call",
        {"id": request_id, "tool": tool, "args": args},
        response_topic=ANSWERS,
        correlation=(correlation or request_id).encode(),
    )


@contextlib.asynccontextmanager
async def unacknowledged(tmp_path: Path) -> AsyncIterator[tuple[DaemonProcess, Caller, Link]]:
    """A daemon connected through a link that drops what it sends from the moment the caller is
    ready: the broker sees neither the PUBACKs of the commands it delivers nor their answers."""
    broker = Mosquitto(tmp_path / "broker").start()
    link = Link(broker.port)
    await link.restore()
    try:
        with daemon(tmp_path, link.port) as d:
            d.start()
            async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
                await online(c)
                link.swallow()
                yield d, c, link
    finally:
        with contextlib.suppress(AssertionError):
            await link.cut()
        broker.kill()


async def test_requests_delivered_again_after_a_kill_before_their_puback_are_answered_once(tmp_path):
    """The daemon takes two calls, but its PUBACKs (and answers) never reach the broker; it is
    killed with one call done (its answer in the outbox) and one running. At the next start the
    broker delivers both again, with DUP set: those copies get no answer of their own -- the done
    one is answered from the outbox, the running one `interrupted` -- so each caller hears exactly
    once, and nothing runs twice. The caller's own retry, a new publish, is answered from the
    ledger, marked `replay`."""
    async with unacknowledged(tmp_path) as (d, c, link):
        await call(c, "quick", "file_append", {"path": "ran/quick.log", "content": "ran\n"})
        await call(c, "slow", "gpio", {"action": "pulse", "pin": 17, "duration_ms": 8000})
        await poll(
            lambda: d.ledger_states() == {"quick": "done", "slow": "running"},
            20,
            "one done, one running",
        )
        d.kill()
        await link.cut()
        await link.restore()
        assert c.on(ANSWERS) == []
        statuses = len(c.on(f"{BASE}/status"))
        d.start()
        await online(c, since=statuses)
        await c.answers(ANSWERS, 2, within=30)
        await asyncio.sleep(1.0)  # a second answer to either would come now
        got = c.on(ANSWERS)
        assert sorted(m.correlation or b"" for m in got) == [b"quick", b"slow"], [m.json for m in got]
        assert not any("replay" in m.json for m in got), [m.json for m in got]
        answers = {m.correlation: m.json for m in got}
        assert answers[b"quick"]["ok"] is True
        assert answers[b"slow"]["code"] == "interrupted" and answers[b"slow"]["may_have_run"] is True
        assert d.executions() == Counter({"quick": 1})
        # The caller retries on purpose: the stored answer, marked as a replay; not run again.
        await call(c, "quick", "file_append", {"path": "ran/quick.log", "content": "ran\n"}, "again")
        [again] = await c.wait_for(
            lambda: [m for m in c.on(ANSWERS) if m.correlation == b"again"], what="the retry"
        )
        assert again.json["replay"] is True and again.json["ok"] is True
        assert d.executions() == Counter({"quick": 1})


async def test_a_request_delivered_again_while_it_runs_is_answered_once(tmp_path):
    """The link drops after the daemon took a long call but before its PUBACK reached the broker;
    after the reconnect the broker delivers the call again (DUP) while it still runs. That copy
    does not wait for an answer of its own: the call answers once, when it finishes."""
    async with unacknowledged(tmp_path) as (d, c, link):
        await call(c, "long", "gpio", {"action": "pulse", "pin": 17, "duration_ms": 4000})
        await poll(lambda: d.ledger_states() == {"long": "running"}, 20, "the call running")
        statuses = len(c.on(f"{BASE}/status"))
        await link.cut()
        await link.restore()
        await online(c, since=statuses)  # reconnected while the call runs
        await c.answers(ANSWERS, 1, within=30)
        await asyncio.sleep(1.0)  # a second answer would come now
        got = c.on(ANSWERS)
        assert [m.correlation for m in got] == [b"long"], [m.json for m in got]
        assert got[0].json["ok"] is True and "replay" not in got[0].json


async def test_link_to_the_broker_cut_mid_burst_no_answer_lost_none_twice(tmp_path):
    """The daemon's connection to the broker dies (reset, with publishes and PUBACKs in flight)
    while the answers to 500 QoS 1 calls are flowing, and comes back a second later. The broker
    keeps everything it acknowledged, so every answer must arrive: each leaves the daemon's outbox
    only on the broker's PUBACK, across the reconnect."""
    broker = Mosquitto(tmp_path / "broker").start()
    link = Link(broker.port)
    await link.restore()
    try:
        with daemon(tmp_path, link.port, inbound_queue=BURST + 100, max_concurrent=4) as d:
            d.start()
            async with Caller(broker.port, [ANSWERS, f"{BASE}/status"], client_id="fleet-backend") as c:
                await online(c)
                ids = [f"l{n:03d}" for n in range(BURST)]
                sender = asyncio.create_task(send_burst(c, ids))
                await c.wait_for(lambda: len(c.on(ANSWERS)) >= BURST // 5, 30, "the first answers")
                await link.cut()
                cut_at = len(c.on(ANSWERS))
                await sender
                await asyncio.sleep(1.0)
                await link.restore()
                await every_answer(c, ids, 90)
                await asyncio.sleep(1.0)  # anything that would come twice comes now
                t = tally(ids, c.on(ANSWERS), d.executions())
                print(f"link cut after {cut_at} answers: {t}")
                assert cut_at < BURST, "the cut came after the burst: nothing was tested"
                assert_clean(t, d)
                assert sum(d.executions().values()) == BURST  # every call ran, once
                assert d.waiting_answers() == set()
    finally:
        with contextlib.suppress(AssertionError):
            await link.cut()
        broker.kill()
    assert "Traceback" not in d.log.read_text(errors="replace")


async def test_broker_killed_mid_burst_no_answer_lost_none_twice(tmp_path):
    """The broker dies (SIGKILL) while answers to 500 QoS 1 calls are flowing; it runs with
    persistence and the caller has a persistent session, so what it had saved survives. What it
    acknowledged after its last save is gone with it, so the daemon does the rest: each answer
    leaves its outbox only on the broker's PUBACK, and the answers acknowledged in the last
    `resend_window_s` are published again after the reconnect. None may be lost."""
    broker = Mosquitto(tmp_path / "broker", persistent=True).start()
    try:
        with daemon(tmp_path, broker.port, inbound_queue=BURST + 100, max_concurrent=4) as d:
            d.start()
            async with Caller(
                broker.port, [ANSWERS, f"{BASE}/status"], client_id="fleet-backend", session_expiry_s=600
            ) as c:
                await online(c)
                # The burst waits at the broker while the daemon is away (its session is persistent),
                # so that it is answered as fast as the daemon can: the kill then catches requests and
                # answers on every leg -- queued, running, stored, in flight, at the broker, delivered.
                d.stop()
                ids = [f"b{n:03d}" for n in range(BURST)]
                await send_burst(c, ids)
                statuses = len(c.on(f"{BASE}/status"))
                d.start()
                await online(c, since=statuses)
                await c.wait_for(lambda: len(c.on(ANSWERS)) >= BURST // 5, 30, "the first answers")
                broker.kill()
                killed_at = len(c.on(ANSWERS))
                await asyncio.sleep(1.0)
                broker.start()
                await every_answer(c, ids, 60)
                await asyncio.sleep(1.0)  # anything that would come twice comes now
                t = tally(ids, c.on(ANSWERS), d.executions())
                # An answer lost after the broker acknowledged it (it left the outbox, its request
                # is done) is told apart in the message: the daemon should have published it again.
                waiting = d.waiting_answers()
                states = d.ledger_states()
                at_broker = [i for i in t.lost if i not in waiting and states.get(i) == "done"]
                print(f"broker killed after {killed_at} answers: {t}; lost after the PUBACK: {at_broker}")
                assert killed_at < BURST, "the kill came after the burst: nothing was tested"
                assert at_broker == [], f"{len(at_broker)} answers lost after the PUBACK: {at_broker[:10]}"
                assert_clean(t, d)
                assert sum(d.executions().values()) == BURST  # every call ran, once
    finally:
        broker.kill()
    assert "Traceback" not in d.log.read_text(errors="replace")


async def backend_session(port: int, client_id: str, *, subscribe: bool, expect: int = 0) -> list[Received]:
    """Connect as a backend that keeps its session (clean start off, even the first time, which
    `Caller` does not do) and take what the broker delivers: `expect` answers, then a second more
    for any copy. With `subscribe`, subscribe to the answers first (and leave at once)."""
    props = Properties(PacketTypes.CONNECT)
    props.SessionExpiryInterval = 600
    got: list[Received] = []
    client = aiomqtt.Client(
        "127.0.0.1",
        port,
        identifier=client_id,
        protocol=aiomqtt.ProtocolVersion.V5,
        clean_start=False,
        properties=props,
        timeout=10,
    )
    async with client:
        if subscribe:
            await client.subscribe(ANSWERS, qos=1)
        if not expect:
            return got
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(30):
                async for m in client.messages:
                    corr = getattr(m.properties, "CorrelationData", None)
                    got.append(Received(m.topic.value, bytes(m.payload), corr, m.retain, 0.0))  # type: ignore[arg-type]
                    if len(got) >= expect:
                        break
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(1.0):
                async for m in client.messages:
                    corr = getattr(m.properties, "CorrelationData", None)
                    got.append(Received(m.topic.value, bytes(m.payload), corr, m.retain, 0.0))  # type: ignore[arg-type]
    return got


async def test_answers_a_killed_broker_acknowledged_but_never_saved_are_published_again(tmp_path):
    """The broker acknowledges answers and queues them for a backend that is away, then dies
    (SIGKILL) before saving them: it saves only when told (SIGUSR1, here before the calls finish),
    like mosquitto between two `autosave_interval`s. It comes back without them, and the outbox
    let go of each on its PUBACK; the daemon publishes the answers acknowledged in the last
    `resend_window_s` again after the reconnect, so the backend gets every one, once."""
    broker = Mosquitto(
        tmp_path / "broker",
        persistent=True,
        extra_conf="autosave_on_changes false\nautosave_interval 3600\n",  # saved only when told
    ).start()
    saved = tmp_path / "broker" / "mosquitto.db"
    calls = 4
    try:
        with daemon(tmp_path, broker.port, max_concurrent=1) as d:
            d.start()
            await backend_session(broker.port, "away-backend", subscribe=True)
            async with Caller(broker.port, [f"{BASE}/status"]) as c:
                await online(c)
                ids = [f"s{n}" for n in range(calls)]
                for i in ids:
                    pulse = {"action": "pulse", "pin": 17, "duration_ms": 1200}
                    await c.publish(
                        f"{BASE}/tool/call",
                        {"id": i, "tool": "gpio", "args": pulse},
                        response_topic=ANSWERS,
                        correlation=i.encode(),
                    )
                await poll(lambda: set(d.ledger_states()) == set(ids), 20, "every call recorded")
                await asyncio.sleep(0.2)  # our PUBACKs reach the broker
                assert broker.proc is not None
                before = saved.stat().st_mtime_ns if saved.exists() else 0
                broker.proc.send_signal(signal.SIGUSR1)  # saved: the backend's session, no answer yet
                await poll(lambda: saved.exists() and saved.stat().st_mtime_ns != before, 10, "the save")
                assert set(d.ledger_states().values()) <= {"running", "queued"}
                await poll(lambda: set(d.ledger_states().values()) == {"done"}, 30, "every call done")
                await poll(lambda: d.waiting_answers() == set(), 10, "every answer acknowledged")
                broker.kill()
                broker.start()
            got = await backend_session(broker.port, "away-backend", subscribe=False, expect=calls)
            print(
                f"answers after the broker lost them: {sorted((m.correlation or b'').decode() for m in got)}"
            )
            assert sorted(m.correlation or b"" for m in got) == sorted(i.encode() for i in ids)
            assert all(m.json["ok"] and "replay" not in m.json for m in got), [m.json for m in got]
    finally:
        broker.kill()
    assert "published again after the reconnect" in d.log.read_text(errors="replace")


async def test_daemon_killed_mid_burst_every_caller_answered_none_twice(tmp_path):
    """SIGKILL of the daemon during an unpaced burst of 500 calls; it is started again and must
    answer every call -- the ones it had finished from its outbox, the ones it was working on
    `interrupted`, the ones it had not taken yet by running them -- without any caller retry, and
    only once: the requests it had recorded but not acknowledged come again from the broker (DUP),
    and those copies get no answer of their own (no `replay`)."""
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        with daemon(tmp_path, broker.port, inbound_queue=BURST + 100, max_concurrent=8) as d:
            d.start()
            async with Caller(broker.port, [ANSWERS, f"{BASE}/status"], client_id="fleet-backend") as c:
                await online(c)
                ids = [f"k{n:03d}" for n in range(BURST)]
                sender = asyncio.create_task(send_burst(c, ids))
                await c.wait_for(lambda: len(c.on(ANSWERS)) >= BURST // 5, 30, "the first answers")
                d.kill()
                killed_at = len(c.on(ANSWERS))
                await sender
                statuses = len(c.on(f"{BASE}/status"))
                d.start()
                await online(c, since=statuses)
                await every_answer(c, ids, 60)
                await asyncio.sleep(1.0)
                t = tally(ids, c.on(ANSWERS), d.executions())
                print(f"daemon killed after {killed_at} answers: {t}")
                assert killed_at < BURST, "the kill came after the burst: nothing was tested"
                assert_clean(t, d)
    finally:
        broker.kill()
    log = d.log.read_text(errors="replace")
    assert "Traceback" not in log


async def test_an_answer_the_broker_never_acknowledged_survives_a_daemon_kill(tmp_path):
    """The broker hangs (SIGSTOP) while a call finishes, so its answer is published but never
    acknowledged; then the daemon is killed and the hung broker dies. The answer must still reach
    the caller once both are back: it leaves the outbox only on the broker's PUBACK."""
    broker = Mosquitto(tmp_path / "broker", persistent=True).start()
    try:
        with daemon(tmp_path, broker.port) as d:
            d.start()
            async with Caller(
                broker.port, [ANSWERS, f"{BASE}/status"], client_id="patient-backend", session_expiry_s=600
            ) as c:
                await online(c)
                await c.publish(
                    f"{BASE}/tool/call",
                    {
                        "id": "slow",
                        "tool": "gpio",
                        "args": {"action": "pulse", "pin": 17, "duration_ms": 1500},
                    },
                    response_topic=ANSWERS,
                    correlation=b"slow",
                )
                await poll(lambda: d.ledger_states().get("slow") == "running", 20, "the call to start")
                assert broker.proc is not None
                broker.proc.send_signal(signal.SIGSTOP)
                await poll(lambda: d.ledger_states().get("slow") == "done", 20, "the call to finish")
                await asyncio.sleep(0.3)  # the answer is on the wire, its PUBACK never comes
                d.kill()
                broker.kill()
                assert c.on(ANSWERS) == []
                broker.start()
                d.start()
                [answer] = await c.answers(ANSWERS, 1, within=30)
                assert answer.correlation == b"slow" and answer.json["id"] == "slow" and answer.json["ok"]
    finally:
        broker.kill()


@pytest.mark.parametrize("dedup_window_s", [600, 0], ids=["dedup", "no-dedup"])
async def test_requests_cut_off_by_a_crash_are_answered_interrupted_at_start_up(tmp_path, dedup_window_s):
    """One call running (a long GPIO pulse), one waiting for its slot; the daemon is killed. At
    the next start both callers hear `interrupted` on their Response Topic with their Correlation
    Data, without asking again: the running one "may have run", the waiting one did not -- with
    deduplication off too (the journal of unfinished requests does not depend on it)."""
    broker = Mosquitto(tmp_path / "broker").start()
    try:
        with daemon(tmp_path, broker.port, max_concurrent=1, dedup_window_s=dedup_window_s) as d:
            d.start()
            async with Caller(broker.port, [ANSWERS, f"{BASE}/status"]) as c:
                await online(c)
                pulse = {"action": "pulse", "pin": 17, "duration_ms": 8000}
                for request_id in ("running", "waiting"):
                    await c.publish(
                        f"{BASE}/tool/call",
                        {"id": request_id, "tool": "gpio", "args": pulse},
                        response_topic=ANSWERS,
                        correlation=request_id.encode(),
                    )
                await poll(lambda: set(d.ledger_states()) == {"running", "waiting"}, 20, "both recorded")
                await asyncio.sleep(0.2)  # the first one's pulse has begun
                # Recorded as what they are: the one in its slot has started, the other waits.
                assert d.ledger_states() == {"running": "running", "waiting": "queued"}
                d.kill()
                assert c.on(ANSWERS) == []
                statuses = len(c.on(f"{BASE}/status"))
                d.start()
                await online(c, since=statuses)
                await c.answers(ANSWERS, 2, within=30)
                await asyncio.sleep(0.5)
                # Exactly one answer each, none a replay: a request the daemon had recorded but not
                # yet acknowledged when it was killed comes again from the broker (DUP), and that copy
                # is not answered again (its answer is the one given at start-up).
                assert sorted(m.correlation or b"" for m in c.on(ANSWERS)) == [b"running", b"waiting"]
                assert not any("replay" in m.json for m in c.on(ANSWERS)), c.on(ANSWERS)
                answers = {m.correlation: m.json for m in c.on(ANSWERS)}
                running, waiting = answers[b"running"], answers[b"waiting"]
                assert running["id"] == "running" and running["tool"] == "gpio"
                assert running["code"] == "interrupted" and running["may_have_run"] is True
                assert "may have had" in running["error"]
                assert waiting["code"] == "interrupted" and waiting["may_have_run"] is False
                assert "did not run" in waiting["error"]
                if dedup_window_s:
                    # A caller's own repeat (a new publish) is told the same, from the ledger, marked as
                    # a replay, and does not run.
                    await c.publish(
                        f"{BASE}/tool/call",
                        {"id": "running", "tool": "gpio", "args": pulse},
                        response_topic=ANSWERS,
                        correlation=b"again",
                    )
                    [again] = await c.wait_for(
                        lambda: [m for m in c.on(ANSWERS) if m.correlation == b"again"], what="the repeat"
                    )
                    assert again.json["code"] == "interrupted" and again.json["replay"] is True
                assert d.ledger_states().get("running", "done") == "done"
    finally:
        broker.kill()
    assert "answered 'interrupted'" in d.log.read_text(errors="replace")
