"""The memory store on real SQLite files: chunks, the index, scopes, the embedding cache, hybrid search."""

from __future__ import annotations

import asyncio
import itertools
import sqlite3
import time
from pathlib import Path

import pytest

from edgeclaw.store.chunking import chunk_markdown
from edgeclaw.store.db import Database
from edgeclaw.store.memory import GLOBAL, MemoryStoreError, fts_query
from tests.llm_server import ScriptedLLM
from tests.memory_support import LoopbackEmbedder, open_store

FAN = "# Greenhouse\n\n## Fans\n\nThe greenhouse fan is on GPIO 22.\n"


@pytest.fixture
def llm():
    with ScriptedLLM() as server:
        yield server


@pytest.fixture
async def embedder(llm):
    e = LoopbackEmbedder(llm)
    yield e
    await e.aclose()


# -- chunks -------------------------------------------------------------------------------


def test_chunks_split_at_headings_keep_their_heading_path_and_ignore_hashes_in_code():
    text = (
        "intro line\n\n# Site\n\n## Fans\n\nFan on GPIO 22.\n\n```sh\n# not a heading\necho hi\n```\n\n"
        "## Sensors\n\n### BME280\n\nDrifts +1.5 C after noon.\n"
    )
    chunks = chunk_markdown(text)
    assert [(c.heading, c.text.splitlines()[0]) for c in chunks] == [
        ("", "intro line"),
        ("Site > Fans", "Fan on GPIO 22."),
        ("Site > Sensors > BME280", "Drifts +1.5 C after noon."),
    ]
    assert "# not a heading" in chunks[1].text  # a fence is kept whole, never read as a heading
    assert (chunks[2].start_line, chunks[2].end_line) == (
        text.splitlines().index("Drifts +1.5 C after noon.") + 1,
    ) * 2


def test_long_sections_become_bounded_overlapping_chunks():
    paragraphs = [f"Paragraph {i} " + "word " * 40 for i in range(30)]
    chunks = chunk_markdown("# Log\n\n" + "\n\n".join(paragraphs), max_tokens=128, overlap_tokens=16)
    assert len(chunks) > 5
    assert all(len(c.text) <= 128 * 4 + 4 for c in chunks)
    for before, after in itertools.pairwise(chunks):
        # The next chunk starts with the end of the previous one: a fact across the cut is in both.
        assert after.text.split("\n\n")[0] in before.text
    joined = " ".join(c.text for c in chunks)
    assert all(f"Paragraph {i} " in joined for i in range(30))


def test_a_paragraph_bigger_than_a_chunk_is_cut_at_words():
    chunks = chunk_markdown("x" * 10 + " " + "longword " * 400, max_tokens=64, overlap_tokens=0)
    assert len(chunks) > 5 and all(len(c.text) <= 256 for c in chunks)
    assert all(not c.text.startswith("ongword") for c in chunks)


def test_fts_query_quotes_terms_so_fts_syntax_in_text_is_harmless():
    assert (
        fts_query('fan AND "gpio" NEAR(x) col:val *')
        == '"fan" OR "gpio" OR "near" OR "x" OR "col" OR "val"'  # "and" is a stop word
    )
    assert fts_query("!!! ...") == fts_query("what is it") == ""


# -- documents, index, scopes ---------------------------------------------------------------------


async def test_a_write_stores_the_document_its_chunks_and_the_index_together(tmp_path):
    store = open_store(tmp_path / "m.db")
    result = store.put("MEMORY.md", FAN, scope="cli:alice")
    assert result.created and result.chunks == 1
    assert store.check_consistency() == []
    found = await store.search("greenhouse fan", "cli:alice")
    assert found.mode == "keyword" and "no embedder is configured" in found.note
    [hit] = found.hits
    assert (hit.path, hit.scope, hit.category, hit.heading) == (
        "MEMORY.md",
        "cli:alice",
        "core",
        "Greenhouse > Fans",
    )
    assert hit.score > 0 and abs(hit.updated - time.time()) < 60
    # Replaced: the old chunks leave the index with it.
    store.put("MEMORY.md", "# Greenhouse\n\nThe pump is on GPIO 5.\n", scope="cli:alice")
    assert [h.text for h in (await store.search("fan", "cli:alice")).hits] == []
    assert store.check_consistency() == []


