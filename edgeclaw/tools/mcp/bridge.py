"""One MCP server's tool as a registry tool, and its results as tool results.

The registry validates the arguments against the server's own schema
(compiled like ours at registration), applies the policy, rate limits, scrubs
and caps the answer; this module only forwards the call and maps the answer:
text as text, images, audio and resources as one short note each (type, size,
MIME type), structured content as `data`.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from typing import Any

from edgeclaw.backends.mcp.manager import McpManager
from edgeclaw.backends.mcp.protocol import McpClosed, McpError, McpTimeout
from edgeclaw.errors import ToolError
from edgeclaw.tools.base import Args, ProgressSink, Tool, ToolContext, ToolResult
from edgeclaw.tools.progress import PacedProgress

log = logging.getLogger("edgeclaw.mcp")

MAX_DESCRIPTION_CHARS = 1024
# Seconds the registry's deadline leaves beyond the server's own timeout, so ours fires first and
# the server is told the call was cancelled.
DEADLINE_MARGIN_S = 5.0


class McpTool(Tool):
    """`mcp_{server}_{tool}`: a call forwarded to the server through the manager."""

    def __init__(
        self,
        manager: McpManager,
        *,
        server: str,
        remote_name: str,
        name: str,
        description: str,
        parameters: dict[str, Any],
        timeout_s: float,
        as_task: bool = False,
    ) -> None:
        self.manager = manager
        self.as_task = as_task  # the server runs it only as a task (taskSupport "required")
        self.server = server
        self.remote_name = remote_name
        self.name = name  # type: ignore[misc]  # instance values: one tool class, many tools
        self.group = f"mcp:{server}"  # type: ignore[misc]
        self.description = (description.strip() or f"{remote_name} (MCP server {server})")[  # type: ignore[misc]
            :MAX_DESCRIPTION_CHARS
        ]
        self.parameters = parameters  # type: ignore[misc]
        self.call_timeout_s = timeout_s
        self.timeout_s = timeout_s + DEADLINE_MARGIN_S  # type: ignore[misc]

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        # The server is asked for progress only when the caller can take it (ctx.progress): the
        # token goes with the call then, and what the server reports is passed on at a pace.
        paced = PacedProgress(self._logged(ctx.progress, ctx)) if ctx.progress is not None else None
        try:
            answer = await self.manager.call(
                self.server,
                self.remote_name,
                args,
                timeout_s=self.call_timeout_s,
                on_progress=paced,
                as_task=self.as_task,
            )
        except McpTimeout:
            raise ToolError(
                f"MCP server {self.server!r} did not answer within {self.call_timeout_s:g} s; "
                "the call was cancelled"
            ) from None
        except McpClosed as e:
            raise ToolError(str(e)) from None
        except McpError as e:
            raise ToolError(f"MCP server {self.server!r}: {e}") from None
        finally:
            if paced is not None:
                paced.close()
        return to_result(answer)

    def _logged(self, sink: ProgressSink, ctx: ToolContext) -> ProgressSink:
        def forward(done: float, total: float | None, message: str) -> None:
            of = f"/{total:g}" if total is not None else ""
            log.debug("%s for %s: progress %g%s %s", self.name, ctx.identity, done, of, message)
            sink(done, total, message)

        return forward


def _size_of_base64(data: object) -> int:
    if not isinstance(data, str):
        return 0
    try:
        return len(base64.b64decode(data, validate=False))
    except (binascii.Error, ValueError):
        return len(data) * 3 // 4


def _note(kind: str, mime: object, size: int, where: object = None) -> str:
    at = f" {where}" if isinstance(where, str) and where else ""
    return (
        f"[{kind}{at}: {mime if isinstance(mime, str) and mime else 'unknown type'}, {size} bytes, not shown]"
    )


def to_result(answer: dict[str, Any]) -> ToolResult:
    """A `tools/call` answer as a tool result."""
    parts: list[str] = []
    content = answer.get("content")
    for item in content if isinstance(content, list) else []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "text":
            parts.append(str(item.get("text", "")))
        elif kind in ("image", "audio"):
            parts.append(_note(kind, item.get("mimeType"), _size_of_base64(item.get("data"))))
        elif kind == "resource":
            res = item.get("resource") if isinstance(item.get("resource"), dict) else {}
            if isinstance(res.get("text"), str):
                size = len(res["text"].encode("utf-8", "surrogatepass"))
            else:
                size = _size_of_base64(res.get("blob"))
            parts.append(_note("resource", res.get("mimeType"), size, res.get("uri")))
        elif kind == "resource_link":
            size = item.get("size") if isinstance(item.get("size"), int) else 0
            parts.append(_note("resource link", item.get("mimeType"), size, item.get("uri")))
        else:
            parts.append(f"[{kind!s} content, not shown]")
    structured = answer.get("structuredContent")
    data = structured if isinstance(structured, dict) else None
    if not parts and structured is not None:
        parts.append(json.dumps(structured, ensure_ascii=False))
    text = "\n".join(parts) if parts else "(no content)"
    if answer.get("isError") is True:
        return ToolResult(for_llm=text, is_error=True, data=data)
    return ToolResult(for_llm=text, data=data)
