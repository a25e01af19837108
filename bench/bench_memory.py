"""Memory benchmarks: search latency, indexing throughput and resident memory, beside bare FTS5.

  * `memory_search` p50/p99 at 1k and 10k chunks, keyword-only and hybrid (384-dimension vectors
    stored), against a bare FTS5 query (`MATCH ... ORDER BY bm25() LIMIT 50`) on the same database
    in the same run, interleaved query by query so that load on the machine hits all alike: the
    baseline is what SQLite alone costs, the rest is ours (scopes, the sign-bit scan, exact cosine,
    fusion, result rows). Hybrid is timed with the query embedded in-process (the store's own cost)
    and as the tool call through the registry with the query embedded by a loopback
    OpenAI-compatible server (what a caller waits for, minus a real model's compute). Each figure
    is given as wall time and as the thread's CPU time (the cost, without waiting for a core).
    Queries are 2-4 words: content words (as questions are, once their stop words are dropped),
    and, as a worst case, the corpus' most frequent words, which match most chunks.
    Target: hybrid p50 <= 15 ms at 10k chunks without numpy.
  * Indexing throughput in MB of markdown per second: chunking, rows and the FTS5 index alone
    (embedding excluded), with in-process embeddings, and (at 1k chunks) over HTTP.
  * RSS added by the memory store at 10k chunks: a process that opened the database, before and
    after its searches built the sign-bit index and warmed SQLite's cache (target <= 8 MB).

Run: python bench/bench_memory.py [--sizes 1000,10000] [--queries 300]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.llm_server import ScriptedLLM, embed_text  # noqa: E402

DIM = 384
MODEL = "bench-embed"
HYBRID_P50_TARGET_MS = 15.0
RSS_TARGET_MB = 8.0
FREQUENT = 100  # the corpus' most frequent words: its "function words"
_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "pa", "qui", "do", "fe", "gu", "ha", "ji"]


def vocabulary(n: int = 4000) -> list[str]:
    rng = random.Random(7)
    words: set[str] = {"gpio", "i2c", "spi", "fan", "pump", "sensor", "relay", "valve", "bus", "probe"}
    while len(words) < n:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(2, 4))))
    return sorted(words)


WORDS = vocabulary()
# Zipf-like: a few words are everywhere, most are rare, as in real notes.
WEIGHTS = [1.0 / (i + 1) ** 0.9 for i in range(len(WORDS))]


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(WORDS, WEIGHTS, k=n)).capitalize() + "."


def corpus(chunks: int, seed: int = 1) -> list[tuple[str, str]]:
    """Markdown documents of 1-8 sections; each section one chunk (600-950 characters)."""
    rng = random.Random(seed)
    docs: list[tuple[str, str]] = []
    made = 0
    while made < chunks:
        sections = min(rng.randint(1, 8), chunks - made)
        parts = [f"# Note {len(docs)}"]
        for s in range(sections):
            body = " ".join(sentence(rng, rng.randint(8, 14)) for _ in range(rng.randint(8, 11)))
            parts.append(f"## Part {s}\n\n{body[:950]}")
        docs.append((f"memory/bench/{len(docs)}.md", "\n\n".join(parts) + "\n"))
        made += sections
    return docs


def queries(n: int, *, frequent: bool = False, seed: int = 3) -> list[str]:
    rng = random.Random(seed)
    words, weights = (
        (WORDS[:FREQUENT], WEIGHTS[:FREQUENT]) if frequent else (WORDS[FREQUENT:], WEIGHTS[FREQUENT:])
    )
    return [" ".join(rng.choices(words, weights, k=rng.randint(2, 4))) for _ in range(n)]


class InProcessEmbedder:
    """The loopback server's model (tests.llm_server.embed_text), without the HTTP round trip."""

    name = "in-process"
    batch_size = 64
    model = MODEL

    async def embed(self, texts: list[str]) -> list[list[float]]:
        return [embed_text(t, DIM) for t in texts]

    def unavailable_reason(self) -> None:
        return None


