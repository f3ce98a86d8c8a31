"""Below ``commands/`` (and ``cli.py``) no string that reaches a user spells one of specmodel's own
command-line flags: the library names the input *field* (:class:`~specmodel.errors.FieldError`,
``{field}`` references) and ``cli.main`` spells it with the one field -> flag table
(``commands/flags.py``). The flags are the ones the click commands define (read from the commands
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

#: strings that still spell a flag, by file (relative to specmodel/) and flag: user-facing advice
#: (notes, hints, suggested command lines) that the commands do not yet render from field names.
#: The list only shrinks: an entry no longer found fails too.
KNOWN: frozenset[tuple[str, str]] = frozenset({
    ('engines/sglang/log.py', '--decode-log-interval'),
    ('model/cycle.py', '--batches'), ('model/cycle.py', '--contexts'),
    ('model/cycle.py', '--phases'), ('model/cycle.py', '--verify-tokens'),
    ('model/hostdraft.py', '--proposal-rate'), ('model/hostdraft.py', '--summarize'),
    ('model/predict.py', '--calibrate'), ('model/predict.py', '--draft-ms'), ('model/predict.py', '--overhead-ms'),
    ('model/predict.py', '--summarize'), ('model/request.py', '--summarize'), ('model/whatif.py', '--tp'),
    ('profile/launcher.py', '--timeout'), ('profile/output.py', '--accept-len'), ('profile/output.py', '--eager'),
    ('profile/output.py', '--name'), ('profile/output.py', '--out-dir'), ('profile/output.py', '--profile'),
    ('profile/output.py', '--spec-loop'), ('report/content.py', '--proposal-rate'), ('report/content.py', '--tp'),
    ('report/pdf.py', '--baseline-sweep'), ('report/pdf.py', '--contexts'),
    ('scenario/accept.py', '--per-position'), ('scenario/accept.py', '--proposal-rate'),
    ('scenario/accept.py', '--steps'), ('scenario/numbers.py', '--allreduce-frac'),
    ('scenario/numbers.py', '--baseline-tps'), ('scenario/numbers.py', '--draft-ms'),
    ('scenario/numbers.py', '--overhead-ms'), ('scenario/numbers.py', '--verify-ms'),
    ('scenario/profiles.py', '--profile'), ('scenario/profiles.py', '--tp'), ('scenario/resolve.py', '--accept-len'),
    ('scenario/resolve.py', '--method'),
})


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
    assert sorted(found - KNOWN) == [], "name the field (FieldError / {field}); commands/flags.py spells it"
    assert sorted(KNOWN - found) == [], "no longer found: take it off KNOWN"


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