async def test_callers_see_their_own_memory_then_the_global_one_never_another_callers(tmp_path):
    store = open_store(tmp_path / "m.db")
    store.put("MEMORY.md", "The fan is on GPIO 22.", scope=GLOBAL)
    store.put("memory/fan.md", "Alice's fan notes: it rattles.", scope="mqtt:sender:alice")
    bob = await store.search("fan", "mqtt:sender:bob")
    assert [(h.path, h.scope) for h in bob.hits] == [("MEMORY.md", GLOBAL)]
    alice = await store.search("fan", "mqtt:sender:alice")
    assert {(h.path, h.scope) for h in alice.hits} == {
        ("MEMORY.md", GLOBAL),
        ("memory/fan.md", "mqtt:sender:alice"),
    }
    # Alice's own MEMORY.md hides the global one from her (and only from her).
    store.put("MEMORY.md", "Alice moved the fan to GPIO 23.", scope="mqtt:sender:alice")
    alice = await store.search("fan gpio", "mqtt:sender:alice")
    assert [h.text for h in alice.hits if h.path == "MEMORY.md"] == ["Alice moved the fan to GPIO 23."]
    assert store.visible("MEMORY.md", "mqtt:sender:alice").scope == "mqtt:sender:alice"
    assert store.visible("MEMORY.md", "mqtt:sender:bob").scope == GLOBAL
    assert [d.scope for d in store.documents("mqtt:sender:alice") if d.path == "MEMORY.md"] == [
        "mqtt:sender:alice"
    ]


async def test_an_edit_is_read_modify_write_in_one_transaction_and_copies_a_global_document(tmp_path):
    store = open_store(tmp_path / "m.db")
    store.put("MEMORY.md", "fan: GPIO 22\n", scope=GLOBAL)
    result = store.update(
        "MEMORY.md", "cli:bob", lambda d: d.content + "pump: GPIO 5\n", fallback_scope=GLOBAL
    )
    assert result.document.scope == "cli:bob" and result.document.content == "fan: GPIO 22\npump: GPIO 5\n"
    assert store.document("MEMORY.md", GLOBAL).content == "fan: GPIO 22\n"  # the global one is untouched

    def fail(_doc):
        raise RuntimeError("the change is refused")

    with pytest.raises(RuntimeError):
        store.update("MEMORY.md", "cli:bob", fail)
    assert store.document("MEMORY.md", "cli:bob").content == "fan: GPIO 22\npump: GPIO 5\n"


def test_bad_paths_categories_and_sizes_are_refused_with_the_reason(tmp_path):
    store = open_store(tmp_path / "m.db", max_document_bytes=1024)
    for path in ("/etc/passwd", "memory/../x.md", "memory//x.md", "memory/x.md/", "a\x00b"):
        with pytest.raises(MemoryStoreError):
            store.put(path, "x", scope=GLOBAL)
    with pytest.raises(MemoryStoreError, match="category 'Core!'"):
        store.put("memory/x.md", "x", scope=GLOBAL, category="Core!")
    with pytest.raises(MemoryStoreError, match="over the 1024-byte limit"):
        store.put("memory/x.md", "x" * 2000, scope=GLOBAL)
    assert store.all_documents() == []


async def test_daily_memories_fade_with_age(tmp_path):
    now = [time.time()]
    store = open_store(tmp_path / "m.db", daily_half_life_days=1.0)
    store._clock = lambda: now[0]
    store.put("memory/daily/old.md", "compressor check done", scope=GLOBAL, category="daily")
    now[0] += 10 * 86400
    store.put("memory/daily/new.md", "compressor check done", scope=GLOBAL, category="daily")
    hits = (await store.search("compressor check", "cli:x")).hits
    assert [h.path for h in hits] == ["memory/daily/new.md", "memory/daily/old.md"]
    assert hits[1].score < hits[0].score / 500  # ten half-lives


# -- embeddings ---------------------------------------------------------------------------------


