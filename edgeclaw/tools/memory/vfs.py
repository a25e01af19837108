"""The virtual file system in front of the fs tools: some workspace paths live in the database.

`read_file`, `write_file`, `edit_file`, `file_append` and `list_files` ask
`VirtualFiles.route` first; a path it claims never reaches the disk:

- `MEMORY.md` (also spelled `memory.md`) and `memory/**` are memory
  documents (`store.memory`). A read sees the caller's own document, else the
  global one; a write, an edit or an append changes the caller's own (an edit
  of a global document makes the caller's own copy). A `.md` document is
  chunked and indexed on write, and its new chunks embedded.
- The seven context files (SOUL.md, IDENTITY.md, AGENTS.md, TOOLS.md,
  HEARTBEAT.md, USER.md, BOOTSTRAP.md) are routed by agent type
  (`tools.memory.context`). Writing BOOTSTRAP.md empty removes it. A write
  that would change the agent's own copy (a predefined agent's), which is in
  every caller's prompt, is refused unless the caller's channel is one of
  `memory.shared_writers` (the local CLI and console), as for global memory.
- `skills/**` is served, read-only, from the skill directories
  (`tools.skills.library`), whichever directory holds the skill.

The caller is `ToolContext.identity` (a console port, an MQTT signing key
or declared sender, a CLI user), so one MQTT sender's MEMORY.md is not
another's. Paths are judged by their text alone (after the workspace's own
syntax checks; an absolute path outside the root's own spelling is judged by
its real path, so the configured workspace path through a symlink is the same
workspace): nothing here opens a file of the workspace, and what is not
claimed goes on to the disk with every check the fs tools make there.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from typing import Literal

from edgeclaw.errors import ToolError, ToolRefused
from edgeclaw.records import dataclass
from edgeclaw.store.context_files import AGENT_SCOPE
from edgeclaw.store.memory import (
    GLOBAL,
    Document,
    MemoryStore,
    MemoryStoreError,
    PutResult,
    check_path,
)
from edgeclaw.tools.base import Args, ToolContext, ToolResult
from edgeclaw.tools.fs.files import ROUTED_TOOLS, render_lines, replace_text
from edgeclaw.tools.fs.workspace import Workspace, format_size
from edgeclaw.tools.memory.context import BOOTSTRAP, CONTEXT_FILES, DEFAULT_AGENT, ContextFiles, reads_disk
from edgeclaw.tools.skills.library import VIRTUAL_ROOT, SkillLibrary
from edgeclaw.wording import plural

WRITING_TOOLS = frozenset({"write_file", "edit_file", "file_append"})
MEMORY_DIR = "memory"
MEMORY_FILE = "MEMORY.md"
INLINE_BYTES = 64 * 1024  # bigger documents are chunked and indexed in a worker thread
EMBED_BACKLOG = 16  # chunks of earlier writes embedded after each write, when the embedder answers


@dataclass(frozen=True, slots=True)
class Route:
    kind: Literal["memory", "context", "skills"]
    path: str  # relative, normalised ("memory", "memory/x.md", "SOUL.md", "skills/NAME/SKILL.md")

    @property
    def is_memory_dir(self) -> bool:
        return self.kind == "memory" and self.path == MEMORY_DIR


def _whose(scope: str) -> str:
    return "global, shared by every caller" if scope == GLOBAL else "yours"


class VirtualFiles:
    def __init__(
        self,
        workspace: Workspace,
        memory: MemoryStore,
        contexts: ContextFiles,
        skills: SkillLibrary | None = None,
        *,
        local: Workspace | None = None,
        shared_writers: Iterable[str] = ("cli", "console"),
    ) -> None:
        self.ws = workspace
        self.memory = memory
        self.contexts = contexts
        self.skills = skills
        # The administrator's directory (daemon.local_dir): the default agent's own context files
        # when none is stored. Never the workspace, which any caller's command may write.
        self.local = local
        # The channels that may change what every caller's prompt holds (memory.shared_writers).
        self.shared_writers = frozenset(shared_writers)

    # -- which paths ---------------------------------------------------------------------------

    def route(self, tool: str, user_path: str) -> Route | None:
        """The route of `user_path`, or None when it is an ordinary workspace path.

        Refuses (ToolRefused) what the workspace would refuse by its text: NUL, '..', '~', ...
        """
        if tool not in ROUTED_TOOLS:
            return None
        self.ws.check_syntax(user_path)
        text = user_path
        if text.startswith("/"):
            root = self.ws.root.as_posix().rstrip("/")
            if not text.startswith(root + "/"):
                # Another spelling of the workspace (the configured path through a symlink, when
                # the root is its real path) is the same workspace: judge the real path.
                text = os.path.realpath(text)
                if not text.startswith(root + "/"):
                    return None  # the root itself, or outside: the fs tools decide
            text = text[len(root) + 1 :]
        parts = [p for p in text.split("/") if p not in ("", ".")]
        if not parts:
            return None
        rel = "/".join(parts)
        if rel in (MEMORY_FILE, "memory.md"):
            return Route("memory", MEMORY_FILE)
        if parts[0] == MEMORY_DIR:
            return Route("memory", rel)
        if len(parts) == 1 and rel in CONTEXT_FILES:
            return Route("context", rel)
        if parts[0] == VIRTUAL_ROOT and self.skills is not None:
            return Route("skills", rel)
        return None

    def check(self, tool: str, route: Route, args: Args) -> None:
        """What a dry run must refuse without touching anything."""
        if route.kind == "skills" and tool in WRITING_TOOLS:
            raise ToolRefused(
                f"refused path {args['path']!r}: skill directories are read-only for the fs tools "
                "(edit skills on the device's disk)"
            )
        if route.kind == "memory" and tool in WRITING_TOOLS:
            if route.is_memory_dir:
                raise ToolError(f"{args['path']!r} is a directory, not a file")
            try:
                check_path(route.path)
            except MemoryStoreError as e:
                raise ToolRefused(f"refused path {args['path']!r}: {e}") from None
        if tool == "write_file" or tool == "file_append":
            size = len(args["content"].encode("utf-8", errors="surrogatepass"))
            limit = self.memory.settings.max_document_bytes
            if size > limit:
                raise ToolRefused(
                    f"refused: content for {route.path} is {format_size(size)}, over the "
                    f"{format_size(limit)} limit of a stored file (memory.max_document_bytes)"
                )

    # -- running -------------------------------------------------------------------------------

    async def run(self, tool: str, route: Route, args: Args, ctx: ToolContext) -> ToolResult:
        self.check(tool, route, args)
        try:
            if route.kind == "skills":
                return self._skills(tool, route, args)
            if route.kind == "context":
                return self._context(tool, route, args, ctx)
            return await self._memory(tool, route, args, ctx)
        except MemoryStoreError as e:
            raise ToolError(str(e)) from None

    def root_note(self, ctx: ToolContext) -> str:
        """A line for `list_files .`: what lives in the database rather than on the disk."""
        names = [
            name for name in CONTEXT_FILES if self.contexts.read(ctx.agent_id, ctx.identity, name) is not None
        ]
        docs = self.memory.documents(ctx.identity)
        if any(d.path == MEMORY_FILE for d in docs):
            names.insert(0, MEMORY_FILE)
        below = sum(1 for d in docs if d.path.startswith(MEMORY_DIR + "/"))
        if below:
            names.append(f"{MEMORY_DIR}/ ({below} {'file' if below == 1 else 'files'})")
        if self.skills is not None:
            names.append(f"{VIRTUAL_ROOT}/ (read-only)")
        if not names:
            return ""
        return f"(stored by edgeclaw, not on disk, read and written with the fs tools: {', '.join(names)})"

    def _skills(self, tool: str, route: Route, args: Args) -> ToolResult:
        assert self.skills is not None
        rel = route.path.removeprefix(VIRTUAL_ROOT).strip("/")
        if tool == "list_files":
            rows = self.skills.listing(rel)
            shown = route.path
            lines = [f"[{shown}: {len(rows)} entries]", *rows] if rows else [f"[{shown}: empty directory]"]
            return _result("\n".join(lines))
        if not rel:
            raise ToolError(f"{route.path} is a directory; use list_files")
        data = self.skills.read(rel, self.ws.max_file_bytes)
        if b"\x00" in data[:8192]:
            raise ToolError(f"{route.path} is a binary file; only text files can be shown")
        text = data.decode("utf-8", errors="replace")
        return _result(render_lines(route.path, text, args.get("start_line", 1), args.get("end_line")))

    def _context(self, tool: str, route: Route, args: Args, ctx: ToolContext) -> ToolResult:
        name, agent, user = route.path, ctx.agent_id, ctx.identity
        if tool == "list_files":
            raise ToolError(f"{name} is a file, not a directory; use read_file")
        current = self.contexts.read(agent, user, name, lambda n: self._disk_context(n, agent))
        if tool == "read_file":
            if current is None:
                raise ToolError(f"no such file or directory: {args['path']!r}")
            where = ", from the device's local directory" if current.on_disk else ""
            shown = f"{name} ({current.placement.whose(current.scope)} context file{where})"
            return _result(
                render_lines(shown, current.content, args.get("start_line", 1), args.get("end_line"))
            )
        if ctx.parent_session:
            # Like the memory tools: a subagent (run perhaps under another, predefined agent) does not
            # rewrite what every later conversation of an agent reads as its own.
            raise ToolRefused(f"{name}: a subagent may read context files, not change them")
        if tool == "write_file":
            content = args["content"]
        elif tool == "file_append":
            content = (current.content if current else "") + args["content"]
        else:
            if current is None:
                raise ToolError(f"no such file or directory: {args['path']!r}")
            content, message = replace_text(
                current.content, args["old_text"], args["new_text"], args.get("replace_all", False), name
            )
            if content == current.content:
                return _result(message)
        self._check_shared_write(ctx, name, content)
        scope, created = self.contexts.write(agent, user, name, content)
        placement = self.contexts.placement(agent, user, name)
        whose = placement.whose(scope)
        if name == "BOOTSTRAP.md" and not content.strip():
            return _result(f"removed {name} ({whose} copy): the first-run instructions are done")
        verb = {"write_file": "created" if created else "overwrote", "file_append": "appended to"}.get(
            tool, "edited"
        )
        size = format_size(len(content.encode("utf-8")))
        return _result(f"{verb} {name} ({whose} context file; {size}, {_line_count(content)} lines)")

    def _check_shared_write(self, ctx: ToolContext, name: str, content: str) -> None:
        """The agent's own copy (a predefined agent's) is in every caller's prompt: only the device's
        administrator changes it, as for the global memory. Ending the first run (BOOTSTRAP.md
        written empty) puts no text into anyone's prompt, and is anyone's."""
        if self.contexts.placement(ctx.agent_id, ctx.identity, name).write != AGENT_SCOPE:
            return
        if ctx.channel in self.shared_writers or (name == BOOTSTRAP and not content.strip()):
            return
        raise ToolRefused(
            f"{name} of agent {ctx.agent_id!r} is the agent's own, in every caller's system prompt: only "
            f"the local CLI or console changes it (memory.shared_writers: "
            f"{', '.join(sorted(self.shared_writers)) or 'none'}); you are {ctx.identity}"
        )

    def _disk_context(self, name: str, agent: str = DEFAULT_AGENT) -> str | None:
        """The agent's own context file from the local directory, when none is stored (one safe
        open); only the default agent has one there (`reads_disk`)."""
        if not reads_disk(agent) or self.local is None:
            return None
        try:
            content = self.local.read_file(self.local.resolve(name), shown=name)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise ToolError(f"cannot read {name}: {e.strerror or e}") from None
        return content.data.decode("utf-8", errors="replace")

    async def _memory(self, tool: str, route: Route, args: Args, ctx: ToolContext) -> ToolResult:
        user = ctx.identity
        if tool == "list_files":
            return self._list_memory(route, args, user)
        if route.is_memory_dir:
            raise ToolError(f"{args['path']!r} is a directory; use list_files")
        if tool == "read_file":
            doc = self.memory.visible(route.path, user)
            if doc is None:
                raise ToolError(f"no such file or directory: {args['path']!r}")
            shown = f"{route.path} (memory, {_whose(doc.scope)}, {doc.category})"
            return _result(render_lines(shown, doc.content, args.get("start_line", 1), args.get("end_line")))
        messages: list[str] = []

        def change(current: Document | None) -> str:
            if tool == "write_file":
                return args["content"]
            if tool == "file_append":
                return (current.content if current else "") + args["content"]
            if current is None:
                raise ToolError(f"no such file or directory: {args['path']!r}")
            updated, message = replace_text(
                current.content,
                args["old_text"],
                args["new_text"],
                args.get("replace_all", False),
                route.path,
            )
            messages.append(message)
            return updated

        size = len(args.get("content", "")) + (len(args.get("new_text", "")) if tool == "edit_file" else 0)
        update = self.memory.update
        if size > INLINE_BYTES:
            result = await asyncio.to_thread(update, route.path, user, change, fallback_scope=GLOBAL)
        else:
            result = update(route.path, user, change, fallback_scope=GLOBAL)
        note = await self.embed_after_write(result)
        if tool == "edit_file":
            text = messages[-1] if messages else f"edited {route.path}"
        elif tool == "file_append":
            text = f"appended {format_size(len(args['content'].encode()))} to {route.path}"
        else:
            text = f"{'created' if result.created else 'overwrote'} {route.path}"
        content = result.document.content
        text += f" (memory, yours; {format_size(len(content.encode()))}, {_line_count(content)} lines"
        text += f"; {plural(result.chunks, 'chunk')} indexed)" if result.changed and result.chunks else ")"
        return _result(text + (f"\n({note})" if note else ""))

    async def embed_after_write(self, result: PutResult) -> str:
        """Embed what the write made new (and a little of the backlog); a note when it could not be."""
        if self.memory.embedder is None or not result.changed:
            return ""
        report = await self.memory.embed_pending(result.new_hashes, limit=EMBED_BACKLOG)
        if report.error:
            return f"not embedded yet, found by keywords until it is: {report.error}"
        return ""

    def _list_memory(self, route: Route, args: Args, user: str) -> ToolResult:
        if not route.is_memory_dir and not route.path.startswith(MEMORY_DIR + "/"):
            raise ToolError(f"{route.path} is a file, not a directory; use read_file")
        docs = self.memory.documents(user, prefix=route.path)
        if route.path != MEMORY_DIR and any(d.path == route.path for d in docs):
            raise ToolError(f"{route.path} is a file, not a directory; use read_file")
        if not args.get("recursive", False):
            depth = route.path.count("/") + 1
            dirs = sorted(
                {"/".join(d.path.split("/")[: depth + 1]) for d in docs if d.path.count("/") > depth}
            )
            files = [d for d in docs if d.path.count("/") == depth]
        else:
            dirs, files = [], docs
        limit = args.get("max_entries", 200)
        rows = [f"{d}/" for d in dirs] + [
            f"{d.path}  ({d.category}, {format_size(d.size)}, {_whose(d.scope)})" for d in files
        ]
        if not rows:
            return _result(f"[{route.path}: empty directory]")
        shown = rows[:limit]
        more = "+" if len(rows) > limit else ""
        lines = [f"[{route.path}: {len(shown)}{more} entries (memory)]", *shown]
        if len(rows) > limit:
            lines.append(f"(truncated at {limit} entries; list a subdirectory or raise max_entries)")
        return _result("\n".join(lines))


def _line_count(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _result(text: str) -> ToolResult:
    return ToolResult(for_llm=text, for_user=text)
