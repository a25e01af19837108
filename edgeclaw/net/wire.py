"""The MQTT contract's inbound JSON: the one parser every request goes through, and `WireError`.

Every problem with a request is a `WireError` carrying a short machine code and a sentence naming
the problem (the codes are listed in `channels/mqtt/protocol.py`). It lives here, below the
channels, because signature checking (`net.signing`) refuses with it too, and the fleet page,
which signs commands, must not import the channel.
"""

from __future__ import annotations

import json
import math
from typing import Any

# Inbound JSON deeper than this, or with longer numbers, is refused before anything walks it: the
# ledger digest, the schema check and the audit digest all recurse, and a 1000-level request would
# end as a RecursionError (a traceback and no answer) instead of a clear refusal.
MAX_JSON_DEPTH = 64
MAX_NUMBER_CHARS = 100


class WireError(Exception):
    def __init__(self, code: str, message: str, request_id: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.request_id = request_id


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def _number(text: str) -> str:
    if len(text) > MAX_NUMBER_CHARS:
        raise ValueError(f"a number with {len(text)} characters (at most {MAX_NUMBER_CHARS})")
    return text


def _int(text: str) -> int:
    return int(_number(text))


def _float(text: str) -> float:
    value = float(_number(text))
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range")
    return value


def _too_deep(value: Any, limit: int) -> bool:
    """Whether containers nest deeper than `limit`; level by level, so it cannot recurse itself."""
    level = [value]
    for _ in range(limit):
        below: list[Any] = []
        for node in level:
            children = node.values() if type(node) is dict else node
            below += [c for c in children if type(c) is dict or type(c) is list]
        if not below:
            return False
        level = below
    return True


def _number_classes() -> bytes:
    """A translation table: digits -> "1", e/E -> "e", +/- -> "+", every other byte -> "0"."""
    table = bytearray(b"0" * 256)
    for c in b"0123456789":
        table[c] = ord("1")
    for c, to in ((b"e", b"e"), (b"E", b"e"), (b"+", b"+"), (b"-", b"+")):
        table[c[0]] = to[0]
    return bytes(table)


_NUMBER_CLASSES = _number_classes()
_LONG_DIGITS = b"1" * (MAX_NUMBER_CHARS + 1)
_PLAIN = json.JSONDecoder(parse_constant=_refuse_constant)
_CHECKED = json.JSONDecoder(parse_int=_int, parse_float=_float, parse_constant=_refuse_constant)


def _may_hold_a_long_number(data: bytes) -> bool:
    """Only text with a digit run past the limit or a 3-digit exponent can hold a number this device
    refuses. Telling which with one translate and a few substring searches (C speed) lets every other
    payload be parsed without per-number hooks, which cost a Python call for each number."""
    classes = data.translate(_NUMBER_CLASSES)
    return _LONG_DIGITS in classes or b"e111" in classes or b"e+111" in classes


def _lone_surrogate(value: Any) -> bool:
    """Whether any string (key or value) holds a surrogate code point; iterative like `_too_deep`."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, str):
            try:
                node.encode("utf-8")
            except UnicodeEncodeError:
                return True
        elif isinstance(node, dict):
            stack.extend(node.keys())
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return False


def load_json(payload: bytes | str, what: str) -> Any:
    """The one parser for inbound JSON: `bad_json` for anything this device will not take.

    Beyond malformed text and non-UTF-8 bytes: nesting deeper than MAX_JSON_DEPTH, numbers longer
    than MAX_NUMBER_CHARS characters, NaN / Infinity, numbers that overflow a float, and strings
    holding lone surrogates (as bytes or as a `\\ud800` escape): they are not text, and SQLite, the
    scrubber and every encoder after us would fail on them. The checks that walk the result run only
    when a cheap look at the text says they could find something.
    """
    surrogate = WireError("bad_json", f"{what}: a string holds a lone surrogate (not valid Unicode)")
    if isinstance(payload, bytes):
        data = payload
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            try:
                data.decode("utf-8", "surrogatepass")
            except UnicodeDecodeError:
                raise WireError("bad_json", f"{what}: the payload is not UTF-8 text") from None
            raise surrogate from None
    else:
        text = payload
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError:
            raise surrogate from None
    try:
        value = (_CHECKED if _may_hold_a_long_number(data) else _PLAIN).decode(text)
    except json.JSONDecodeError as e:
        raise WireError("bad_json", f"{what}: malformed JSON: {e.msg} at position {e.pos}") from None
    except RecursionError:
        raise WireError("bad_json", f"{what}: JSON nested deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as e:  # from the number hooks above
        raise WireError("bad_json", f"{what}: {e}") from None
    # Containers cannot nest deeper than there are brackets.
    brackets = data.count(b"[") + data.count(b"{")
    if brackets > MAX_JSON_DEPTH and isinstance(value, dict | list) and _too_deep(value, MAX_JSON_DEPTH):
        raise WireError("bad_json", f"{what}: JSON nested deeper than {MAX_JSON_DEPTH} levels")
    if b"\\u" in data and _lone_surrogate(value):
        raise surrogate
    return value
