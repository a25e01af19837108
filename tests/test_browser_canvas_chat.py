"""The seed's ui tools together, as a user meets them: on the sim board, `edgeclaw chat` asks the agent to
open a page on loopback, read a value from it and show it on the board's display. The model is scripted
(a real HTTP server speaking OpenAI's protocol); the browser is the real headless chromium, the display
the sim SSD1306 behind the real I2C backend. The page also tries to fetch a forbidden address (a listener
the test owns on 127.0.0.2, which the config does not allow): chromium's request is refused by the guard,
the page says so, and the listener sees nothing."""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

import pytest
from PIL import Image

from edgeclaw.tools.base import ToolContext
from tests.hw_support import make_runtime
from tests.llm_server import ScriptedLLM, openai_text, openai_tools
from tests.web_support import Page, Site

pytestmark = pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed")

VALUE = "Tank 73 %"


def png_pixels(path: Path) -> set[tuple[int, int]]:
    with Image.open(path) as picture:
        mono = picture.convert("L")
        return {(x, y) for y in range(mono.height) for x in range(mono.width) if mono.getpixel((x, y))}


async def drawn(tmp_path: Path, text: str) -> set[tuple[int, int]]:
    """The pixels `text` draws on another sim board's display: what the canvas shows for it."""
    board = make_runtime(tmp_path / "reference")
    try:
        done = await board.registry.execute(
            "canvas", {"action": "text", "text": text}, ToolContext(channel="cli")
        )
        assert done.ok, done.error
        return png_pixels(board.workspace / "canvas" / "oled.png")
    finally:
        await board.aclose()


def test_a_chat_reads_a_value_from_a_page_and_shows_it_on_the_board_s_display(tmp_path, run_cli, state_env):
    with Site("127.0.0.1") as site, Site("127.0.0.2") as forbidden, ScriptedLLM() as llm:
        forbidden.routes["/latest"] = lambda _seen: Page(body=b"secret")
        script = b"fetch('%s').then(() => f.textContent = 'fetched', () => f.textContent = 'fetch refused')"
        page = (
            b"<!doctype html><title>Tank</title><p>Level: <b>%s</b></p><p id=f>fetching</p>"
            b"<script>%s</script>" % (VALUE.encode(), script % forbidden.url("/latest").encode())
        )
        site.routes["/"] = lambda _seen: Page(body=page, headers={"Content-Type": "text/html"})
        Path(state_env["EDGECLAW_CONFIG"]).write_text(
            'board = "sim"\n[agent]\nproviders = ["local"]\nprovider_attempts = 1\n'
            f'[providers.local]\nkind = "openai"\nmodel = "m"\nbase_url = "{llm.url}/v1"\ntimeout_s = 30\n'
            f'[tools]\nrate_limit = 0\n[tools.web]\nallow_networks = ["127.0.0.1/32"]\n'
            f"ports = [{site.port}, {forbidden.port}]\n"
        )
        llm.reply(
            openai_tools(("browser", {"action": "open", "url": site.url("/")})),
            openai_tools(("browser", {"action": "wait", "text": "fetch refused", "timeout_s": 10})),
            openai_tools(("browser", {"action": "read"})),
            openai_tools(("canvas", {"action": "text", "text": VALUE, "present": True})),
            openai_text(f"The display shows {VALUE}."),
        )
        out = run_cli("chat", "--message", "show the tank level from the page on the display", timeout=120)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == f"The display shows {VALUE}."

    results = [m["content"] for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    # What the browser read from the page reached the model, with the page's word that its fetch of the
    # forbidden address was refused; the forbidden listener never saw a connection.
    assert VALUE in results[2] and "fetch refused" in results[2], results[2]
    assert forbidden.seen == [] and forbidden.connections == 0
    # The display shows the value: the PNG the canvas wrote is, pixel for pixel, what that text draws on
    # another sim board, and not what a different value draws.
    shown = png_pixels(Path(state_env["EDGECLAW_STATE_DIR"]) / "workspace" / "canvas" / "oled.png")
    assert shown == asyncio.run(drawn(tmp_path / "a", VALUE))
    assert shown != asyncio.run(drawn(tmp_path / "b", "Tank 74 %"))
