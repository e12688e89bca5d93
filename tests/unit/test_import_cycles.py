"""No module of replywire imports itself back, however indirectly.

Every import counts, at the top of a module, inside a function or under
``TYPE_CHECKING``: a cycle that only type checking or a late import hides is still
two modules that cannot be read (or moved) one without the other. The graph is drawn
from the source (``ast``), between the project's own modules; the generated protobuf
code is left out. ``tests/unit/test_layers.py`` says which layer may import which;
this says that within and across layers the arrows never come back.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PACKAGES: Final = (
    "shared",
    "runtime",
    "producer",
    "consumer",
    "traces",
    "harness",
    "conformance",
    "native",
    "replywire",
    "tools",
    "bench",
)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[:2] == ("shared", "pb"):
                continue
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def imported(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)


def graph() -> dict[str, set[str]]:
    known = modules()
    return {
        name: {target for target in imported(path) if target in known and target != name}
        for name, path in known.items()
    }


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start``'s imports lead to (``start`` itself only through a cycle)."""
    seen: set[str] = set()
    todo = list(edges.get(start, ()))
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(edges.get(node, ()))
    return seen


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The modules that lead back to themselves, grouped by the cycle they are on."""
    leads_to = {node: reachable(edges, node) for node in edges}
    on_cycle = sorted(node for node in edges if node in leads_to[node])
    groups = {
        tuple(
            sorted(
                other for other in on_cycle if other in leads_to[node] and node in leads_to[other]
            )
        )
        for node in on_cycle
    }
    return sorted(list(group) for group in groups)


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c"}}) == [["a", "b"], ["c", "d"]]


def test_no_module_imports_itself_back() -> None:
    assert cycles(graph()) == []
