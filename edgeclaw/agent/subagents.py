"""The subagent manager: spawns children on the agent loop, keeps their limits, states and results.

A child is a model run of its own (`AgentLoop.run_child`) in the session
`subagent:ID`, on behalf of the session that spawned it:

- **Context.** Its tool calls carry the parent's channel, chat id and caller
  (so an approval is asked where the parent's person is, and rate limits and
  process ownership stay the parent's), its own depth, the parent's session,
  and a ceiling: the tools the parent could use at the spawn (narrowed by the
  spawn's own list). The policy's subagent steps take more away on top.
- **Limits** (`[tools.subagents]`): running children in all, children per
  parent, spawn depth, iterations, run time. A spawn past one is refused with
  the limit's name; nothing is started.
- **States**, kept in the state database (`store.subagents`): spawning →
  running → completed / failed / cancelled / interrupted → archived.
- **Results** go to the parent's session through the announce queue, batched
  when several end close together: a notice in the parent's conversation and a
  turn of the parent's agent, whose reply is delivered on the parent's channel.
  A child whose parent took the result itself (`run`, `wait`, `delegate`) or
  cancelled it is not announced.
- **Stopping.** `/stop` of the turn that spawned a child, and `/new` of its
  parent's conversation, cancel it unless it was spawned detached; a child's
  end cancels its own non-detached children. At shutdown children get the
  tool calls' grace, then are cancelled as `interrupted`; so is every child a
  killed daemon left running. Interrupted children are announced at the next
  start: never silently lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Iterable

from edgeclaw.agent.announce import AnnounceQueue
from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.loop import AgentLoop, ChildTurn, UnknownAgent
from edgeclaw.agent.providers.base import ProviderError
from edgeclaw.errors import ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.store.subagents import SubagentRow, SubagentStore
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.sessions.subagents import SpawnRequest, describe

log = logging.getLogger("edgeclaw.subagents")

SESSION_PREFIX = "subagent:"
STEER_SETTLE_S = 0.5  # between cancelling a child and starting its replacement
ANNOUNCE_RESULT_CHARS = 1500  # of each result in a notice; the whole one is in the child's session
RESULT_MAX_CHARS = 32 * 1024  # stored per child
ARCHIVE_SWEEP_S = 60.0


@dataclass(frozen=True)
class SubagentLimits:
    max_concurrent: int = 8
    max_children: int = 5
    max_depth: int = 1
    max_iterations: int = 20
    timeout_s: float = 900.0
    archive_after_s: float = 3600.0
    announce_debounce_s: float = 0.5


class SubagentManager:
    def __init__(self, loop: AgentLoop, store: SubagentStore, limits: SubagentLimits | None = None) -> None:
        self.loop = loop
        self.store = store
        self.limits = limits or SubagentLimits()
        self.timeout_s = self.limits.timeout_s
        self.announcer: AnnounceQueue[str, SubagentRow] = AnnounceQueue(
            self._announce, debounce_s=self.limits.announce_debounce_s
        )
        self._tasks: dict[int, asyncio.Task[None]] = {}
        self._spawned_in: dict[int, object] = {}  # child id -> the parent's turn that spawned it
        self._stopping = False
        self._last_sweep = 0.0
        loop.turn_stop_hooks.append(self._turn_stopped)
        loop.session_end_hooks.append(self._session_ended)

    # -- spawning ------------------------------------------------------------
    def spawn(self, request: SpawnRequest, ctx: ToolContext) -> SubagentRow:
        """Start a child now; ToolRefused, naming the limit or the problem, when it may not start."""
        limits = self.limits
        if self._stopping:
            raise ToolRefused("the daemon is shutting down: no new subagents")
        depth = ctx.subagent_depth + 1
        if depth > limits.max_depth:
            raise ToolRefused(
                f"spawn depth limit: a subagent at depth {depth} is past tools.subagents.max_depth "
                f"({limits.max_depth})"
            )
        self._sweep()
        running = self.store.count_active()
        if running >= limits.max_concurrent:
            raise ToolRefused(
                f"{running} subagents are running, the most tools.subagents.max_concurrent allows; "
                "wait for one to end or cancel one"
            )
        mine = self.store.count_active(ctx.session_key)
        if mine >= limits.max_children:
            raise ToolRefused(
                f"this session has {mine} subagents running, the most tools.subagents.max_children "
                "allows; wait for one to end or cancel one"
            )
        agent_id = request.agent or ctx.agent_id
        if agent_id not in self.loop.agents:
            known = ", ".join(sorted(self.loop.agents))
            raise ToolRefused(f"no agent named {agent_id!r} (configured: {known})")
        if not self.loop.agents[agent_id].chain:
            raise ToolRefused(f"agent {agent_id!r} has no language model configured")
        # The child may never use more than its parent may use now, through any provider.
        ceiling = set(self.loop.registry.policy.allowed(ctx))
        if request.tools is not None:
            beyond = sorted(set(request.tools) - ceiling)
            if beyond:
                raise ToolRefused(
                    f"a subagent can only have tools this session may use; not: {', '.join(beyond)}"
                )
            ceiling &= set(request.tools)
        timeout = min(request.timeout_s or limits.timeout_s, limits.timeout_s)
        row = self.store.create(
            parent_session=ctx.session_key,
            task=request.task,
            label=request.label,
            agent_id=agent_id,
            depth=depth,
            detached=request.detached,
            announce=request.announce,
            channel=ctx.channel,
            chat_id=ctx.chat_id,
            peer_kind=ctx.peer_kind,
            caller=ctx.caller,
            sender=ctx.sender,
            parent_agent=ctx.agent_id,
            session_prefix=SESSION_PREFIX,
        )
        child_ctx = ctx.for_subagent(row.session_key, agent_id, depth, frozenset(ceiling))
        token = self.loop.turn_token(ctx.session_key)
        if token is not None:
            self._spawned_in[row.id] = token
        task = asyncio.get_running_loop().create_task(
            self._run(row, child_ctx, timeout), name=f"subagent {row.id}"
        )
        self._tasks[row.id] = task
        log.info(
            "subagent %d spawned by %s (agent %s, depth %d%s)",
            row.id,
            ctx.session_key,
            agent_id,
            depth,
            ", detached" if request.detached else "",
        )
        return row

    def _brief(self, row: SubagentRow) -> str:
        label = f" ({row.label})" if row.label else ""
        return (
            f"## Subagent\nYou are subagent {row.id}{label}, started by the session {row.parent_session} "
            "to do the task in the first message. Work with your tools, then end with your answer: "
            "it is handed to the agent that started you, not shown to a person, and nobody will "
            "answer questions. Keep the answer short and factual."
        )

    async def _run(self, row: SubagentRow, ctx: ToolContext, timeout_s: float) -> None:
        state, result = "failed", ""
        try:
            self.store.set_state(row.id, "running")
            async with asyncio.timeout(timeout_s):
                text, finished = await self.loop.run_child(
                    ChildTurn(
                        row.session_key,
                        row.task,
                        row.agent_id,
                        ctx,
                        self.limits.max_iterations,
                        self._brief(row),
                    )
                )
            state, result = ("completed" if finished else "failed"), text
        except TimeoutError:
            result = f"stopped: still running after {timeout_s:g} s (the subagent time limit)"
        except asyncio.CancelledError:
            state = "interrupted" if self._stopping else "cancelled"
            result = (
                "the daemon stopped while this subagent ran; its work may be half done"
                if self._stopping
                else "cancelled"
            )
            raise
        except (ProviderError, UnknownAgent) as e:
            result = str(e)
        except Exception as e:
            log.exception("subagent %d failed", row.id)
            result = f"{type(e).__name__}: {e}"
        finally:
            self._ended(row, state, result)

    def _ended(self, row: SubagentRow, state: str, result: str) -> None:
        self._tasks.pop(row.id, None)
        self._spawned_in.pop(row.id, None)
        current = self.store.get(row.id)
        if current is None or not current.active:  # ended already (its cancel recorded it first)
            return
        result = self.loop.registry.scrubber.scrub(result)[:RESULT_MAX_CHARS]
        self.store.end(row.id, state, result)
        log.info("subagent %d %s", row.id, state)
        ended = self.store.get(row.id)
        if ended is not None and ended.announce and not self._stopping:
            self.announcer.add(ended.parent_session, ended)
        # Its own children go with it, unless they were spawned detached.
        self._cancel_rows(
            [c for c in self.store.children(row.session_key) if c.active and not c.detached],
            state="cancelled",
            why=f"its parent, subagent {row.id}, ended",
        )

    # -- the parent's view -----------------------------------------------------
    def children(self, ctx: ToolContext, *, archived: bool = False) -> list[SubagentRow]:
        self._sweep()
        return self.store.children(ctx.session_key, archived=archived)

    def _own(self, ctx: ToolContext, which: str, *, allow_all: bool) -> list[SubagentRow]:
        """The caller's children `which` names: an id, 'last' (the newest still running) or 'all'."""
        mine = self.store.children(ctx.session_key)
        if which == "all" and allow_all:
            return [c for c in mine if c.active]
        if which == "last":
            running = [c for c in mine if c.active]
            if not running:
                raise ToolRefused("no subagent of this session is running")
            return [running[-1]]
        if not which.isdigit():
            raise ToolRefused(f"expected a subagent id{', all' if allow_all else ''} or last, got {which!r}")
        found = next(
            (c for c in self.store.children(ctx.session_key, archived=True) if c.id == int(which)), None
        )
        if found is None:
            raise ToolRefused(f"this session has no subagent {which}")
        return [found]

    async def wait(self, child_id: int, ctx: ToolContext) -> SubagentRow:
        """Until the caller's child ends; its row, result included. The parent now has the result,
        so it is not announced as well."""
        (row,) = self._own(ctx, str(child_id), allow_all=False)
        task = self._tasks.get(row.id)
        if task is not None:
            try:
                await asyncio.shield(task)
            except asyncio.CancelledError:
                if not task.done():  # we were cancelled (the parent's turn stopped), not the child
                    raise
        self._taken(row.parent_session, [row.id])
        ended = self.store.get(row.id)
        assert ended is not None
        return ended

    async def cancel(self, ctx: ToolContext, which: str) -> list[SubagentRow]:
        rows = self._own(ctx, which, allow_all=True)
        done = [r for r in rows if not r.active]
        if which.isdigit() and done:
            raise ToolRefused(f"subagent {which} is not running (it {done[0].state})")
        await self._cancel_and_wait(
            [r for r in rows if r.active], why="cancelled by the session that started it"
        )
        return [self.store.get(r.id) or r for r in rows]

    async def steer(self, ctx: ToolContext, which: str, message: str) -> SubagentRow:
        """Cancel a running child, let it settle, and start it again with the new instructions."""
        (row,) = self._own(ctx, which, allow_all=False)
        if not row.active:
            raise ToolRefused(f"subagent {row.id} is not running (it {row.state}); spawn a new one")
        await self._cancel_and_wait([row], why="steered")
        await asyncio.sleep(STEER_SETTLE_S)
        task = f"{message}\n\n(You replace subagent {row.id}, stopped mid-way; its task was: {row.task})"
        return self.spawn(
            SpawnRequest(task=task, label=row.label, agent=row.agent_id, detached=row.detached), ctx
        )

    async def _cancel_and_wait(self, rows: Iterable[SubagentRow], *, why: str) -> None:
        tasks = self._cancel_rows(rows, state="cancelled", why=why)
        if tasks:
            await asyncio.wait(tasks)

    def _cancel_rows(self, rows: Iterable[SubagentRow], *, state: str, why: str) -> list[asyncio.Task[None]]:
        """Record the rows' ending (not announced: whoever cancelled knows) and cancel their tasks."""
        tasks = []
        for row in rows:
            self.store.end(row.id, state, why, announce=False)
            self._taken(row.parent_session, [row.id])
            task = self._tasks.get(row.id)
            if task is not None and not task.done():
                task.cancel()
                tasks.append(task)
        return tasks

    def _taken(self, parent: str, ids: list[int]) -> None:
        """The parent learned of these children another way: not announced."""
        wanted = set(ids)
        self.announcer.remove(parent, lambda r: r.id in wanted)
        self.store.mark_announced(ids)

    # -- the parent's turn and conversation ----------------------------------------
    def _turn_stopped(self, session_key: str, turn: object) -> None:
        rows = [
            c
            for c in self.store.children(session_key)
            if c.active and not c.detached and self._spawned_in.get(c.id) is turn
        ]
        self._cancel_rows(rows, state="cancelled", why="the turn that started it was stopped")

    async def _session_ended(self, session_key: str, _identity: str) -> None:
        rows = [c for c in self.store.children(session_key) if c.active and not c.detached]
        await self._cancel_and_wait(rows, why="the conversation that started it was restarted (/new)")

    # -- announcing ------------------------------------------------------------------
    async def _announce(self, parent: str, rows: list[SubagentRow]) -> None:
        rows = [r for r in rows if r.announce]
        if not rows:
            return
        first = rows[0]
        lines = [
            f"[Subagent results, {len(rows)} of them: not typed by anyone. Tell the person what they "
            "need from these, briefly.]"
            if len(rows) > 1
            else "[A subagent's result: not typed by anyone. Tell the person what they need from it.]"
        ]
        lines += [describe(r, cut=ANNOUNCE_RESULT_CHARS) for r in rows]
        text = "\n".join(lines)
        if parent.startswith(SESSION_PREFIX):
            # The parent is itself a child: its run reads its children with `subagents wait`;
            # no turn is started in its session (it would run without a subagent's limits).
            self.loop.notice(parent, "subagent", text)
        else:
            msg = InboundMessage(
                channel=first.channel,
                text=text,
                chat_id=first.chat_id,
                sender="subagents",
                session=parent,
                peer_kind=first.peer_kind or "direct",
                caller=first.caller,
                agent=first.parent_agent,
                origin="subagents",
            )
            await self.loop.deliver_turn(msg)
        # Told once the notice is in the parent's conversation: a crash before this tells it again.
        self.store.mark_announced(r.id for r in rows)

    async def settled(self, session_key: str) -> None:
        """Until this session's children have ended and their results have been announced (what
        `edgeclaw chat --message` waits for before it exits)."""
        while True:
            tasks = [
                t
                for cid, t in list(self._tasks.items())
                if (row := self.store.get(cid)) is not None and row.parent_session == session_key
            ]
            if tasks:
                await asyncio.wait(tasks)
                continue
            if self.announcer.pending(session_key):
                self.announcer.flush_now(session_key)
            await self.announcer.idle(session_key)
            if not self.announcer.pending(session_key) and not any(
                (row := self.store.get(cid)) is not None and row.parent_session == session_key
                for cid in self._tasks
            ):
                return

    # -- start and stop ---------------------------------------------------------------
    def recover(self) -> list[SubagentRow]:
        """At start: children a stopped daemon left running become `interrupted`; every ended child
        whose parent was not told yet is announced now. Returns the interrupted ones."""
        interrupted = self.store.interrupt_leftovers()
        for row in interrupted:
            log.warning("subagent %d of %s was interrupted by a restart", row.id, row.parent_session)
        for row in self.store.unannounced():
            self.announcer.add(row.parent_session, row)
        self._sweep(force=True)
        return interrupted

    def _sweep(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if force or now - self._last_sweep >= ARCHIVE_SWEEP_S:
            self._last_sweep = now
            self.store.archive(self.limits.archive_after_s)

    @property
    def running(self) -> int:
        return len(self._tasks)

    async def drain(self, grace_s: float) -> None:
        """Shutdown: no new children; the running ones get `grace_s`, then are cancelled and recorded
        `interrupted`. Results not yet announced stay in the database for the next start."""
        self._stopping = True
        await self.announcer.close()
        tasks = list(self._tasks.values())
        if tasks:
            log.info("stopping: %d subagent(s) running, %.1f s grace", len(tasks), grace_s)
            _, left = await asyncio.wait(tasks, timeout=grace_s)
            for task in left:
                task.cancel()
            if left:
                await asyncio.wait(left)

    async def aclose(self) -> None:
        await self.drain(0)
        with contextlib.suppress(Exception):
            await self.announcer.close()
