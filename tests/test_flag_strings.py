"""Below ``commands/`` (and ``cli.py``) no string that reaches a user spells one of specmodel's own
command-line flags: the library names the input *field* (:class:`~specmodel.errors.FieldError`,
``{field}`` references; :func:`~specmodel.errors.field_name` in notes and hints) and ``cli.main`` spells
it with the one field -> flag table (``commands/flags.py``). The flags are the ones the click commands define (read from the commands
themselves); the engines' own flags (``--speculative-config`` on vLLM's command line) are facts about
a server, read from the engine records' flag writers. Docstrings may mention a flag to explain;
comments are not strings."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path
from types import SimpleNamespace

import click

import specmodel
from specmodel import cli
from specmodel.engines import ENGINE_SPECS

PKG = Path(specmodel.__file__).resolve().parent
_TOKEN = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

def specmodel_flags() -> set[str]:
    """Every ``--flag`` a specmodel command defines."""
    flags: set[str] = set()

    def walk(cmd: click.Command) -> None:
        for p in cmd.params:
            if isinstance(p, click.Option):
                flags.update(o for o in (*p.opts, *p.secondary_opts) if o.startswith("--"))
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                walk(sub)

    for ref, _ in cli.COMMANDS.values():
        mod, attr = ref.split(":")
        walk(getattr(importlib.import_module(mod), attr))
    return flags


def engine_flags() -> set[str]:
    """The flags the engine records write for a server's command line."""
    out: set[str] = set()
    for spec in ENGINE_SPECS:
        for method in spec.methods:
            for steps, topk in ((3, 1), (3, 4)):
                text = spec.paste(SimpleNamespace(steps=steps, topk=topk, num_draft_tokens=steps + 1), method)
                out.update(_TOKEN.findall(text or ""))
    return out


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def flag_literals(paths: list[Path], flags: set[str], root: Path = PKG) -> set[tuple[str, str]]:
    """(file, flag) for every string literal (docstrings aside) that spells one of ``flags``."""
    found = set()
    for path in paths:
        tree = ast.parse(path.read_text(), filename=str(path))
        docs = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for tok in _TOKEN.findall(node.value):
                    if tok in flags:
                        found.add((path.relative_to(root).as_posix(), tok))
    return found


def _library_files() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py")
                  if p.relative_to(PKG).parts[0] != "commands" and p.name != "cli.py")


def test_the_library_spells_no_specmodel_flag():
    flags = specmodel_flags() - engine_flags()
    found = flag_literals(_library_files(), flags)
    assert sorted(found) == [], "name the field (FieldError / {field} / field_name); commands/flags.py spells it"


def test_the_scan_reads_flags_from_the_commands_and_the_engines():
    flags = specmodel_flags()
    assert {"--accept-len", "--timeout", "--phases", "--contexts"} <= flags
    assert "--speculative-num-steps" in engine_flags() and "--speculative-config" in engine_flags()


def test_the_scan_finds_a_flag_in_a_string_but_not_in_a_docstring(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""--steps in a docstring."""\n'
                 'def f(x):\n    """--topk here too."""\n    raise SpecmodelError(f"--steps: {x}")\n'
                 'def g():\n    return "pass --speculative-num-steps 3; 1--2 is a range"  # --topk\n')
    assert flag_literals([p], {"--steps", "--topk"}, tmp_path) == {("m.py", "--steps")}


def test_a_note_names_the_field_from_python_and_the_flag_under_the_cli():
    from specmodel.commands.flags import flag_of
    from specmodel.errors import field_name, fields_named

    args = specmodel.ScenarioArgs(baseline_tps=82, verify_ms=27, draft_ms=0.85, accept_len=2.0)
    assert dict(specmodel.predict_args(args).source.cost_sources)["verify"] == "your flag verify_ms 27"
    with fields_named(flag_of):  # what cli.main runs every command inside
        assert field_name("draft_ms") == "--draft-ms"
        assert dict(specmodel.predict_args(args).source.cost_sources)["verify"] == "your flag --verify-ms 27"
    assert field_name("draft_ms") == "draft_ms"
