"""The daemon's agent loop, built by the first thing that needs it.

Kept apart from `daemon.agent` (which builds the loop and imports its modules) so that `edgeclaw run`
can arrange for the loop without loading it, and from `daemon.runtime`, which `daemon.agent` imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from edgeclaw.agent.loop import AgentLoop
    from edgeclaw.daemon.runtime import Runtime


def agent_on_demand(runtime: Runtime, *, recover_at_start: bool) -> None:
    """For `edgeclaw run`: the agent loop is built by the first thing that needs it, not at start-up
    (its modules are a large part of a start); its subagent manager then recovers what a previous
    run left. With `recover_at_start` (a channel that can tell the parents is up: MQTT), that is done
    at start instead: children left running become `interrupted` and ended ones are announced, by
    building the loop then if (and only if) the state database holds such children."""

    def build() -> AgentLoop:
        from edgeclaw.daemon.agent import shared_agent

        return shared_agent(runtime)

    def recover_subagents() -> None:
        from edgeclaw.store.subagents import SubagentStore

        if runtime.subagents is None and SubagentStore(lambda: runtime.db).left_by_last_run():
            build()  # its subagent manager's recovery runs as the next start-up step

    runtime.agent_factory = build
    if recover_at_start:
        runtime.on_ready(recover_subagents)
