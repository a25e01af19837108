"""HTML to a small content tree, in one pass of the regular-expression engine (`_TOKEN`).

The tree already leaves out what is never content (scripts, styles, navigation, site headers and
footers, sidebars, form controls, hidden elements) and collects what the content choice looks at
(`<main>`, articles, forms, tables holding tables) while it is built.

Bounded on hostile input: one linear pass (nothing past the last '>' is retried as a tag, a quoted
'>' is repaired within `QUOTE_WINDOW`), and the tree is never deeper than `MAX_DEPTH` (deeper
elements are flattened into the deepest one), so rendering recursion stays bounded too.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from html import unescape

from edgeclaw.records import dataclass

MAX_DEPTH = 200  # elements nested deeper are flattened: a hostile page cannot exhaust the stack
MAX_TITLE_CHARS = 300  # a densest block with less text than this is no better than the whole body

# A <br> in inline content, until whitespace is collapsed (a NUL in the page is made U+FFFD on parsing).
LINE_BREAK = "\x00"

# -- the HTML tree ---------------------------------------------------------------------

_VOID = frozenset(
    {
        "area",
        "base",
        "br",
        "col",
        "embed",
        "hr",
        "img",
        "input",
        "link",
        "meta",
        "param",
        "source",
        "track",
        "wbr",
    }
)
# Never content, wherever they are.
_DROP = frozenset(
    {
        "script",
        "style",
        "noscript",
        "template",
        "svg",
        "math",
        "iframe",
        "object",
        "embed",
        "canvas",
        "video",
        "audio",
        "map",
        "nav",
        "aside",
        "footer",
        "dialog",
        "button",
        "input",
        "select",
        "textarea",
        "option",
        "datalist",
        "head",
        "link",
        "meta",
        "base",
    }
)
_DROP_ROLES = frozenset(
    {
        "navigation",
        "banner",
        "contentinfo",
        "complementary",
        "search",
        "menu",
        "menubar",
        "dialog",
        "alertdialog",
    }
)
# A <header> is the site's banner unless it sits in one of these (then it is the article's own).
_SECTIONING = frozenset({"article", "main", "section"})
BLOCK_TAGS = frozenset(
    {
        "address",
        "article",
        "blockquote",
        "body",
        "caption",
        "center",
        "dd",
        "details",
        "dir",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "form",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "header",
        "hgroup",
        "hr",
        "html",
        "legend",
        "li",
        "main",
        "menu",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
    }
)
HEADING_LEVELS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Implied end tags: a start tag of the key closes an open element of the set, looking up the
# stack no further than the boundary elements (the HTML parsing algorithm's scopes, simplified).
_TABLE_SCOPE = frozenset({"table", "html", "template", "caption"})
_CLOSES_P = BLOCK_TAGS - {
    "body",
    "html",
    "td",
    "th",
    "tr",
    "tbody",
    "thead",
    "tfoot",
    "caption",
    "li",
    "dd",
    "dt",
}
_IMPLIED: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "li": (frozenset({"li"}), frozenset({"ul", "ol", "menu"}) | _TABLE_SCOPE),
    "dt": (frozenset({"dt", "dd"}), frozenset({"dl"}) | _TABLE_SCOPE),
    "dd": (frozenset({"dt", "dd"}), frozenset({"dl"}) | _TABLE_SCOPE),
    "tr": (frozenset({"tr", "td", "th"}), frozenset({"table", "thead", "tbody", "tfoot"})),
    "td": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "th": (frozenset({"td", "th"}), frozenset({"tr", "table"})),
    "thead": (frozenset({"thead", "tbody", "tfoot", "tr", "td", "th"}), frozenset({"table"})),
    "tbody": (frozenset({"thead", "tbody", "tfoot", "tr", "td", "th"}), frozenset({"table"})),
    "tfoot": (frozenset({"thead", "tbody", "tfoot", "tr", "td", "th"}), frozenset({"table"})),
}
_P_SCOPE = _TABLE_SCOPE | {"td", "th", "button"}
_JUNK_TOKENS = frozenset(
    {
        "sidebar",
        "navbar",
        "nav",
        "menu",
        "breadcrumb",
        "breadcrumbs",
        "cookie",
        "cookies",
        "consent",
        "banner",
        "footer",
        "comments",
        "comment",
        "share",
        "social",
        "related",
        "promo",
        "advert",
        "ads",
        "ad",
        "sponsor",
        "newsletter",
        "popup",
        "modal",
        "toc",
        "skip",
    }
)
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_TOKEN_SPLIT = re.compile(r"[\s_\-]+")


class Node:
    """One element: its tag, the attributes kept, children (elements and text runs)."""

    __slots__ = ("_attrs", "children", "link_len", "parent", "tag", "text_len")

    def __init__(
        self, tag: str, attrs: dict[str, str] | None, parent: Node | None, raw_attrs: str = ""
    ) -> None:
        self.tag = tag
        # Parsed, or the attribute text not parsed yet (most never are: they are never rendered).
        self._attrs: dict[str, str] | str = attrs if attrs is not None else raw_attrs
        self.parent = parent
        self.children: list[Node | str] = []
        self.text_len = 0  # characters of text below (whitespace runs counted once)
        self.link_len = 0  # of which inside links

    @property
    def attrs(self) -> dict[str, str]:
        found = self._attrs
        if isinstance(found, str):
            found = self._attrs = _attrs(found) if found else _NO_ATTRS
        return found

    def iter(self) -> Iterator[Node]:
        """This element and every element below it, in document order (no recursion)."""
        stack: list[Node] = [self]
        while stack:
            node = stack.pop()
            yield node
            stack.extend(c for c in reversed(node.children) if isinstance(c, Node))

    def text(self) -> str:
        return " ".join("".join(_texts(self)).split())


def _texts(node: Node) -> Iterator[str]:
    stack: list[Node | str] = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        else:
            stack.extend(reversed(item.children))


def looks_like_furniture(attrs: dict[str, str]) -> bool:
    names = f"{attrs.get('class', '')} {attrs.get('id', '')}".lower()
    return any(token in _JUNK_TOKENS for token in _TOKEN_SPLIT.split(names))


_KEPT_ATTRS = frozenset(
    {"href", "src", "alt", "class", "id", "role", "colspan", "start", "hidden", "aria-hidden", "style"}
)

# The tokenizer: one pass of the regular-expression engine over the page (html.parser's pure-Python
# loop costs about four times as much on a 1 MB page). Each match is a comment, a doctype or
# processing instruction, an end tag, a start tag, or a raw-text element (script, style, ...)
# whole with its content; the text between matches is text. A tag ends at its first '>'; a '>'
# inside a quoted attribute value is repaired afterwards (`_TAG_REST`), looking no further than
# `QUOTE_WINDOW` characters, so a hostile page cannot make the pass quadratic.
_RAW = "script|style|textarea|title|iframe|noembed|noframes|noscript|xmp"
_TOKEN = re.compile(
    rf"<(?:(?P<raw>{_RAW})(?P<rawattrs>[\s/][^>]*+)?>(?P<rawtext>.*?)(?:</(?P=raw)\s*>|\Z)"
    r"|!--.*?(?:--!?>|\Z)"
    r"|[!?][^>]*+>"
    r"|/(?P<end>[A-Za-z][^\s/>]*+)[^>]*+>"
    r"|(?P<start>[A-Za-z][^\s/>]*+)(?P<attrs>[^>]*+)>)",
    re.S | re.I,
)
_BALANCED = re.compile(r"""(?:[^"']++|"[^"]*+"|'[^']*+')*+""")
_TAG_REST = re.compile(r"""(?:[^>"']++|"[^"]*+"|'[^']*+')*+>""")
_ATTR = re.compile(r"""([^\s"'=<>`/]+)(?:\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s>]+)))?""")
QUOTE_WINDOW = 2048


def _attrs(raw: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for name, dq, sq, bare in _ATTR.findall(raw):
        key = name.lower()
        if key in _KEPT_ATTRS and key not in found:
            value = dq or sq or bare
            found[key] = unescape(value) if "&" in value else value
    return found


@dataclass(slots=True)
class Document:
    """A page's content tree and what the content choice needs, collected while building it."""

    root: Node
    title: str
    nodes: list[Node]  # every element attached to the tree, in document order
    mains: list[Node]  # <main> and role=main
    articles: list[Node]
    forms: list[Node]
    grid_less: set[int]  # ids of the tables holding tables (laid out with tables, not data)
    stopped: bool = False  # the parse stopped early: the main content had enough text (`_Enough`)


class _Enough(Exception):
    """Raised inside the parse once the page's <main> holds more text than will be shown."""


class _Builder:
    """A forgiving tree of the document, without the parts that are never content.

    A dropped element is still built (so its end tag and implied end tags match as usual) but
    never attached: its subtree is garbage the moment it closes. The loop is written flat, with
    a count of the open elements per tag (implied end tags look up the stack only when one of
    theirs is open), because it runs once per tag of the page.
    """

    def __init__(self, stop_after: int | None = None) -> None:
        self.root = Node("#root", _NO_ATTRS, None)
        # Stop once the first <main> (or role=main) holds this many characters of visible text:
        # it is the content then (a page has one main), and the rest of the page would not be shown.
        self.stop_after = stop_after if stop_after is not None else sys.maxsize
        self.main: Node | None = None
        self.main_at = 0  # its position in the stack while it is open
        self.main_chars = 0
        self.stack: list[Node] = [self.root]
        self.live: list[bool] = [True]  # per stack entry: attached to the tree
        self.open: dict[str, int] = {}  # open elements per tag
        self.overflow: list[str] = []  # tags opened past MAX_DEPTH, not made into elements
        self.title: str | None = None
        self.doc = Document(self.root, "", [], [], [], [], set())

    def build(self, html: str) -> Document:
        end = html.rfind(">") + 1  # no tag can end after the last '>': nothing past it is retried
        pos = 0
        skip_to = 0
        stack = self.stack
        start_tag = self.start
        end_tag = self.end
        add_text = self.text
        names: dict[str, str] = {}  # tag names as written -> lower case, one string per name
        counts = self.open
        live = self.live
        overflow = self.overflow
        try:
            for m in _TOKEN.finditer(html, 0, end):
                begin = m.start()
                if begin < skip_to:
                    continue  # inside a tag whose quoted attribute held a '>'
                if begin > pos:
                    add_text(html[pos:begin])
                pos = m.end()
                raw, raw_attrs, raw_text, closing, name, attrs = m.groups()
                if name is not None:
                    if attrs and ('"' in attrs or "'" in attrs) and _BALANCED.fullmatch(attrs) is None:
                        at = m.start("attrs")
                        rest = _TAG_REST.match(html, at, min(at + QUOTE_WINDOW, len(html)))
                        if rest is not None:
                            attrs = html[at : rest.end() - 1]
                            pos = skip_to = rest.end()
                    start_tag(names.get(name) or _tag_name(names, name), attrs)
                elif closing is not None:
                    tag = names.get(closing) or _tag_name(names, closing)
                    top = stack[-1]
                    if top.tag == tag and tag != "title" and not overflow:  # the usual case, inline
                        counts[tag] -= 1
                        stack.pop()
                        live.pop()
                    else:
                        end_tag(tag)
                elif raw is not None:
                    tag = raw.lower()
                    start_tag(tag, raw_attrs or "")
                    if raw_text and tag in ("title", "textarea", "xmp"):
                        add_text(raw_text)
                    elif raw_text:
                        stack[-1].children.append(raw_text)  # script, style: never shown, kept as is
                    end_tag(tag)
                # comments, doctypes, processing instructions: nothing
            if pos < len(html):
                add_text(html[pos:])
        except _Enough:
            self.doc.stopped = True
        self.doc.title = " ".join((self.title or "").split())[:MAX_TITLE_CHARS]
        return self.doc

    def text(self, data: str) -> None:
        if data.isspace() and not self.open.get("pre"):
            data = " "  # the runs of indentation between tags: one shared string, not thousands
        elif "&" in data:
            data = unescape(data)
        if LINE_BREAK in data:
            data = data.replace(LINE_BREAK, "\ufffd")
        stack = self.stack
        stack[-1].children.append(data)
        main = self.main
        if main is not None and self.live[-1] and len(stack) > self.main_at and stack[self.main_at] is main:
            self.main_chars += len(data)
            if self.main_chars > self.stop_after:
                raise _Enough

    def start(self, tag: str, raw_attrs: str) -> None:
        # Attributes are parsed now only when they could drop the element or mark the main content
        # (role, hidden, aria-hidden, style); the rest wait until an element is rendered.
        attrs: dict[str, str] | None = _NO_ATTRS
        if raw_attrs and raw_attrs.strip(" \t\n\r\f/"):
            attrs = (
                _attrs(raw_attrs)
                if ("role" in raw_attrs or "hidden" in raw_attrs or "style" in raw_attrs)
                else None
            )
        stack = self.stack
        counts = self.open
        # An implied end tag is only looked for when an element it could close is open (a <td>
        # after a closed </td>, the usual case, costs two lookups here, no call).
        implied = _IMPLIED.get(tag)
        if implied is not None:
            for name in implied[0]:
                if counts.get(name):
                    self._close_implied(tag)
                    break
        elif tag in HEADING_LEVELS or (tag in _CLOSES_P and counts.get("p")):
            self._close_implied(tag)
        parent = stack[-1]
        if len(stack) > MAX_DEPTH:
            if tag not in _VOID:
                self.overflow.append(tag)
            if tag == "br":
                parent.children.append(LINE_BREAK)
            return
        node = Node(tag, attrs, parent, raw_attrs)
        live = self.live[-1]
        if live and (tag in _DROP or (attrs and _dropped_by_attrs(attrs))):
            live = False
        elif live and tag == "header" and not any(self.open.get(t) for t in _SECTIONING):
            live = False  # the site's banner, not an article's header
        if live:
            parent.children.append(node)
            doc = self.doc
            doc.nodes.append(node)
            if tag in _NOTED or attrs:
                self._note(doc, node, tag, attrs)
        if tag not in _VOID:
            stack.append(node)
            self.live.append(live)
            counts[tag] = counts.get(tag, 0) + 1

    def _note(self, doc: Document, node: Node, tag: str, attrs: dict[str, str] | None) -> None:
        """Record the elements the content choice and the tables look for."""
        if tag == "main" or (attrs and attrs.get("role", "").lower() == "main"):
            doc.mains.append(node)
            if self.main is None and tag not in _VOID:
                self.main, self.main_at = node, len(self.stack)  # where start() is about to put it
        elif tag == "article":
            doc.articles.append(node)
        elif tag == "form":
            doc.forms.append(node)
        elif tag == "table" and self.open.get("table"):
            for open_node in self.stack:
                if open_node.tag == "table":
                    doc.grid_less.add(id(open_node))

    def _pop_to(self, i: int) -> None:
        """Close the elements from stack position i up."""
        stack = self.stack
        counts = self.open
        for node in stack[i:]:
            counts[node.tag] -= 1
        del stack[i:]
        del self.live[i:]

    def end(self, tag: str) -> None:
        if self.overflow:
            if tag in self.overflow:
                del self.overflow[len(self.overflow) - 1 - self.overflow[::-1].index(tag)]
            return
        counts = self.open
        if not counts.get(tag):
            return  # an end tag nothing opened
        stack = self.stack
        top = stack[-1]
        if top.tag == tag and tag != "title":  # the usual case: the element just opened closes
            counts[tag] -= 1
            stack.pop()
            self.live.pop()
            return
        for i in range(len(stack) - 1, 0, -1):
            node = stack[i]
            if node.tag == tag:
                if tag == "title" and self.title is None:
                    self.title = node.text()
                self._pop_to(i)
                return
            if tag == "p" and node.tag in _P_SCOPE:
                return  # a stray </p> does not close through a table cell

    def _close_implied(self, tag: str) -> None:
        stack = self.stack
        closes, boundary = _IMPLIED.get(tag, (_JUST_P, _P_SCOPE))
        if tag in HEADING_LEVELS and stack[-1].tag in HEADING_LEVELS:
            self._pop_to(len(stack) - 1)  # <h2>...<h3> without </h2>: headings do not nest
        counts = self.open
        if closes is _JUST_P:
            if not counts.get("p"):
                return
        else:
            for name in closes:
                if counts.get(name):
                    break
            else:
                return  # none of them open: nothing to close (no walk up the stack)
        for i in range(len(stack) - 1, 0, -1):
            name = stack[i].tag
            if name in closes:
                self._pop_to(i)
                return
            if name in boundary:
                return


def _tag_name(names: dict[str, str], written: str) -> str:
    name = names[written] = sys.intern(written.lower())
    return name


_JUST_P = frozenset({"p"})
_NOTED = frozenset({"main", "article", "form", "table"})
_NO_ATTRS: dict[str, str] = {}  # shared by every element without attributes: never written to


def _dropped_by_attrs(attrs: dict[str, str]) -> bool:
    """Hidden (hidden, aria-hidden, display:none) or page furniture by its ARIA role."""
    if "hidden" in attrs or attrs.get("aria-hidden", "").lower() == "true":
        return True
    if attrs.get("role", "").strip().lower() in _DROP_ROLES:
        return True
    style = attrs.get("style")
    return bool(style and _HIDDEN_STYLE.search(style))


def parse_html(html: str, stop_after: int | None = None) -> Document:
    """The document's content tree, its <title>, and the elements the content choice looks at.

    With `stop_after`, the parse stops once the first <main> holds that many characters of text
    (`Document.stopped`): the tree then ends there, its last elements cut short.
    """
    return _Builder(stop_after).build(html)
