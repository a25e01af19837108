"""web_fetch benchmark: a 1 MB HTML page from a loopback server.

Printed beside a baseline measured in the same run:
  * the raw download with httpx (one GET, the body read whole) — the floor under any fetch;
  * extraction time of the page (HTML to markdown) as web_fetch does it by default (max_chars
    50 000: parsing stopped once <main> holds twice that, rendering past what is shown; the
    page has a <main>, as most do), the fastest of several
    runs and their median: the built-in extractor (target: <= 150 ms) and trafilatura when the
    web-extract extra is installed; beside it the same with the whole page rendered;
  * a whole web_fetch call through the registry (guard, streamed download, extraction, framing);
  * peak RSS of that call over the idle process (target: <= 15 MB), measured in a fresh process
    per extractor (VmHWM after resetting it, minus VmRSS at rest with every module loaded).

The page is served by a separate process, so its memory is not counted. Loopback is granted to the
tool explicitly, as an owner would in tools.web.allow_networks.

The fastest run is the figure a quiet machine gives; the median shows what other load did; the
extraction's CPU time (this thread's) is printed too, as other processes inflate it least.

Run: python bench/bench_web_fetch.py [--runs N] [--size BYTES]
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

EXTRACT_TARGET_MS = 150.0
RSS_TARGET_MB = 15.0


def make_page(size: int) -> bytes:
    """A documentation-and-article-shaped page of about `size` bytes: site header, navigation and
    sidebar around a main column of sections (headings, paragraphs with links and inline code, lists,
    a code block, a table), scripts and styles between."""
    head = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'><title>Board field notes</title>"
        "<style>" + "body{margin:0} .x{color:#333} " * 200 + "</style>"
        "<script>" + "window.cfg = {a: 1, b: [1, 2, 3]}; " * 200 + "</script></head><body>"
        "<header class='site-header'><a href='/'>Field notes</a><nav><ul>"
        + "".join(f"<li><a href='/section/{i}'>Section {i}</a></li>" for i in range(40))
        + "</ul></nav></header><div class='layout'><aside class='sidebar'><ul>"
        + "".join(f"<li><a href='/post/{i}'>Older post number {i}</a></li>" for i in range(60))
        + "</ul></aside><main>"
    )
    tail = (
        "</main></div><footer class='site-footer'><p>© 2026 Field notes. "
        "<a href='/privacy'>Privacy</a></p></footer></body></html>"
    )
    parts = [head]
    size_now = len(head) + len(tail)
    i = 0
    while size_now < size:
        section = (
            f"<section id='s{i}'><h2>Measurement {i}: the sensor on bus {i % 4}</h2>"
            f"<p>The reading at address <code>0x{0x40 + i % 32:02x}</code> drifted by {i % 7}.{i % 10} % "
            f"over the day; see <a href='/notes/{i}'>the notes for run {i}</a> and the "
            f"<a href='https://vendor.example/datasheet/{i}.pdf'>datasheet</a>. The board sat in a "
            "closed box, and its temperature rose by a few degrees, which the compensation handles, "
            "as the second table shows.</p>"
            "<ul><li>Supply at 3.3 V, measured at the header.</li><li>Pull-ups of 4.7 kΩ on both lines."
            "</li><li>Clock at 400 kHz, no clock stretching seen.</li></ul>"
            "<pre><code class='language-python'>for reg in range(0x00, 0x10):\n"
            "    value = bus.read_byte_data(0x76, reg)\n"
            '    print(f"{reg:#04x} = {value:#04x}")\n</code></pre>'
            "<table><thead><tr><th>Hour</th><th>Reading</th><th>Reference</th><th>Offset</th></tr></thead>"
            "<tbody>"
            + "".join(
                f"<tr><td>{h:02d}:00</td><td>{20 + h / 10:.1f}</td>"
                f"<td>{19 + h / 10:.1f}</td><td>1.0</td></tr>"
                for h in range(6)
            )
            + "</tbody></table></section>"
        )
        parts.append(section)
        size_now += len(section)
        i += 1
    parts.append(tail)
    return "".join(parts).encode("utf-8")


# -- the page server (a child process) -----------------------------------------------------------

SERVER = r"""
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
page = open(sys.argv[1], "rb").read()
# Over web_fetch's inline limit, so the warm-up runs the worker thread a big page runs in: the idle
# figure then holds that thread (a daemon has it anyway) and only the big page's own memory counts.
small = b"<main>" + b"<p>warm-up paragraph with a few words in it.</p>" * 2000 + b"</main>"
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a): pass
    def do_GET(self):
        body = page if self.path == "/page" else small
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
s = ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"""


# -- in-process measurements ----------------------------------------------------------------------


def registry_for(port: int, extractor: str, max_bytes: int):
    import ipaddress

    from edgeclaw.backends.web.guard import NetworkPolicy
    from edgeclaw.tools.policy import PolicyEngine, PolicyRules
    from edgeclaw.tools.ratelimit import RateLimiter
    from edgeclaw.tools.registry import Registry
    from edgeclaw.tools.web.fetch import FetchSettings, WebFetchTool

    policy = NetworkPolicy(allow_networks=(ipaddress.ip_network("127.0.0.1/32"),), ports=frozenset({port}))
    registry = Registry(PolicyEngine(PolicyRules()), limiter=RateLimiter(0), max_output_bytes=1 << 20)
    registry.register(
        WebFetchTool(lambda ctx: policy, FetchSettings(max_bytes=max_bytes, extractor=extractor))
    )
    return registry


async def timed_calls(port: int, extractor: str, runs: int, max_bytes: int) -> tuple[float, float]:
    from edgeclaw.tools.base import ToolContext

    registry = registry_for(port, extractor, max_bytes)
    url = f"http://127.0.0.1:{port}/page"
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        out = await registry.execute("web_fetch", {"url": url}, ToolContext())
        times.append((time.perf_counter() - started) * 1000)
        if not out.ok:
            raise SystemExit(f"web_fetch failed: {out.for_llm[:300]}")
    return min(times), statistics.median(times)


async def raw_downloads(port: int, runs: int) -> tuple[float, float]:
    import httpx

    url = f"http://127.0.0.1:{port}/page"
    times = []
    async with httpx.AsyncClient(trust_env=False) as client:
        await client.get(url)
        for _ in range(runs):
            started = time.perf_counter()
            response = await client.get(url)
            response.read()
            times.append((time.perf_counter() - started) * 1000)
    return min(times), statistics.median(times)


def extraction_times(
    page: bytes, engine: str, runs: int, max_chars: int | None
) -> tuple[float, float, float, int]:
    """Wall time (fastest, median), the fastest run's CPU time of this thread, characters out."""
    from edgeclaw.backends.web.extract import decode_body, extract_html

    times = []
    cpu = []
    text = ""
    for _ in range(runs):
        cpu_started = time.thread_time()
        started = time.perf_counter()
        html, _ = decode_body(page, "text/html; charset=utf-8")
        got = extract_html(html, "http://127.0.0.1/page", "markdown", engine, max_chars)  # type: ignore[arg-type]
        text = got.text
        times.append((time.perf_counter() - started) * 1000)
        cpu.append((time.thread_time() - cpu_started) * 1000)
    return min(times), statistics.median(times), min(cpu), len(text)


