"""The page extractor: real-world-shaped pages (tests/web_pages/) to markdown and text; charsets; kinds."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from edgeclaw.backends.web.extract import (
    MAX_DEPTH,
    classify,
    decode_body,
    extract_html,
    html_to_readable,
    parse_html,
    pretty_json,
    sniff_declared_charset,
    trafilatura_available,
)

PAGES = Path(__file__).parent / "web_pages"


def page(name: str) -> str:
    return (PAGES / name).read_text(encoding="utf-8")


# -- an article with a site header, navigation, a cookie banner, a sidebar and footers -----------


def test_article_keeps_the_post_and_drops_the_page_furniture() -> None:
    got = html_to_readable(page("article.html"), "https://notes.example/posts/bme280/")
    assert got.title == "Calibrating the BME280 on a Raspberry Pi | Board Notes"
    text = got.text
    assert text.startswith("# Calibrating the BME280 on a Raspberry Pi\n\nBy Ada Fernsby")
    assert "## Wiring" in text and "## Offsets" in text
    assert "temperature reads **about 1.5 °C high** on a Pi" in text  # source line breaks collapsed
    assert "address is `0x76`; pull SDO high for `0x77`" in text
    assert "[I2C address guide](https://notes.example/guides/i2c-addresses/)" in text  # made absolute
    assert "- Keep the wires under 20 cm.\n- Use the *3.3 V* rail, never 5 V.\n  - The breakout's" in text
    assert "1. Log both readings every minute.\n2. Compute the mean offset.\n3. Store it" in text
    assert "> A sensor mounted 3 cm away" in text
    for furniture in (
        "Skip to content",  # the skip link sits outside the article
        "Subscribe to the newsletter",  # <nav>
        "cookies",  # role=dialog
        "Popular posts",  # <aside>
        "Search",  # the sidebar's form
        "All rights reserved",  # the site <footer>
        "Share on",  # the article's own <footer>
        "dataLayer",  # <script>
        "font-family",  # <style>
        "tracking pixel",  # <noscript>
    ):
        assert furniture not in text, furniture


def test_article_as_plain_text_has_no_markup() -> None:
    text = html_to_readable(page("article.html"), "https://notes.example/posts/bme280/", "text").text
    assert text.startswith("Calibrating the BME280 on a Raspberry Pi\n\nBy Ada Fernsby")
    assert "temperature reads about 1.5 °C high on a Pi" in text
    assert "See the I2C address guide for conflicts." in text
    for markup in ("**", "](", "# ", "`"):
        assert markup not in text, markup


# -- a documentation page: role=main, code blocks, a definition list ----------------------------


def test_docs_page_keeps_code_blocks_verbatim_with_their_language() -> None:
    text = html_to_readable(page("docs.html"), "https://docs.example/en/gpio.html").text
    assert text.startswith("# gpio\n\nRead and drive")  # the heading's ¶ permalink is gone
    assert "[the gpio tool](https://docs.example/en/hardware.html#gpio)" not in text
    assert "[the gpio tool](https://docs.example/hardware.html#gpio)" in text
    assert "```\npip install 'edgeclaw[hw]'\n```" in text
    assert (
        "```python\nfrom edgeclaw.backends.gpio import open_chip\n\n"
        'with open_chip("gpiochip0") as chip:\n'
        "    if chip.read(17) < 1:\n"
        '        print("line 17 is low")\n```'
    ) in text  # indentation, the blank line and the &lt; entity as the author wrote them
    assert "**`bias`**\n: One of `pull-up`, `pull-down`, `none`." in text
    assert "Never drive a line that is wired as an input" in text
    for furniture in ("GitHub", "Install</a>", "Show source", "Built with"):
        assert furniture not in text, furniture


def test_a_fence_inside_code_gets_a_longer_fence() -> None:
    html = "<main><p>Markdown sample:</p><pre>```\ncode\n```</pre></main>"
    assert "````\n```\ncode\n```\n````" in html_to_readable(html).text


# -- a table ---------------------------------------------------------------------------------


def test_table_becomes_a_markdown_table() -> None:
    text = html_to_readable(page("table.html"), "https://hw.example/boards").text
    assert text.startswith("## Supported boards")  # the site's <header> with its h1 is not content
    assert (
        "**Tested boards**\n\n"
        "| Board | SoC | I2C buses | Notes |\n"
        "|---|---|---|---|\n"
        "| Raspberry Pi 4 | BCM2711 | 1, 3 | Bus 0 reserved for HATs |\n"
        "| Raspberry Pi Zero 2 W | RP3A0 | 1 | Slow SD card \\| use a fast one |\n"
        "| BeagleBone Black (AM3358) |  | 2 | [details](https://hw.example/bbb) |"
    ) in text
    assert text.endswith("Other boards may work; report yours.")
    assert "Site footer" not in text and "Home" not in text


def test_table_as_text_keeps_rows_and_cells() -> None:
    text = html_to_readable(page("table.html"), "", "text").text
    assert (
        "Board | SoC | I2C buses | Notes\nRaspberry Pi 4 | BCM2711 | 1, 3 | Bus 0 reserved for HATs" in text
    )


def test_layout_tables_are_read_as_blocks_not_as_a_grid() -> None:
    html = (
        "<table><tr><td><table><tr><td><a href='/'>Home</a></td></tr></table></td>"
        "<td><h1>Old school</h1><p>A page laid out with nested tables, as in 2003.</p></td></tr></table>"
    )
    text = html_to_readable(html).text
    assert "# Old school\n\nA page laid out with nested tables" in text
    assert "|---" not in text


# -- choosing the content without <main> or <article> ---------------------------------------------


def test_densest_block_wins_over_link_lists_and_comment_boxes() -> None:
    story = " ".join(f"Sentence {i} of the report, with its details, numbers and context." for i in range(30))
    html = (
        "<body><div class='menu'>"
        + "".join(f"<p><a href='/s{i}'>Section number {i} of the site</a></p>" for i in range(40))
        + "</div><div class='post-body'><p>"
        + story
        + "</p><p>Second paragraph of the report, also long enough to count for something.</p></div>"
        + "<div class='comments'><p>First! Great post, thanks for sharing this with everyone here.</p></div>"
        + "</body>"
    )
    text = html_to_readable(html).text
    assert text.startswith("Sentence 0 of the report")
    assert "Second paragraph of the report" in text
    assert "Section number" not in text
    assert "Great post" not in text


def test_a_page_wrapped_in_one_form_keeps_its_content() -> None:
    body = "<p>" + "Content of a page some frameworks put inside a single form element. " * 20 + "</p>"
    html = f"<body><form action='/postback'><div>{body}</div><input type=hidden name=state></form></body>"
    assert "Content of a page some frameworks" in html_to_readable(html).text


def test_a_search_form_is_dropped() -> None:
    html = "<main><p>Results below.</p><form><label>Find a board</label><input name=q></form></main>"
    assert html_to_readable(html).text == "Results below."


def test_hidden_elements_are_dropped() -> None:
    html = (
        "<main><p>Shown.</p><div hidden>Hidden one.</div><div style='display: none'>Hidden two.</div>"
        "<span aria-hidden='true'>Hidden three.</span></main>"
    )
    assert html_to_readable(html).text == "Shown."


# -- robustness ----------------------------------------------------------------------------------


def test_unclosed_and_implied_tags_read_as_a_browser_would() -> None:
    html = "<main><p>one<p>two<ul><li>a<li>b</ul><p>three<br>four</main>"
    assert html_to_readable(html).text == "one\n\ntwo\n\n- a\n- b\n\nthree\nfour"


def test_deep_nesting_is_flattened_not_a_crash() -> None:
    depth = 20 * MAX_DEPTH
    html = "<div>" * depth + "<p>deep text</p>" + "</div>" * depth + "<p>after</p>"
    text = html_to_readable(html, fmt="text").text
    assert "deep text" in text and "after" in text


def test_a_quoted_gt_does_not_end_a_tag() -> None:
    html = '<main><p><a title="1 > 0, and 2 > 1" href="/cmp">comparisons</a> explained.</p></main>'
    text = html_to_readable(html, "https://x.example/").text
    assert text == "[comparisons](https://x.example/cmp) explained."


@pytest.mark.parametrize("unit", ['<a "x>', "<a ", '<p title="', "<!--", "<script>", "<a href='"])
def test_hostile_fragments_are_read_in_one_pass(unit: str) -> None:
    # 400 KB of half tags: a tokenizer that retried each '<' to the end of the page would take
    # hours here; this one reads it in one pass and keeps what is text.
    def hung(*_: object) -> None:
        raise AssertionError("the extractor did not finish in 10 s: a quadratic pass")

    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(10)  # a hang guard, not a speed target: one pass takes well under a second
    try:
        for tail in ("<p>after</p></main>", ""):  # "": no '>' after the fragments at all
            html = "<main><p>before</p>" + unit * (400_000 // len(unit)) + tail
            assert html_to_readable(html, fmt="text").text.startswith("before")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def test_rendering_stops_past_max_chars() -> None:
    html = "<main>" + "".join(f"<h2>Part {i}</h2><p>{'text ' * 50}</p>" for i in range(400)) + "</main>"
    whole = html_to_readable(html)
    assert whole.complete and len(whole.text) > 100_000
    cut = html_to_readable(html, max_chars=1000)
    assert not cut.complete
    assert 1000 < len(cut.text) < 2000  # enough to show 1000 characters, not the other 100 000
    assert whole.text.startswith(cut.text)
    short = html_to_readable("<main><p>short</p></main>", max_chars=1000)
    assert short.complete and short.text == "short"


def test_parsing_stops_once_main_holds_more_than_is_shown() -> None:
    sections = "".join(
        f"<section><h2>Part {i}</h2><p>{'text ' * 50}<b>bold</b> end.</p></section>" for i in range(400)
    )
    trailer = "<div>" + "<span>after the main</span>" * 20_000 + "</div>"
    html = f"<html><head><title>Long</title></head><body><main>{sections}</main>{trailer}</body></html>"
    whole = html_to_readable(html)
    for fmt in ("markdown", "text"):
        full = html_to_readable(html, fmt=fmt).text  # type: ignore[arg-type]
        cut = html_to_readable(html, fmt=fmt, max_chars=3000)  # type: ignore[arg-type]
        assert not cut.complete and cut.title == "Long"
        assert full[:3000] == cut.text[:3000]  # what is shown is what the whole parse shows
    assert parse_html(html, stop_after=10_000).stopped  # the trailer was never tokenized
    assert not parse_html(html).stopped and "after the main" not in whole.text


def test_a_stopped_parse_that_renders_short_reads_the_whole_page() -> None:
    # Text that collapses to almost nothing: the parse stops on the count of characters, the
    # rendering does not reach max_chars, so the whole page is read after all.
    padded = "".join(f"<p>{i}" + " " * 3000 + "</p>" for i in range(100))
    html = f"<main>{padded}<p>{'the real content ' * 100}</p></main>"
    cut = html_to_readable(html, max_chars=1000)
    assert "the real content" in cut.text
    assert cut.text.startswith("0\n\n1\n\n2")


def test_without_a_main_the_whole_page_is_read() -> None:
    blocks = "".join(f"<div><p>{'words, ' * 40}</p></div>" for i in range(300))
    html = f"<body>{blocks}<article><p>{'the article. ' * 3000}</p></article></body>"
    assert not parse_html(html, stop_after=1000).stopped
    assert html_to_readable(html, max_chars=1000).text.startswith("the article.")


def test_javascript_links_keep_their_text_only() -> None:
    html = "<main><p><a href='javascript:alert(1)'>click</a> and <a href='#top'>top</a></p></main>"
    assert html_to_readable(html).text == "click and top"


# -- charsets ------------------------------------------------------------------------------------


def _html(charset_decl: str, body: str) -> str:
    return f"<html><head>{charset_decl}<title>t</title></head><body><main><p>{body}</p></main></body></html>"


@pytest.mark.parametrize(
    ("declaration", "codec", "words"),
    [
        ('<meta charset="ISO-8859-1">', "cp1252", "Größe des Gehäuses: 12 € — déjà vu"),
        (
            '<meta http-equiv="Content-Type" content="text/html; charset=windows-1251">',
            "cp1251",
            "Датчик температуры на шине I2C",
        ),
        ("<meta charset=Shift_JIS>", "cp932", "温度センサーの読み取り"),
    ],
)
def test_a_charset_declared_by_meta_only_is_honoured(declaration: str, codec: str, words: str) -> None:
    body = _html(declaration, words).encode(codec)
    text, used = decode_body(body, "text/html")  # the header names no charset
    assert used == codec
    assert words in html_to_readable(text).text


def test_the_header_charset_beats_the_meta_one() -> None:
    body = _html('<meta charset="utf-8">', "Привет").encode("koi8-r")
    text, used = decode_body(body, "text/html; charset=KOI8-R")
    assert used == "koi8-r" and "Привет" in text


def test_a_bom_beats_everything() -> None:
    body = "\ufeff".encode() + _html('<meta charset="windows-1251">', "naïve").encode()
    text, used = decode_body(body, "text/html; charset=iso-8859-1")
    assert used == "utf-8" and "naïve" in text


def test_no_declaration_is_utf8_with_replacement() -> None:
    text, used = decode_body(b"<p>caf\xc3\xa9 and a stray \xff byte</p>", "text/html")
    assert used == "utf-8"
    assert text == "<p>café and a stray \ufffd byte</p>"


def test_an_unknown_label_falls_back_to_utf8() -> None:
    _, used = decode_body(b"<meta charset='x-klingon'><p>hi</p>", None)
    assert used == "utf-8"


def test_a_meta_claiming_utf16_is_read_as_utf8() -> None:
    _, used = decode_body(b"<meta charset='utf-16'><p>hi</p>", "text/html")
    assert used == "utf-8"


def test_xml_declaration_names_the_encoding() -> None:
    assert sniff_declared_charset(b'<?xml version="1.0" encoding="ISO-8859-15"?><html/>') == "ISO-8859-15"


# -- body kinds ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "body", "kind"),
    [
        ("text/html; charset=utf-8", b"<p>x</p>", "html"),
        ("application/xhtml+xml", b"<html/>", "html"),
        ("application/json", b"{}", "json"),
        ("application/problem+json", b"{}", "json"),
        ("text/plain", b"hello", "text"),
        ("text/csv", b"a,b", "text"),
        ("application/xml", b"<a/>", "text"),
        ("application/atom+xml", b"<feed/>", "text"),
        ("image/png", b"\x89PNG\r\n\x1a\n", "binary"),
        ("application/pdf", b"%PDF-1.7", "binary"),
        ("application/zip", b"PK\x03\x04", "binary"),
        (None, b"<!DOCTYPE html><html></html>", "html"),
        (None, b'{"a": 1}', "json"),
        (None, b"plain words", "text"),
        ("application/octet-stream", b"\x00\x01\x02\x03", "binary"),
        (None, b"\xff\xd8\xff\xe0\x00\x10JFIF", "binary"),
    ],
)
def test_classify(content_type: str | None, body: bytes, kind: str) -> None:
    assert classify(content_type, body) == kind


def test_pretty_json_indents_and_keeps_non_ascii() -> None:
    assert pretty_json('{"name":"Größe","values":[1,2]}') == json.dumps(
        {"name": "Größe", "values": [1, 2]}, indent=2, ensure_ascii=False
    )
    assert pretty_json('{"cut": [1, 2') is None


# -- trafilatura, when installed -----------------------------------------------------------------


@pytest.mark.skipif(
    not trafilatura_available(), reason="the web-extract extra (trafilatura) is not installed"
)
def test_trafilatura_answers_first_when_installed() -> None:
    got = extract_html(page("article.html"), "https://notes.example/posts/bme280/")
    assert got.engine == "trafilatura"
    assert "## Wiring" in got.text and "Popular posts" not in got.text and "dataLayer" not in got.text
    assert extract_html(page("article.html"), engine="builtin").engine == "builtin"


@pytest.mark.skipif(not trafilatura_available(), reason="the web-extract extra is not installed")
def test_trafilatura_paragraphs_lose_their_source_indentation() -> None:
    text = extract_html(page("article.html"), "https://notes.example/posts/bme280/").text
    assert "temperature reads" in text
    assert "\n      temperature" not in text  # four spaces or more would make it a code block
    assert "  - The breakout's regulator" in text  # a nested list item keeps its nesting


def test_builtin_answers_when_trafilatura_finds_nothing() -> None:
    got = extract_html("<main><p>x</p></main>")
    assert got.text == "x"  # trafilatura (if installed) finds too little here: the builtin one answers
