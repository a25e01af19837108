"""Serving requests: exactly one answer for every command delivered, whatever goes wrong on the way.

The path of a request (`tool/call`, `chat/in`, an admin topic):

  `take` → `RequestReader.read` (checks, signature and `ts`, parse: a `Command`, or refused)
  → `serve`: the request ledger (a repeat is answered from the stored result, or joins the
  running original) → admission (at most `inbound_queue` requests waiting or running; beyond
  that the answer is "busy") → a task per request, at most `max_concurrent` running (`_run`)
  → `_conclude`: the answer stored with the ledger's record of it, then published, to the MQTT 5
  Response Topic with its Correlation Data, else to `tool/result` / `chat/out`.

Exactly one answer per request *sent*: a copy the broker delivers again (the DUP flag: we had not
acknowledged it when the daemon was killed or the connection dropped) is not answered again when
the ledger knows it -- its answer went out, waits in the outbox, or comes when the request running
finishes -- while a caller's own retry (a new publish of the same request) is answered from the
ledger, marked `replay`.

Every request is its proven caller's (channels.mqtt.keys): a caller without the role a request
needs is answered `forbidden`. A `tool/cancel` stops a call of the same caller only; it goes around
the ledger and admission, so it gets through when the device is busy.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from edgeclaw.channels.mqtt.dedup import PURGE_CHUNK, Lookup, Recorded, RequestLedger, Seen, journal_key
from edgeclaw.channels.mqtt.inbound import (
    Cancellable,
    Command,
    CommandKind,
    ErrorAnswer,
    Incoming,
    error_for,
    refusal,
)
from edgeclaw.channels.mqtt.keys import forbidden
from edgeclaw.channels.mqtt.outbox import Kind
from edgeclaw.channels.mqtt.protocol import (
    AdminCall,
    CancelRequest,
    Route,
    ToolCallRequest,
    cancel_answer,
    cancel_error,
    encode,
    peek_id,
    replayed,
)
from edgeclaw.channels.mqtt.reader import RequestReader
from edgeclaw.channels.mqtt.sender import Sender, StoredPublish
from edgeclaw.config.schema import MqttConfig
from edgeclaw.net.wire import WireError
from edgeclaw.store.db import StorageFull
from edgeclaw.tasks import TaskSet

log = logging.getLogger("edgeclaw.mqtt")

HOUSEKEEPING_S = 60.0
MAX_PURGE_CHUNKS = 1000  # per housekeeping round; whatever is left waits for the next

# `interrupted` answers carry "may_have_run": whether the request had started when the daemon stopped.
INTERRUPTED = (
    "this request was running when the daemon stopped: it may have had (part of) its effect; it is "
    "not run again (send it with a new id to run it)"
)
INTERRUPTED_WAITING = (
    "the daemon stopped before this request started: it did not run; it is not run later either "
    "(send it with a new id to run it)"
)


def interrupted(error: ErrorAnswer, may_have_run: bool) -> bytes:
    """The `interrupted` answer, saying whether the request had started when the daemon stopped."""
    answer = json.loads(error("interrupted", INTERRUPTED if may_have_run else INTERRUPTED_WAITING))
    answer["may_have_run"] = may_have_run
    return encode(answer)


def naming_device(route: Route, payload: bytes) -> bytes:
    """The answer to a fleet or group command with `"device"`: whose answer it is."""
    if route.device is None:
        return payload
    try:
        answer = json.loads(payload)
    except ValueError:
        return payload
    if not isinstance(answer, dict) or answer.get("device") == route.device:
        return payload
    answer["device"] = route.device
    return encode(answer)


class RequestServer:
    """Admission, the request ledger, cancel and the one answer of every request."""

    def __init__(
        self,
        config: MqttConfig,
        *,
        reader: RequestReader,
        ledger: RequestLedger[Route],
        sender: Sender,
        run: Callable[[Command], Awaitable[bytes]],
        only_observes: Callable[[str, dict[str, Any]], bool],
        after_answer: Callable[[], None] = lambda: None,
        on_bad_signature: Callable[[str], None] = lambda topic: None,
    ) -> None:
        self.config = config
        self.reader = reader
        self.ledger = ledger
        self.sender = sender
        self._run = run  # what a command does: its answer
        self._only_observes = only_observes  # the registry's: a call that changes nothing
        self.after_answer = after_answer  # the events of a call go out with its answer
        self.on_bad_signature = on_bad_signature
        # `redelivered`: copies the broker sent again that needed no answer of their own.
        self.counters = {
            "requests": 0,
            "answered": 0,
            "busy": 0,
            "replayed": 0,
            "redelivered": 0,
            "rejected": 0,
        }
        self._slots = asyncio.Semaphore(config.max_concurrent)
        self.admitted = 0  # waiting or running
        self.tasks = TaskSet()  # one per admitted request
        # Tool calls by request id, while they may still be cancelled.
        self._cancellable: dict[str, list[Cancellable]] = {}
        self.closing = False

    # -- taking a command in ------------------------------------------------------
    def take(self, msg: Incoming, kind: CommandKind) -> None:
        """One command: exactly one answer, whatever goes wrong on the way (see the module doc)."""
        self.counters["requests"] += 1
        route_problem = self.reader.route_problem(msg)
        route = self.reader.route(msg, kind, route_problem)
        answered = self.counters["answered"]
        try:
            try:
                command = self.reader.read(msg, kind, route, route_problem)
            except WireError as e:
                self.counters["rejected"] += 1
                request_id = e.request_id or (peek_id(msg.payload) if e.code == "bad_signature" else None)
                if e.code == "bad_signature":
                    self.on_bad_signature(msg.topic)
                self.answer(route, refusal(kind, request_id)(e.code, e.message))
                return
            self.serve(command, redelivered=msg.redelivered)
        except Exception as e:
            # A fault of ours (the state database failing, a bug) must not leave the caller waiting
            # for an answer that never comes. Unless one already went out, this is it.
            log.exception("handling a request on %s failed", msg.topic)
            if self.counters["answered"] == answered:
                problem = f"internal error: {type(e).__name__}: {e}"
                self.answer(route, refusal(kind, peek_id(msg.payload))("internal", problem))

    def serve(self, command: Command, *, redelivered: bool = False) -> None:
        """Admit a request: recorded in the ledger (durably, before the broker gets our PUBACK for
        it) with where its answer goes and what it names, so that even a crash leaves it answered.
        `redelivered`: the broker's DUP flag (see `_answered_from_ledger`)."""
        asked, route = command.asked, command.route
        if isinstance(asked, CancelRequest):
            self._cancel(asked, route, command.caller)
            return
        cancel: tuple[str, Cancellable] | None = None
        observes = False
        if isinstance(asked, ToolCallRequest):
            cancel = (asked.id, Cancellable(command.caller))
        if isinstance(asked, ToolCallRequest | AdminCall):
            observes = self._only_observes(asked.tool, asked.args)
        key = command.ledger_key() if self.ledger.enabled else None
        error = command.error
        missing = self._missing_role(command, observes)
        if missing is not None:
            self.counters["rejected"] += 1
            role, what = missing
            self.answer(route, error("forbidden", forbidden(command.caller, role, what).message))
            return
        if self.closing:
            self.answer(route, error("stopping", "the daemon is shutting down; try again shortly"))
            return
        if self.admitted >= self.config.inbound_queue:
            # A repeat of a known request needs no slot: answer it from the ledger even when busy.
            if key is not None and self._answered_from_ledger(
                key, self.ledger.lookup(key), route, error, redelivered
            ):
                return
            self.counters["busy"] += 1
            self.answer(
                route,
                error("busy", f"busy: {self.admitted} requests are waiting or running; try again shortly"),
            )
            return
        request_id = asked.id
        recorded = Recorded(route.topic, route.correlation, request_id, command.label)
        # Below max_concurrent admitted, this one gets a slot at once: recorded as running right away.
        started = self.admitted < self.config.max_concurrent
        try:
            if key is None:
                # Nothing to recognise it by: recorded only so that a crash cannot leave it unanswered.
                key = journal_key(command.kind)
                self.ledger.begin(key, recorded, started=started)
            elif self._answered_from_ledger(
                key, self.ledger.begin(key, recorded, started=started), route, error, redelivered
            ):
                return
        except StorageFull as e:
            # A full disk: a call that only reads runs unrecorded (a repeat of it is harmless);
            # anything else is refused, since a repeat of an unrecorded call could run it twice.
            if not observes:
                self.counters["rejected"] += 1
                self.answer(route, error("no_space", f"{e}; the request was not run"))
                return
            log.warning("%s; request %s only reads, so it runs without a ledger entry", e, request_id)
            key = None
        self.admitted += 1
        if cancel is not None:
            self._cancellable.setdefault(cancel[0], []).append(cancel[1])
        self.tasks.spawn(self._serve(key, command, cancel))

    @staticmethod
    def _missing_role(command: Command, observes: bool) -> tuple[str, str] | None:
        """The role the caller lacks for a tool call, and what needs it; None when it has it: `operate`,
        or `observe` for a call that only observes (which only the registry can tell, so here). The
        other roles are checked where the request is read: chat and cancel by the reader, the admin
        and approver roles by Keys.prove."""
        roles, asked = command.roles, command.asked
        if not isinstance(asked, ToolCallRequest) or "operate" in roles or ("observe" in roles and observes):
            return None
        if "observe" in roles:
            return ("operate", f"tool {asked.tool!r} (it does not only observe)")
        return ("operate", "tool/call")

    def _answered_from_ledger(
        self, key: str, found: Lookup, route: Route, error: ErrorAnswer, redelivered: bool
    ) -> bool:
        """Handle a request the ledger already knows; False when it is new (and must run).

        A copy the broker `redelivered` (DUP) is the same PUBLISH the ledger recorded, not a
        retry: its request has its one answer already -- delivered, waiting in the outbox (sent
        after the reconnect or restart), or to come from the call still running -- so it gets
        none of its own. A caller's retry is a new PUBLISH (DUP clear): answered from the ledger.
        """
        if redelivered and found.seen in (Seen.DONE, Seen.RUNNING):
            self.counters["redelivered"] += 1
            log.debug("request %s delivered again by the broker: already answered once", key)
            return True
        if found.seen is Seen.DONE:
            assert found.answer is not None  # a finished request always has its answer stored
            self.counters["replayed"] += 1
            self.answer(route, replayed(found.answer))
            return True
        if found.seen is Seen.RUNNING:
            self.counters["replayed"] += 1
            if not self.ledger.wait(key, route):
                self.answer(route, error("busy", "this request is still running and many copies of it wait"))
            return True
        if found.seen is Seen.INTERRUPTED:
            # Left unfinished by an earlier process, and not answered at start-up (a row from before
            # routes were recorded): answered now, once, and recorded so.
            self.counters["answered"] += 1
            self.sender.launch(self._conclude(key, route, interrupted(error, found.may_have_run), ran=True))
            return True
        return False

    # -- running one ----------------------------------------------------------------
    async def _serve(self, key: str | None, command: Command, cancel: tuple[str, Cancellable] | None) -> None:
        route, error = command.route, command.error
        started = False
        ran = True
        entry = cancel[1] if cancel is not None else None
        try:
            if entry is not None:
                entry.task = asyncio.current_task()
                if entry.cancelled_by is not None:  # cancelled before this task first ran
                    raise asyncio.CancelledError
            async with self._slots:
                started = True
                if key is not None:
                    self.ledger.start(key)
                if entry is not None:
                    entry.started = True
                answer = await self._run(command)
            self._keep_answer(entry)
        except asyncio.CancelledError:
            if self._cancelled_by_caller(entry):
                assert entry is not None and entry.cancelled_by is not None
                # Like a stop, one that started may have had effects (recorded, not run again);
                # one still waiting never ran and may be sent again.
                ran = started
                answer = error(
                    "cancelled",
                    f"cancelled by request {entry.cancelled_by!r} "
                    + (
                        "while it ran: it may have had part of its effect"
                        if started
                        else "before it started: it did not run (send it again to run it)"
                    ),
                )
            else:
                # Stopping: still one answer. One that started may have had effects, so it is
                # recorded as done and not run again (a retry is told so, from the ledger); one
                # still waiting for a slot never ran, and may be sent again and run.
                if started:
                    answer = interrupted(error, True)
                else:
                    answer = error(
                        "stopping", "the daemon stopped before this request started; try again shortly"
                    )
                self.counters["answered"] += 1
                self.sender.launch(self._conclude(key, route, answer, ran=started))
                raise
        except Exception as e:
            log.exception("request failed")
            answer = error("internal", f"internal error: {type(e).__name__}: {e}")
        finally:
            self.admitted -= 1
            self._uncancellable(cancel)  # from here on nothing may interrupt the answer
        out = self._conclude(key, route, answer, ran=ran)
        self.counters["answered"] += 1
        self.after_answer()
        # Published from this task (no hop to another): the answer is what the caller waits for.
        if out is not None:
            await self.sender.publish(out)

    # -- cancel ---------------------------------------------------------------------
    def _cancel(self, cancel: CancelRequest, route: Route, caller: str) -> None:
        """Stop a call of the same caller: it is answered `cancelled` (by `_serve`), this request with
        what the call was doing. Not through the ledger or admission: a cancel must get through when
        the device is busy, and a repeated cancel is harmless."""
        entries = [
            e for e in self._cancellable.get(cancel.target, ()) if e.caller == caller and not e.cancelled_by
        ]
        if not entries:
            answer = cancel_error(
                cancel.id,
                cancel.target,
                "not_found",
                f"no call with id {cancel.target!r} from this caller is waiting or running "
                "(finished already, never sent, or sent by another caller)",
            )
            self.answer(route, encode(answer))
            return
        state = "running" if any(e.started for e in entries) else "waiting"
        for entry in entries:
            entry.cancelled_by = cancel.id
            if entry.task is not None:  # else `_serve` sees `cancelled_by` when it starts
                entry.task.cancel()
        log.info("call %s cancelled by request %s (%s)", cancel.target, cancel.id, caller)
        self.answer(route, encode(cancel_answer(cancel.id, cancel.target, state)))

    def _cancelled_by_caller(self, entry: Cancellable | None) -> bool:
        """Whether the CancelledError being handled came from a caller's `tool/cancel` (and not from
        a stop, which wins); if so the task's cancellation is taken back, so it can still answer."""
        if entry is None or entry.cancelled_by is None or self.closing:
            return False
        task = asyncio.current_task()
        if task is not None and task.cancelling():
            task.uncancel()
        return True

    def _keep_answer(self, entry: Cancellable | None) -> None:
        """A tool that swallowed the cancel and returned anyway: its answer stands, and the pending
        cancellation must not hit the delivery of it instead."""
        if entry is not None and entry.cancelled_by is not None and not self.closing:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                task.uncancel()

    def _uncancellable(self, cancel: tuple[str, Cancellable] | None) -> None:
        if cancel is None:
            return
        request_id, entry = cancel
        entries = self._cancellable.get(request_id)
        if entries is not None and entry in entries:
            entries.remove(entry)
            if not entries:
                del self._cancellable[request_id]

    # -- answers ----------------------------------------------------------------------
    def answer(self, route: Route, payload: bytes) -> None:
        """An answer that needs no ledger record (a refusal, a reply): stored, then published."""
        self.counters["answered"] += 1
        payload = naming_device(route, payload)
        self.sender.send(Kind.ANSWER, route.topic, payload, correlation=route.correlation)

    def _conclude(self, key: str | None, route: Route, answer: bytes, *, ran: bool) -> StoredPublish | None:
        """Store the answer in the outbox and conclude the request in the ledger, in one transaction
        (so a crash leaves the request either unfinished or with its answer on the way, never both),
        then answer the copies that waited on it. Returns what to publish now (see Sender.store)."""
        answer = naming_device(route, answer)
        if key is None:
            return self.sender.store(Kind.ANSWER, route.topic, answer, correlation=route.correlation)
        # One that never ran is forgotten: it may be sent again, and the copies get the same refusal.
        finished = self.ledger.finish(key, answer) if ran else self.ledger.abandon(key)
        out = self.sender.store(
            Kind.ANSWER, route.topic, answer, correlation=route.correlation, record=finished.record
        )
        for waiter in finished.waiters:
            self.answer(waiter, replayed(answer) if ran else answer)
        return out

    def answer_unfinished(self) -> None:
        """At start-up, before anything is taken in: answer `interrupted` every request the last
        process recorded and never answered (it was killed, or the machine lost power), to the
        Response Topic and Correlation Data it came with. Published once connected."""
        unfinished = self.ledger.unfinished()
        for row in unfinished:
            error = error_for(row.kind, row.recorded.request_id, row.recorded.label)
            answer = interrupted(error, row.may_have_run)
            finished = self.ledger.finish(row.key, answer)
            if not row.recorded.topic:
                self.ledger.write(finished)  # recorded before routes were: answered to repeats only
                continue
            self.sender.store(
                Kind.ANSWER,
                row.recorded.topic,
                answer,
                correlation=row.recorded.correlation,
                record=finished.record,
            )
        if unfinished:
            started = sum(row.may_have_run for row in unfinished)
            log.warning(
                "the daemon stopped last time with %d request(s) unanswered (%d had started): "
                "each is answered 'interrupted' and not run again",
                len(unfinished),
                started,
            )

    # -- lifecycle ----------------------------------------------------------------------
    async def housekeeping(self) -> None:
        """Purge the ledger of answers past their window, forever (a background task)."""
        period = max(1.0, min(HOUSEKEEPING_S, self.config.dedup_window_s / 2))
        while True:
            await asyncio.sleep(period)
            try:
                # In chunks, letting requests in between, so a big ledger never stalls the loop.
                for _ in range(MAX_PURGE_CHUNKS):
                    if self.ledger.purge() < PURGE_CHUNK:
                        break
                    await asyncio.sleep(0)
            except Exception:
                log.exception("purging the request ledger failed")

    async def stop(self, grace_s: float) -> None:
        """Take nothing more in; give the requests running `grace_s`, then cancel them (each is
        still answered: `interrupted` or `stopping`)."""
        self.closing = True
        running = await self.tasks.wait(grace_s)
        for task in running:
            task.cancel()
        await self.tasks.wait()
