"""The memory group: `memory_search`, `memory_get`, `memory_store`, `memory_list`, `memory_forget`.

Every call is the caller's (`ToolContext.identity`): it stores into and
forgets from its own memory, and sees its own first, then the global memory
every caller shares. Writing the shared memory (`shared: true`) is for people
at the device: the channels named in `memory.shared_writers` (the CLI and the
console by default), so a remote caller cannot put text into every other
caller's prompt.

A key names a document `memory/KEY.md`; the virtual file system shows the
same documents to `read_file` and friends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any, ClassVar

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.store.memory import (
    BUILTIN_CATEGORIES,
    GLOBAL,
    MemoryStore,
    MemoryStoreError,
    check_category,
    check_path,
    key_path,
)
from edgeclaw.tools.base import Args, Tool, ToolContext, ToolResult
from edgeclaw.tools.memory.vfs import MEMORY_DIR, MEMORY_FILE, VirtualFiles

MAX_HIT_CHARS = 600  # of each search result's text; memory_get shows a whole document


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _schema(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


_KEY = {
    "type": "string",
    "minLength": 1,
    "maxLength": 128,
    "description": "A short name such as 'greenhouse_fan' (letters, digits, '_', '.', '-'; "
    "'/' between parts).",
}
_CATEGORY = {
    "type": "string",
    "minLength": 1,
    "maxLength": 32,
    "description": "core (lasting facts), daily (today's notes; they fade in search), conversation, "
    "or a word of your own.",
}
_SHARED = {
    "type": "boolean",
    "description": "The global memory every caller sees instead of the caller's own (default false; "
    "only from the channels in memory.shared_writers).",
}


def _path_of(key: str) -> str:
    """A key or a path (MEMORY.md, memory/...) as a document path."""
    if key in (MEMORY_FILE, "memory.md"):
        return MEMORY_FILE
    if key.startswith(MEMORY_DIR + "/"):
        return check_path(key)
    return key_path(key)


class _MemoryTool(Tool):
    group: ClassVar[str] = "memory"

    def __init__(self, memory: MemoryStore, files: VirtualFiles, shared_writers: Iterable[str] = ()) -> None:
        self.memory = memory
        self.files = files
        self.shared_writers = frozenset(shared_writers)

    def _scope(self, args: Args, ctx: ToolContext) -> str:
        if not args.get("shared", False):
            return ctx.identity
        if ctx.channel not in self.shared_writers:
            allowed = ", ".join(sorted(self.shared_writers)) or "none"
            raise ToolRefused(
                f"refused: the shared memory is written only from the channels in memory.shared_writers "
                f"({allowed}), not from {ctx.channel}; store it in your own memory instead"
            )
        return GLOBAL


class MemorySearchTool(_MemoryTool):
    name = "memory_search"
    observes_only = True
    description = (
        "Search what was remembered (facts stored with memory_store, MEMORY.md, memory/ files): by keywords "
        "and, when an embedder is configured, by meaning. Results carry score, path, category and time."
    )
    parameters = _schema(
        {
            # Below 1024: some local servers' grammar builders fail on longer limits.
            "query": {
                "type": "string",
                "minLength": 1,
                "maxLength": 1000,
                "description": "What to look for.",
            },
            "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Results (default 5)."},
            "category": _CATEGORY,
            "diversify": {
                "type": "boolean",
                "description": "Prefer results unlike each other (MMR) over near-duplicates (default false).",
            },
        },
        ["query"],
    )

    async def check(self, args: Args, ctx: ToolContext) -> None:
        if "category" in args:
            try:
                check_category(args["category"])
            except MemoryStoreError as e:
                raise ToolRefused(str(e)) from None

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        found = await self.memory.search(
            args["query"],
            ctx.identity,
            limit=args.get("limit", 5),
            category=args.get("category"),
            diversify=args.get("diversify", False),
        )
        lines = []
        results = []
        for i, hit in enumerate(found.hits, 1):
            whose = "global" if hit.scope == GLOBAL else "yours"
            where = f" [{hit.heading}]" if hit.heading else ""
            text = hit.text if len(hit.text) <= MAX_HIT_CHARS else hit.text[:MAX_HIT_CHARS] + " ..."
            lines.append(
                f"{i}. {hit.path}{where} ({hit.category}, {whose}, {iso(hit.updated)}, "
                f"score {hit.score:.4f}, lines {hit.start_line}-{hit.end_line})\n   "
                + text.replace("\n", "\n   ")
            )
            results.append(
                {
                    "path": hit.path,
                    "key": hit.key,
                    "scope": "global" if hit.scope == GLOBAL else "user",
                    "category": hit.category,
                    "score": round(hit.score, 6),
                    "updated": iso(hit.updated),
                    "heading": hit.heading,
                    "lines": [hit.start_line, hit.end_line],
                    "text": text,
                }
            )
        if not lines:
            lines.append(f"nothing remembered matches {args['query']!r}")
        lines.append(
            f"({found.note})" if found.note else "(hybrid search: keywords and meaning, fused by rank)"
        )
        data = {"mode": found.mode, "note": found.note or None, "results": results}
        return ToolResult(for_llm="\n".join(lines), data=data)


class MemoryGetTool(_MemoryTool):
    name = "memory_get"
    observes_only = True
    description = (
        "Read one remembered document whole: by the key given to memory_store, or by path "
        "(MEMORY.md, memory/NAME.md). The caller's own comes first, else the global one."
    )
    parameters = _schema(
        {
            "key": {**_KEY, "description": "The key given to memory_store."},
            "path": {"type": "string", "minLength": 1, "maxLength": 512, "description": "Or a path."},
        },
        [],
    )

    def _path(self, args: Args) -> str:
        given = [n for n in ("key", "path") if n in args]
        if len(given) != 1:
            raise ToolRefused("memory_get: give exactly one of key and path")
        try:
            return _path_of(args[given[0]])
        except MemoryStoreError as e:
            raise ToolRefused(str(e)) from None

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self._path(args)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        path = self._path(args)
        doc = self.memory.visible(path, ctx.identity)
        if doc is None:
            raise ToolError(f"nothing is remembered at {path} (memory_list shows what is)")
        whose = "global" if doc.scope == GLOBAL else "yours"
        header = f"[{doc.path} ({doc.category}, {whose}, updated {iso(doc.updated)})]"
        data = {
            "path": doc.path,
            "key": doc.key,
            "scope": "global" if doc.scope == GLOBAL else "user",
            "category": doc.category,
            "updated": iso(doc.updated),
            "content": doc.content,
        }
        return ToolResult(for_llm=f"{header}\n{doc.content}", data=data)


class MemoryStoreTool(_MemoryTool):
    name = "memory_store"
    description = (
        "Remember something across sessions and restarts: content under a key, with a category "
        "(core, daily, conversation, or your own). Storing under an existing key replaces it."
    )
    parameters = _schema(
        {
            "key": _KEY,
            # No maxLength: memory.max_document_bytes bounds it (and long limits upset some servers).
            "content": {"type": "string", "minLength": 1, "description": "What to remember."},
            "category": _CATEGORY,
            "shared": _SHARED,
        },
        ["key", "content"],
    )

    def _prepare(self, args: Args, ctx: ToolContext) -> tuple[str, str, str]:
        try:
            path = key_path(args["key"])
            category = check_category(args.get("category", "core"))
        except MemoryStoreError as e:
            raise ToolRefused(str(e)) from None
        return path, category, self._scope(args, ctx)

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self._prepare(args, ctx)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        path, category, scope = self._prepare(args, ctx)
        try:
            result = self.memory.put(path, args["content"], scope=scope, category=category)
        except MemoryStoreError as e:
            raise ToolError(str(e)) from None
        note = await self.files.embed_after_write(result)
        whose = "the shared memory" if scope == GLOBAL else "your memory"
        verb = "stored" if result.created else ("replaced" if result.changed else "already had")
        text = f"{verb} {args['key']!r} in {whose} ({category}; {path})"
        if category not in BUILTIN_CATEGORIES:
            text += f"; {category!r} is a category of your own"
        text += f"\n({note})" if note else ""
        data = {"key": args["key"], "path": path, "category": category, "shared": scope == GLOBAL}
        return ToolResult(for_llm=text, data=data)


class MemoryListTool(_MemoryTool):
    name = "memory_list"
    observes_only = True
    description = "List what is remembered (the caller's own and the global memory), optionally one category."
    parameters = _schema({"category": _CATEGORY}, [])

    async def check(self, args: Args, ctx: ToolContext) -> None:
        if "category" in args:
            try:
                check_category(args["category"])
            except MemoryStoreError as e:
                raise ToolRefused(str(e)) from None

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        await self.check(args, ctx)
        docs = self.memory.documents(ctx.identity, category=args.get("category"))
        if not docs:
            what = f" in category {args['category']!r}" if "category" in args else ""
            return ToolResult(for_llm=f"nothing is remembered{what}")
        lines = [
            f"{d.key or d.path}  ({d.category}, {'global' if d.scope == GLOBAL else 'yours'}, "
            f"{iso(d.updated)}, {d.size} bytes): {d.first_line}"
            for d in docs
        ]
        data = {
            "entries": [
                {
                    "key": d.key,
                    "path": d.path,
                    "category": d.category,
                    "scope": "global" if d.scope == GLOBAL else "user",
                    "updated": iso(d.updated),
                    "bytes": d.size,
                }
                for d in docs
            ]
        }
        return ToolResult(for_llm="\n".join(lines), data=data)


class MemoryForgetTool(_MemoryTool):
    name = "memory_forget"
    description = (
        "Forget a remembered document of the caller's own (by key, or a path such as memory/NAME.md); "
        "shared: true forgets it from the global memory."
    )
    parameters = _schema({"key": {**_KEY, "maxLength": 512}, "shared": _SHARED}, ["key"])

    def _prepare(self, args: Args, ctx: ToolContext) -> tuple[str, str]:
        try:
            path = _path_of(args["key"])
        except MemoryStoreError as e:
            raise ToolRefused(str(e)) from None
        return path, self._scope(args, ctx)

    async def check(self, args: Args, ctx: ToolContext) -> None:
        self._prepare(args, ctx)

    async def execute(self, args: Args, ctx: ToolContext) -> ToolResult:
        path, scope = self._prepare(args, ctx)
        if not self.memory.delete(path, scope):
            where = "the shared memory" if scope == GLOBAL else "your memory"
            hint = ""
            if scope != GLOBAL and self.memory.document(path, GLOBAL) is not None:
                hint = " (it is in the shared memory: shared: true forgets it there)"
            raise ToolError(f"nothing is remembered at {path} in {where}{hint}")
        whose = "the shared memory" if scope == GLOBAL else "your memory"
        return ToolResult(
            for_llm=f"forgot {args['key']!r} ({path}) from {whose}",
            data={"path": path, "shared": scope == GLOBAL},
        )


def memory_tools(memory: MemoryStore, files: VirtualFiles, shared_writers: Iterable[str]) -> list[Tool]:
    writers = tuple(shared_writers)
    return [
        MemorySearchTool(memory, files, writers),
        MemoryGetTool(memory, files, writers),
        MemoryStoreTool(memory, files, writers),
        MemoryListTool(memory, files, writers),
        MemoryForgetTool(memory, files, writers),
    ]
