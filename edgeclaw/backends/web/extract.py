"""Fetched bodies made readable: bytes to text (charset), HTML to markdown or plain text, JSON pretty-printed.

Pure functions over bytes and str, no I/O, standard library only. HTML is read in one pass of
the regular-expression engine (`_TOKEN`) into a small tree that already leaves out what is never
content (scripts, styles, navigation, site headers and footers, sidebars, form controls, hidden
elements); the main content is then chosen (`<main>`/`role=main`, else the article, else the
block densest in text that is not link text) and rendered with its headings, paragraphs, links,
lists, code blocks and tables, stopping once past what the caller will show. `trafilatura`, when
installed (the `web-extract` extra), is asked first for HTML under the engine "auto".

Bounded on hostile input: one linear pass (nothing past the last '>' is retried as a tag, a quoted
'>' is repaired within `QUOTE_WINDOW`), and the tree is never deeper than `MAX_DEPTH` (deeper
elements are flattened into the deepest one), so rendering recursion stays bounded too.
"""

from __future__ import annotations

import codecs
import json
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from html import unescape
from itertools import chain
from typing import Literal
from urllib.parse import urljoin

Format = Literal["markdown", "text"]
Kind = Literal["html", "json", "text", "binary"]
Engine = Literal["auto", "builtin", "trafilatura"]

MAX_DEPTH = 200  # elements nested deeper are flattened: a hostile page cannot exhaust the stack
META_SNIFF_BYTES = 4096  # where a <meta charset> or XML declaration is looked for
MIN_CONTENT_CHARS = 140
MAX_TITLE_CHARS = 300  # a densest block with less text than this is no better than the whole body

STOP_SLACK_CHARS = 4096  # a parse stops past 2 * max_chars + this in <main> (see html_to_readable)

# A <br> in inline content, until whitespace is collapsed (a NUL in the page is made U+FFFD on parsing).
_BREAK = "\x00"

# -- charsets ----------------------------------------------------------------------

