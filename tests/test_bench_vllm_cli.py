"""benchmarks/bench_vllm_cli.py scores the user's path only: it may not import specmodel (every
specmodel step is the installed command in a subprocess), and its recorded table is what
``--table`` prints from the recorded JSON."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

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
