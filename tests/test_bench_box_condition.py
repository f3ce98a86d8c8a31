"""benchmarks/bench_box_condition.py measures the user's path only (the installed commands), scores a
guard on a clean pair as a false alarm and its silence on a loaded one as a miss, and its recorded
tables are what ``--table`` prints from the recorded JSON."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import REPO, checkout_env
from tests.test_bench_vllm_cli import _imported_modules

BENCH = REPO / "benchmarks" / "bench_box_condition.py"


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_box_condition", BENCH)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_the_benchmark_imports_nothing_of_specmodel_and_runs_the_users_commands() -> None:
    assert not [m for m in _imported_modules(BENCH) if m == "specmodel" or m.startswith("specmodel.")]
    text = BENCH.read_text()
    for cmd in ('"vllm", "--out"', '"--summarize"', '"predict", "--json", "--profile"', '"--accept-log"'):
        assert cmd in text, cmd


def test_a_guard_on_a_clean_pair_is_a_false_alarm_and_silence_on_a_loaded_one_a_miss() -> None:
    b = _bench()
    assert b.score("probe", None, None) == "ok" and b.score("probe", None, "qualify") == "false alarm"
    assert b.score("probe", "baseline", "refuse") == "ok" and b.score("probe", "spec", "qualify") == "ok"
    assert b.score("probe", "baseline", None) == "miss"
    # a loaded baseline only qualified lets a false GO through with its P withheld: said, not passed
    assert b.score("probe", "baseline", "qualify") == "wrong severity (qualify)"
    rows = [{"loaded": None, "probe": {"score": "false alarm"}, "old_format": {"score": "ok"}},
            {"loaded": "baseline", "probe": {"score": "ok"}, "old_format": {"score": "miss"}}]
    s = b.summary(rows)
    assert s["probe"] == {"false_alarms": [1, 1], "misses": [0, 1], "wrong_severity": [0, 1]}
    assert s["old_format"] == {"false_alarms": [0, 1], "misses": [1, 1], "wrong_severity": [0, 1]}


def test_recorded_results_reprint_as_their_table(tmp_path: Path) -> None:
    runs = sorted((REPO / "benchmarks" / "results").glob("box_condition_*.json"))
    assert runs, "no recorded bench_box_condition run"
    for j in runs:
        res = json.loads(j.read_text())
        assert {"rows", "summary", "load_avg_1m", "date"} <= set(res)
        r = subprocess.run([sys.executable, str(BENCH), "--table", str(j)], capture_output=True, text=True,
                           timeout=60, cwd=tmp_path, env=checkout_env())
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == j.with_suffix(".md").read_text().strip()
