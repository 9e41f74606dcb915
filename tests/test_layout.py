"""The layout holds: no import cycle between the project's modules, and no package importing
one above it in the layering.

The import graph is read from the source with ``ast`` (nothing is imported): every ``import``
counts, at the top of a module, inside a function or under ``TYPE_CHECKING`` alike — a cycle
hidden by a late import is still two modules that cannot be read one without the other.
Importing ``a.b.c`` runs ``a/__init__.py`` too, but that edge is Python's, not the code's: only
the module named is counted.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Bottom to top: a package imports only packages of lower layers.
LAYERS = (
    ("leaderboard",),  # the library wrappers, keys, settings, errors: everything builds on it
    ("api", "client", "gateway", "scorer"),  # the processes and the client, each on the library alone
    ("fleet",),  # runs gateways and scorers
    ("loadtest", "clients"),  # drive a fleet through the clients (the load test, the conformance suite)
    ("bench",),  # measures all of the above
)
LAYER = {package: i for i, packages in enumerate(LAYERS) for package in packages}


def modules() -> dict[str, tuple[Path, bool]]:
    """Each module of the project's packages by dotted name: its file, and whether it is a package."""
    out = {}
    for package in LAYER:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def imported(name: str, path: Path, is_package: bool, known: dict[str, tuple[Path, bool]]) -> Iterator[str]:
    """The project's modules ``name`` imports (``from p import m`` names module ``p.m`` when it is one)."""
    here = name.split(".") if is_package else name.split(".")[:-1]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                yield target


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: set(imported(name, path, is_package, known)) for name, (path, is_package) in known.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_are_found() -> None:
    # the check itself: a cycle through three modules, one through two, and a module on none
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e", "a"}, "e": {"d"}, "f": {"a"}}
    assert sorted(cycles(edges)) == [["a", "b", "c"], ["d", "e"]]


def test_the_graph_is_read_from_the_source() -> None:
    edges = graph()
    assert "scorer.durable.records" in edges["scorer.durable.sqlite"]  # a relative import
    assert "leaderboard.errors" in edges["scorer.__main__"]  # an absolute one
    assert "scorer.stream" in edges["scorer.durable.recorder"]  # one inside a function


def test_no_import_cycle() -> None:
    assert cycles(graph()) == []


def test_no_package_imports_one_above_it() -> None:
    wrong = sorted(
        f"{a} imports {b}"
        for a, targets in graph().items()
        for b in targets
        if a.split(".")[0] != b.split(".")[0] and LAYER[b.split(".")[0]] >= LAYER[a.split(".")[0]]
    )
    assert wrong == []


def test_the_durable_records_are_a_leaf() -> None:
    # the records every part of the durable log names (store, backends, fold, rebuild) import
    # nothing of the package: each of them can be read from it up
    assert not {m for m in graph()["scorer.durable.records"] if m.startswith("scorer.")}
