"""Fetched bodies as text: the charset (a BOM, the header, the document's own declaration) and the
kind of body (HTML, JSON, text or binary) from the media type or the first bytes; JSON pretty-printed.

Pure functions over bytes and str, no I/O, standard library only.
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Literal

Kind = Literal["html", "json", "text", "binary"]

META_SNIFF_BYTES = 4096  # where a <meta charset> or XML declaration is looked for

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
