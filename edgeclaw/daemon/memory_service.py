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

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from edgeclaw.tool_groups import memory_tool_groups
from edgeclaw.tools.fs.files import ROUTED_TOOLS

if TYPE_CHECKING:
    from edgeclaw.config.schema import Config
    from edgeclaw.daemon.memory_build import MemoryRuntime
    from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
    from edgeclaw.tools.fs.files import PathRouter
    from edgeclaw.tools.registry import Registry


class MemoryService:
    """Memory built by its first use through `factory` (None with memory off), then shared."""

    def __init__(self, factory: Callable[[], MemoryRuntime] | None) -> None:
        self.factory = factory
        self.built: MemoryRuntime | None = None

    def get(self) -> MemoryRuntime | None:
        """Built now if it is not yet; None with memory off. A build that fails raises, and the next
        use tries again."""
        if self.built is None and self.factory is not None:
            self.built = self.factory()
        return self.built

    def require(self) -> MemoryRuntime:
        memory = self.get()
        if memory is None:  # only installed with memory on, so the factory is set
            raise RuntimeError("memory is on but its runtime was not built")
        return memory


def install_memory_service(config: Config, registry: Registry, memory: MemoryService) -> None:
    """Name the memory tools to the registry and stand in for the fs tools' virtual file system
    until memory is first used (nothing when memory is off)."""
    if not config.memory.enabled:
        return

    def tools() -> list[Tool]:
        return memory.require().tools

    registry.register_deferred(memory_tool_groups(config), tools)
    router = MemoryFilesOnDemand(memory)
    for name in ROUTED_TOOLS:
        tool: Any = registry.get(name)
        if tool is not None and hasattr(tool, "vfs"):
            tool.vfs = router


class MemoryFilesOnDemand:
    """The fs tools' `PathRouter` until memory exists: the first call builds it, each forwards to
    its virtual file system (`tools.memory.vfs`)."""

    def __init__(self, memory: MemoryService) -> None:
        self._memory = memory

    def _files(self) -> PathRouter:
        return self._memory.require().files

    def route(self, tool: str, user_path: str) -> Any | None:
        return self._files().route(tool, user_path)

    def check(self, tool: str, route: Any, args: Args) -> None:
        self._files().check(tool, route, args)

    async def run(self, tool: str, route: Any, args: Args, ctx: ToolContext) -> ToolResult:
        return await self._files().run(tool, route, args, ctx)

    def root_note(self, ctx: ToolContext) -> str:
        return self._files().root_note(ctx)
