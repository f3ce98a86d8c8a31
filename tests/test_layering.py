"""The package's arrows point one way: the readers (trace/), the equations (model/) and the formats
(schema/) never import the profiler (profile/), the engines (engines/), the commands (commands/) or
the report (report/), whether at module level or inside a function. Walks every import statement with ast.

Edges decided against as well: trace/ → model/ (but the accept-length type), model/ → trace/ (the
equations are pure), engines/ → commands/ or report/ (an engine's code runs under the commands), the
domain layer (scenario, api, validation) → click/commands/report, and a command-line flag spelled in
an error raised by model/, schema/ or the domain layer (they name fields; commands/flags.py maps)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import specmodel

PKG = Path(specmodel.__file__).resolve().parent
LOWER = ("trace", "model", "schema")
UPPER = ("profile", "engines", "commands", "report")


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
            if mod == "specmodel" or mod.startswith("specmodel."):
                # `from specmodel import profile` / `from specmodel.model import accept`: a name may be a module
                out.extend((node.lineno, f"{mod}.{a.name}") for a in node.names)
    return out


def imports_from(layer: str, banned: tuple[str, ...], pkg: Path = PKG) -> list[str]:
    """Imports under ``specmodel/<layer>/`` of any ``specmodel.<banned>`` package."""
    bad = []
    for path in sorted((pkg / layer).rglob("*.py")):
        for line, mod in _imported_modules(path, pkg):
            parts = mod.split(".")
            if len(parts) >= 2 and parts[0] == "specmodel" and parts[1] in banned:
                bad.append(f"{path.relative_to(pkg.parent)}:{line} imports {mod}")
    return bad


def upward_imports(pkg: Path = PKG) -> list[str]:
    return [b for layer in LOWER for b in imports_from(layer, UPPER, pkg)]


def test_trace_model_schema_never_import_profile_commands_report():
    assert upward_imports() == []


def test_the_walk_sees_function_level_and_relative_imports(tmp_path):
    # the checker itself: planted upward imports (inside a function, relative, via the package) are found
    fake = tmp_path / "specmodel"
    for layer in LOWER:
        (fake / layer).mkdir(parents=True)
    (fake / "trace" / "x.py").write_text("def f():\n    from specmodel.engines.hook.annotate import phase\n"
                                         "from specmodel.profile import worker\n")
    (fake / "model" / "y.py").write_text("from ..report import pdf\nfrom specmodel import commands\n")
    (fake / "schema" / "z.py").write_text("from specmodel.errors import SpecmodelError\nimport specmodel.model.cycle\n")
    found = {f.split(" imports ")[1] for f in upward_imports(fake)}
    assert {"specmodel.commands", "specmodel.engines.hook.annotate", "specmodel.profile.worker", "specmodel.report"} <= found
    assert all(f.startswith(("specmodel.commands", "specmodel.engines", "specmodel.profile", "specmodel.report"))
               for f in found)


# ---------------------------------------------------------------------------------------------
# edges decided against

#: trace/ readers produce data; the equations consume it. The one exception: a log reader returns
#: the accept-length distribution type (model/accept.py), where the mixtures live.
TRACE_MAY_IMPORT_FROM_MODEL = ("specmodel.model.accept",)
#: the domain layer under the commands and the Python API: no click, no commands, no report
DOMAIN = ("scenario", "api.py", "live")


def _domain_files(pkg: Path = PKG) -> list[Path]:
    """The domain layer's modules (a package named in :data:`DOMAIN` stands for each of its files)."""
    return [f for n in DOMAIN for f in (sorted((pkg / n).rglob("*.py")) if (pkg / n).is_dir() else [pkg / n])]


def trace_to_model_imports(pkg: Path = PKG) -> list[str]:
    bad = []
    for path in sorted((pkg / "trace").rglob("*.py")):
        for line, mod in _imported_modules(path, pkg):
            allowed = mod == "specmodel.model" or any(mod == m or mod.startswith(m + ".")
                                                      for m in TRACE_MAY_IMPORT_FROM_MODEL)
            if (mod == "specmodel.model" or mod.startswith("specmodel.model.")) and not allowed:
                bad.append(f"{path.relative_to(pkg.parent)}:{line} imports {mod}")
    return bad


def test_trace_does_not_import_the_model():
    assert trace_to_model_imports() == []


def test_the_model_imports_no_reader_and_no_engine():
    # floors go one way: an engine's record reaches the model as a value (a Protocol there), never as an import
    assert imports_from("model", ("trace", "engines")) == []


def test_engines_import_no_command_and_no_report():
    assert imports_from("engines", ("commands", "report", "cli")) == []


def test_the_domain_layer_imports_no_cli():
    bad = []
    for path in _domain_files():
        for line, mod in _imported_modules(path, PKG):
            parts = mod.split(".")
            if mod == "click" or (len(parts) >= 2 and parts[0] == "specmodel" and parts[1] in UPPER
                                  and parts[1] != "engines"):  # (the domain layer reads logs through the registry)
                bad.append(f"{path.relative_to(PKG)}:{line} imports {mod}")
    assert bad == []


#: a flag of ours; the engines' own (--speculative-num-steps) are facts about the server, not our flags
_FLAG = re.compile(r"(?:^|[\s(\[,;'\"])--(?!speculative-)[a-z]")
_ERRORS = {"SpecmodelError", "FieldError"}


def _strings(node: ast.AST) -> list[str]:
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def flag_strings_in_errors(paths: list[Path]) -> list[str]:
    """Errors raised below commands/ that spell a command-line flag instead of naming the field."""
    bad = []
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                f = node.func
                name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if name in _ERRORS and any(_FLAG.search(s) for a in node.args for s in _strings(a)):
                    bad.append(f"{path.name}:{node.lineno}")
    return bad


def _below_commands() -> list[Path]:
    return sorted([*(PKG / "model").rglob("*.py"), *(PKG / "schema").rglob("*.py"), *_domain_files()])


def test_errors_below_commands_name_fields_not_flags():
    # `specmodel.predict(accept=9.0)` must not say `--accept-len: …`; the CLI maps fields
    # to flags in one table (commands/flags.py). trace/ and profile/ are not covered yet (see the note).
    assert flag_strings_in_errors(_below_commands()) == []


def test_the_flag_check_finds_a_flag_in_an_error(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('def f(x):\n    raise SpecmodelError(f"--steps: {x}")\n'
                 'def g(x):\n    raise errors.FieldError("steps", "pass --topk 2")\n'
                 'def h(x):\n    raise FieldError("steps", "pass {topk} 2; 1--2 is a range")\n')
    assert flag_strings_in_errors([p]) == ["m.py:2", "m.py:4"]
