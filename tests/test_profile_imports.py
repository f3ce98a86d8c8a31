"""No import circle inside specmodel/profile/ -- counting imports inside functions too (a lazy
import that closes a circle still ties two modules' load order and ownership together); imports
for type checkers only (``if TYPE_CHECKING:``) are not run and do not count."""

from __future__ import annotations

import ast
from pathlib import Path

PROFILE = Path(__file__).resolve().parents[1] / "specmodel" / "profile"


def _graph() -> dict[str, set[str]]:
    mods = {p.stem for p in PROFILE.glob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in mods}
    for p in PROFILE.glob("*.py"):
        tree = ast.parse(p.read_text(encoding="utf-8"))
        typing_only = {id(n) for b in ast.walk(tree) if isinstance(b, ast.If) and ast.unparse(b.test) == "TYPE_CHECKING"
                       for n in ast.walk(b)}
        for node in ast.walk(tree):
            if id(node) in typing_only:
                continue
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module == "specmodel.profile":
                    names = [a.name for a in node.names]
                elif node.module.startswith("specmodel.profile."):
                    names = [node.module.split(".")[2]]
            elif isinstance(node, ast.Import):
                names = [a.name.split(".")[2] for a in node.names if a.name.startswith("specmodel.profile.")]
            graph[p.stem].update(n for n in names if n in mods and n != p.stem)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
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

    for m in sorted(graph):
        if m not in state and (c := visit(m)):
            return c
    return None


def test_no_import_circle_in_profile() -> None:
    graph = _graph()
    assert graph["launcher"] and graph["worker"]  # the walk sees imports at all
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])
