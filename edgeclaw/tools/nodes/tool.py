"""`nodes`: the other devices on this device's broker -- list them, read their status, call their tools.

The tool never touches MQTT. It talks to a `PeerLink`: the MQTT channel's peer
directory implements it (it reads the retained `status` and `health` of every
device under the topic prefix, and sends a peer's `tool/call` with this
device's command key, waiting for the answer on a reply topic of its own); the
daemon attaches it when the channel starts. Without it (no `[mqtt]`, or a
call from a process other than the daemon), every action says so.

What may be called is `[tools.nodes]`: the peers (device ids or patterns) and
their tools (names or patterns). Either list empty means no calls at all: the
tool lists and reads status, nothing more. A call outside the lists is refused
before anything is published.

The peer decides for itself too: the call runs under the peer's own policy
(`[tools.channels.mqtt]` there), as the MQTT caller this device signs as
("mqtt:NAME"), and a refusal there comes back as this call's error.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Sequence
from dataclasses import field
from fnmatch import fnmatchcase
from typing import Any, Protocol

from edgeclaw.config.schema import NodesToolConfig
from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult

# A peer's device id: one topic level (what the peer's topics are built from), no wildcards.
PEER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
TOOL_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_ARGS_CHARS = 16 * 1024  # a call's arguments, as JSON: a peer refuses big payloads anyway


class PeerUnavailable(ToolError):
    """The call could not be made or was not answered: no link, not connected, timed out."""


@dataclass(frozen=True, slots=True)
class Peer:
    """What the broker holds about one device: its retained status and health (either may be None)."""

    device: str
    status: dict[str, Any] | None = None
    health: dict[str, Any] | None = None
    # Whether its status is signed with its pinned device key: "verified", or "unverifiable" (it signs
    # nothing, or nothing can check it). Reports signed with another key never get this far.
    trust: str = "unverifiable"

    @property
    def state(self) -> str:
        value = (self.status or {}).get("state")
        return value if isinstance(value, str) else "unknown"

    @property
    def last_seen(self) -> float | None:
        """The newest time the device reported (its health's `ts`, else its status's)."""
        times = [
            v.get("ts")
            for v in (self.health, self.status)
            if isinstance(v, dict) and isinstance(v.get("ts"), int | float)
        ]
        return max(times) if times else None


class PeerLink(Protocol):
    """The way to the other devices (the MQTT channel implements it)."""

    @property
    def device(self) -> str:
        """This device's own id (never listed as a peer)."""
        ...

    def peers(self) -> Sequence[Peer]:
        """Every other device whose status or health the broker holds, sorted by device id."""
        ...

    async def call(self, peer: str, tool: str, args: dict[str, Any], *, timeout_s: float) -> dict[str, Any]:
        """Send `tool` with `args` to the peer's `tool/call` and return its answer (the `tool/result`
        object: id, ok, tool, for_llm, for_user?, data?, error?, code?). Raises PeerUnavailable when
        it cannot be sent or no answer came within `timeout_s` (the message names the peer)."""
        ...


@dataclass(frozen=True)
class NodesPolicy:
    """[tools.nodes]: the peers and tools that may be called (patterns, shell-style)."""

    peers: tuple[str, ...] = ()
    tools: tuple[str, ...] = ()
    timeout_s: float = 10.0

    @property
    def calls_allowed(self) -> bool:
        return bool(self.peers) and bool(self.tools)

    def peer_allowed(self, device: str) -> bool:
        return any(fnmatchcase(device, pattern) for pattern in self.peers)

    def tool_allowed(self, tool: str) -> bool:
        return any(fnmatchcase(tool, pattern) for pattern in self.tools)

    def refusal(self, peer: str, tool: str) -> str | None:
        """Why this call is outside the policy, or None."""
        if not self.calls_allowed:
            return (
                "calling peers is off: [tools.nodes] peers and tools name none (the nodes tool only lists "
                "peers and reads their status)"
            )
        if not self.peer_allowed(peer):
            return f"peer {peer!r} is not in [tools.nodes] peers ({', '.join(self.peers)})"
        if not self.tool_allowed(tool):
            return f"tool {tool!r} is not in [tools.nodes] tools ({', '.join(self.tools)})"
        return None


