"""Which tools to offer a model whose context cannot hold them all: BM25 over names and descriptions.

A request to a model with a small context (2048 tokens on a board running a
1-3B model) cannot carry every tool definition: edgeclaw's full set is
~30 KB of JSON, several thousand tokens. `rank` orders the tools by how well
their name, description and board vocabulary (the devices the board profile
names behind each hardware tool, `board_vocabulary`) match the conversation:
the newest user message and the user messages of the turns before it. The
tools the recent turns called come first whatever their score, so a model
that is halfway through a task keeps the tools it is using.

The query is people's words only, never tool results, so the ranking (and
with it the subset sent) stays the same across the iterations of one turn:
the request's tool block is then the same bytes each time, which a server's
prompt cache reuses.

`compact` shortens a definition to the first sentence of each description,
which `context_budget` tries before leaving tools out.
"""

from __future__ import annotations

import copy
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from edgeclaw.agent.messages import Message

if TYPE_CHECKING:
    from edgeclaw.board import BoardProfile, DeviceSpec

# The usual BM25 constants: term-frequency saturation and length normalisation.
K1 = 1.2
B = 0.75
NAME_WEIGHT = 2  # a word of the tool's name counts as this many words of its description
RECENT_TURNS = 3  # the turns before the newest one whose user text and tool calls count
# Besides the usual stop words, a follow-up's fillers ("once more?", "and now?", "thanks"): matched
# against tool descriptions they would put an unrelated tool ahead of the ones in use.
_STOP = frozenset(
    {
        "about",
        "again",
        "all",
        "also",
        "any",
        "just",
        "more",
        "much",
        "now",
        "ok",
        "okay",
        "once",
        "same",
        "some",
        "still",
        "thank",
        "thanks",
        "then",
        "there",
        "too",
        "very",
        "yes",
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "by",
        "can",
        "do",
        "does",
        "for",
        "from",
        "get",
        "give",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "me",
        "my",
        "of",
        "on",
        "or",
        "please",
        "show",
        "tell",
        "that",
        "the",
        "this",
        "to",
        "us",
        "was",
        "we",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
    }
)
_WORD = re.compile(r"[a-z0-9]+")
# A sentence ends at . ! ? before a capital letter or the end; "e.g. 1" and "i.e. x" do not end one.
_SENTENCE_END = re.compile(r"(?<!\be\.g)(?<!\bi\.e)[.!?](?=\s+[A-Z(`'\"]|\s*$)")


def words(text: str) -> list[str]:
    """Lower-case words without stop words, a plural's "s" dropped ("sensors" finds "sensor")."""
    out = []
    for w in _WORD.findall(text.lower()):
        if w in _STOP:
            continue
        if len(w) > 3 and w.endswith("s") and not w.endswith("ss"):
            w = w[:-1]
        out.append(w)
    return out


def definition_parts(definition: Mapping[str, Any]) -> tuple[str, str]:
    """(name, description) of a definition in either wire format (OpenAI's function, Anthropic's tool)."""
    fn = definition.get("function", definition)
    return str(fn.get("name", "")), str(fn.get("description", ""))


def board_vocabulary(board: BoardProfile) -> dict[str, str]:
    """Per hardware tool, the names the board profile gives what it grants ("TMP102 temperature
    sensor" behind i2c): a person asks for the temperature, not for an I2C read."""
    p = board.spec
    if p is None:
        return {}
    vocab = {
        "i2c": " ".join(d.name for g in p.i2c for d in g.devices),
        "spi": " ".join(g.name for g in p.spi),
        "gpio": " ".join(g.name for g in p.gpio),
        "hardware_memory": " ".join(g.name for g in p.memory),
        "probe": p.probe.target if p.probe is not None else "",
        "esp32": " ".join(g.name for g in (*p.esp32.gpio, *p.esp32.adc)) if p.esp32 is not None else "",
        "serial": " ".join(g.name for g in p.serial),
        "sensor": " ".join(_device_words(d) for d in p.devices),
    }
    return {tool: text for tool, text in vocab.items() if text}


