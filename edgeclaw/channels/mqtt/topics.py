"""The topic names of one device: `{prefix}/{dev}/...` plus Home Assistant's two.

Fixed by the MQTT contract (docs/mqtt.md); fleet dashboards and backends
are written against these names, so they live in one place -- and so does the
rule for which topics belong to the devices (`reserved_topic`): an answer
aimed there by a caller's Response Topic could pose as a device's report or
arrive at another device as a command.
"""

from __future__ import annotations

import re

from edgeclaw.records import dataclass

# A `message` target: up to four levels under `{base}/message/`, each of these characters (no
# wildcards, no empty level, nothing a topic filter or a shell could read twice).
MESSAGE_TARGET_LEVEL = re.compile(r"[A-Za-z0-9_.-]{1,64}")
MAX_MESSAGE_TARGET_LEVELS = 4


@dataclass(frozen=True)
class DeviceTopics:
    prefix: str
    device: str
    discovery_prefix: str = "homeassistant"

    @property
    def base(self) -> str:
        return f"{self.prefix}/{self.device}"

    # -- outbound ------------------------------------------------------------
    @property
    def status(self) -> str:
        return f"{self.base}/status"

    @property
    def chat_out(self) -> str:
        return f"{self.base}/chat/out"

    @property
    def tool_result(self) -> str:
        return f"{self.base}/tool/result"

    @property
    def approval_request(self) -> str:
        return f"{self.base}/approval/request"

    @property
    def telemetry(self) -> str:
        return f"{self.base}/telemetry"

    @property
    def health(self) -> str:
        """Retained: the last telemetry, so a dashboard opened now sees every device's figures."""
        return f"{self.base}/health"

    @property
    def events(self) -> str:
        return f"{self.base}/events"

    @property
    def admin_result(self) -> str:
        return f"{self.base}/admin/result"

    def message(self, target: str) -> str:
        """Where the `message` tool publishes to `target` ("alerts", "crew/night"); ValueError
        naming the problem for anything else."""
        levels = target.split("/")
        if len(levels) > MAX_MESSAGE_TARGET_LEVELS or not all(
            MESSAGE_TARGET_LEVEL.fullmatch(level) and level not in (".", "..") for level in levels
        ):
            raise ValueError(
                f"MQTT message target {target!r}: expected 1-{MAX_MESSAGE_TARGET_LEVELS} topic levels "
                "separated by '/', each 1-64 letters, digits, '_', '.' or '-' (e.g. \"alerts\")"
            )
        return f"{self.base}/message/{target}"

    @property
    def discovery(self) -> str:
        return f"{self.discovery_prefix}/device/{self.device}/config"

    # -- inbound -------------------------------------------------------------
    @property
    def chat_in(self) -> str:
        return f"{self.base}/chat/in"

    @property
    def tool_call(self) -> str:
        return f"{self.base}/tool/call"

    @property
    def tool_cancel(self) -> str:
        return f"{self.base}/tool/cancel"

    @property
    def approval_response(self) -> str:
        return f"{self.base}/approval/response"

    @property
    def admin_tools(self) -> str:
        return f"{self.base}/admin/tools"

    @property
    def admin_cron(self) -> str:
        return f"{self.base}/admin/cron"

    @property
    def admin_gateway(self) -> str:
        return f"{self.base}/admin/gateway"

    @property
    def ha_status(self) -> str:
        return f"{self.discovery_prefix}/status"

    def subscriptions(self, *, admin: bool, discovery: bool) -> list[str]:
        """Only this device's own command topics (and Home Assistant's birth topic): no wildcards."""
        topics = [self.chat_in, self.tool_call, self.tool_cancel, self.approval_response]
        if admin:
            topics += [self.admin_tools, self.admin_cron, self.admin_gateway]
        if discovery:
            topics.append(self.ha_status)
        return topics


# A fleet group's name: one topic level of these characters (no wildcards, nothing a shell reads twice).
GROUP_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")


def group_problem(name: str) -> str | None:
    """Why `name` cannot be a fleet group (`mqtt.groups`), or None."""
    if not GROUP_NAME.fullmatch(name) or name in (".", ".."):
        return f"group {name!r}: expected 1-64 letters, digits, '_', '.' or '-' (one topic level)"
    return None


@dataclass(frozen=True)
class FleetTopics:
    """The commands addressed to several devices at once: `{prefix}/_all/...` reaches every device,
    `{prefix}/_group/{group}/...` the members of the group. The same suffixes as a device's own
    command topics; each device answers for itself (Response Topic, else its own result topic)."""

    prefix: str
    groups: tuple[str, ...] = ()

    @property
    def bases(self) -> list[str]:
        return [f"{self.prefix}/_all", *(f"{self.prefix}/_group/{g}" for g in self.groups)]

    def tool_calls(self) -> list[str]:
        return [f"{base}/tool/call" for base in self.bases]

    def admin(self) -> dict[str, str]:
        """Admin topic -> which admin command it is ("tools", "cron", "gateway")."""
        return {f"{base}/admin/{what}": what for base in self.bases for what in ("tools", "cron", "gateway")}

    def subscriptions(self) -> list[str]:
        return [*self.tool_calls(), *self.admin()]


# The first level under a device (`{prefix}/{dev}/LEVEL/...`) of every topic a device reads or writes,
# now or later: status, health, telemetry and events are reports; tool, chat, approval and admin hold
# both commands and answers; message holds what the agent sends (the `message` tool); ha holds Home
# Assistant's entity states and commands.
DEVICE_LEVELS = frozenset(
    {"status", "health", "telemetry", "events", "tool", "chat", "approval", "admin", "message", "ha"}
)
# Pseudo-devices that address several devices at once: `{prefix}/_all/...`, `{prefix}/_group/{g}/...`.
FLEET_LEVELS = {"_all": 1, "_group": 2}


def reserved_topic(topic: str, prefix: str, discovery_prefix: str) -> str | None:
    """Why `topic` belongs to the devices under `prefix` (any device, not only this one) or to
    Home Assistant's discovery, or None when a caller may have answers sent there."""
    levels = topic.split("/")
    if topic == discovery_prefix or topic.startswith(discovery_prefix + "/"):
        return f"it is under Home Assistant's discovery prefix {discovery_prefix!r}"
    head = prefix.split("/")
    if levels[: len(head)] != head:
        return None
    rest = levels[len(head) :]
    if not rest:
        return f"it is the topic prefix {prefix!r} itself"
    device_levels = FLEET_LEVELS.get(rest[0], 1)
    below = rest[device_levels:]
    if not below:
        return "it is a device's own level"
    if below[0] in DEVICE_LEVELS:
        return f"it is under a device's {below[0]!r} topics"
    return None