class Timings:
    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    async def time(self, fn: Callable[[], Awaitable[Any]]) -> Any:
        w, c = time.perf_counter(), time.thread_time()
        out = await fn()
        self.cpu.append(time.thread_time() - c)
        self.wall.append(time.perf_counter() - w)
        return out

    @staticmethod
    def _p(samples: list[float]) -> tuple[float, float]:
        ordered = sorted(samples)
        return statistics.median(ordered) * 1000, ordered[
            min(len(ordered) - 1, int(len(ordered) * 0.99))
        ] * 1000

    def figures(self) -> dict[str, tuple[float, float]]:
        return {"wall": self._p(self.wall), "cpu": self._p(self.cpu)}


def runtime_for(state: Path, llm: ScriptedLLM) -> Any:
    from edgeclaw.config.loader import config_from_dict
    from edgeclaw.daemon.runtime import build_runtime

    config = config_from_dict(
        {
            "board": "sim",
            "state_dir": str(state),
            "tools": {"rate_limit": 0},
            "providers": {"local": {"kind": "openai", "model": "m", "base_url": llm.url + "/v1"}},
            "memory": {"embedder": "local", "embedding_model": MODEL, "embedding_batch": 64},
        },
        "bench",
    )
    return build_runtime(config, environ={})


async def run_size(size: int, n_queries: int, workdir: Path, http_index: bool) -> dict[str, Any]:
    from edgeclaw.store.memory import GLOBAL, fts_query
    from edgeclaw.tools.base import ToolContext

    state = workdir / f"state-{size}"
    docs = corpus(size)
    markdown_mb = sum(len(t.encode()) for _, t in docs) / 1e6
    result: dict[str, Any] = {"size": size, "markdown_mb": markdown_mb, "state": str(state)}
    with ScriptedLLM() as llm:
        runtime = runtime_for(state, llm)
        store = runtime.memory.store
        http_embedder = store.embedder
        store.embedder = None  # indexing first without embeddings
        t0 = time.perf_counter()
        for path, text in docs:
            store.put(path, text, scope=GLOBAL)
        index_s = time.perf_counter() - t0
        result["chunks"] = store.counts()["chunks"]
        store.embedder = InProcessEmbedder()
        t0 = time.perf_counter()
        assert (await store.embed_pending()).pending == 0
        embed_s = time.perf_counter() - t0
        result["index_mb_s"] = markdown_mb / index_s
        result["index_embed_mb_s"] = markdown_mb / (index_s + embed_s)
        if http_index:
            # The same documents into a second database, embedded over HTTP by the loopback server.
            other = runtime_for(workdir / f"state-{size}-http", llm)
            t0 = time.perf_counter()
            for path, text in docs:
                other.memory.store.put(path, text, scope=GLOBAL)
            assert (await other.memory.store.embed_pending()).pending == 0
            result["index_http_mb_s"] = markdown_mb / (time.perf_counter() - t0)
            await other.aclose()

        conn = sqlite3.connect(state / "edgeclaw.db")
        ctx = ToolContext(channel="cli", caller="cli:bench")
        in_process = InProcessEmbedder()

        async def fts(q: str) -> None:
            conn.execute(
                "SELECT rowid FROM memory_fts WHERE memory_fts MATCH ? ORDER BY bm25(memory_fts) LIMIT 50",
                (fts_query(q),),
            ).fetchall()

        async def keyword(q: str) -> None:
            store.embedder = None
            await store.search(q, "cli:bench", limit=5)

        async def hybrid(q: str) -> None:
            store.embedder = in_process
            found = await store.search(q, "cli:bench", limit=5)
            assert found.mode == "hybrid", found.note

        async def tool(q: str) -> None:
            store.embedder = http_embedder
            outcome = await runtime.registry.execute("memory_search", {"query": q}, ctx)
            assert outcome.ok and outcome.data["mode"] == "hybrid", outcome

        await hybrid("warm up")  # builds the sign-bit index once
        await tool("warm up")
        for label, qs in (
            ("content", queries(n_queries)),
            ("frequent", queries(max(50, n_queries // 3), frequent=True)),
        ):
            timings = {name: Timings() for name in ("fts", "keyword", "hybrid", "tool")}
            for q in qs:
                for name, fn in (("fts", fts), ("keyword", keyword), ("hybrid", hybrid), ("tool", tool)):
                    await timings[name].time(lambda fn=fn, q=q: fn(q))
            result[label] = {name: t.figures() for name, t in timings.items()}
        conn.close()
        await runtime.aclose()
    return result


RSS_PROBE = """
import asyncio, json, sys
sys.path.insert(0, {root!r})
from bench.bench_memory import InProcessEmbedder, queries
from edgeclaw.store.db import Database
from edgeclaw.store.memory import MemoryStore

def rss_kib():
    return int([l.split()[1] for l in open("/proc/self/status") if l.startswith("VmRSS:")][0])

store = MemoryStore(Database({db!r}), embedder=InProcessEmbedder())
store.counts()  # the database open, its tables migrated
before = rss_kib()
async def main():
    for q in queries(200):
        await store.search(q, "cli:bench", limit=5)
asyncio.run(main())
after = rss_kib()
print(json.dumps({{"before": before, "after": after, "vectors": len(store.finder._index({model!r}))}}))
"""


def rss_added(state: str) -> dict[str, float]:
    code = RSS_PROBE.format(root=str(ROOT), db=str(Path(state) / "edgeclaw.db"), model=MODEL)
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    return {
        "before_mb": figures["before"] / 1024,
        "after_mb": figures["after"] / 1024,
        "added_mb": (figures["after"] - figures["before"]) / 1024,
        "vectors": figures["vectors"],
    }


LABELS = (
    ("bare FTS5 query (baseline)", "fts"),
    ("memory search, keyword only", "keyword"),
    ("memory search, hybrid (query in-process)", "hybrid"),
    ("memory_search tool, hybrid (query over HTTP)", "tool"),
)


def report(r: dict[str, Any]) -> None:
    print(f"\n{r['chunks']} chunks ({r['markdown_mb']:.1f} MB of markdown):")
    print(f"  indexing, embeddings excluded:       {r['index_mb_s']:.2f} MB/s")
    print(f"  indexing with in-process embeddings: {r['index_embed_mb_s']:.2f} MB/s")
    if "index_http_mb_s" in r:
        print(f"  indexing with embeddings over HTTP:  {r['index_http_mb_s']:.2f} MB/s")
    for label, key in (
        ("content-word queries", "content"),
        ("most-frequent-word queries (worst case)", "frequent"),
    ):
        print(f"  {label}, ms                  wall p50   p99   cpu p50   p99")
        for name, k in LABELS:
            (wp50, wp99), (cp50, cp99) = r[key][k]["wall"], r[key][k]["cpu"]
            print(f"    {name:<45} {wp50:7.2f} {wp99:7.2f}  {cp50:7.2f} {cp99:7.2f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--sizes", default="1000,10000", help="chunk counts, comma-separated")
    parser.add_argument("--queries", type=int, default=300, help="content-word queries timed per figure")
    args = parser.parse_args()
    from edgeclaw.store.vectors import has_numpy

    sizes = [int(s) for s in args.sizes.split(",")]
    load = os.getloadavg()[0]
    print(f"memory bench: {DIM}-dimension vectors, numpy {'installed' if has_numpy() else 'not installed'}")
    versions = f"python {sys.version.split()[0]}, sqlite {sqlite3.sqlite_version}"
    print(f"{versions}, {os.cpu_count()} cores, load average {load:.1f} at the start")
    results = []
    with tempfile.TemporaryDirectory(prefix="edgeclaw-bench-memory-") as tmp:
        for size in sizes:
            results.append(asyncio.run(run_size(size, args.queries, Path(tmp), http_index=size <= 1000)))
            report(results[-1])
        largest = results[-1]
        rss = rss_added(largest["state"])
    print(
        f"\nRSS added by the memory store at {largest['chunks']} chunks ({rss['vectors']} vectors): "
        f"{rss['added_mb']:.1f} MB ({rss['before_mb']:.1f} -> {rss['after_mb']:.1f} MB)"
    )
    wall, cpu = largest["content"]["hybrid"]["wall"][0], largest["content"]["hybrid"]["cpu"][0]
    ok = wall <= HYBRID_P50_TARGET_MS and rss["added_mb"] <= RSS_TARGET_MB
    print(
        f"targets at {largest['chunks']} chunks: hybrid p50 {wall:.2f} ms wall, {cpu:.2f} ms cpu "
        f"(<= {HYBRID_P50_TARGET_MS:g}); RSS added {rss['added_mb']:.1f} MB (<= {RSS_TARGET_MB:g}): "
        + ("met" if ok else "MISSED")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