# Labels whose meaning on the web differs from Python's codec of the same name (the WHATWG
# Encoding Standard maps them), or that Python does not know.
_CHARSET_ALIASES = {
    "iso-8859-1": "cp1252",
    "iso8859-1": "cp1252",
    "latin1": "cp1252",
    "latin-1": "cp1252",
    "l1": "cp1252",
    "us-ascii": "cp1252",
    "ascii": "cp1252",
    "shift_jis": "cp932",
    "shift-jis": "cp932",
    "sjis": "cp932",
    "x-sjis": "cp932",
    "ms_kanji": "cp932",
    "windows-31j": "cp932",
    "gb2312": "gbk",
    "gb_2312-80": "gbk",
    "x-gbk": "gbk",
    "euc-kr": "cp949",
    "ks_c_5601-1987": "cp949",
    "tis-620": "cp874",
    "iso-8859-9": "cp1254",
    "x-mac-roman": "mac_roman",
    "x-user-defined": "cp1252",
}
_BOMS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_CT_CHARSET = re.compile(r"""charset\s*=\s*["']?([^"';\s]+)""", re.IGNORECASE)
_META_CHARSET = re.compile(rb"""<meta\b[^>]*?charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_XML_ENCODING = re.compile(rb"""^\s*<\?xml\b[^>]*?encoding\s*=\s*["']([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)


def codec_for(label: str | None) -> str | None:
    """Python's codec for a charset label as the web uses it, or None for a label nobody knows."""
    if not label:
        return None
    name = label.strip().strip("\"'").lower()
    name = _CHARSET_ALIASES.get(name, name)
    try:
        return codecs.lookup(name).name
    except LookupError:
        return None


def charset_from_content_type(content_type: str | None) -> str | None:
    """The charset label a Content-Type header names, or None."""
    if not content_type:
        return None
    found = _CT_CHARSET.search(content_type)
    return found.group(1) if found else None


def sniff_declared_charset(head: bytes) -> str | None:
    """The charset a document declares in its first bytes: <meta charset>, http-equiv, an XML declaration."""
    head = head[:META_SNIFF_BYTES]
    found = _XML_ENCODING.search(head) or _META_CHARSET.search(head)
    return found.group(1).decode("ascii") if found else None


def decode_body(body: bytes, content_type: str | None, *, sniff_meta: bool = True) -> tuple[str, str]:
    """The body as text and the codec used: a BOM, else the header's charset, else (for HTML and
    XML) the document's own declaration, else UTF-8. Undecodable bytes become U+FFFD, never an error.

    A meta tag may not claim UTF-16 (it is itself written in an ASCII-compatible encoding, so the
    claim is wrong): such a claim is read as UTF-8, as browsers do.
    """
    for bom, name in _BOMS:
        if body.startswith(bom):
            return body[len(bom) :].decode(name, "replace"), name
    codec = codec_for(charset_from_content_type(content_type))
    if codec is None and sniff_meta:
        codec = codec_for(sniff_declared_charset(body))
        if codec is not None and codec.startswith("utf-16"):
            codec = "utf-8"
    codec = codec or "utf-8"
    return body.decode(codec, "replace"), codec


# -- what kind of body ---------------------------------------------------------------

_TEXT_TYPES = frozenset(
    {
        "application/javascript",
        "application/ecmascript",
        "application/x-javascript",
        "application/xml",
        "application/x-yaml",
        "application/yaml",
        "application/toml",
        "application/x-sh",
        "application/sql",
        "application/graphql",
        "application/x-ndjson",
        "application/jsonl",
        "image/svg+xml",
    }
)


def media_type(content_type: str | None) -> str:
    """'text/html' from 'text/html; charset=utf-8'; '' when there is none."""
    return (content_type or "").split(";", 1)[0].strip().lower()


def kind_of_type(content_type: str | None) -> Kind | None:
    """What a body is by its media type alone; None when the type says nothing (none, or the
    generic octet-stream): then only its first bytes tell (`classify`)."""
    mtype = media_type(content_type)
    if mtype in ("text/html", "application/xhtml+xml"):
        return "html"
    if mtype == "application/json" or mtype.endswith("+json"):
        return "json"
    if mtype.startswith("text/") or mtype in _TEXT_TYPES or mtype.endswith("+xml"):
        return "text"
    if mtype and mtype not in ("application/octet-stream", "binary/octet-stream"):
        return "binary"
    return None


def classify(content_type: str | None, body: bytes) -> Kind:
    """What a body is, from its media type, else from its first bytes (a server that names no type)."""
    kind = kind_of_type(content_type)
    if kind is not None:
        return kind
    # No type (or the generic one): look at the bytes.
    head = body[:1024]
    if b"\x00" in head and not head.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return "binary"
    stripped = head.lstrip().lower()
    if stripped.startswith((b"<!doctype html", b"<html")) or b"<body" in stripped:
        return "html"
    if stripped[:1] in (b"{", b"["):
        return "json"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start < len(head) - 4:  # a character cut by the 1024-byte window is not a failure
            return "binary"
    return "text"


def pretty_json(text: str) -> str | None:
    """The JSON document indented (non-ASCII kept as is), or None when it does not parse."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return json.dumps(value, indent=2, ensure_ascii=False)


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
_BLOCK = frozenset(
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
_HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
# Implied end tags: a start tag of the key closes an open element of the set, looking up the
# stack no further than the boundary elements (the HTML parsing algorithm's scopes, simplified).
_TABLE_SCOPE = frozenset({"table", "html", "template", "caption"})
_CLOSES_P = _BLOCK - {
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


def _looks_junk(attrs: dict[str, str]) -> bool:
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
        if _BREAK in data:
            data = data.replace(_BREAK, "\ufffd")
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
        elif tag in _HEADINGS or (tag in _CLOSES_P and counts.get("p")):
            self._close_implied(tag)
        parent = stack[-1]
        if len(stack) > MAX_DEPTH:
            if tag not in _VOID:
                self.overflow.append(tag)
            if tag == "br":
                parent.children.append(_BREAK)
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
        if tag in _HEADINGS and stack[-1].tag in _HEADINGS:
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


# -- choosing the main content ------------------------------------------------------------


def _measure(doc: Document) -> None:
    """Fill text_len and link_len bottom-up (children before parents: the reversed document order).

    Whitespace between tags is one shared " " by now (see `_Builder.text`), so a text's length is
    what a reader sees, near enough.
    """
    for node in chain(reversed(doc.nodes), (doc.root,)):
        text = link = 0
        for child in node.children:
            if child.__class__ is str:
                text += len(child)  # type: ignore[arg-type]
            else:
                text += child.text_len  # type: ignore[union-attr]
                link += child.link_len  # type: ignore[union-attr]
        node.text_len = text
        node.link_len = text if node.tag == "a" else link


def _drop_small_forms(doc: Document) -> None:
    """A form is a search box or a login unless it holds the page (some sites wrap everything in one)."""
    for node in doc.forms:
        if node.parent is not None and node.text_len < 500:
            node.parent.children = [c for c in node.parent.children if c is not node]
            node.parent = None  # out of the tree: neither <main> nor <article> is looked for in it


def _in_tree(node: Node, root: Node) -> bool:
    while node.parent is not None:
        node = node.parent
    return node is root


_SCORED = frozenset({"p", "pre", "blockquote", "li", "td", "dd", "h2", "h3", "h4"})


def _densest(root: Node) -> list[Node]:
    """Readability's idea in small: each paragraph's own text (not link text) scores for its parent,
    half for the grandparent; class/id names of page furniture cut a score; the best block wins,
    with the siblings that scored nearly as well (content split into several blocks)."""
    scores: dict[int, float] = {}
    nodes: dict[int, Node] = {}
    for node in root.iter():
        if node.tag in _SCORED or (
            node.tag == "div" and any(isinstance(c, str) and c.strip() for c in node.children)
        ):
            own = node.text_len - node.link_len
            if own < 25:
                continue
            points = 1 + own / 100 + node.text().count(",")
            for weight, up in ((1.0, node.parent), (0.5, node.parent.parent if node.parent else None)):
                if up is None or up is root:
                    break
                scores[id(up)] = scores.get(id(up), 0.0) + points * weight
                nodes[id(up)] = up
    best: Node | None = None
    best_score = 0.0
    final: dict[int, float] = {}
    for key, score in scores.items():
        node = nodes[key]
        density = node.link_len / node.text_len if node.text_len else 1.0
        score *= 1.0 - density
        if _looks_junk(node.attrs):
            score *= 0.2
        final[key] = score
        if score > best_score:
            best, best_score = node, score
    if best is None or best.text_len - best.link_len < MIN_CONTENT_CHARS:
        return [root]
    parent = best.parent
    if parent is None:
        return [best]
    picked = []
    for sibling in parent.children:
        if not isinstance(sibling, Node):
            continue
        if sibling is best or final.get(id(sibling), 0.0) >= best_score * 0.25:
            picked.append(sibling)
    return picked


def _common_ancestor(nodes: list[Node]) -> Node:
    chains = []
    for node in nodes:
        chain = []
        current: Node | None = node
        while current is not None:
            chain.append(current)
            current = current.parent
        chains.append(chain[::-1])
    shared = chains[0][0]
    for level in zip(*chains, strict=False):
        if all(n is level[0] for n in level):
            shared = level[0]
        else:
            break
    return shared


def main_content(doc: Document) -> list[Node]:
    """The elements that hold the page's content, in document order."""
    root = doc.root
    _measure(doc)
    _drop_small_forms(doc)
    mains = [n for n in doc.mains if n.text_len and _in_tree(n, root)]
    if mains:
        return [max(mains, key=lambda n: n.text_len)]
    articles = [n for n in doc.articles if n.text_len and _in_tree(n, root)]
    if articles:
        biggest = max(articles, key=lambda n: n.text_len)
        total = sum(n.text_len for n in articles)
        if len(articles) == 1 or biggest.text_len * 3 >= total * 2:
            return [biggest]
        return [_common_ancestor(articles)]
    return _densest(root)


# -- rendering -----------------------------------------------------------------------------

_RUNS = re.compile(r"\s+")
_AROUND_BREAK = re.compile(r" ?\x00 ?")
_LANG = re.compile(r"(?:^|\s)(?:language|lang|highlight-source|brush:?)-?([A-Za-z0-9_+#.\-]+)")
_EMPH = {"strong": "**", "b": "**", "em": "*", "i": "*", "del": "~~", "s": "~~"}


def _collapse(text: str) -> str:
    """Whitespace runs (source line breaks too) to one space; <br> breaks kept, spaces around them gone."""
    return _AROUND_BREAK.sub("\n", _RUNS.sub(" ", text)).strip()


class _Renderer:
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
        if tag in _HEADINGS:
            text = self.inline_text(node).replace("\n", " ")
            if not text:
                return []
            self.used += len(text)
            return [f"{'#' * _HEADINGS[tag]} {text}" if self.markdown else text]
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
            elif child.tag in _BLOCK:  # type: ignore[union-attr]
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
            return _BREAK
        if tag == "img":
            alt = " ".join(node.attrs.get("alt", "").split())
            if not alt:
                return ""
            src = self.url(node.attrs.get("src", ""))
            return f"![{alt}]({src})" if self.markdown and src else f"[{alt}]"
        inner = "".join([c if c.__class__ is str else self.inline(c) for c in node.children])  # type: ignore
        if tag in _BLOCK:  # a block inside inline content (<a><div>..</div></a>): its text, spaced
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
                lines.extend(self.blocks(child) if child.tag in _BLOCK else [_collapse(self.inline(child))])
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
    renderer = _Renderer(fmt, base_url, doc.grid_less, max_chars)
    blocks: list[str] = []
    for node in main_content(doc):
        if renderer.over:
            break
        blocks.extend(renderer.blocks(node) if node.tag in _BLOCK else renderer.container(node))
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
