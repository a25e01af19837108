"""`edgeclaw memory export DIR|import DIR|reindex`: the store as plain files and back, all or nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from edgeclaw.cli.memory_files import ExportError, export_memory, import_memory
from edgeclaw.store.context_files import ContextFileStore
from edgeclaw.store.db import Database
from edgeclaw.store.memory import GLOBAL, MemoryStore


def stores(path: Path) -> tuple[MemoryStore, ContextFileStore]:
    db = Database(path)
    return MemoryStore(db), ContextFileStore(db)


def fill(memory: MemoryStore, contexts: ContextFileStore) -> None:
    memory.put("MEMORY.md", "# Site\n\nGreenhouse 6.\n", scope=GLOBAL)
    clock = memory._clock
    memory._clock = lambda: clock() + 3600  # changed an hour later: created and updated differ
    memory.put("MEMORY.md", "# Site\n\nGreenhouse 7.\n", scope=GLOBAL)
    memory._clock = clock
    memory.put("memory/fan.md", "Fan on GPIO 22.", scope="console:/dev/ttyGS0", category="core")
    memory.put("memory/daily/2026-01-02.md", "Pump checked.", scope="mqtt:sender:ops", category="daily")
    memory.put("memory/odd.md", "custom", scope="cli:root", category="site_notes")
    contexts.put("main", "", "SOUL.md", "Be brief.")
    contexts.put("main", "mqtt:sender:ops", "USER.md", "Ops prefers JSON.")
    contexts.remove("main", "cli:root", "BOOTSTRAP.md", tombstone=True)


def tree(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def test_export_then_import_into_a_fresh_database_round_trips_everything(tmp_path):
    memory, contexts = stores(tmp_path / "a.db")
    fill(memory, contexts)
    first = tmp_path / "export1"
    report = export_memory(memory, contexts, first)
    assert (report.documents, report.context_files) == (4, 3)
    files = tree(first)
    assert files["memory/global/MEMORY.md"] == "# Site\n\nGreenhouse 7.\n"
    assert files["memory/users/console:=2Fdev=2FttyGS0/memory/fan.md"] == "Fan on GPIO 22."
    assert files["context/main/users/mqtt:sender:ops/USER.md"] == "Ops prefers JSON."
    assert "context/main/users/cli:root/BOOTSTRAP.md" not in files  # a tombstone has no file
    assert oct(os.stat(first / "memory/global/MEMORY.md").st_mode & 0o777) == "0o600"

    memory2, contexts2 = stores(tmp_path / "b.db")
    imported = import_memory(memory2, contexts2, first)
    assert imported.problems == [] and (imported.documents, imported.context_files) == (4, 3)
    second = tmp_path / "export2"
    export_memory(memory2, contexts2, second)
    assert tree(second) == files
    manifest1, manifest2 = (json.loads((d / "manifest.json").read_text()) for d in (first, second))
    assert manifest1["documents"] == manifest2["documents"]
    site = next(d for d in manifest1["documents"] if d["path"] == "MEMORY.md")
    assert site["created"] != site["updated"]  # both kept
    assert manifest1["context_files"] == manifest2["context_files"]
    assert memory2.document("memory/odd.md", "cli:root").category == "site_notes"
    assert contexts2.get("main", "cli:root", "BOOTSTRAP.md").removed
    assert memory2.check_consistency() == []


def test_an_edited_file_is_taken_back_and_replace_drops_what_is_gone(tmp_path):
    memory, contexts = stores(tmp_path / "a.db")
    fill(memory, contexts)
    out = tmp_path / "out"
    export_memory(memory, contexts, out)
    (out / "memory/global/MEMORY.md").write_text("# Site\n\nGreenhouse 8 now.\n")
    (out / "memory/global/memory").mkdir()
    (out / "memory/global/memory/new.md").write_text("A note made in an editor.")  # no manifest entry
    (out / "memory/users/cli:root/memory/odd.md").unlink()
    report = import_memory(memory, contexts, out)
    assert report.problems == [] and report.changed == 2
    assert memory.document("MEMORY.md", GLOBAL).content == "# Site\n\nGreenhouse 8 now.\n"
    assert memory.document("memory/new.md", GLOBAL).category == "core"
    assert memory.document("memory/odd.md", "cli:root") is not None  # kept without --replace
    import_memory(memory, contexts, out, replace=True)
    assert memory.document("memory/odd.md", "cli:root") is None


def test_an_import_with_any_bad_file_changes_nothing_and_names_each(tmp_path):
    memory, contexts = stores(tmp_path / "a.db")
    fill(memory, contexts)
    out = tmp_path / "out"
    export_memory(memory, contexts, out)
    secret = tmp_path / "shadow"
    secret.write_text("root:$6$hash")
    os.symlink(secret, out / "memory/global/memory.md")
    (out / "memory/global/MEMORY.md").write_text("changed")
    (out / "memory/global/bad.md").write_bytes(b"\xff\xfe not utf-8")
    (out / "context/main/NOTES.md").write_text("not a context file")
    report = import_memory(memory, contexts, out)
    assert len(report.problems) == 3, report.problems
    joined = "\n".join(report.problems)
    assert "memory/global/memory.md" in joined and "symlink" in joined
    assert "bad.md: not UTF-8" in joined and "'NOTES.md' is not a context file" in joined
    assert memory.document("MEMORY.md", GLOBAL).content == "# Site\n\nGreenhouse 7.\n"
    assert memory.document("memory.md", GLOBAL) is None


@pytest.mark.parametrize("identity", ["console:/dev/ttyGS0", "mqtt:sender:a=b c", "..", ".x", "ünï/%2e", ""])
def test_identities_become_file_names_and_come_back_exactly(identity):
    from edgeclaw.cli.memory_files import escape, unescape

    name = escape(identity)
    assert "/" not in name and "%" not in name and not name.startswith(".") and name
    assert unescape(name) == identity


def test_export_refuses_a_directory_that_holds_something(tmp_path):
    memory, contexts = stores(tmp_path / "a.db")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match="not an empty directory"):
        export_memory(memory, contexts, tmp_path / "busy")
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".busy")] == []


def test_the_cli_exports_imports_and_reindexes(run_cli, state_env, tmp_path):
    env = state_env
    Path(env["EDGECLAW_CONFIG"]).write_text('board = "sim"\n[memory]\nchunk_tokens = 128\n')
    wrote = run_cli(
        "tool", "call", "write_file", '{"path": "MEMORY.md", "content": "# Fans\\n\\nfan on GPIO 22"}'
    )
    assert wrote.returncode == 0, wrote.stderr
    out = tmp_path / "exported"
    exported = run_cli("memory", "export", str(out))
    assert exported.returncode == 0 and "exported 1 memory documents" in exported.stdout
    user = next(p.name for p in (out / "memory" / "users").iterdir())
    edited = out / "memory" / "users" / user / "MEMORY.md"
    edited.write_text("# Fans\n\nfan moved to GPIO 23")
    imported = run_cli("memory", "import", str(out))
    assert imported.returncode == 0 and "(1 changed)" in imported.stdout, imported.stderr
    assert "keyword search only" in imported.stdout
    again = run_cli("memory", "import", str(tmp_path / "missing"))
    assert again.returncode == 1 and "is not a directory" in again.stderr
    reindexed = run_cli("memory", "reindex")
    assert reindexed.returncode == 0 and "reindexed 1 documents into 1 chunks" in reindexed.stdout
    read = run_cli("tool", "call", "read_file", '{"path": "MEMORY.md"}')
    assert "GPIO 23" in read.stdout
    assert (
        subprocess.run([sys.executable, "-m", "edgeclaw", "memory"], capture_output=True, env=env).returncode
        == 2
    )
