"""The agents one loop serves, which of them answers a message, and what a subagent's run is given.

"main" is the [agent] table; the named agents are [agents.NAME], each with its own
provider chain, system prompt and iteration limit (an `AgentSpec`). Which agent
answers a message is the message's own `agent`, else the first configured
route (`AgentRoute`) that matches its channel or session, else "main".
"""

from __future__ import annotations

import dataclasses
import fnmatch

from edgeclaw.agent.channel import InboundMessage
from edgeclaw.agent.prompt import PromptBuilder
from edgeclaw.agent.providers.chain import ProviderChain
from edgeclaw.errors import EdgeclawError
from edgeclaw.tools.base import ToolContext


class UnknownAgent(EdgeclawError):
    """A message or a job named an agent that is not configured."""


@dataclasses.dataclass
class AgentSpec:
    """One agent: what it answers with (its provider chain and system prompt) and how long it may go."""

    id: str
    chain: ProviderChain
    prompt: PromptBuilder
    max_iterations: int = 20
    description: str = ""


@dataclasses.dataclass(frozen=True)
class AgentRoute:
    """Messages of `channel`, or of the session keys the glob `session` matches, go to `agent`."""

    agent: str
    channel: str = ""
    session: str = ""

    def matches(self, msg: InboundMessage) -> bool:
        if self.channel:
            return msg.channel == self.channel
        return fnmatch.fnmatchcase(msg.session_key, self.session)


@dataclasses.dataclass(frozen=True)
class ChildTurn:
    """What a subagent's run needs from its manager: its session, task, agent and per-call context."""

    session_key: str
    task: str
    agent_id: str
    ctx: ToolContext  # channel, caller and route of the parent; the child's depth, parent and ceiling
    max_iterations: int
    brief: str  # added to the agent's system prompt: who the child is and where its answer goes
