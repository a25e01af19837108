"""`edgeclaw memory export|import|reindex`: the memory store and context files from this shell."""

from __future__ import annotations

import argparse
import sys

from edgeclaw.cli.common import EXIT_OK, EXIT_REFUSED, EXIT_TOOL_ERROR, config_of


def cmd_memory(args: argparse.Namespace) -> int:
    import asyncio
    from pathlib import Path

    from edgeclaw.cli.memory_files import ExportError, export_memory, import_memory
    from edgeclaw.daemon.runtime import build_runtime

    # The embeddings provider's key may be missing from this shell: reindex then says it could not embed.
    runtime = build_runtime(config_of(args), require_secrets=False)
    memory = runtime.memory
    if memory is None:
        print("edgeclaw: memory is off in this configuration (memory.enabled = false)", file=sys.stderr)
        return EXIT_REFUSED
    store, contexts = memory.store, memory.contexts.store

    async def embed() -> str:
        if store.embedder is None:
            return "keyword search only: no embedder is configured (memory.embedder)"
        report = await store.embed_pending()
        done = f"embedded {report.embedded} chunks with {store.embedder.model}"
        return f"{done}, {report.pending} still pending" + (f" ({report.error})" if report.error else "")

    async def run() -> int:
        try:
            if args.memory_command == "export":
                exported = export_memory(store, contexts, Path(args.dir))
                print(
                    f"exported {exported.documents} memory documents and {exported.context_files} "
                    f"context files to {args.dir}"
                )
                return EXIT_OK
            if args.memory_command == "import":
                imported = import_memory(store, contexts, Path(args.dir), replace=args.replace)
                if imported.problems:
                    print(f"edgeclaw: nothing imported from {args.dir}:", file=sys.stderr)
                    for problem in imported.problems:
                        print(f"  {problem}", file=sys.stderr)
                    return EXIT_TOOL_ERROR
                print(
                    f"imported {imported.documents} memory documents and {imported.context_files} context "
                    f"files from {args.dir} ({imported.changed} changed); {await embed()}"
                )
                return EXIT_OK
            documents, chunks, report = await store.rebuild()
            if store.embedder is None:
                done = "keyword search only: no embedder is configured (memory.embedder)"
            else:
                done = (
                    f"embedded {report.embedded} chunks with {store.embedder.model}, {report.pending} pending"
                )
                done += f" ({report.error})" if report.error else ""
            print(f"reindexed {documents} documents into {chunks} chunks; {done}")
            return EXIT_TOOL_ERROR if report.error else EXIT_OK
        except ExportError as e:
            print(f"edgeclaw: {e}", file=sys.stderr)
            return EXIT_TOOL_ERROR
        finally:
            await runtime.aclose()

    return asyncio.run(run())
