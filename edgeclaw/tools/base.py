"""What a tool is: a name, a JSON-schema, and an async body run with a per-call context.

One tool instance serves every session at once, so anything that differs per
call travels in `ToolContext`, never in fields of the tool.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import field, replace
from typing import Any, ClassVar

from edgeclaw.records import dataclass

Args = dict[str, Any]
# Where a long call's progress goes: (progress, total or None when unknown, message).
ProgressSink = Callable[[float, float | None, str], None]


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Who is calling and from where. Immutable: tools may not stash state in it."""

    channel: str = "cli"  # "cli" | "mqtt" | "console" | "agent" ...
    chat_id: str = ""
    peer_kind: str = "local"  # "local" | "direct" | "group" | "device"
    session_key: str = "cli:local"
    agent_id: str = "main"
    provider: str = ""  # the LLM provider that asked; "" for direct calls
    subagent_depth: int = 0
    sender: str = ""  # who the caller says it is (MQTT "sender"): a label, not a proof
    # Who is calling, as far as the channel can know it: "console:/dev/ttyGS0", "cli:alice",
    # "mqtt:ops" (a caller that proved its key), "mqtt:anonymous" (unsigned).
    # Rate limits and ownership (background processes) are keyed on it, never on the session name,
    # which the caller chooses freely. Empty = the channel itself (see `identity`).
    caller: str = ""
    request_id: str = ""  # the channel's id of the request this call serves (MQTT "id"), for matching
    # A subagent's calls: the session that spawned it, and the tools it may never go beyond (its
    # parent's, at the spawn, narrowed by the spawn's own list): a child can only narrow.
    parent_session: str = ""
    tool_ceiling: frozenset[str] | None = None
    # Where this call's progress goes, when the caller can show it (an MCP client that sent a
    # progress token); None = nobody is listening, and a tool need not report any.
    progress: ProgressSink | None = field(default=None, compare=False, repr=False)

    @property
    def identity(self) -> str:
        """The caller's identity, falling back to the channel name when the channel gave none."""
        return self.caller or self.channel

    def derive(self, **changes: Any) -> ToolContext:
        """This context with `changes` (the same call, seen by another provider or progress sink)."""
        return replace(self, **changes)

    def for_subagent(
        self, session_key: str, agent_id: str, depth: int, tool_ceiling: frozenset[str]
    ) -> ToolContext:
        """The context of a subagent this call spawns: the caller's channel, chat and identity, the
        child's own session and agent under this session, its depth and ceiling. Neither the
        provider (the child asks its own) nor the progress sink (nobody waits on a child's calls)
        carries over."""
        return replace(
            self,
            session_key=session_key,
            agent_id=agent_id,
            subagent_depth=depth,
            parent_session=self.session_key,
            tool_ceiling=tool_ceiling,
            provider="",
            progress=None,
        )


@dataclass(slots=True)
class ToolResult:
    """A tool's answer: text for the model, optional text for the person, an error flag, and
    optional structured data.

    `for_user` is None when the person should read the same text as the model (it is then sent
    once). `data` holds the figures a program would want (addresses, values, pin states) as a
    JSON-serialisable dict, so nobody has to parse them back out of a text.
    """

    for_llm: str
    for_user: str | None = None
    is_error: bool = False
    data: dict[str, Any] | None = None
    # Bytes for a program (a chunk of a file): the registry checks them for secrets as it scrubs
    # text, then puts them into `data` as `base64` with their `sha256` (both would otherwise be
    # scrubbed as random-looking strings).
    binary: bytes | None = None

    @classmethod
    def error(cls, message: str) -> ToolResult:
        return cls(for_llm=message, for_user=None, is_error=True)


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """What `check` returns when the call would still need a person's yes: a dry run says so."""

    reason: str  # why approval would be asked ("'rm' is not on the allowlist ...")


@dataclass(frozen=True, slots=True)
class ToolInfo:
    """The public face of a tool, as listed by `edgeclaw tools list`."""

    name: str
    group: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


class Tool(ABC):
    """Base class for every tool.

    `check` runs the bounds checks that need the arguments (workspace paths,
    board profile grants) without doing anything; a dry run stops after it.
    `execute` does the work and returns a `ToolResult` (or a plain string for
    the model). Raise `ToolRefused` for a bounds failure, `ToolError` for a
    failure worth telling the caller.
    """

    name: ClassVar[str]
    group: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}, "additionalProperties": False}
    # None = the registry's default timeout.
    timeout_s: ClassVar[float | None] = None
    # Calls that only observe (read a file, a pin, a register) and change nothing may run when the
    # daemon cannot record them (a full disk: see `only_observes`). A tool that never changes
    # anything sets `observes_only`; one whose `action` decides lists its observing actions.
    observes_only: ClassVar[bool] = False
    observing_actions: ClassVar[frozenset[str]] = frozenset()

    def only_observes(self, args: Args) -> bool:
        """True when this call changes nothing on the device (a read). Default: it may change something."""
        return self.observes_only or args.get("action") in self.observing_actions

    async def check(self, args: Args, ctx: ToolContext) -> PendingApproval | None:  # noqa: B027
        """Refuse (raise ToolRefused) when the call would leave its bounds. Default: nothing to check.

        Returns a `PendingApproval` when the call passed but would ask a person first (so a dry
        run does not say "would run"), else None.
        """

    @abstractmethod
    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult | str: ...

    def info(self) -> ToolInfo:
        return ToolInfo(self.name, self.group, self.description, self.parameters)
