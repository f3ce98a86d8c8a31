"""Issue 18 item 15: a profile whose all-reduce share nobody measured (the SGLang hook times whole
forwards) prints "unknown", never "all-reduce 0.00 ms = 0.0 %"."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import run_cli


def _sglang_log(d: Path) -> None:
    d.mkdir()
    lines = [{"schema": "specmodel.sglang_forward", "schema_version": 1, "type": "meta", "sglang_version": "0.5.5",
              "rank": "0", "tp_size": 2, "spec": {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "num_draft_tokens": 4}}]
    for phase, toks, secs in (("decode", 1, 0.020), ("verify", 4, 0.030), ("draft", 1, 0.004)):
        for i in range(5):
            lines.append({"schema": "specmodel.sglang_forward", "schema_version": 1, "type": "forward", "phase": phase,
                          "batch": 1, "tokens": toks, "forwards": 1, "runner": "draft" if phase == "draft" else "target",
                          "gpu_s": secs * (1 + 0.01 * i)})
    (d / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_sglang_summary_prints_allreduce_unknown_not_zero(tmp_path: Path) -> None:
    _sglang_log(tmp_path / "run")
    r = run_cli("sglang", "--summarize", str(tmp_path / "run"), "-o", str(tmp_path / "prof"))
    assert r.returncode == 0, r.stderr
    r = run_cli("predict", "--profile", str(tmp_path / "prof"), "--accept-len", "2.5", "--steps", "3",
                "--num-draft-tokens", "4")
    assert r.returncode == 0, r.stderr
    assert "all-reduce 0.00 ms" not in r.stdout and "= 0.0 % of the cycle" not in r.stdout
    assert "all-reduce    unknown" in r.stdout
    assert "all-reduce unknown" in r.stdout  # the baseline line too


def test_a_profile_with_a_measured_split_still_prints_it(tmp_path: Path, reference_profile: Path) -> None:
    r = run_cli("predict", "--profile", str(reference_profile), "--accept-len", "2.0")
    assert r.returncode == 0, r.stderr
    assert "unknown" not in r.stdout.split("cycle", 1)[1].split("predicted", 1)[0]
    assert "% of the cycle" in r.stdout
