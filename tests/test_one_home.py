"""Each bound, tolerance and helper has one home (issue 17 item 6): a second definition elsewhere
is how the two MAX_CONTEXT_TOKENS (10M and 1M) and two MAX_STEPS (64 and 8) came to disagree."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from specmodel import limits

PKG = Path(limits.__file__).resolve().parent


def _sources() -> dict[Path, str]:
    return {p: p.read_text() for p in sorted(PKG.rglob("*.py"))}


#: not bounds on input: a heuristic of one trace format, kept beside it (trace/kineto.py)
NOT_BOUNDS = {"MAX_BASE_TIME_APART_S"}


def test_no_module_but_limits_defines_a_bound():
    bounds = {n for n in vars(limits) if n.isupper()}
    found = []
    for path, text in _sources().items():
        if path.name == "limits.py":
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name) and (t.id in bounds or t.id.lstrip("_") in bounds
                                                    or re.fullmatch(r"_?MAX_[A-Z_]+", t.id)) and t.id not in NOT_BOUNDS:
                        found.append(f"{path.relative_to(PKG)}:{node.lineno} {t.id}")
    assert found == [], found


def test_the_rounding_slack_is_written_once():
    hits = [f"{p.relative_to(PKG)}" for p, text in _sources().items() if "0.0051" in text and p.name != "limits.py"]
    assert hits == [] and limits.ROUND_SLACK == 0.0051


def test_the_profilers_context_bound_is_the_tighter_one():
    assert limits.MAX_PROFILE_CONTEXT_TOKENS < limits.MAX_CONTEXT_TOKENS
    assert limits.SEARCH_MAX_STEPS < limits.MAX_STEPS
