"""The artefacts recorded from the live engine (scripts/record_vllm_fixtures.py →
tests/data/vllm_cpu_032/): the hook's own logs of real vLLM 0.32 CPU servers summarize into a
profile, the all-reduce count per forward is the model's, and every trace stays under 1 MB.
Runs without the engine (fast); the live checks are in test_vllm_live.py."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from specmodel.engines.vllm.hooklog import summarize
from specmodel.engines.vllm.steplog import read_step_log
from specmodel.errors import SpecmodelError
from tests.conftest import DATA, run_cli

REC = DATA / "vllm_cpu_032"
CONFIGS = ("tp1_none", "tp1_ngram", "tp2_ngram", "tp1_draft_model", "tp2_draft_model")


@pytest.mark.parametrize("name", CONFIGS)
def test_each_recording_is_complete_and_small(name: str) -> None:
    d = REC / name
    run = json.loads((d / "run.json").read_text())
    assert run["vllm"] == "0.32.0" and run["tp"] == int(name[2])
    ranks = sorted(p.name for p in (d / "hook").glob("rank*.jsonl"))
    assert ranks == [f"rank{r}.jsonl" for r in range(run["tp"])]
    traces = sorted((d / "traces").glob("rank*.pt.trace.json.gz"))
    assert len(traces) == run["tp"]
    assert all(t.stat().st_size < 1_000_000 for t in (d / "traces").iterdir())
    log = (d / "server.log").read_text()
    assert ("SpecDecoding metrics: Mean acceptance length" in log) == (run["speculative_config"] is not None)
    assert "vllm:generation_tokens_total" in (d / "metrics.txt").read_text()


def test_tp1_baseline_and_ngram_summarize_with_host_time_in_the_rows() -> None:
    prof = summarize([REC / "tp1_none" / "hook", REC / "tp1_ngram" / "hook"], name="rec")
    dec = prof.rows("decode")[0]
    assert dec.batch == 1 and dec.tokens == 1 and dec.n_allreduce == 0 and dec.allreduce_s == 0
    assert dec.other_s > 0 and dec.compute_s > 0 and dec.samples > 20
    assert prof.rows("verify") and not prof.has("draft")
    assert 0 < prof.overhead_s < dec.total_s  # ngram proposes on the host: a fraction of a step
    assert prof.spec.algorithm == "NGRAM" and prof.spec.steps == 3 and prof.source.engine_version == "0.32.0"


def test_tp2_draft_model_allreduces_per_forward_on_both_ranks() -> None:
    for r in (0, 1):
        steps = read_step_log(REC / "tp2_draft_model" / "hook" / f"rank{r}.jsonl").steps
        verify = [s for s in steps if s["kind"] == "verify"]
        decode_like = [s for s in steps if s["kind"] in ("verify", "extend")]
        assert verify and decode_like
        # 4-layer Llama at TP 2: 2 per layer + the vocab-parallel embedding = 9; the drafter (same shape) x k=3
        assert {s["forward_n_allreduce"] for s in verify} == {9}
        assert {s["draft_n_allreduce"] for s in verify} == {27}
        assert all(0 < s["forward_allreduce_s"] < s["forward_s"] for s in verify)


def test_a_speculative_run_alone_is_refused_with_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SpecmodelError, match="no decode steps recorded"):
        summarize([REC / "tp2_draft_model" / "hook"], name="x")
    r = run_cli("vllm", "--summarize", str(REC / "tp2_draft_model" / "hook"), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and "without --speculative-config" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "p").exists()


def test_a_vllm_hook_profile_does_not_call_its_host_work_unmeasured() -> None:
    """The vLLM hook's rows are whole engine steps (host work and the gap before each step in
    them): predict must not warn "no per-cycle overhead measured" beside such a profile, and says
    where that work is. A profile of forwards only (an ingest of traces) still gets the warning."""
    from specmodel.model.cyclecost import cycle_costs
    from specmodel.model.provenance import cost_provenance

    prof = summarize([REC / "tp1_none" / "hook", REC / "tp1_draft_model" / "hook"], name="rec")
    assert prof.overhead_s == 0.0 and prof.source.host_work_in_rows
    cc = cycle_costs(prof, batch=1, spec=prof.spec)
    assert not any("no per-cycle overhead" in w for w in cc.warnings), cc.warnings
    assert dict(cost_provenance(prof, cc, None))["overhead"].startswith("in the rows: ")
    assert not dataclasses.replace(prof, source=dataclasses.replace(prof.source, tool="specmodel ingest")
                                   ).source.host_work_in_rows