# -- peak RSS in a fresh process -------------------------------------------------------------------


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_peak() -> None:
    """VmHWM := VmRSS, so the next VmHWM is this call's peak."""
    Path("/proc/self/clear_refs").write_text("5")


def rss_child(port: int, extractor: str, max_bytes: int) -> None:
    """Run in a child: everything loaded and warmed on a small page, then one call on the big one."""
    import gc

    from edgeclaw.tools.base import ToolContext

    async def main() -> dict[str, float]:
        registry = registry_for(port, extractor, max_bytes)
        small = await registry.execute("web_fetch", {"url": f"http://127.0.0.1:{port}/small"}, ToolContext())
        assert small.ok, small.for_llm
        gc.collect()
        idle = _status_kb("VmRSS")
        reset_peak()
        out = await registry.execute("web_fetch", {"url": f"http://127.0.0.1:{port}/page"}, ToolContext())
        assert out.ok, out.for_llm
        peak = _status_kb("VmHWM")
        return {"idle_mb": idle / 1024, "peak_mb": peak / 1024, "over_mb": (peak - idle) / 1024}

    print(json.dumps(asyncio.run(main())))


def rss_over_idle(port: int, extractor: str, max_bytes: int) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--rss-child", str(port), extractor, str(max_bytes)],
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--rss-child", nargs=3, metavar=("PORT", "EXTRACTOR", "MAX_BYTES"))
    args = parser.parse_args()
    if args.rss_child:
        port, extractor, max_bytes = args.rss_child
        rss_child(int(port), extractor, int(max_bytes))
        return 0

    import tempfile

    from edgeclaw.backends.web.extract import trafilatura_available

    page = make_page(args.size)
    max_bytes = 2 * 1024 * 1024  # the default download cap; the page fits under it
    engines = ["builtin"] + (["trafilatura"] if trafilatura_available() else [])
    with tempfile.NamedTemporaryFile(suffix=".html") as f:
        f.write(page)
        f.flush()
        server = subprocess.Popen([sys.executable, "-c", SERVER, f.name], stdout=subprocess.PIPE, text=True)
        try:
            assert server.stdout is not None
            port = int(server.stdout.readline())
            print(
                f"page: {len(page) / 1e6:.2f} MB of HTML from 127.0.0.1:{port}; "
                f"{args.runs} runs, fastest (median)"
            )
            raw_min, raw_med = asyncio.run(raw_downloads(port, args.runs))
            print(f"  raw httpx download (baseline)          {raw_min:8.1f} ms ({raw_med:.1f})")
            missed = False
            for engine in engines:
                target = engine == "builtin"
                ex_min, ex_med, ex_cpu, chars = extraction_times(page, engine, args.runs, 50_000)
                full_min, full_med, _, full_chars = extraction_times(
                    page, engine, max(3, args.runs // 2), None
                )
                call_min, call_med = asyncio.run(timed_calls(port, engine, args.runs, max_bytes))
                rss = rss_over_idle(port, engine, max_bytes)
                slow = target and ex_min > EXTRACT_TARGET_MS
                heavy = target and rss["over_mb"] > RSS_TARGET_MB
                missed = missed or slow or heavy
                print(
                    f"  {engine:<11} extraction, max_chars 50000 {ex_min:8.1f} ms ({ex_med:.1f})"
                    + (f"  target <= {EXTRACT_TARGET_MS:g} ms" if target else "")
                    + ("  MISSED" if slow else "")
                    + f"  -> {chars / 1000:.0f} k chars; CPU {ex_cpu:.0f} ms"
                )
                print(
                    f"  {engine:<11} extraction, whole page      {full_min:8.1f} ms ({full_med:.1f})"
                    f"  -> {full_chars / 1000:.0f} k chars"
                )
                print(
                    f"  {engine:<11} whole web_fetch call        {call_min:8.1f} ms ({call_med:.1f})"
                    f"  {call_min - raw_min:+.1f} ms over the raw download"
                )
                print(
                    f"  {engine:<11} peak RSS over idle          {rss['over_mb']:8.1f} MB"
                    + (f"  target <= {RSS_TARGET_MB:g} MB" if target else "")
                    + ("  MISSED" if heavy else "")
                    + f"  (idle {rss['idle_mb']:.1f} MB, peak {rss['peak_mb']:.1f} MB)"
                )
        finally:
            server.terminate()
            server.wait()
    return 1 if missed else 0


if __name__ == "__main__":
    raise SystemExit(main())
