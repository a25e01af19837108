"""Choosing a page's main content: `<main>`/`role=main`, else the article, else the block densest
in text that is not link text (readability's idea in small).
"""

from __future__ import annotations

from itertools import chain

from edgeclaw.backends.web.html_tree import Document, Node, looks_like_furniture

MIN_CONTENT_CHARS = 140

# -- choosing the main content ------------------------------------------------------------


def _measure(doc: Document) -> None:
    """Fill text_len and link_len bottom-up (children before parents: the reversed document order).

    Whitespace between tags is one shared " " by now (see `html_tree._Builder.text`), so a text's length is
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
        if looks_like_furniture(node.attrs):
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
