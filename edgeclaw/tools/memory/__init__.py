"""The memory group and the virtual file system in front of the fs tools.

- `tools`: memory_search, memory_get, memory_store, memory_list, memory_forget;
- `vfs`: MEMORY.md, memory/**, the context files and skills/** routed away from the disk;
- `context`: which copy of a context file a caller reads and writes (open and predefined agents);
- `prompt_context`: what the system prompt takes from the store;
- `adopt`: the administrator's memory files (STATE/local), taken into the store once.

The store itself is `edgeclaw.store.memory` and `edgeclaw.store.context_files`.
"""
