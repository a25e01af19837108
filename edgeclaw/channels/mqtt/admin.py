"""The admin topics: `admin/tools` (runtime custom tools), `admin/cron` and `admin/gateway`.

The channel does not reach into the tool groups: the daemon hands it the custom tools' catalog
(anything shaped like `CustomToolCatalog`; edgeclaw.tools.custom.CustomTools is one), and
`admin/cron` / `admin/gateway` are calls of those tools through the registry, as the admin
channel, whose policy is `[tools.channels.mqtt-admin]`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from edgeclaw.channels.mqtt.inbound import CHANNEL
from edgeclaw.channels.mqtt.protocol import (
    AdminCall,
    AdminRequest,
    Route,
    admin_call_answer,
    admin_error,
    encode,
)
from edgeclaw.tools.audit import AuditTrail
from edgeclaw.tools.base import ToolContext
from edgeclaw.tools.registry import Registry

log = logging.getLogger("edgeclaw.mqtt")

# Calls over admin/cron and admin/gateway run as this channel: its policy is [tools.channels.mqtt-admin]
# (no built-in restriction: the admin topics take callers with the admin role only, unless
# mqtt.admin_unsigned; channels.mqtt.keys).
ADMIN_CHANNEL = "mqtt-admin"


class CustomToolDefinition(Protocol):
    @property
    def name(self) -> str: ...
    def public(self) -> dict[str, Any]: ...


class CustomToolCatalog(Protocol):
    """The runtime custom tools as `admin/tools` sees them. `define` and `remove` raise ValueError
    (edgeclaw.tools.custom's InvalidDefinition is one) for a definition or name they refuse."""

    def define(self, definition: Mapping[str, Any]) -> CustomToolDefinition: ...
    def remove(self, name: str) -> bool: ...
    def list(self) -> Sequence[CustomToolDefinition]: ...


class AdminTopics:
    """What the admin topics do once a request on them is admitted: its answer."""

    def __init__(
        self, registry: Registry, custom_tools: CustomToolCatalog | None, audit: AuditTrail | None
    ) -> None:
        self.registry = registry
        self.custom_tools = custom_tools
        self.audit = audit

    async def run(self, asked: AdminRequest | AdminCall, route: Route, caller: str) -> bytes:
        if isinstance(asked, AdminCall):
            return await self._call(asked, route, caller)
        return self._custom_tools(asked, caller)

    async def _call(self, call: AdminCall, route: Route, caller: str) -> bytes:
        """`admin/cron`, `admin/gateway`: the tool through the registry, as the admin channel. Jobs
        made here belong to the admin caller's identity ("mqtt:NAME") on that channel."""
        ctx = ToolContext(
            channel=ADMIN_CHANNEL,
            chat_id=route.topic,
            peer_kind="device",
            session_key=ADMIN_CHANNEL,
            caller=caller,
            request_id=call.id,
        )
        outcome = await self.registry.execute(call.tool, call.args, ctx)
        return encode(admin_call_answer(call.id, call.action, outcome))

    def _custom_tools(self, admin: AdminRequest, caller: str) -> bytes:
        """Define, remove or list runtime custom tools. Definitions take effect at once and are kept
        across restarts (edgeclaw.tools.custom); environment values are never echoed back. Every
        change is an event of the audit trail (who, what, which tool; never the definition)."""
        custom = self.custom_tools
        if custom is None:
            return encode(
                admin_error(admin.id, admin.action, "unavailable", "custom tools are not available here")
            )
        answer: dict[str, Any] = {"id": admin.id, "ok": True, "action": admin.action}
        try:
            if admin.action == "define":
                assert admin.definition is not None
                spec = custom.define(admin.definition)
                answer["tool"] = spec.public()
                self._event("define", spec.name, caller, admin.id)
            elif admin.action == "remove":
                if not custom.remove(admin.name):
                    return encode(
                        admin_error(
                            admin.id, admin.action, "not_found", f"no custom tool named {admin.name!r}"
                        )
                    )
                answer["name"] = admin.name
                self._event("remove", admin.name, caller, admin.id)
            else:
                answer["tools"] = [spec.public() for spec in custom.list()]
        except ValueError as e:  # the definition refused (InvalidDefinition)
            self._event(admin.action, None, caller, admin.id, outcome="refused")
            return encode(admin_error(admin.id, admin.action, "invalid_definition", str(e)))
        # A definition may carry a command line with a secret in it: scrubbed like tool output.
        text = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
        return self.registry.scrubber.scrub(text).encode("utf-8", "surrogatepass")

    def _event(
        self, action: str, tool: str | None, caller: str, request_id: str, outcome: str = "ok"
    ) -> None:
        if self.audit is not None:
            self.audit.emit(
                "admin", action=action, tool=tool, outcome=outcome, by=caller, channel=CHANNEL,
                request_id=request_id,
            )  # fmt: skip
        else:
            log.info("custom tool %s: %s over MQTT by %s (%s)", tool, action, caller, outcome)
