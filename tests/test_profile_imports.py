"""No import circle through specmodel/profile/ or specmodel/engines/ -- counting imports inside
functions too (a lazy import that closes a circle still ties two modules' load order and ownership
together); imports for type checkers only (``if TYPE_CHECKING:``) are not run and do not count.
An import names its module (``from specmodel.engines.vllm import log`` is an edge to
``specmodel.engines.vllm.log``); the package ``__init__`` Python runs first is no edge."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "specmodel"
WATCHED = ("specmodel.profile", "specmodel.engines")


def _name(p: Path) -> str:
    parts = ("specmodel", *p.relative_to(PKG).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    files = {_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in files}
    for mod, p in files.items():
        tree = ast.parse(p.read_text(encoding="utf-8"))
        typing_only = {id(n) for b in ast.walk(tree) if isinstance(b, ast.If) and ast.unparse(b.test) == "TYPE_CHECKING"
                       for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("specmodel"):
                names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in files else node.module
                         for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("specmodel")]
            graph[mod].update(n for n in names if n in files and n != mod)
    return graph


def _cycle(graph: dict[str, set[str]], starts: list[str]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*stack[stack.index(n):], n]
            if n not in state and (c := visit(n)):
                return c
        stack.pop()
        state[m] = 2
        return None

    for m in starts:
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_circle_through_profile_or_engines() -> None:
    graph = _graph()
    assert graph["specmodel.profile.launcher"] and graph["specmodel.engines.vllm.hook"]  # the walk sees imports
    starts = sorted(m for m in graph if m.startswith(WATCHED))
    cycle = _cycle(graph, starts)
    assert cycle is None, " -> ".join(cycle or [])
