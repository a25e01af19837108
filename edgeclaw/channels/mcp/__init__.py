"""edgeclaw's own tools served to MCP clients: the channel `mcp`.

`server.py` is the protocol (sessions, initialize, tools/list, tools/call,
elicitation for approvals, list-changed notifications); `stdio.py`,
`http.py` (on the small HTTP/1.1 server in `edgeclaw/net/httpd.py`) and `mqtt.py` carry it.
"""

from edgeclaw.channels.mcp.server import CHANNEL, McpServer, ServedSession

__all__ = ["CHANNEL", "McpServer", "ServedSession"]
