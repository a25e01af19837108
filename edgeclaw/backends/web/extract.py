"""Fetched pages made readable: HTML to markdown or plain text, by the standard-library extractor
(`html_tree` parses, `readability` chooses the main content, `render` writes it) or, when installed
(the `web-extract` extra) and asked for under the engine "auto", by `trafilatura`.

The body readers web_fetch uses (`body`: charsets, kinds, JSON) are imported from here too.
"""

from __future__ import annotations

import re
from typing import Literal

from edgeclaw.backends.web.body import (
    Kind,
    charset_from_content_type,
    classify,
    codec_for,
    decode_body,
    kind_of_type,
    media_type,
    pretty_json,
    sniff_declared_charset,
)
from edgeclaw.backends.web.html_tree import BLOCK_TAGS, MAX_DEPTH, Document, parse_html
from edgeclaw.backends.web.readability import main_content
from edgeclaw.backends.web.render import Format, Renderer
from edgeclaw.records import dataclass

Engine = Literal["auto", "builtin", "trafilatura"]

STOP_SLACK_CHARS = 4096  # a parse stops past 2 * max_chars + this in <main> (see html_to_readable)


@dataclass(frozen=True, slots=True)
class Extracted:
    """A page made readable: its title, the text, and which extractor made it."""

    title: str
    text: str
    engine: str  # "builtin" | "trafilatura"
    complete: bool = True  # False: rendering stopped past max_chars, the page has more


def html_to_readable(
    html: str, base_url: str = "", fmt: Format = "markdown", max_chars: int | None = None
) -> Extracted:
    """The standard-library extractor: the page's main content as markdown or plain text.

    With `max_chars`, rendering stops once the text is past it, and so does parsing once the
    page's <main> holds twice that much text (without a <main> the whole page is read: the content
    can be anywhere). When the rendering of a parse stopped so did not get past `max_chars` (text
    that collapses a lot), the whole page is read after all. `complete` says whether it stopped.
    """
    stop_after = None if max_chars is None else 2 * max_chars + STOP_SLACK_CHARS
    doc = parse_html(html, stop_after)
    text, over = _render(doc, fmt, base_url, max_chars)
    if doc.stopped and not over:
        doc = parse_html(html)
        text, over = _render(doc, fmt, base_url, max_chars)
    return Extracted(doc.title, text, "builtin", complete=not over and not doc.stopped)


def _render(doc: Document, fmt: Format, base_url: str, max_chars: int | None) -> tuple[str, bool]:
    renderer = Renderer(fmt, base_url, doc.grid_less, max_chars)
    blocks: list[str] = []
    for node in main_content(doc):
        if renderer.over:
            break
        blocks.extend(renderer.blocks(node) if node.tag in BLOCK_TAGS else renderer.container(node))
    return "\n\n".join(b for b in blocks if b.strip()), renderer.over


def _trafilatura(html: str, base_url: str, fmt: Format) -> Extracted | None:
    """trafilatura's extraction, or None when it is not installed or finds nothing."""
    try:
        import trafilatura  # the optional web-extract extra: imported only when a page is read
    except ImportError:
        return None
    try:
        text = trafilatura.extract(
            html,
            url=base_url or None,
            output_format="markdown" if fmt == "markdown" else "txt",
            include_links=fmt == "markdown",
            include_tables=True,
            include_formatting=fmt == "markdown",
            include_images=False,
            include_comments=False,
            favor_recall=True,
        )
        title = ""
        meta = trafilatura.extract_metadata(html)
        if meta is not None and meta.title:
            title = meta.title
    except Exception:  # a third-party parser's failure on one page: the builtin extractor answers instead
        return None
    if not text or not text.strip():
        return None
    return Extracted(" ".join(title.split()), _dedent_paragraphs(text.strip()), "trafilatura")


_LIST_ITEM = re.compile(r"(?:[-*+]|\d+[.)])\s")


def _dedent_paragraphs(text: str) -> str:
    """trafilatura keeps a paragraph's source indentation on its continuation lines; in markdown
    four spaces make a code block of them. Outside code fences, such lines lose it (list items,
    whose indentation is their nesting, keep theirs)."""
    out: list[str] = []
    fence = ""
    for line in text.split("\n"):
        stripped = line.lstrip()
        if fence:
            if stripped.startswith(fence):
                fence = ""
            out.append(line)
            continue
        if stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
            out.append(line)
            continue
        if line[:1] in (" ", "\t") and not _LIST_ITEM.match(stripped):
            out.append(stripped)
        else:
            out.append(line)
    return "\n".join(out)


def trafilatura_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("trafilatura") is not None


def extract_html(
    html: str,
    base_url: str = "",
    fmt: Format = "markdown",
    engine: Engine = "auto",
    max_chars: int | None = None,
) -> Extracted:
    """The page's content: trafilatura's when asked or installed (engine 'auto') and it finds some,
    else the standard-library extractor's."""
    if engine == "trafilatura" and not trafilatura_available():
        raise RuntimeError("the trafilatura extractor is not installed (pip install 'edgeclaw[web-extract]')")
    if engine != "builtin":
        found = _trafilatura(html, base_url, fmt)
        if found is not None:
            return found
    return html_to_readable(html, base_url, fmt, max_chars)


__all__ = [
    "MAX_DEPTH",
    "Engine",
    "Extracted",
    "Format",
    "Kind",
    "charset_from_content_type",
    "classify",
    "codec_for",
    "decode_body",
    "extract_html",
    "html_to_readable",
    "kind_of_type",
    "media_type",
    "parse_html",
    "pretty_json",
    "sniff_declared_charset",
    "trafilatura_available",
]
