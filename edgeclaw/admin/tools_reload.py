"""The gateway tool's `reload_tools`: runtime custom tools taken again from the database, and the
MCP servers that are not connected tried again.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from edgeclaw.tools.audit import AuditTrail
    from edgeclaw.tools.registry import Registry


class McpServers(Protocol):
    def retry(self) -> list[str]:
        """The names of the servers tried again."""
        ...


class ToolsHost(Protocol):
    """What reloading reads: the registry with its custom tools, the MCP servers, the audit trail."""

    @property
    def registry(self) -> Registry: ...
    @property
    def mcp(self) -> McpServers | None: ...
    @property
    def audit(self) -> AuditTrail: ...


def reload_custom_tools(runtime: ToolsHost) -> dict[str, Any]:
    from edgeclaw.tools.runtime.custom import custom_tools_for

    custom = custom_tools_for(runtime.registry)
    if custom is None and runtime.mcp is not None:
        return retry_mcp_servers(runtime, {"text": "no custom tools here (the shell tools are off)"})
    if custom is None:
        from edgeclaw.errors import ToolError

        raise ToolError("custom tools are not available here (the shell tools are off)")
    stored = {row.name for row in custom.store().list()}
    gone = [s.name for s in custom.list() if s.source != "config" and s.name not in stored]
    for name in gone:
        custom.remove(name)
    loaded = custom.load_stored()
    text = f"custom tools reloaded: {len(loaded)} from the database" + (
        f", {len(gone)} removed" if gone else ""
    )
    runtime.audit.emit("admin", action="reload_tools", loaded=len(loaded), removed=len(gone))
    return retry_mcp_servers(runtime, {"text": text, "loaded": sorted(loaded), "removed": gone})


def retry_mcp_servers(runtime: ToolsHost, report: dict[str, Any]) -> dict[str, Any]:
    """The MCP servers that are not connected (a failed one included) are tried again now."""
    if runtime.mcp is None:
        return report
    retried = runtime.mcp.retry()
    if retried:
        runtime.audit.emit("admin", action="mcp_retry", servers=retried)
        report["text"] += f"; MCP servers tried again: {', '.join(retried)}"
    report["mcp_retried"] = retried
    return report