def _device_words(device: DeviceSpec) -> str:
    """A declared device's name and what it measures ("greenhouse air temperature")."""
    if device.part == "analog":
        quantities = [str(device.option("quantity"))]
    else:
        quantities = [m.quantity for m in device.info.measures]
    return " ".join([device.name, *quantities]).replace("_", " ")


def query_text(messages: Sequence[Message], turns: int = RECENT_TURNS) -> str:
    """What people said in the newest turn and the `turns` before it (their words, no tool output)."""
    said: list[str] = []
    for m in reversed(messages):
        if m.role == "user":
            said.append(m.content)
            if len(said) > turns:
                break
    return "\n".join(reversed(said))


def tools_in_use(messages: Sequence[Message], turns: int = RECENT_TURNS) -> set[str]:
    """The tools called in the newest turn and the `turns` before it."""
    used: set[str] = set()
    seen_users = 0
    for m in reversed(messages):
        used.update(c.name for c in m.tool_calls)
        if m.role == "user":
            seen_users += 1
            if seen_users > turns:
                break
    return used


def scores(
    definitions: Sequence[Mapping[str, Any]], query: str, vocabulary: Mapping[str, str] | None = None
) -> list[float]:
    """BM25 score of each definition against `query` (0 for a tool the query shares no word with)."""
    vocabulary = vocabulary or {}
    docs: list[Counter[str]] = []
    for d in definitions:
        name, description = definition_parts(d)
        docs.append(Counter(words(name) * NAME_WEIGHT + words(description) + words(vocabulary.get(name, ""))))
    if not docs:
        return []
    terms = set(words(query))
    average = sum(sum(c.values()) for c in docs) / len(docs) or 1.0
    holding = {t: sum(1 for c in docs if t in c) for t in terms}
    out = []
    for doc in docs:
        length = sum(doc.values())
        total = 0.0
        for t in terms:
            tf = doc.get(t, 0)
            if not tf:
                continue
            idf = math.log(1 + (len(docs) - holding[t] + 0.5) / (holding[t] + 0.5))
            total += idf * tf * (K1 + 1) / (tf + K1 * (1 - B + B * length / average))
        out.append(total)
    return out


def rank(
    definitions: Sequence[Mapping[str, Any]],
    query: str,
    in_use: Iterable[str] = (),
    vocabulary: Mapping[str, str] | None = None,
    cost: Sequence[int] | None = None,
    newest: str = "",
    current: Iterable[str] = (),
    per_cost: bool = False,
) -> list[int]:
    """Indexes of `definitions`, best first: the tools the newest turn called (`current`: the model is
    halfway through a task), those whose words the message being answered (`newest`) uses, the other
    tools in use, those whose words the recent turns (`query`) use, the rest; within each, by BM25
    score (against `newest`, then `query`), or with `per_cost` by that score a token (to fill a room:
    two cheap tools before one dear one); among equals the cheaper (`cost`, e.g. tokens) first, so
    more of them fit; then as given."""
    used, now_used = set(in_use), set(current)
    score = scores(definitions, query, vocabulary)
    now = scores(definitions, newest, vocabulary) if newest else [0.0] * len(definitions)
    names = [definition_parts(d)[0] for d in definitions]
    costs = cost or [0] * len(definitions)

    def tier(i: int) -> int:
        if names[i] in now_used:
            return 0
        if now[i] > 0:
            return 1
        if names[i] in used:
            return 2
        return 3 if score[i] > 0 else 4

    def worth(i: int) -> tuple[float, float]:
        if per_cost:
            return -(now[i] or score[i]) / max(1, costs[i]), 0.0
        return -now[i], -score[i]

    return sorted(range(len(definitions)), key=lambda i: (tier(i), *worth(i), costs[i], i))


def first_sentence(text: str) -> str:
    match = _SENTENCE_END.search(text)
    return text[: match.end()] if match else text


def compact(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition with each description (the tool's and its parameters') cut to its first sentence.

    A new dict: the registry's cached definitions are shared by every request.
    """
    out = copy.deepcopy(dict(definition))
    _shorten(out)
    return out


def _shorten(node: Any) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "description" and isinstance(value, str):
                node[key] = first_sentence(value)
            else:
                _shorten(value)
    elif isinstance(node, list):
        for item in node:
            _shorten(item)