@dataclass
class _LinkHolder:
    """The MQTT channel's link to peers, once there is one, or why there is none."""

    link: PeerLink | None = None
    why_not: str = field(
        default="no MQTT connection: the nodes tool reaches peers through the running daemon's MQTT "
        "channel ([mqtt] enabled = true; from a shell, `edgeclaw tool call nodes` asks the daemon)"
    )


def _peer_summary(peer: Peer, policy: NodesPolicy) -> dict[str, Any]:
    status = peer.status or {}
    health = peer.health or {}
    out: dict[str, Any] = {
        "device": peer.device,
        "state": peer.state,
        "board": status.get("board"),
        "version": status.get("version"),
        "since": status.get("since"),
        "last_seen": peer.last_seen,
        "hostname": status.get("hostname"),
        "addresses": status.get("addresses"),
        "callable": policy.calls_allowed and policy.peer_allowed(peer.device),
        "trust": peer.trust,
    }
    if health:
        out["health_ts"] = health.get("ts")
    return out


def _ago(ts: float, now: float | None = None) -> str:
    """How long ago `ts` (Unix seconds) was, as a technician reads it ("12 s ago", "3 min ago")."""
    seconds = max(0.0, (time.time() if now is None else now) - ts)
    if seconds < 120:
        return f"{seconds:.0f} s ago"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min ago"
    if seconds < 172800:
        return f"{seconds / 3600:.0f} h ago"
    return f"{seconds / 86400:.0f} days ago"


def _peer_line(s: dict[str, Any]) -> str:
    parts = [s["device"], s["state"]]
    if s.get("board"):
        parts.append(f"board {s['board']}")
    if s.get("version"):
        parts.append(f"edgeclaw {s['version']}")
    if isinstance(s.get("last_seen"), int | float):
        parts.append(f"last seen {_ago(s['last_seen'])}")
    if s.get("trust") != "verified":
        parts.append("unverified (signs nothing)")
    parts.append("callable" if s["callable"] else "list only")
    return " | ".join(str(p) for p in parts)


