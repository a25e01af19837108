"""Memory, context files and skills built on first use, not at start-up.

With `[memory] enabled`, `build_runtime` names the memory tools (and
skill_search) to the registry and puts a stand-in router in front of the fs
tools; neither loads the memory modules (store, chunking, skills, the virtual
file system). The first of these builds them (`daemon.memory_build.build_memory`):
a memory tool called, listed or looked up; an fs call (the router must judge
its path); the agent loop being built (its prompt reads memory); a job's
output delivered to the daily note; `edgeclaw memory`. After that every
caller sees the same one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from edgeclaw.daemon.tool_families import memory_tool_groups
from edgeclaw.tools.fs import ROUTED_TOOLS

if TYPE_CHECKING:
    from edgeclaw.daemon.memory_build import MemoryRuntime
    from edgeclaw.daemon.runtime import Runtime
    from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
    from edgeclaw.tools.fs import PathRouter
    from edgeclaw.tools.workspace import Workspace


def install_memory_on_demand(runtime: Runtime, ws: Workspace) -> None:
    """Set the runtime up to build its memory on first use (nothing when memory is off)."""
    if not runtime.config.memory.enabled:
        return

    def build() -> MemoryRuntime:
        from edgeclaw.daemon.memory_build import build_memory

        return build_memory(runtime, ws)

    def tools() -> list[Tool]:
        return _built(runtime).tools

    runtime.memory_factory = build
    runtime.registry.register_deferred(memory_tool_groups(runtime.config), tools)
    router = MemoryFilesOnDemand(runtime)
    for name in ROUTED_TOOLS:
        tool: Any = runtime.registry.get(name)
        if tool is not None and hasattr(tool, "vfs"):
            tool.vfs = router


def _built(runtime: Runtime) -> MemoryRuntime:
    memory = runtime.memory
    if memory is None:  # only installed with memory on, so the factory is set
        raise RuntimeError("memory is on but its runtime was not built")
    return memory


class MemoryFilesOnDemand:
    """The fs tools' `PathRouter` until memory exists: the first call builds it, each forwards to
    its virtual file system (`tools.memory.vfs`)."""

    def __init__(self, runtime: Runtime) -> None:
        self._runtime = runtime

    def _files(self) -> PathRouter:
        return _built(self._runtime).files

    def route(self, tool: str, user_path: str) -> Any | None:
        return self._files().route(tool, user_path)

    def check(self, tool: str, route: Any, args: Args) -> None:
        self._files().check(tool, route, args)

    async def run(self, tool: str, route: Any, args: Args, ctx: ToolContext) -> ToolResult:
        return await self._files().run(tool, route, args, ctx)

    def root_note(self, ctx: ToolContext) -> str:
        return self._files().root_note(ctx)