async def test_hybrid_search_finds_by_meaning_what_keywords_miss(tmp_path, llm, embedder):
    store = open_store(tmp_path / "m.db", embedder)
    result = store.put("memory/fan.md", "The greenhouse fan is on GPIO 22.", scope=GLOBAL)
    store.put("memory/pump.md", "The irrigation pump runs at dawn.", scope=GLOBAL)
    report = await store.embed_pending()
    assert report.embedded == 2 and report.pending == 0 and not report.error
    assert result.new_hashes  # a new chunk without a vector yet, reported by the write
    keyword_only = open_store(tmp_path / "m.db")
    assert (await keyword_only.search("ventilator", "cli:x")).hits == []  # no shared word
    found = await store.search("ventilator", "cli:x")
    assert found.mode == "hybrid" and found.note == ""
    assert [h.path for h in found.hits][:1] == ["memory/fan.md"]
    # The query went to the embeddings endpoint of the configured server.
    assert llm.embed_requests[-1] == {"model": "fake-embed", "input": ["ventilator"]}


async def test_unchanged_text_is_never_embedded_twice(tmp_path, llm, embedder):
    store = open_store(tmp_path / "m.db", embedder, chunk_tokens=32, overlap_tokens=0)
    text = "\n\n".join(f"## Part {i}\n\nnote {i} about sensor {i}" for i in range(6))
    store.put("memory/notes.md", text, scope=GLOBAL)
    await store.embed_pending()
    sent = sum(len(r["input"]) for r in llm.embed_requests)
    assert sent == 6
    # One section changes: only its chunk is embedded again; the same text in another document is not.
    store.put("memory/notes.md", text.replace("note 3 about", "note 3 (changed) about"), scope=GLOBAL)
    store.put("memory/copy.md", text.split("\n\n## Part 1")[0], scope="cli:x")
    report = await store.embed_pending()
    assert report.embedded == 1
    assert sum(len(r["input"]) for r in llm.embed_requests) == sent + 1
    # A forgotten text's vector goes with its last chunk.
    rows = store.db.query("SELECT count(*) FROM memory_embeddings")[0][0]
    store.delete("memory/notes.md", GLOBAL)
    assert store.db.query("SELECT count(*) FROM memory_embeddings")[0][0] == 1 < rows


async def test_an_unreachable_embedder_means_keyword_search_that_says_so(tmp_path, llm, embedder):
    store = open_store(tmp_path / "m.db", embedder)
    store.put("memory/fan.md", "The greenhouse fan is on GPIO 22.", scope=GLOBAL)
    llm.embeddings_down = True
    report = await store.embed_pending()
    assert report.embedded == 0 and report.pending == 1 and "HTTP 503" in report.error
    found = await store.search("greenhouse fan", "cli:x")
    assert found.mode == "keyword" and "could not be used" in found.note
    assert [h.path for h in found.hits] == ["memory/fan.md"]  # still found, by its words
    asked = len(llm.embed_requests)
    await store.search("fan", "cli:x")
    assert len(llm.embed_requests) == asked  # cooling down: not asked again at every call
    # Back up: the pending chunk is filled in and found by meaning.
    llm.embeddings_down = False
    embedder.health.failed_at -= embedder.cooldown_s
    assert (await store.embed_pending()).embedded == 1
    assert (await store.search("ventilator", "cli:x")).hits[0].path == "memory/fan.md"


async def test_vectors_of_another_size_are_not_compared(tmp_path, llm, embedder):
    store = open_store(tmp_path / "m.db", embedder)
    store.put("memory/fan.md", "fan on GPIO 22", scope=GLOBAL)
    await store.embed_pending()
    llm.embed_dim = 64  # the server now runs a different model under the same name
    found = await store.search("fan", "cli:x")
    assert found.mode == "keyword" and "memory reindex" in found.note
    documents, chunks, report = await store.rebuild()
    assert (documents, chunks, report.embedded, report.pending) == (1, 1, 1, 0)
    found = await store.search("ventilator", "cli:x")
    assert found.mode == "hybrid" and found.hits[0].path == "memory/fan.md"


