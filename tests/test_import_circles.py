"""No import circle among specmodel's modules: every import statement counts, at module level,
under ``TYPE_CHECKING`` and inside a function, since a deferred import only hides a circle. A
function-level import may be left out with a ``# deferred:`` comment on its line saying why (start-up
time, an optional dependency). A package's own ``__init__`` running before a submodule is Python's
doing, not an edge; ``from pkg import sub`` is an edge to ``pkg.sub``."""

from __future__ import annotations

import ast
from pathlib import Path

import specmodel

PKG = Path(specmodel.__file__).resolve().parent
MARK = "# deferred:"

#: circles not broken yet, each as its sorted modules; the list only shrinks (an entry no longer found
#: fails too)
KNOWN: set[tuple[str, ...]] = set()


def modules(pkg: Path = PKG) -> dict[str, Path]:
    out = {}
    for p in pkg.rglob("*.py"):
        parts = (pkg.name, *p.relative_to(pkg).with_suffix("").parts)
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    out: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        text = path.read_text()
        lines = text.splitlines()
        package = m if path.name == "__init__.py" else m.rpartition(".")[0]
        tree = ast.parse(text, filename=str(path))
        in_function = {id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
                       for n in ast.walk(f) if n is not f}
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            if id(node) in in_function and MARK in lines[node.lineno - 1]:
                continue
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    up = package.split(".")[:len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                r = known(t) if t.split(".")[0] == PKG.name else None
                if r is not None and r != m:
                    out[m].add(r)
    return out


def circles(graph: dict[str, set[str]]) -> list[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[tuple[str, ...]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(tuple(sorted(comp)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def test_no_import_circle():
    found = set(circles(edges(modules())))
    assert sorted(found - KNOWN) == [], "move the shared piece down a module (or mark a deferred import: why)"
    assert sorted(KNOWN - found) == [], "no longer a circle: take it off KNOWN"


def test_the_walk_sees_deferred_type_checking_and_relative_imports(tmp_path):
    pkg = tmp_path / "specmodel"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("from specmodel.sub import a\n")
    (pkg / "sub" / "a.py").write_text("def f():\n    from specmodel.sub.b import g\n")
    (pkg / "sub" / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import h\n")
    (pkg / "sub" / "c.py").write_text("from . import a\n")
    (pkg / "d.py").write_text("def f():\n    import specmodel.e  # deferred: start-up time\n")
    (pkg / "e.py").write_text("import specmodel.d\n")
    assert circles(edges(modules(pkg))) == [("specmodel.sub.a", "specmodel.sub.b", "specmodel.sub.c")]
