"""dettui's import graph has no circle, counting every import: module-level ones, lazy ones
inside functions and those under `if TYPE_CHECKING`.

import-linter's contracts (pyproject.toml) say which layer may import which; this test says
the stronger thing a reader of any one module relies on: following imports never leads back.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dettui"

# Circles known and owned by work in progress, by name, each with the modules on it. Empty
# when the graph is clean; anything not listed here fails the test.
ALLOWED: dict[str, frozenset[str]] = {}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """Every dettui module `name` imports, anywhere in its body; `from a import b` counts
    as an import of a.b when a.b is a module, else of a."""
    is_package = path.name == "__init__.py"
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                found.add(sub if sub in known else base)
    return {m for m in found if m in known and m != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    known = set(found)
    return {name: imports_of(name, path, known) for name, path in found.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def a_path_around(component: list[str], edges: dict[str, set[str]]) -> list[str]:
    """One circle through the component's first module, to print: a -> b -> ... -> a."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        node = frontier.pop(0)
        for nxt in sorted(edges[node] & members):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(previous[path[-1]])
                return [*reversed(path), start]
            if nxt not in previous:
                previous[nxt] = node
                frontier.append(nxt)
    return component


def test_the_import_graph_has_no_circle() -> None:
    edges = graph()
    found = cycles(edges)
    unexplained = [c for c in found if frozenset(c) not in ALLOWED.values()]
    message = "\n\n".join(
        f"{len(c)} modules: {', '.join(c)}\none circle: {' -> '.join(a_path_around(c, edges))}"
        for c in unexplained)
    assert not unexplained, message


def test_the_walk_sees_lazy_and_type_only_imports(tmp_path: Path) -> None:
    """The walker itself: imports inside a function, under TYPE_CHECKING and relative ones
    count, and `from package import module` names the module."""
    path = tmp_path / "a.py"
    path.write_text("from typing import TYPE_CHECKING\n"
                    "if TYPE_CHECKING:\n    from dettui.x import Thing\n"
                    "def f():\n    import dettui.y\n"
                    "from . import z\n"
                    "from dettui.p import q, R\n")
    known = {"dettui.a", "dettui.x", "dettui.y", "dettui.z", "dettui.p", "dettui.p.q"}
    assert imports_of("dettui.a", path, known) == {
        "dettui.x", "dettui.y", "dettui.z", "dettui.p", "dettui.p.q"}
