"""`sessions_spawn` and `spawn` (one capability under both names), and `subagents`.

A subagent is a child agent run in the background, in a session of its own,
on the parent's behalf: `spawn` returns at once with its id (mode "run" waits
for its answer instead); its result is announced to the parent's session when
it ends, batched with others ending close together. `subagents` lists the
caller's children, waits for them, cancels them (an id, `all`, `last`) and
steers one (cancel, settle, respawn with new instructions).

The tools only describe and check the request; the manager (the agent layer's
`SubagentManager`, reached through `SubagentControl`) runs the children, keeps
their limits and their state in the database. Without an agent loop (`edgeclaw
tool call`) there is no manager, and the tools say so.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from edgeclaw.errors import ToolError
from edgeclaw.records import dataclass
from edgeclaw.store.subagents import SubagentRow
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

NO_MANAGER = (
    "subagents run inside the agent loop (edgeclaw run, edgeclaw chat); there is none here "
    "(edgeclaw tool call)"
)
RESULT_CHARS_IN_LISTS = 400  # a result is cut to this in lists; `wait` gives it whole


@dataclass(frozen=True)
class SpawnRequest:
    task: str
    label: str = ""
    agent: str = ""  # empty = the caller's own agent
    tools: tuple[str, ...] | None = None  # narrows the child's tools further; None = the caller's
    detached: bool = False  # survives /stop and /new of the parent (not a shutdown)
    timeout_s: float | None = None  # None = tools.subagents.timeout_s (and never more)
    announce: bool = True  # False: the caller takes the result itself (run, delegate)


class SubagentControl(Protocol):
    """What the tools need of the manager. Refusals (limits, unknown ids) are ToolRefused."""

    timeout_s: float  # the longest a child may run

    def spawn(self, request: SpawnRequest, ctx: ToolContext) -> SubagentRow: ...

    async def wait(self, child_id: int, ctx: ToolContext) -> SubagentRow: ...

    def children(self, ctx: ToolContext, *, archived: bool = False) -> list[SubagentRow]: ...

    async def cancel(self, ctx: ToolContext, which: str) -> list[SubagentRow]: ...

    async def steer(self, ctx: ToolContext, which: str, message: str) -> SubagentRow: ...


ControlSource = Callable[[], "SubagentControl | None"]


def _control(source: ControlSource) -> SubagentControl:
    control = source()
    if control is None:
        raise ToolError(NO_MANAGER)
    return control


def describe(row: SubagentRow, *, cut: int | None = RESULT_CHARS_IN_LISTS) -> str:
    """One child in a line or two: id, label, state, and its result when it has one."""
    label = f" ({row.label})" if row.label else ""
    agent = f" [agent {row.agent_id}]" if row.agent_id != row.parent_agent else ""
    line = f"subagent {row.id}{label}{agent}: {row.state}"
    if row.detached:
        line += ", detached"
    if row.result:
        result = row.result if cut is None or len(row.result) <= cut else row.result[:cut] + " [...]"
        line += f"\n  {result}"
    return line


def _rows(rows: Sequence[SubagentRow], *, cut: int | None = RESULT_CHARS_IN_LISTS) -> ToolResult:
    data = [r.as_dict() for r in rows]
    if cut is not None:
        for item in data:
            if item["result"] and len(item["result"]) > cut:
                item["result"] = item["result"][:cut] + " [...]"
    text = "\n".join(describe(r, cut=cut) for r in rows) or "no subagents"
    return ToolResult(for_llm=json.dumps(data, ensure_ascii=False), for_user=text, data={"subagents": data})


class SpawnTool(Tool):
    name = "sessions_spawn"
    group = "sessions"
    description = (
        "Start a subagent: a child agent that works on a task in the background with its own "
        "session and (at most) your tools, and returns at once with its id. Its result is announced "
        "to this session when it ends. mode 'run' waits for the result instead. The subagents tool "
        "lists, waits for, cancels and steers children."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "task": {"type": "string", "minLength": 1, "maxLength": 8000, "description": "what to do"},
            "label": {"type": "string", "maxLength": 64, "description": "a short name for lists"},
            "mode": {
                "type": "string",
                "enum": ["spawn", "run"],
                "description": "spawn (default): return at once; run: wait for the answer",
            },
            "agent": {"type": "string", "maxLength": 32, "description": "a named agent; default yours"},
            "tools": {
                "type": "array",
                "items": {"type": "string", "maxLength": 64},
                "maxItems": 64,
                "description": "only these of your tools (default: all you may use)",
            },
            "detached": {
                "type": "boolean",
                "description": "keep running when this turn is stopped or the conversation restarted",
            },
            "timeout_s": {"type": "number", "exclusiveMinimum": 0, "description": "stop it after this long"},
        },
        "required": ["task"],
        "additionalProperties": False,
    }

    def __init__(self, control: ControlSource, *, timeout_s: float) -> None:
        self._source = control
        # A run waits for the child: as long as a child may run, and a little for its ending.
        self.timeout_s = timeout_s + 10.0

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        control = _control(self._source)
        wait = args.get("mode") == "run"
        tools = args.get("tools")
        request = SpawnRequest(
            task=args["task"],
            label=args.get("label", "").strip(),
            agent=args.get("agent", ""),
            tools=tuple(tools) if tools is not None else None,
            detached=bool(args.get("detached", False)),
            timeout_s=args.get("timeout_s"),
            announce=not wait,
        )
        row = control.spawn(request, ctx)
        if not wait:
            text = f"started subagent {row.id}" + (f" ({row.label})" if row.label else "")
            text += "; its result will be announced to this session when it ends"
            data = {"id": row.id, "state": row.state, "session": row.session_key}
            return ToolResult(for_llm=json.dumps(data), for_user=text, data=data)
        done = await control.wait(row.id, ctx)
        result = _rows([done], cut=None)
        result.is_error = done.state != "completed"
        return result


class SpawnAliasTool(SpawnTool):
    name = "spawn"


class SubagentsTool(Tool):
    name = "subagents"
    group = "sessions"
    description = (
        "Manage the subagents this session started: list (with states and results), wait for one "
        "(its full result), cancel one (an id, 'all' or 'last'), or steer one (cancel it and start it "
        "again with new instructions)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "wait", "cancel", "steer"]},
            "id": {
                "type": "string",
                "maxLength": 16,
                "description": "a subagent id; cancel also takes 'all' or 'last', steer 'last'",
            },
            "message": {"type": "string", "maxLength": 8000, "description": "steer: the new instructions"},
            "archived": {"type": "boolean", "description": "list: include archived children"},
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    observing_actions = frozenset({"list", "wait"})

    def __init__(self, control: ControlSource, *, timeout_s: float) -> None:
        self._source = control
        self.timeout_s = timeout_s + 10.0  # wait

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        control = _control(self._source)
        action = args["action"]
        if action == "list":
            return _rows(control.children(ctx, archived=bool(args.get("archived", False))))
        which = args.get("id", "").strip().removeprefix("#")
        if not which:
            raise ToolError(
                f"subagents {action}: give an id" + (", 'all' or 'last'" if action == "cancel" else "")
            )
        if action == "cancel":
            return _rows(await control.cancel(ctx, which))
        if action == "steer":
            message = args.get("message", "").strip()
            if not message:
                raise ToolError("subagents steer: give the new instructions in 'message'")
            row = await control.steer(ctx, which, message)
            return _rows([row])
        if not which.isdigit():
            raise ToolError(f"subagents wait: expected a subagent id, got {which!r}")
        done = await control.wait(int(which), ctx)
        return _rows([done], cut=None)
