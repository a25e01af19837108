"""Imports point down the house: no module reaches up, not even behind a function-level import.

Every `edgeclaw` import in a module (at the top or in a function) is an edge, and so is every
package it runs on the way: importing `a.b.c` executes `a/__init__` and `a/b/__init__` first, so the
importer depends on those too. The graph of what runs has no cycle; and no edge points up a layer,
counting the imports under TYPE_CHECKING as well (a type named from above is a dependency on it).
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "edgeclaw"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for child in ast.walk(node):
                lines.add(getattr(child, "lineno", -1))
    return lines


def _with_packages(target: str) -> list[str]:
    """`a.b.c` and the packages importing it runs first: `a`, `a.b`."""
    parts = target.split(".")
    return [".".join(parts[:n]) for n in range(1, len(parts) + 1)]


def _edges(name: str, tree: ast.Module, modules: set[str]) -> tuple[set[str], set[str]]:
    """One module's (what importing it runs, what it names including the imports for types only)."""
    runs: set[str] = set()
    named: set[str] = set()
    typing_only = _type_checking_lines(tree)
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            targets = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for target in {m for t in targets for m in _with_packages(t)}:
            if target in modules and target != name and not name.startswith(target + "."):
                named.add(target)
                if getattr(node, "lineno", None) not in typing_only:
                    runs.add(target)
    return runs, named


def _graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(what runs: imports and their packages; what is named: those and the imports for types only)."""
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    runs: dict[str, set[str]] = {}
    named: dict[str, set[str]] = {}
    for name, path in modules.items():
        runs[name], named[name] = _edges(name, ast.parse(path.read_text()), set(modules))
    return runs, named


def _graph() -> dict[str, set[str]]:
    """What importing each module runs (the imports for types only do not run)."""
    return _graphs()[0]


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    assert _cycle(_graph()) is None


def test_the_finder_sees_a_cycle_hidden_in_a_function():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}
    assert _cycle(graph) == ["a", "b", "c", "a"]


# The house, top to bottom. A module may import its own layer and those below it; the shared
# vocabulary (config schema, errors, board profiles, wording) is below everything.
LAYERS = {
    "edgeclaw.cli": 6,
    "edgeclaw.__main__": 6,
    "edgeclaw.daemon": 5,
    "edgeclaw.admin": 5,  # operator actions the daemon's gateway wiring and `edgeclaw run` use
    "edgeclaw.fleet": 5,
    "edgeclaw.fleetpage": 5,  # `edgeclaw fleet serve`: a process of its own, beside the daemon
    "edgeclaw.channels": 4,
    "edgeclaw.agent": 3,
    "edgeclaw.tools": 2,
    "edgeclaw.testing": 2,  # the doubles users' tests take: built on the backends, used by nothing above
    "edgeclaw.backends": 1,
    "edgeclaw.net": 1,  # what the daemon and the fleet page share: MQTT connection, signing, HTTP server
    "edgeclaw.sandbox": 1,
    "edgeclaw.store": 1,
    "edgeclaw.firmware": 0,  # the ESP32's own program: imports nothing of the daemon
    "edgeclaw.config": 0,
    "edgeclaw.errors": 0,
    "edgeclaw.board": 0,  # the profile records, their checks and the sensor parts catalogue
    "edgeclaw.wording": 0,
    "edgeclaw": 0,
}


def _layer(module: str) -> int:
    best = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[best]


def test_imports_point_down_only():
    """Imports for types only count too: naming a type from above is depending on it."""
    named = _graphs()[1]
    upward = {
        f"{name} -> {target}"
        for name, targets in named.items()
        for target in targets
        if _layer(target) > _layer(name)
    }
    assert sorted(upward) == []


def test_the_graph_counts_packages_run_on_the_way_and_imports_for_types():
    modules = {"a", "a.b", "a.b.c", "t", "t.u"}
    source = "from typing import TYPE_CHECKING\nimport a.b.c\nif TYPE_CHECKING:\n    from t.u import X\n"
    runs, named = _edges("m", ast.parse(source), modules)
    assert runs == {"a", "a.b", "a.b.c"}
    assert named == {"a", "a.b", "a.b.c", "t", "t.u"}


def test_the_fleet_page_speaks_only_the_mqtt_contract():
    """`edgeclaw fleet serve` could run on another machine: it imports none of the daemon's insides."""
    banned = ("edgeclaw.channels", "edgeclaw.daemon", "edgeclaw.agent", "edgeclaw.tools")
    reached = [
        f"{name} -> {target}"
        for name, targets in _graphs()[1].items()
        if name == "edgeclaw.fleetpage" or name.startswith("edgeclaw.fleetpage.")
        for target in targets
        if any(target == b or target.startswith(b + ".") for b in banned)
    ]
    assert reached == []


def test_admin_does_not_reach_into_the_daemon():
    """`admin` sits beside `daemon` so the daemon can wire its actions in; the edges go one way only."""
    into_daemon = [
        f"{name} -> {target}"
        for name, targets in _graphs()[1].items()
        if name.startswith("edgeclaw.admin")
        for target in targets
        if target.startswith("edgeclaw.daemon")
    ]
    assert into_daemon == []
