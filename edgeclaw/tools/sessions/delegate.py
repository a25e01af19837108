"""`delegate`: hand a task to a named agent and wait for its answer.

The task runs as a subagent of the caller under the named agent (its system
prompt, models and tool layers), so it is held to everything a subagent is:
the caller's tools as a ceiling, the subagent deny lists, depth and count
limits. Unlike a spawn, the caller waits, and the answer is the tool's result.
"""

from __future__ import annotations

from typing import Any

from edgeclaw.errors import ToolError
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.sessions.subagents import ControlSource, SpawnRequest, _control


class DelegateTool(Tool):
    name = "delegate"
    group = "sessions"
    description = (
        "Hand a task to another agent on this device (agents_list names them) and wait for its answer."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "agent": {"type": "string", "minLength": 1, "maxLength": 32},
            "task": {"type": "string", "minLength": 1, "maxLength": 8000},
            "timeout_s": {"type": "number", "exclusiveMinimum": 0},
        },
        "required": ["agent", "task"],
        "additionalProperties": False,
    }

    def __init__(self, control: ControlSource, *, timeout_s: float) -> None:
        self._source = control
        self.timeout_s = timeout_s + 10.0

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        control = _control(self._source)
        request = SpawnRequest(
            task=args["task"],
            label=f"delegated to {args['agent']}",
            agent=args["agent"],
            timeout_s=args.get("timeout_s"),
            announce=False,
        )
        row = control.spawn(request, ctx)
        done = await control.wait(row.id, ctx)
        if done.state != "completed":
            raise ToolError(f"agent {args['agent']} did not finish ({done.state}): {done.result}")
        return ToolResult(done.result, data={"agent": args["agent"], "subagent": done.id})
