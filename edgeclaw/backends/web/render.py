"""The chosen content rendered as markdown or plain text: headings, paragraphs, links, lists, code
blocks and tables, stopping once past what the caller will show.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from typing import Literal
from urllib.parse import urljoin

from edgeclaw.backends.web.html_tree import BLOCK_TAGS, HEADING_LEVELS, LINE_BREAK, Node

Format = Literal["markdown", "text"]

# -- rendering -----------------------------------------------------------------------------

_RUNS = re.compile(r"\s+")
_AROUND_BREAK = re.compile(r" ?\x00 ?")
_LANG = re.compile(r"(?:^|\s)(?:language|lang|highlight-source|brush:?)-?([A-Za-z0-9_+#.\-]+)")
_EMPH = {"strong": "**", "b": "**", "em": "*", "i": "*", "del": "~~", "s": "~~"}


def _collapse(text: str) -> str:
    """Whitespace runs (source line breaks too) to one space; <br> breaks kept, spaces around them gone."""
    return _AROUND_BREAK.sub("\n", _RUNS.sub(" ", text)).strip()


class Renderer:
    def __init__(self, fmt: Format, base_url: str, grid_less: set[int], budget: int | None = None) -> None:
        self.markdown = fmt == "markdown"
        self.base_url = base_url
        self.grid_less = grid_less  # tables holding tables
        # Rendering stops once this many characters of text are out (the caller shows no more);
        # `used` counts paragraphs, headings and code, not the markup around them, so it is short
        # of the real length: stopping when it passes the budget never stops too early.
        self.budget = budget if budget is not None else sys.maxsize
        self.used = 0

    @property
    def over(self) -> bool:
        return self.used > self.budget

    # blocks: each a list of finished paragraphs (strings without blank lines at the ends)
    def blocks(self, node: Node) -> list[str]:
        tag = node.tag
        if tag in HEADING_LEVELS:
            text = self.inline_text(node).replace("\n", " ")
            if not text:
                return []
            self.used += len(text)
            return [f"{'#' * HEADING_LEVELS[tag]} {text}" if self.markdown else text]
        if tag == "pre":
            return self.code_block(node)
        if tag in ("ul", "ol", "menu", "dir"):
            return self.list_block(node)
        if tag == "dl":
            return self.definition_list(node)
        if tag == "table":
            return self.table(node)
        if tag == "blockquote":
            inner = self.container(node)
            prefix = "> " if self.markdown else "  "
            return [
                "\n".join(prefix + line if line else prefix.rstrip() for line in b.split("\n")) for b in inner
            ]
        if tag == "hr":
            return ["---"] if self.markdown else []
        return self.container(node)

    def container(self, node: Node) -> list[str]:
        """Children in order: runs of inline content become paragraphs, block children their own blocks."""
        out: list[str] = []
        run: list[str] = []
        for child in node.children:
            if self.used > self.budget:
                break
            if child.__class__ is str:
                run.append(child)  # type: ignore[arg-type]
            elif child.tag in BLOCK_TAGS:  # type: ignore[union-attr]
                if run:
                    if text := _collapse("".join(run)):
                        out.append(text)
                        self.used += len(text)
                    run = []
                out.extend(self.blocks(child))  # type: ignore[arg-type]
            else:
                run.append(self.inline(child))  # type: ignore[arg-type]
        if run and (text := _collapse("".join(run))):
            out.append(text)
            self.used += len(text)
        return out

    def inline_text(self, node: Node) -> str:
        return _collapse("".join(self.inline(c) if isinstance(c, Node) else c for c in node.children))

    def inline(self, node: Node) -> str:
        tag = node.tag
        if tag == "br":
            return LINE_BREAK
        if tag == "img":
            alt = " ".join(node.attrs.get("alt", "").split())
            if not alt:
                return ""
            src = self.url(node.attrs.get("src", ""))
            return f"![{alt}]({src})" if self.markdown and src else f"[{alt}]"
        inner = "".join([c if c.__class__ is str else self.inline(c) for c in node.children])  # type: ignore
        if tag in BLOCK_TAGS:  # a block inside inline content (<a><div>..</div></a>): its text, spaced
            return f" {inner} "
        if tag == "a":
            return self.link(node, inner)
        if not self.markdown:
            return inner
        if tag == "code" or tag == "kbd" or tag == "samp":
            text = " ".join(inner.split())
            if not text:
                return ""
            fence = "``" if "`" in text else "`"
            return f"{fence}{text}{fence}"
        mark = _EMPH.get(tag)
        if mark and inner.strip():
            lead = inner[: len(inner) - len(inner.lstrip())]
            trail = inner[len(inner.rstrip()) :]
            return f"{lead}{mark}{inner.strip()}{mark}{trail}"
        return inner

    def link(self, node: Node, inner: str) -> str:
        text = " ".join(inner.split())
        href = node.attrs.get("href", "").strip()
        if href.startswith("#") and len(text) <= 1 and not text.isalnum():
            return ""  # a heading's permalink mark (¶, #, §)
        if not self.markdown:
            return inner
        if not href or href.startswith("#") or href.lower().startswith(("javascript:", "data:", "vbscript:")):
            return inner
        url = self.url(href)
        if not text:
            return ""
        if text == url:
            return f"<{url}>"
        return f"[{text}]({url})"

    def url(self, href: str) -> str:
        href = href.strip()
        if not href or href.lower().startswith(("javascript:", "data:", "vbscript:")):
            return ""
        try:
            url = urljoin(self.base_url, href) if self.base_url else href
        except ValueError:
            return href
        return url.replace(" ", "%20").replace(")", "%29")

    def code_block(self, node: Node) -> list[str]:
        raw = "".join("\n" if isinstance(c, Node) else c for c in _pre_pieces(node))
        if raw.startswith("\n"):
            raw = raw[1:]  # the newline right after <pre> is not content (HTML says so)
        code = raw.rstrip()
        if not code.strip():
            return []
        self.used += len(code)
        if not self.markdown:
            return [code]
        lang = ""
        for holder in (
            node,
            *(c for c in node.children if isinstance(c, Node) and c.tag == "code"),
            node.parent,
        ):
            if holder is not None and (found := _LANG.search(holder.attrs.get("class", ""))):
                lang = found.group(1)
                break
        fence = "```"
        while fence in code:
            fence += "`"
        return [f"{fence}{lang}\n{code}\n{fence}"]

    def list_block(self, node: Node) -> list[str]:
        ordered = node.tag == "ol"
        try:
            number = int(node.attrs.get("start", "1"))
        except ValueError:
            number = 1
        lines: list[str] = []
        for child in node.children:
            if self.over:
                break
            if isinstance(child, str):
                if child.strip():  # text straight inside a list: an item of its own
                    lines.append(f"- {_collapse(child)}")
                continue
            if child.tag != "li":
                lines.extend(
                    self.blocks(child) if child.tag in BLOCK_TAGS else [_collapse(self.inline(child))]
                )
                continue
            marker = f"{number}. " if ordered else "- "
            number += 1
            body = self.container(child)
            if not body:
                continue
            indent = " " * len(marker)
            first, *rest = "\n".join(body).split("\n")  # tight: a nested list right under its item
            item = [marker + first] + [indent + line if line else "" for line in rest]
            lines.append("\n".join(item))
        lines = [line for line in lines if line]
        return ["\n".join(lines)] if lines else []

    def definition_list(self, node: Node) -> list[str]:
        entries: list[list[str]] = []  # a term with its definitions, one paragraph each
        last = ""
        for child in node.children:
            if not isinstance(child, Node) or child.tag not in ("dt", "dd"):
                continue
            text = "\n".join(self.container(child))
            if not text:
                continue
            if child.tag == "dt":
                if last != "dt" or not entries:
                    entries.append([])
                entries[-1].append(f"**{text}**" if self.markdown else text)
            else:
                if not entries:
                    entries.append([])
                entries[-1].append((": " if self.markdown else "  ") + text.replace("\n", "\n  "))
            last = child.tag
        return ["\n".join(entry) for entry in entries]

    def table(self, node: Node) -> list[str]:
        rows: list[tuple[list[str], bool]] = []  # cells, is a header row
        caption = ""
        # Tables in tables, or a table marked so: a page laid out with tables, not data.
        if id(node) in self.grid_less or node.attrs.get("role", "").lower() in ("presentation", "none"):
            return self.container(node)
        for element in _table_parts(node):
            if self.over:
                break
            if element.tag == "caption":
                caption = self.inline_text(element)
                continue
            cells: list[str] = []
            header = element.parent is not None and element.parent.tag == "thead"
            all_th = True
            for cell in element.children:
                if not isinstance(cell, Node) or cell.tag not in ("td", "th"):
                    continue
                all_th = all_th and cell.tag == "th"
                text = " ".join("\n".join(self.container(cell)).split())
                if len(text) > 400:
                    return self.container(node)  # a cell holding an essay: layout again
                cells.append(text.replace("|", "\\|") if self.markdown else text)
                try:
                    span = min(max(int(cell.attrs.get("colspan", "1")), 1), 50)
                except ValueError:
                    span = 1
                cells.extend([""] * (span - 1))
            if cells:
                rows.append((cells, header or all_th))
        if not rows:
            return []
        width = max(len(cells) for cells, _ in rows)
        if width < 2:
            return self.container(node)  # one column is a box around content, not a grid
        padded = [(cells + [""] * (width - len(cells)), head) for cells, head in rows]
        out: list[str] = []
        if self.markdown:  # markdown needs a header row: the first row serves when the table names none
            head, *body = (cells for cells, _ in padded)
            lines = ["| " + " | ".join(head) + " |", "|" + "|".join(["---"] * width) + "|"]
            lines += ["| " + " | ".join(cells) + " |" for cells in body]
        else:
            lines = [" | ".join(cells).rstrip(" |") for cells, _ in padded]
        if caption:
            out.append(f"**{caption}**" if self.markdown else caption)
        out.append("\n".join(lines))
        return out


def _pre_pieces(node: Node) -> Iterator[Node | str]:
    """The text of a <pre> in order, a <br> as a Node marker (it stands for a newline)."""
    stack: list[Node | str] = list(reversed(node.children))
    while stack:
        item = stack.pop()
        if isinstance(item, str) or item.tag == "br":
            yield item
        else:
            stack.extend(reversed(item.children))


def _table_parts(table: Node) -> Iterator[Node]:
    """The rows and caption of this table (not of tables inside it), in order."""
    for child in table.children:
        if not isinstance(child, Node):
            continue
        if child.tag in ("tr", "caption"):
            yield child
        elif child.tag in ("thead", "tbody", "tfoot"):
            yield from (row for row in child.children if isinstance(row, Node) and row.tag == "tr")
