"""benchmarks/bench_vllm_cli.py scores the user's path only: it may not import specmodel (every
specmodel step is the installed command in a subprocess), and its recorded table is what
``--table`` prints from the recorded JSON."""

from __future__ import annotations

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO

BENCH = REPO / "benchmarks" / "bench_vllm_cli.py"


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
    return out


def test_the_cli_benchmark_imports_nothing_of_specmodel() -> None:
    mods = _imported_modules(BENCH)
    assert not [m for m in mods if m == "specmodel" or m.startswith("specmodel.")], mods
    # the check itself bites: the older benchmark calls summarize / predict directly
    assert any(m.startswith("specmodel.") for m in _imported_modules(REPO / "benchmarks" / "bench_vllm_oos.py"))
    # and it runs the commands a user runs
    text = BENCH.read_text()
    for cmd in ('"vllm", "--out"', '"--summarize"', '"predict", "--json", "--profile"', '"--accept-log"'):
        assert cmd in text, cmd


def test_recorded_results_reprint_as_their_table_and_the_readme_has_the_rerun_command() -> None:
    runs = sorted((REPO / "benchmarks" / "results").glob("vllm_cli_*.json"))
    assert runs, "no recorded bench_vllm_cli run"
    for j in runs:
        res = json.loads(j.read_text())
        assert {"rows", "summary", "commands"} <= set(res)
        r = subprocess.run([sys.executable, str(BENCH), "--table", str(j)], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == j.with_suffix(".md").read_text().strip()
    readme = (REPO / "README.md").read_text()
    assert "benchmarks/bench_vllm_cli.py --tp 1 --tp 2" in readme


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_vllm_cli", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # (its dataclasses look their module up there)
    spec.loader.exec_module(mod)
    return mod


def test_a_verdict_is_scored_right_only_when_the_action_a_user_takes_is_right() -> None:
    b = _bench()
    # a clear win (>= 1.2x measured): only GO acts on it; MARGINAL ("switch off") or a refusal misses it
    assert b.action(1.27, "GO") == "right"
    assert b.action(1.27, "MARGINAL") == "missed" and b.action(1.74, None) == "missed"
    assert b.action(1.2, "NO-GO") == "wrong"
    # a clear loss (<= 0.9x): anything but GO keeps speculation off
    assert b.action(0.9, "GO") == "wrong" and b.action(0.7, "MARGINAL") == "right" and b.action(0.7, "NO-GO") == "right"
    # between the two the engine did not clearly decide: not scored
    assert b.action(1.19, "MARGINAL") is None and b.action(0.91, "GO") is None


def test_the_table_names_a_missed_decision_in_its_action_column_and_counts_it() -> None:
    b = _bench()
    row = {"tp": 1, "drafter": "ngram_b2", "k": 3, "batch": 2, "in_sample": False, "accept_tokens": 2.4,
           "proposal_rate_metrics": 0.6, "base_tokens_per_s": 100.0, "spec_tokens_per_s": 133.0, "spread_rel": 0.1,
           "measured_speedup": 1.33, "predicted_speedup": 1.39, "band": [0.95, 1.8], "verdict": "MARGINAL"}
    rows = [{**row, **b.score(row)}, {**row, **b.score({**row, "verdict": "GO"}), "verdict": "GO"}]
    res = {"rows": rows, "summary": b.summary(rows), "date": "2026-12-06T06:00+00:00", "box": "x86_64 2 cores",
           "load_avg_1m": [1.0, 2.0], "tokens": 128, "reps": 5, "wall_s": 10.0}
    # the action column tells the MARGINAL on a clear win apart from the GO
    table = b.markdown(res)
    lines = [ln for ln in table.splitlines() if ln.startswith("| 1 |")]
    assert "| MARGINAL | **missed decision** |" in lines[0] and "| GO | right |" in lines[1]
    assert "right on 1/2, missed decisions 1, wrong 0" in table
    assert res["summary"]["actions"] == {"right": 1, "missed": 1, "wrong": 0}
    assert res["summary"]["targets"]["actions_all_right"] is False