async def test_diversify_prefers_different_results_over_near_duplicates(tmp_path, llm, embedder):
    store = open_store(tmp_path / "m.db", embedder)
    for i in range(3):
        store.put(f"memory/fan{i}.md", "greenhouse fan gpio 22 relay", scope=GLOBAL)
    store.put("memory/pump.md", "greenhouse pump relay on gpio 5", scope=GLOBAL)
    await store.embed_pending()
    plain = await store.search("greenhouse fan relay gpio", "cli:x", limit=2)
    varied = await store.search("greenhouse fan relay gpio", "cli:x", limit=2, diversify=True)
    assert {h.path for h in plain.hits} <= {"memory/fan0.md", "memory/fan1.md", "memory/fan2.md"}
    assert "memory/pump.md" in {h.path for h in varied.hits}


# -- durability and concurrency -------------------------------------------------------------------


async def test_writers_in_two_sessions_at_once_lose_nothing(tmp_path, llm, embedder):
    store = open_store(tmp_path / "m.db", embedder)
    store.put("MEMORY.md", "", scope="cli:a")

    async def session(name: str) -> None:
        for i in range(20):
            store.update("MEMORY.md", "cli:a", lambda d, i=i: d.content + f"- {name} note {i}\n")
            store.put(f"memory/{name}/{i}.md", f"{name} fact {i}", scope="cli:a")
            await store.embed_pending(limit=2)
            await asyncio.sleep(0)

    await asyncio.gather(session("one"), session("two"))
    content = store.document("MEMORY.md", "cli:a").content
    assert all(f"- {n} note {i}\n" in content for n in ("one", "two") for i in range(20))
    assert len(store.all_documents()) == 41 and store.check_consistency() == []


