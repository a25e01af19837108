"""The topic names of one device: `{prefix}/{dev}/...` plus Home Assistant's two.

Fixed by the MQTT contract (blueprint §3.2); fleet dashboards and backends
are written against these names, so they live in one place.
"""

from __future__ import annotations

from dataclasses import dataclass


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
    def events(self) -> str:
        return f"{self.base}/events"

    @property
    def admin_result(self) -> str:
        return f"{self.base}/admin/result"

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
    def approval_response(self) -> str:
        return f"{self.base}/approval/response"

    @property
    def admin_tools(self) -> str:
        return f"{self.base}/admin/tools"

    @property
    def ha_status(self) -> str:
        return f"{self.discovery_prefix}/status"

    def subscriptions(self, *, admin: bool, discovery: bool) -> list[str]:
        """Only this device's own command topics (and Home Assistant's birth topic): no wildcards."""
        topics = [self.chat_in, self.tool_call, self.approval_response]
        if admin:
            topics.append(self.admin_tools)
        if discovery:
            topics.append(self.ha_status)
        return topics
