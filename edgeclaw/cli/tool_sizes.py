"""What each tools profile costs a model: its tools on this board, the bytes of their definitions as
sent (OpenAI function format) and the tokens they take, whole and compact, by the same estimate the
context budget uses. `edgeclaw tools sizes` prints it; docs/models.md carries the sim board's table,
which a test regenerates, so the figures quoted there cannot go stale."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from edgeclaw.records import dataclass

if TYPE_CHECKING:
    from edgeclaw.tools.registry import Registry


@dataclass(frozen=True)
class ProfileSize:
    profile: str
    tools: int
    definition_bytes: int
    tokens: int  # estimated, every definition whole
    compact_tokens: (
        int  # estimated, each description cut to its first sentence (as a small context gets them)
    )


def profile_sizes(registry: Registry) -> list[ProfileSize]:
    from edgeclaw.agent.context_budget import estimate_tokens
    from edgeclaw.agent.tool_selection import compact
    from edgeclaw.config.policy_rules import PROFILES
    from edgeclaw.tools.model_schema import model_definition

    infos = registry.infos()  # every registered tool, whatever the config's policy
    out = []
    for name in PROFILES:
        members = registry.policy.profile_members(name)
        definitions = [model_definition(i, "openai") for i in infos if i.name in members]
        whole = json.dumps(definitions, ensure_ascii=False)
        out.append(
            ProfileSize(
                profile=name,
                tools=len(definitions),
                definition_bytes=len(whole.encode()),
                tokens=estimate_tokens(whole),
                compact_tokens=estimate_tokens(
                    json.dumps([compact(d) for d in definitions], ensure_ascii=False)
                ),
            )
        )
    return out


def sizes_table(sizes: list[ProfileSize]) -> str:
    """A Markdown table of `sizes`, as docs/models.md carries it."""
    rows = [
        "| profile | tools | definitions (JSON) | tokens, whole | tokens, compact |",
        "|---|---|---|---|---|",
    ]
    rows += [
        f"| `{s.profile}` | {s.tools} | {s.definition_bytes / 1024:,.1f} KiB "
        f"| ~{s.tokens:,} | ~{s.compact_tokens:,} |"
        for s in sizes
    ]
    return "\n".join(rows)
