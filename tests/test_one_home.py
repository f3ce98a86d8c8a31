"""Each bound, tolerance and helper has one home: a second definition elsewhere
drifts (two MAX_CONTEXT_TOKENS, 10M and 1M, or two MAX_STEPS, 64 and 8, would disagree silently)."""

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


#: a unit conversion written inline: x * 1e3 / x / 1e3 / x * 1e-6 / x * 1e9 / x / 1024**3 ...
_CONVERSION = re.compile(r"[*/]\s*(?:1e-?[369]|1000(?:\.0)?|1024\s*\*\*\s*3)\b")


def test_unit_conversions_live_in_units_py():
    """SI is stored and converted once: the printers (ms, us, gb_per_s, gib, gb,
    alpha_beta, tokens_text) and the readers' conversions into SI (from_ms, from_us, from_ns,
    from_gb_per_s, to_ms / to_us for plot axes) are in specmodel/units.py; no other module writes
    ``seconds * 1e3``. (Bounds such as ``1e-3 <= x`` compare, not convert, and are not matched.)"""
    hits = []
    for path, text in _sources().items():
        if path.name == "units.py":
            continue
        for i, line in enumerate(text.splitlines(), 1):
            code = line.split("#", 1)[0]
            if _CONVERSION.search(code):
                hits.append(f"{path.relative_to(PKG)}:{i}: {line.strip()}")
    assert hits == [], "\n".join(hits)
