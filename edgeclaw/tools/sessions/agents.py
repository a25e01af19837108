"""`agents_list`: the agents this device runs, for handing work to one (`delegate`, `spawn` agent=)."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict

from edgeclaw.records import dataclass
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult


@dataclass(frozen=True)
class AgentInfo:
    name: str
    description: str
    type: str  # "open" or "predefined": how its context files are kept (see tools.memory.context)
    providers: tuple[str, ...]
    max_iterations: int
    answers: tuple[str, ...] = ()  # the routes that send messages to it ("channel console", ...)


class AgentsListTool(Tool):
    name = "agents_list"
    group = "sessions"
    observes_only = True
    description = (
        "List the agents on this device: name, what each is for, its type, models and what it answers; "
        "the one answering you is marked."
    )
    parameters = {"type": "object", "properties": {}, "additionalProperties": False}

    def __init__(self, agents: Callable[[], Sequence[AgentInfo]]) -> None:
        self._agents = agents

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        rows = []
        lines = []
        for info in self._agents():
            item = asdict(info)
            item["providers"] = list(info.providers)
            item["answers"] = list(info.answers)
            item["current"] = info.name == ctx.agent_id
            rows.append(item)
            mark = "*" if item["current"] else " "
            what = f" - {info.description}" if info.description else ""
            models = ", ".join(info.providers) or "no model"
            lines.append(f"{mark} {info.name} ({info.type}; {models}){what}")
        return ToolResult(
            for_llm=json.dumps(rows, ensure_ascii=False), for_user="\n".join(lines), data={"agents": rows}
        )
