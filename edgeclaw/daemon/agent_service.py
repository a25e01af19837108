"""Where the daemon's agent loop is kept, built by the first thing that needs it.

Kept apart from `daemon.agent` (which builds the loop and imports its modules) so that the runtime
can hold the loop without loading it; `daemon.lifecycle.agent_on_demand` sets the factory for
`edgeclaw run`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop
    from edgeclaw.agent.subagents import SubagentManager


class AgentService:
    """The agent loop and its subagent manager once built (`daemon.agent`), and how to build them
    on first use. Without a factory (`edgeclaw tool call`) what needs the loop says it is absent."""

    def __init__(self) -> None:
        self.loop: AgentLoop | None = None
        self.subagents: SubagentManager | None = None
        # `edgeclaw run` sets this (`daemon.lifecycle.agent_on_demand`): what needs the agent loop
        # (a chat, a spawn, sessions_send's turn) builds it through here on first use.
        self.factory: Callable[[], AgentLoop] | None = None

    def on_demand(self) -> AgentLoop | None:
        """The loop, built now when there is a factory and it is not yet."""
        if self.loop is None and self.factory is not None:
            self.factory()
        return self.loop