def test_two_processes_writing_one_database_at_once_keep_it_consistent(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "m.db"
    open_store(db).db  # noqa: B018 - create the tables before both start
    script = (
        "import sys; from tests.memory_support import open_store\n"
        "s = open_store(sys.argv[1])\n"
        "for i in range(60):\n"
        "    text = f'# {sys.argv[2]}\\n\\nfact {i} ' + 'word ' * 200\n"
        "    s.put(f'memory/{sys.argv[2]}/{i}.md', text, scope='')\n"
        "    s.update('MEMORY.md', '', lambda d: (d.content if d else '') + sys.argv[2] + str(i) + '\\n')\n"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", script, str(db), name], cwd=Path(__file__).parent.parent)
        for name in ("left", "right")
    ]
    assert [p.wait(120) for p in procs] == [0, 0]
    store = open_store(db)
    assert len(store.all_documents()) == 121 and store.check_consistency() == []
    lines = store.document("MEMORY.md", GLOBAL).content.split()
    assert sorted(lines) == sorted([f"left{i}" for i in range(60)] + [f"right{i}" for i in range(60)])


KILL_SCRIPT = """
import os, sys, time
from tests.memory_support import open_store
import edgeclaw.store.memory_index as m
store = open_store(sys.argv[1])
big = "\\n\\n".join(f"## Section {i}\\n\\n" + f"new text {i} " * 150 for i in range(200))
original = m.ChunkIndex.insert_chunk_rows
def slow(conn, doc_id, path, chunks):
    original(conn, doc_id, path, chunks)
    sys.stdout.write("inside\\n"); sys.stdout.flush()
    time.sleep(60)  # killed here: chunks written, the transaction not committed
m.ChunkIndex.insert_chunk_rows = staticmethod(slow)
store.put("memory/big.md", big, scope="")
"""


def test_a_process_killed_mid_index_leaves_the_old_version_whole(tmp_path):
    import signal
    import subprocess
    import sys

    db = tmp_path / "m.db"
    store = open_store(db)
    old = "\n\n".join(f"## Section {i}\n\nold text {i}" for i in range(50))
    store.put("memory/big.md", old, scope=GLOBAL)
    store.db.close()
    for attempt in range(2):  # twice: the second run starts from what the first kill left
        proc = subprocess.Popen(
            [sys.executable, "-c", KILL_SCRIPT, str(db)],
            cwd=Path(__file__).parent.parent,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None and proc.stdout.readline() == "inside\n", attempt
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        reopened = open_store(db)
        assert reopened.db.query("PRAGMA integrity_check")[0][0] == "ok"
        assert reopened.check_consistency() == []
        doc = reopened.document("memory/big.md", GLOBAL)
        assert doc.content == old
        assert [h.path for h in asyncio.run(reopened.search("old text 7", "cli:x")).hits][:1] == [
            "memory/big.md"
        ]
        assert asyncio.run(reopened.search("new", "cli:x")).hits == []
        reopened.db.close()


def test_a_database_from_before_memory_is_migrated_in_place(tmp_path):
    from edgeclaw.store.approvals import MIGRATIONS as APPROVALS
    from edgeclaw.store.custom_tools import MIGRATIONS as CUSTOM_TOOLS
    from edgeclaw.store.sessions import MIGRATIONS as SESSIONS
    from edgeclaw.store.sessions import SessionStore

    path = tmp_path / "edgeclaw.db"
    old = Database(path)
    old.migrate([*SESSIONS, *APPROVALS, *CUSTOM_TOOLS])
    old.stamp()
    SessionStore(old).append("cli:t", "cli", '{"role": "user", "content": "hello"}', 3)
    before = {r[0] for r in old.query("SELECT name FROM schema_migrations")}
    old.close()

    store = open_store(path)
    store.put("MEMORY.md", FAN, scope=GLOBAL)
    applied = {r[0] for r in store.db.query("SELECT name FROM schema_migrations")}
    assert applied == before | {"memory-1"}
    assert SessionStore(store.db).load("cli:t")[0][1] == '{"role": "user", "content": "hello"}'
    assert store.db.identity()[1] == 1  # the format did not change: older daemons still read the file
    store.db.close()
    again = open_store(path)  # a second start applies nothing twice
    assert again.document("MEMORY.md", GLOBAL).content == FAN
    assert again.db.migrate([]) == []
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# -- the vector scan ------------------------------------------------------------------------------


def _random_vectors(n: int, dim: int, seed: int) -> list[list[float]]:
    import random

    rng = random.Random(seed)
    return [[rng.gauss(0, 1) for _ in range(dim)] for _ in range(n)]


def test_sign_bits_pick_the_nearest_vectors_the_exact_cosine_would():
    """Clustered vectors, as embeddings of related notes are: the exact top 5 are among the 64 picked."""
    import random

    from edgeclaw.store import vectors

    rng = random.Random(5)
    centers = _random_vectors(100, 384, 1)

    def near(center: list[float], spread: float) -> list[float]:
        return vectors.normalise([c + rng.gauss(0, spread) for c in center])

    stored = [near(centers[i % 100], 0.8) for i in range(3000)]
    index = vectors.BitIndex((i, "g", vectors.sign_bits(v)) for i, v in enumerate(stored))
    recall = []
    for k in range(30):
        query = near(centers[k], 0.8)
        picked = set(index.nearest(vectors.sign_bits(query), ["g"], 64))
        exact = sorted(range(len(stored)), key=lambda i: -vectors.dot(query, stored[i]))[:5]
        recall.append(len(picked.intersection(exact)) / 5)
    assert sum(recall) / len(recall) >= 0.95, recall


def test_the_numpy_scan_gives_the_pure_python_scans_answers(monkeypatch):
    np = pytest.importorskip("numpy")
    from edgeclaw.store import vectors

    rows = [(i, f"g{i % 3}", vectors.sign_bits(v)) for i, v in enumerate(_random_vectors(3000, 384, 3))]
    with_numpy = vectors.BitIndex(rows)
    monkeypatch.setattr(vectors, "_np", None)
    pure = vectors.BitIndex(rows)
    assert np is not None and with_numpy._matrices and not pure._matrices
    for query in _random_vectors(10, 384, 4):
        bits = vectors.sign_bits(query)
        q = int.from_bytes(bits, "big")
        distance = {i: (q ^ int.from_bytes(b, "big")).bit_count() for i, _, b in rows}
        monkeypatch.setattr(vectors, "_np", np)
        fast = with_numpy.nearest(bits, ["g0", "g2"], 50)
        monkeypatch.setattr(vectors, "_np", None)
        slow = pure.nearest(bits, ["g0", "g2"], 50)
        # The same distances, in the same order (ties may pick different members at the cut).
        assert [distance[i] for i in fast] == [distance[i] for i in slow]
        assert all(i % 3 in (0, 2) for i in fast)
