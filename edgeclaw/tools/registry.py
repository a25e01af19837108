"""The registry: the one path every tool call takes, from any channel or the model.

execute(name, args, ctx):
  find the tool → validate arguments against its schema → policy → per-caller
  rate limit → the tool's own bounds check (a dry run stops here) → run under
  a timeout, capturing exceptions → scrub credentials from both outputs, then
  cap their size (so a cut never leaves half a secret showing) → audit record
  and statistics.

A refusal anywhere before the body runs is marked `refused`, which callers
map to "refused before running" (exit status 2 for `edgeclaw tool call`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from contextlib import AbstractContextManager
from typing import Any

from edgeclaw.errors import BackendError, ToolError, ToolRefused
from edgeclaw.tool_groups import declared_group_problem
from edgeclaw.tools.audit import AuditRecord, AuditSink, AuditSinks, ToolStats, args_digest
from edgeclaw.tools.base import PendingApproval, Tool, ToolContext, ToolInfo, ToolResult
from edgeclaw.tools.model_schema import model_definition
from edgeclaw.tools.outcome import CallOutcome, clean_data, clean_text, json_copy, scrubbed_progress
from edgeclaw.tools.policy import PolicyEngine
from edgeclaw.tools.ratelimit import RateLimiter
from edgeclaw.tools.schema import ArgumentError, compile_schema
from edgeclaw.tools.scrub import Scrubber

log = logging.getLogger("edgeclaw.tools")

# An unknown tool name is shown this long at most in audit records.
MAX_UNKNOWN_NAME_CHARS = 64


class _Registered:
    __slots__ = ("info", "timeout_s", "tool", "validate")

    def __init__(self, tool: Tool, validate: Callable[[Any], None], timeout_s: float) -> None:
        self.tool = tool
        self.validate = validate
        self.timeout_s = timeout_s
        self.info = tool.info()


class _Deferred:
    """Tools known by name and group from the start, built by `load` when one of them is first needed:
    a family whose modules are not imported until it is used (start-up time and memory)."""

    __slots__ = ("groups", "load")

    def __init__(self, groups: Mapping[str, str], load: Callable[[], Iterable[Tool]]) -> None:
        self.groups = dict(groups)
        self.load = load


class Registry:
    def __init__(
        self,
        policy: PolicyEngine,
        scrubber: Scrubber | None = None,
        limiter: RateLimiter | None = None,
        *,
        default_timeout_s: float = 60.0,
        max_output_bytes: int = 32 * 1024,
    ) -> None:
        self.policy = policy
        self.scrubber = scrubber or Scrubber()
        self.limiter = limiter or RateLimiter()
        self.default_timeout_s = default_timeout_s
        self.max_output_bytes = max_output_bytes
        self.stats = ToolStats()
        self._tools: dict[str, _Registered] = {}
        self._deferred: dict[str, _Deferred] = {}  # name -> its family, until the family is loaded
        self._audit = AuditSinks()
        # Told after every change of the tool table (MCP clients are sent list_changed from it).
        self._change_listeners: list[Callable[[], None]] = []
        self._in_flight: set[asyncio.Timeout] = set()
        self._idle: asyncio.Event | None = None
        self._stopping = False
        self._definitions: dict[tuple[frozenset[str], str], list[dict[str, Any]]] = {}
        # Held around a tool's body: the update lock, for tools in gateway.defer_updates_during.
        self.call_guard: Callable[[str, str], AbstractContextManager[None]] | None = None

    # -- the tool table ----------------------------------------------------
    def register(self, tool: Tool, *, replace: bool = False) -> None:
        """Add a tool. Its schema is compiled now, so a bad schema fails at start-up, not mid-call."""
        if tool.name in self._deferred:
            self._load(tool.name)
        if tool.name in self._tools and not replace:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._add(tool)
        self._changed()

    def _add(self, tool: Tool) -> None:
        validate = compile_schema(tool.parameters)
        timeout = tool.timeout_s if tool.timeout_s is not None else self.default_timeout_s
        registered = _Registered(tool, validate, timeout)
        if problem := declared_group_problem(tool.name, registered.info.group):
            raise ValueError(problem)
        self._tools[tool.name] = registered

    def register_all(self, tools: Iterable[Tool]) -> None:
        for tool in tools:
            self.register(tool)

    def register_deferred(self, groups: Mapping[str, str], load: Callable[[], Iterable[Tool]]) -> None:
        """Tools named now (name -> group: enough for policies, `names()` and status) and built by
        `load` when one of them is first looked up, listed or called.

        `load` must build exactly the tools named; it runs once, and a difference is an error then
        (RuntimeError), as a bad schema is: the family's own tests load it."""
        for name in groups:
            if name in self._tools or name in self._deferred:
                raise ValueError(f"a tool named {name!r} is already registered")
            if problem := declared_group_problem(name, groups[name]):
                raise ValueError(problem)
        family = _Deferred(groups, load)
        for name in groups:
            self._deferred[name] = family
        self._changed()

    def _load(self, name: str) -> None:
        """Build the deferred family `name` belongs to and put its tools in the table."""
        family = self._deferred[name]
        tools = list(family.load())  # a failure leaves the family deferred: each use says why again
        built = {tool.name: tool.info().group for tool in tools}
        if built != family.groups:
            raise RuntimeError(f"deferred tools built as {built}, but were registered as {family.groups}")
        for member in family.groups:
            del self._deferred[member]
        for tool in tools:
            self._add(tool)
        # The table looks the same from outside (names and groups were known): no listeners told.
        self._definitions.clear()

    def _load_all(self) -> None:
        while self._deferred:
            self._load(next(iter(self._deferred)))

    def _entry(self, name: str) -> _Registered | None:
        if name in self._deferred:
            self._load(name)
        return self._tools.get(name)

    def unregister(self, name: str) -> None:
        if name in self._deferred:
            self._load(name)
        if self._tools.pop(name, None) is not None:
            self._changed()

    def _groups(self) -> dict[str, str]:
        groups = {name: r.info.group for name, r in self._tools.items()}
        groups.update((name, family.groups[name]) for name, family in self._deferred.items())
        return groups

    def _changed(self) -> None:
        self.policy.set_tools(self._groups())
        self._definitions.clear()
        for listener in list(self._change_listeners):
            try:
                listener()
            except Exception:
                log.exception("tool table listener failed")

    def add_change_listener(self, listener: Callable[[], None]) -> None:
        """Call `listener` after each tool registered, replaced or removed."""
        self._change_listeners.append(listener)

    def remove_change_listener(self, listener: Callable[[], None]) -> None:
        if listener in self._change_listeners:
            self._change_listeners.remove(listener)

    def get(self, name: str) -> Tool | None:
        entry = self._entry(name)
        return entry.tool if entry else None

    def only_observes(self, name: str, args: object) -> bool:
        """Would this call only read (see `Tool.only_observes`)? False for anything unknown."""
        tool = self.get(name)
        return tool is not None and isinstance(args, dict) and tool.only_observes(args)

    def names(self) -> list[str]:
        return sorted([*self._tools, *self._deferred])

    def infos(self, ctx: ToolContext | None = None) -> list[ToolInfo]:
        """Every registered tool, or only those the policy lets through for `ctx`."""
        self._load_all()
        allowed = None if ctx is None else self.policy.allowed(ctx)
        return [r.info for n, r in sorted(self._tools.items()) if allowed is None or n in allowed]

    def definitions(self, ctx: ToolContext, fmt: str = "openai") -> list[dict[str, Any]]:
        """Tool definitions for a provider request: OpenAI function format or Anthropic tool format."""
        allowed = self.policy.allowed(ctx)
        key = (allowed, fmt)
        cached = self._definitions.get(key)
        if cached is not None:
            return cached
        out = [model_definition(info, fmt) for info in self.infos(ctx)]
        self._definitions[key] = out
        return out

    def add_audit_sink(self, sink: AuditSink) -> None:
        self._audit.add(sink)

    def remove_audit_sink(self, sink: AuditSink) -> None:
        self._audit.remove(sink)

    # -- the call path -----------------------------------------------------
    async def execute(
        self,
        name: str,
        args: Mapping[str, Any] | str | None,
        ctx: ToolContext,
        *,
        dry_run: bool = False,
    ) -> CallOutcome:
        started = time.perf_counter()
        parsed: dict[str, Any] = {}
        try:  # the checks: no awaits, so nothing to cancel before _run
            entry = self._entry(name)
            if entry is None:
                why = f"unknown tool {name!r}"
                return self._refuse(name, parsed, ctx, started, "unknown_tool", why, reason="unknown tool")
            if self._stopping:
                return self._refuse(name, parsed, ctx, started, "stopping", "the daemon is shutting down")
            try:
                parsed = _parse_args(args)
                entry.validate(parsed)
            except ArgumentError as e:
                return self._refuse(
                    name, parsed, ctx, started, "arguments", f"{name}: {e}", reason=f"arguments: {e.kind}"
                )
            if name not in self.policy.allowed(ctx):
                why = self.policy.explain(name, ctx)
                return self._refuse(
                    name, parsed, ctx, started, "policy", f"tool {name!r} is not allowed here ({why})"
                )
            # Keyed on who calls (never the session name, which callers choose), under the channel's ceiling.
            limiter = self.limiter
            throttled = (
                limiter.check(ctx.identity, ctx.channel)
                if dry_run
                else limiter.acquire(ctx.identity, ctx.channel)
            )
            if throttled is not None:
                return self._refuse(name, parsed, ctx, started, "rate_limit", throttled.message)
        except Exception as e:
            # A fault in the checks themselves (a policy that cannot be evaluated, say) must
            # refuse the call, not escape to the channel: fail closed. Stage "internal": nothing
            # ran, unlike "exception", which is a tool body that raised (and may have had effects).
            log.exception("checking a call to %s failed", name)
            return self._refuse(
                name,
                parsed,
                ctx,
                started,
                "internal",
                f"{name}: internal error: {type(e).__name__}: {e}",
                reason=f"internal error ({type(e).__name__})",
            )
        if ctx.progress is not None:
            # What a tool says of its progress reaches the caller as its answer does: scrubbed.
            ctx = ctx.derive(progress=scrubbed_progress(ctx.progress, self.scrubber.scrub))
        try:
            return await self._run(entry, parsed, ctx, started, dry_run)
        except asyncio.CancelledError:
            self._finish(name, parsed, ctx, started, False, "cancelled", "cancelled", refused=False)
            raise

    async def _run(
        self, entry: _Registered, args: dict[str, Any], ctx: ToolContext, started: float, dry_run: bool
    ) -> CallOutcome:
        name = entry.info.name
        stage = "ok"
        refused = False
        result: ToolResult
        reason: str | None = None  # for the audit record: what went wrong, never the caller's values
        timeout = asyncio.timeout(entry.timeout_s)
        self._in_flight.add(timeout)
        try:
            async with timeout:
                pending = await entry.tool.check(args, ctx)
                if dry_run:
                    if isinstance(pending, PendingApproval):
                        # Not "would run": a person would be asked first (`tool call` exits 3).
                        note = f"dry run: {name} would ask for approval: {pending.reason}"
                        stage = "dry_run_approval"
                        return self._finish(name, args, ctx, started, True, stage, None, for_llm=note)
                    return self._finish(
                        name, args, ctx, started, True, "dry_run", None, for_llm=f"dry run: {name} would run"
                    )
                with (self.call_guard or _no_guard)(name, entry.info.group):
                    raw = await entry.tool.execute(args, ctx)
            result = raw if isinstance(raw, ToolResult) else ToolResult(for_llm=str(raw))
            if not isinstance(result.for_llm, str) or not isinstance(result.for_user, str | None):
                # Caught here, in the tool's own stage, rather than as a TypeError in the scrubber.
                raise TypeError("the tool's result text is not a str")
            if result.data is not None:
                result.data = json_copy(result.data)  # a TypeError here is the tool's bug
            if result.is_error:
                stage, reason = "tool_error", "the tool reported an error"
        except ToolRefused as e:
            result, stage, refused = ToolResult.error(f"{name}: {e}"), "bounds", True
            reason = f"refused by the tool's bounds check ({type(e).__name__})"
        except (ToolError, BackendError) as e:
            result, stage = ToolResult.error(f"{name}: {e}"), "tool_error"
            reason = f"the tool failed ({type(e).__name__})"
        except TimeoutError:
            if not timeout.expired():
                # A TimeoutError of the tool's own (a socket, a bus), not our deadline.
                result, stage = ToolResult.error(f"{name}: operation timed out"), "tool_error"
            elif self._stopping:
                result, stage = (
                    ToolResult.error(f"{name}: cancelled, the daemon is shutting down"),
                    "cancelled",
                )
            else:
                result, stage = ToolResult.error(f"{name}: timed out after {entry.timeout_s:g} s"), "timeout"
            reason = result.for_llm.removeprefix(f"{name}: ")  # our own words, no values in them
        except Exception as e:
            log.exception("tool %s raised", name)
            result, stage = ToolResult.error(f"{name}: internal error: {type(e).__name__}: {e}"), "exception"
            reason = f"internal error ({type(e).__name__})"
        finally:
            self._in_flight.discard(timeout)
            if not self._in_flight and self._idle is not None:
                self._idle.set()
        ok = not result.is_error
        return self._finish(
            name,
            args,
            ctx,
            started,
            ok,
            stage,
            None if ok else result.for_llm,
            for_llm=result.for_llm,
            for_user=result.for_user,
            refused=refused,
            data=result.data,
            binary=result.binary,
            reason=reason,
        )

    def _clean(self, text: str) -> str:
        return clean_text(text, self.scrubber.scrub, self.max_output_bytes)

    def _refuse(
        self,
        name: str,
        args: dict[str, Any],
        ctx: ToolContext,
        started: float,
        stage: str,
        message: str,
        *,
        reason: str | None = None,
    ) -> CallOutcome:
        """A call stopped before its body ran. `reason` is the message as the audit trail may carry it;
        None when `message` is our own words throughout (policy, rate limit, shutting down)."""
        return self._finish(
            name,
            args,
            ctx,
            started,
            False,
            stage,
            message,
            for_llm=message,
            refused=True,
            reason=message if reason is None else reason,
        )

    def _finish(
        self,
        name: str,
        args: dict[str, Any],
        ctx: ToolContext,
        started: float,
        ok: bool,
        stage: str,
        error: str | None,
        *,
        for_llm: str = "",
        for_user: str | None = None,
        refused: bool = False,
        data: dict[str, Any] | None = None,
        binary: bytes | None = None,
        reason: str | None = None,
    ) -> CallOutcome:
        """Scrub and cap the outputs, count and audit the call. `error` is the caller's own answer;
        `reason` what the audit record says instead: the stage's cause without the caller's values
        (paths, commands, output), which events and logs must never quote."""
        data, dropped = clean_data(data, binary, self.scrubber.scrub, self.max_output_bytes)
        if dropped:  # said where people and the model look, not only in the missing field
            for_llm += dropped
            if for_user is not None:
                for_user += dropped
        for_llm = self._clean(for_llm)
        if for_user is not None:
            for_user = self._clean(for_user)
        if error is not None:
            error = self._clean(error)
        duration_ms = (time.perf_counter() - started) * 1000.0
        now = time.time()
        known = name in self._tools or name in self._deferred
        # Unknown names come from the outside world: count them under one key so the table stays
        # bounded, and record them cut short and scrubbed like any other text from outside.
        self.stats.record(name if known else "(unknown)", ctx.session_key, ok, refused, duration_ms, now)
        if self._audit.wanted:
            if not ok and reason is None:
                reason = stage  # fail closed: a path that gave no reason records only where it stopped
            scrub = self.scrubber.scrub
            self._audit.emit(
                AuditRecord(
                    ts=now,
                    tool=name if known else scrub(name[:MAX_UNKNOWN_NAME_CHARS]),
                    session=scrub(ctx.session_key),
                    channel=ctx.channel,
                    agent_id=ctx.agent_id,
                    ok=ok,
                    stage=stage,
                    duration_ms=duration_ms,
                    args_digest=args_digest(args),
                    error=scrub(reason) if reason is not None and not ok else None,
                    caller=scrub(ctx.identity),
                    request_id=scrub(ctx.request_id),
                    refused=refused,
                )
            )
        return CallOutcome(name, ok, for_llm, for_user, error, duration_ms, refused, stage, data)

    # -- shutdown ----------------------------------------------------------
    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    async def drain(self, grace_s: float) -> None:
        """Refuse new calls; give in-flight calls `grace_s` seconds, then cancel them.

        Cancelling works by pulling each call's own deadline in, so the call
        ends through the normal path with a "shutting down" error result.
        """
        self._stopping = True
        if not self._in_flight:
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace_s
        for timeout in list(self._in_flight):
            when = timeout.when()
            if when is None or when > deadline:
                timeout.reschedule(deadline)
        self._idle = asyncio.Event()
        if self._in_flight:
            await self._idle.wait()


def _parse_args(args: Mapping[str, Any] | str | None) -> dict[str, Any]:
    """Arguments arrive as a mapping, or as JSON text straight from a model or a wire."""
    if args is None:
        return {}
    if isinstance(args, str):
        text = args.strip()
        if not text:
            return {}
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise ArgumentError("", f"arguments are not valid JSON: {e.msg} at position {e.pos}") from None
        except ValueError:  # the only other one: an integer past sys.int_max_str_digits
            raise ArgumentError(
                "", "arguments are not acceptable JSON: a number has too many digits"
            ) from None
        except RecursionError:
            raise ArgumentError("", "arguments are not acceptable JSON: nested too deeply") from None
        args = value
    if not isinstance(args, Mapping):
        raise ArgumentError("", f"arguments must be a JSON object, got {type(args).__name__}")
    return dict(args)


def _no_guard(name: str, group: str) -> AbstractContextManager[None]:
    return contextlib.nullcontext()
