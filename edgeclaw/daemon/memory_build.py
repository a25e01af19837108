"""Build memory, context files and skills from `[memory]` and `[skills]`; shared by run, chat and the CLI.

Built on first use (`daemon.memory_service`): this module and what it imports load then.

The embedder talks to a configured provider's server through the same
request path and retry policy as the chat providers (`agent.providers`): it
is built here, where the daemon may import both layers, and handed down to
the store and the skills as a plain `Embedder`.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from edgeclaw.backends.embeddings import HttpEmbedder, embeddings_url
from edgeclaw.config.schema import AgentType, Config
from edgeclaw.records import dataclass
from edgeclaw.store.context_files import ContextFileStore
from edgeclaw.store.memory import MemorySettings, MemoryStore
from edgeclaw.tools.fs.workspace import Workspace
from edgeclaw.tools.memory.adopt import adopt_local_memory
from edgeclaw.tools.memory.context import AgentTypes, ContextFiles
from edgeclaw.tools.memory.prompt_context import PromptContext
from edgeclaw.tools.memory.tools import memory_tools
from edgeclaw.tools.memory.vfs import VirtualFiles
from edgeclaw.tools.skills.library import BUILTIN_DIR, SkillLibrary, SkillRoot
from edgeclaw.tools.skills.tool import SkillSearchTool

if TYPE_CHECKING:
    from edgeclaw.store.db import Database
    from edgeclaw.tools.base import Tool

log = logging.getLogger("edgeclaw.memory")

# Registers a release step with the runtime's lifecycle (`daemon.hooks.Lifecycle.on_close`).
OnClose = Callable[[Callable[[], Awaitable[None]]], None]


@dataclass
class MemoryRuntime:
    store: MemoryStore
    contexts: ContextFiles
    files: VirtualFiles
    prompt: PromptContext
    skills: SkillLibrary | None
    embedder: HttpEmbedder | None
    # memory_* and, with skills on, skill_search: the names `edgeclaw.tool_groups` gives for them.
    tools: list[Tool]


def build_memory(
    config: Config,
    ws: Workspace,
    local: Workspace | None,
    *,
    database: Callable[[], Database],
    secrets: Mapping[str, str],
    scrub: Callable[[str], str],
    on_close: OnClose,
) -> MemoryRuntime:
    """The memory store, context files, skills, the virtual file system for the fs tools and the
    memory tools, for a config with memory on. `local` is the administrator's directory
    (`daemon.local_dir`): the only files on disk that reach the global memory, the default agent's
    context files and the skills besides the configured and system ones; never the workspace's."""
    m = config.memory
    embedder = build_embedder(config, secrets, scrub, on_close)
    settings = MemorySettings(
        chunk_tokens=m.chunk_tokens,
        overlap_tokens=m.chunk_overlap_tokens,
        max_document_bytes=m.max_document_bytes,
        daily_half_life_days=m.daily_half_life_days,
        mmr_lambda=m.mmr_lambda,
    )
    # The database opens on first use, as for sessions: a `tool call` that needs none never opens it.
    store = MemoryStore(
        database,
        settings=settings,
        embedder=embedder,
        on_open=lambda s: adopt_local_memory(local, ws, s),
    )
    contexts = ContextFiles(
        ContextFileStore(database),
        AgentTypes(agent_types(config)),
        bootstrap_max_turns=m.bootstrap_max_turns,
    )
    skills = build_skills(config, ws, local, embedder) if config.skills.enabled else None
    files = VirtualFiles(ws, store, contexts, skills, local=local, shared_writers=m.shared_writers)
    tools = memory_tools(store, files, m.shared_writers)
    if skills is not None:
        tools.append(SkillSearchTool(skills))
    prompt = PromptContext(
        contexts,
        store,
        skills,
        memory_chars=m.prompt_memory_chars,
        max_skills=config.skills.prompt_max,
    )
    return MemoryRuntime(store, contexts, files, prompt, skills, embedder, tools)


def agent_types(config: Config) -> dict[str, AgentType]:
    """Each agent's type: `[agents.NAME] type`, else the older `memory.agent_types` entry (the
    loader refuses the two disagreeing); agents named in neither are open."""
    types: dict[str, AgentType] = dict(config.memory.agent_types)
    types.update({name: a.type for name, a in config.agents.items() if a.type is not None})
    return types


def build_skills(
    config: Config, ws: Workspace, local: Workspace | None, embedder: HttpEmbedder | None
) -> SkillLibrary:
    """The skill directories: the administrator's (STATE/local/skills), the configured ones, the
    system one. Never the workspace's `skills/`: any caller's command may write there."""
    s = config.skills
    limit = ws.max_file_bytes
    roots = [SkillRoot("local", local, "skills")] if local is not None else []
    for d in s.dirs:
        root = Workspace(Path(d), max_file_bytes=limit)
        if ws.contains(root.root):
            log.warning("skills.dirs: %s is in the workspace, where any caller's commands write: not used", d)
            continue
        roots.append(SkillRoot("configured", root))
    system = Path(s.system_dir) if s.system_dir else BUILTIN_DIR
    roots.append(SkillRoot("system", Workspace(system, max_file_bytes=limit)))
    return SkillLibrary(roots, embedder=embedder)


def build_embedder(
    config: Config, secrets: Mapping[str, str], scrub: Callable[[str], str], on_close: OnClose
) -> HttpEmbedder | None:
    """The configured provider's embeddings endpoint, or None (keyword search only); `scrub` keeps
    the secrets out of its requests, and its HTTP client is released through `on_close`."""
    m = config.memory
    if not m.embedder:
        return None
    from edgeclaw.agent.providers.chain import RetryPolicy
    from edgeclaw.agent.providers.endpoints import provider_url
    from edgeclaw.agent.providers.http import SharedClient, post_json

    provider = config.providers[m.embedder]
    client = SharedClient()  # created on the first request; closed with the runtime
    on_close(client.aclose)
    label = f"{m.embedder} embeddings"

    def post(url: str, body: dict[str, Any], headers: dict[str, str], timeout_s: float) -> Any:
        return post_json(client.get(), label, url, body, headers, timeout_s)

    return HttpEmbedder(
        m.embedder,
        api=m.embedding_api,
        url=embeddings_url(m.embedding_api, provider_url(provider)),
        model=m.embedding_model,
        post=post,
        retry=RetryPolicy(attempts=m.embedding_attempts, max_retry_after_s=config.agent.max_retry_after_s),
        api_key=secrets.get(f"providers.{m.embedder}", ""),
        batch_size=m.embedding_batch,
        timeout_s=m.embedding_timeout_s,
        cooldown_s=m.embedding_cooldown_s,
        scrub=scrub,
    )
