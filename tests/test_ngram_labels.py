"""What a host proposer's plan and schedules say (vLLM ngram, SGLang NGRAM): the flags the engines take.

- vLLM's ngram config names its lookup window (vLLM 0.32 config/speculative.py sets
  prompt_lookup_min = prompt_lookup_max = 5 when neither is given) and never a draft `model`;
- a profile of a vLLM server is planned over chains only (vLLM drafts chains: no topk trees);
- SGLang's adaptive speculation retunes a drafter's forwards, so NGRAM gets static flags only.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA, baseline_standin, run_cli

NGRAM = DATA / "vllm_cpu_032" / "tp1_ngram" / "hook"


@pytest.fixture(scope="module")
def ngram_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("ngram")
    out = tmp / "p"
    r = run_cli("vllm", "--summarize", str(baseline_standin(NGRAM, tmp / "base")), "--summarize", str(NGRAM),
                "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_vllm_ngram_paste_names_the_window_and_no_model(ngram_profile: Path, tmp_path: Path) -> None:
    r = run_cli("plan", "--profile", str(ngram_profile), "--accept-len", "2.97", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    cell = doc["cells"][0]
    vllm = cell["engine_flags"]["vllm"]
    cfg = json.loads(vllm.split("'")[1])
    assert cfg == {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 5, "prompt_lookup_max": 5}
    # every configuration considered is a chain: topk 1 (the profile is of a vLLM server)
    assert all(c[k]["topk"] == 1 for c in doc["cells"] for k in ("best_extrapolated", "recommended", "default")
               if c.get(k))


def test_sglang_ngram_schedule_has_no_adaptive_flags(ngram_profile: Path, tmp_path: Path) -> None:
    r = run_cli("plan", "--profile", str(ngram_profile), "--accept-len", "2.97", "--engine", "sglang", "--json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    band = json.loads(r.stdout)["bands"][0]["sglang"]
    assert band["adaptive_flags"] is None and band["adaptive_config"] is None
    assert any(st["flags"] and "--speculative-algorithm NGRAM" in st["flags"] for st in band["static"])
    text = run_cli("plan", "--profile", str(ngram_profile), "--accept-len", "2.97", "--engine", "sglang",
                   cwd=tmp_path).stdout
    assert "--speculative-adaptive" not in text