class NodesTool(Tool):
    name = "nodes"
    group = "nodes"
    description = (
        "The other edgeclaw devices on this device's MQTT broker. action=list: every peer with its state "
        "(online/offline), board, version, last seen. action=status: one peer's full retained status "
        "and last health figures. action=call: run one of the peer's tools (e.g. i2c, hardware_info) on "
        "the peer and return its answer; only peers and tools named in [tools.nodes] may be called, and "
        "the peer applies its own policy."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["list", "status", "call"]},
            "peer": {
                "type": "string",
                "maxLength": 128,
                "description": "the peer's device id (status, call)",
            },
            "tool": {"type": "string", "maxLength": 64, "description": "the peer's tool to call (call)"},
            "args": {
                "type": "object",
                "additionalProperties": True,
                "description": "the arguments of the peer's tool (call)",
            },
            "timeout_s": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": 300,
                "description": "how long to wait for the answer (call; at most [tools.nodes] timeout_s)",
            },
        },
        "required": ["action"],
        "additionalProperties": False,
    }
    observing_actions = frozenset({"list", "status"})

    def __init__(self, policy: NodesPolicy) -> None:
        self.policy = policy
        self._holder = _LinkHolder()
        # The registry's timeout must not cut the wait short: a bit beyond the longest call.
        self.timeout_s = policy.timeout_s + 5.0  # type: ignore[misc]

    def attach(self, link: PeerLink | None, why_not: str = "") -> None:
        """The channel's peer directory (None when it stops); `why_not` explains its absence."""
        self._holder.link = link
        if why_not:
            self._holder.why_not = why_not

    def _link(self) -> PeerLink:
        if self._holder.link is None:
            raise PeerUnavailable(self._holder.why_not)
        return self._holder.link

    @staticmethod
    def _peer_arg(args: Args) -> str:
        peer = args.get("peer")
        if not isinstance(peer, str) or not peer:
            raise ToolRefused(f"nodes {args.get('action')}: give the peer's device id as 'peer'")
        if not PEER_NAME.fullmatch(peer):
            raise ToolRefused(
                f"peer {peer!r}: a device id is one MQTT topic level of letters, digits, '_', '.' and '-'"
            )
        return peer

    async def check(self, args: Args, ctx: ToolContext) -> None:
        action = args.get("action")
        if action == "list":
            return
        if action not in ("status", "call"):
            raise ToolRefused(f"nodes: unknown action {action!r} (expected list, status or call)")
        peer = self._peer_arg(args)
        if action == "status":
            return
        tool = args.get("tool")
        if not isinstance(tool, str) or not TOOL_NAME.fullmatch(tool):
            raise ToolRefused("nodes call: give the peer's tool name as 'tool' (e.g. \"i2c\")")
        call_args = args.get("args", {})
        if not isinstance(call_args, dict):
            raise ToolRefused("nodes call: 'args' must be a JSON object")
        if len(json.dumps(call_args)) > MAX_ARGS_CHARS:
            raise ToolRefused(f"nodes call: 'args' is larger than {MAX_ARGS_CHARS} characters as JSON")
        problem = self.policy.refusal(peer, tool)
        if problem is not None:
            raise ToolRefused(f"nodes call {tool} on {peer}: {problem}")
        timeout = args.get("timeout_s")
        if timeout is not None and not (
            isinstance(timeout, int | float) and 0 < timeout <= self.policy.timeout_s
        ):
            raise ToolRefused(
                f"nodes call: timeout_s must be > 0 and at most {self.policy.timeout_s} "
                "([tools.nodes] timeout_s)"
            )

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        action = args["action"]
        link = self._link()
        if action == "list":
            return self._list(link)
        peer = self._peer_arg(args)
        if action == "status":
            return self._status(link, peer)
        return await self._call(link, peer, args)

    def _list(self, link: PeerLink) -> ToolResult:
        summaries = [_peer_summary(p, self.policy) for p in link.peers()]
        if not summaries:
            text = f"no peers seen on the broker (this device is {link.device})"
        else:
            text = f"{len(summaries)} peer(s) of {link.device}:\n" + "\n".join(map(_peer_line, summaries))
        return ToolResult(text, data={"device": link.device, "peers": summaries})

    def _status(self, link: PeerLink, peer: str) -> ToolResult:
        found = next((p for p in link.peers() if p.device == peer), None)
        if found is None:
            raise ToolError(f"peer {peer!r}: the broker holds no status or health for it")
        summary = _peer_summary(found, self.policy)
        data = {**summary, "status": found.status, "health": found.health}
        return ToolResult(_peer_line(summary), data=data)

    async def _call(self, link: PeerLink, peer: str, args: Args) -> ToolResult:
        tool = args["tool"]
        found = next((p for p in link.peers() if p.device == peer), None)
        if found is not None and found.state == "offline":
            raise PeerUnavailable(f"peer {peer!r} is offline (its retained status says so): not called")
        timeout = float(args.get("timeout_s") or self.policy.timeout_s)
        answer = await link.call(peer, tool, dict(args.get("args") or {}), timeout_s=timeout)
        if not answer.get("ok"):
            code = answer.get("code") or "error"
            error = answer.get("error") or answer.get("for_llm") or "no reason given"
            raise ToolError(f"peer {peer} refused or failed {tool} ({code}): {error}")
        for_llm = answer.get("for_llm")
        text = for_llm if isinstance(for_llm, str) else ""
        for_user = answer.get("for_user")
        verified = answer.get("verified") is True
        data = {"peer": peer, "tool": tool, "answer": answer.get("data"), "verified": verified}
        # An answer from a peer that signs nothing (taken only with unsigned_peers) says so to the model.
        label = f"[{peer}]" if verified else f"[{peer}, unverified]"
        return ToolResult(
            f"{label} {text}",
            for_user=f"{label} {for_user}" if isinstance(for_user, str) else None,
            data=data,
        )


def nodes_tool(config: NodesToolConfig) -> NodesTool:
    """The tool as `[tools.nodes]` configures it (attached to the MQTT channel's peers later)."""
    return NodesTool(NodesPolicy(tuple(config.peers), tuple(config.tools), config.timeout_s))
