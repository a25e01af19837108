"""`skill_search`: which skills fit a task, best first (BM25, and meaning when embeddings exist)."""

from __future__ import annotations

from typing import Any, ClassVar

from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.skills.library import SkillLibrary


class SkillSearchTool(Tool):
    name = "skill_search"
    group = "skills"
    observes_only = True
    description = (
        "Find skills (step-by-step instructions for tasks on this board, such as recovering a stuck I2C "
        "bus) that fit a task. Returns names, descriptions and the path to read with read_file before "
        "following one."
    )
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1000,
                "description": "The task, in words.",
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 20,
                "description": "Skills shown (default 5).",
            },
        },
        "required": ["query"],
        "additionalProperties": False,
    }

    def __init__(self, library: SkillLibrary) -> None:
        self.library = library

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        found = await self.library.search(args["query"], args.get("limit", 5))
        if not found.hits:
            text = f"no skill matches {args['query']!r}"
        else:
            text = "\n".join(
                f"{i}. {h.skill.name} (score {h.score:.4f}): {h.skill.description}\n   read: {h.skill.path}"
                for i, h in enumerate(found.hits, 1)
            )
        if found.note:
            text += f"\n({found.note})"
        data = {
            "mode": found.mode,
            "note": found.note or None,
            "skills": [
                {
                    "name": h.skill.name,
                    "description": h.skill.description,
                    "path": h.skill.path,
                    "score": round(h.score, 6),
                    "source": h.skill.root.label,
                }
                for h in found.hits
            ],
        }
        return ToolResult(for_llm=text, data=data)
