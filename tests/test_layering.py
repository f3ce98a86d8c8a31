"""The package's arrows point one way: the readers (trace/), the equations (model/) and the formats
(schema/) never import the profiler (profile/), the commands (commands/) or the report (report/),
whether at module level or inside a function. Walks every import statement with ast."""

from __future__ import annotations

import ast
from pathlib import Path

import specmodel

PKG = Path(specmodel.__file__).resolve().parent
LOWER = ("trace", "model", "schema")
UPPER = ("profile", "commands", "report")


def _imported_modules(path: Path, pkg: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    package = ".".join(("specmodel", *path.relative_to(pkg).parts[:-1]))
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative: resolve against this module's package
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                mod = f"{base}.{node.module}" if node.module else base
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
            if mod == "specmodel":  # `from specmodel import profile` names the subpackage as an attribute
                out.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return out


def upward_imports(pkg: Path = PKG) -> list[str]:
    bad = []
    for layer in LOWER:
        for path in sorted((pkg / layer).rglob("*.py")):
            for line, mod in _imported_modules(path, pkg):
                parts = mod.split(".")
                if len(parts) >= 2 and parts[0] == "specmodel" and parts[1] in UPPER:
                    bad.append(f"{path.relative_to(pkg.parent)}:{line} imports {mod}")
    return bad


def test_trace_model_schema_never_import_profile_commands_report():
    assert upward_imports() == []


def test_the_walk_sees_function_level_and_relative_imports(tmp_path):
    # the checker itself: planted upward imports (inside a function, relative, via the package) are found
    fake = tmp_path / "specmodel"
    for layer in LOWER:
        (fake / layer).mkdir(parents=True)
    (fake / "trace" / "x.py").write_text("def f():\n    from specmodel.profile.annotate import phase\n")
    (fake / "model" / "y.py").write_text("from ..report import pdf\nfrom specmodel import commands\n")
    (fake / "schema" / "z.py").write_text("from specmodel.errors import SpecmodelError\nimport specmodel.model.cycle\n")
    found = sorted(f.split(" imports ")[1] for f in upward_imports(fake))
    assert found == ["specmodel.commands", "specmodel.profile.annotate", "specmodel.report"]
