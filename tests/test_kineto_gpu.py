"""Hand-built GPU-format traces (tests/data/kineto_gpu_tp2) with known collective time.

The fixture, per rank (µs): three ``step[DECODE bs=1]`` passes of 100 µs (the third has 20 µs
more idle): GEMM [0,30], NCCL all-reduce with Collective-name args [30,50] (rank 1: GEMM [0,24],
all-reduce [24,50] — it waits 6 µs for rank 0), GEMM [50,80], sglang cross_device_reduce_1stage
[80,90], idle, elementwise [95,100]. Two ``step[VERIFY bs=1]`` of 200 µs: GEMM [0,60] on stream 7
while an NCCL all-reduce without args runs [40,100] on stream 20 (20 µs overlapped), GEMM
[100,150], NCCL all-gather [150,170], idle, GEMM [180,200]. Two ``step[DRAFT bs=1]`` of 40 µs with
a 5 µs all_reduce_1shot kernel; one ``draft_extend`` stage span of 30 µs with a 10 µs NCCL 2.18
all-reduce. Plus a kernel between passes and a memcpy outside any pass (must not count).
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from specmodel.trace.ingest import PhaseStats, build_profile, ingest
from specmodel.trace.kineto import IngestOptions, phase_of

DATA = Path(__file__).parent / "data"
GPU = DATA / "kineto_gpu_tp2"
US = 1e-6
TOL = 1e-9  # seconds; the fixture's times are exact to the ns


def _phase(result, kind: str) -> PhaseStats:
    (p,) = [p for p in result.phases if p.kind == kind]
    return p


@pytest.fixture(scope="module")
def gpu_result():
    return ingest([GPU], jobs=1)


def test_decode_numbers(gpu_result) -> None:
    d = _phase(gpu_result, "decode")
    assert (d.batch, d.tokens, d.samples, d.ranks) == (1, 1, 6, 2)
    # medians over 3 passes x 2 ranks
    assert d.span_s == pytest.approx(100 * US, abs=TOL)  # spans 100,100,120 on each rank
    assert d.busy_s == pytest.approx(95 * US, abs=TOL)
    assert d.allreduce_s == pytest.approx(33 * US, abs=TOL)  # 30 on rank 0, 36 on rank 1
    assert d.exposed_s == pytest.approx(33 * US, abs=TOL)  # nothing overlaps the collectives
    assert d.compute_s == pytest.approx(62 * US, abs=TOL)
    assert d.other_s == pytest.approx(5 * US, abs=TOL)  # the median, not the mean (5,5,25)
    assert d.skew_s == pytest.approx(3 * US, abs=TOL)  # rank 0 waits 0, rank 1 waits 6
    assert d.spread_s == pytest.approx(15 * US, abs=TOL)  # IQR of 100,100,100,100,120,120
    assert (d.n_collectives, d.n_allreduce, d.allreduce_msg_bytes) == (2, 2, 14336)  # 7168 bf16
    assert dict(d.comm_by_impl_s) == pytest.approx({"nccl": 23 * US, "sglang_custom": 10 * US}, abs=TOL)


def test_verify_exposed_communication(gpu_result) -> None:
    v = _phase(gpu_result, "verify")
    assert (v.batch, v.tokens, v.samples) == (1, 4, 4)  # 4 = bs x --num-draft-tokens default
    assert v.span_s == pytest.approx(200 * US, abs=TOL)
    assert v.busy_s == pytest.approx(190 * US, abs=TOL)
    assert v.allreduce_s == pytest.approx(80 * US, abs=TOL)  # all-reduce 60 + all-gather 20
    assert v.exposed_s == pytest.approx(60 * US, abs=TOL)  # 20 µs of the all-reduce hidden under the GEMM
    assert v.compute_s == pytest.approx(110 * US, abs=TOL)
    assert v.other_s == pytest.approx(10 * US, abs=TOL)
    assert v.skew_s == pytest.approx(0.0, abs=TOL)
    assert (v.n_collectives, v.n_allreduce, v.allreduce_msg_bytes) == (2, 1, 0)  # the all-reduce has no args


def test_draft_and_draft_extend(gpu_result) -> None:
    r = _phase(gpu_result, "draft")
    assert (r.tokens, r.span_s, r.allreduce_s, r.compute_s, r.other_s) == pytest.approx(
        (1, 40 * US, 5 * US, 35 * US, 0.0), abs=TOL)
    assert dict(r.comm_by_impl_s) == pytest.approx({"sglang_custom": 5 * US}, abs=TOL)
    de = _phase(gpu_result, "draft_extend")
    # batch from the preceding step span, tokens = batch x num_draft_tokens
    assert (de.batch, de.tokens, de.samples) == (1, 4, 2)
    assert (de.span_s, de.allreduce_s, de.compute_s) == pytest.approx((30 * US, 10 * US, 20 * US), abs=TOL)


def test_per_rank_summary(gpu_result) -> None:
    assert [r.rank for r in gpu_result.ranks] == [0, 1]
    assert [r.passes for r in gpu_result.ranks] == [8, 8]
    assert gpu_result.mode == "gpu" and gpu_result.world_size == 2


def test_profile_rows_add_up_and_match(gpu_result) -> None:
    prof = build_profile(gpu_result, name="fx", opts=IngestOptions())
    assert prof.source_kind == "ingested" and prof.tp == 2 and prof.backend == "nccl"
    assert prof.hardware["gpu_name"].startswith("NVIDIA RTX PRO 6000")
    (dec,) = prof.rows("decode")
    assert dec.total_s == pytest.approx(100 * US, abs=TOL)
    assert (dec.allreduce_s, dec.compute_s, dec.other_s, dec.skew_s) == pytest.approx(
        (33 * US, 62 * US, 5 * US, 3 * US), abs=TOL)
    assert {r.kind for r in prof.costs} == {"decode", "verify", "draft", "draft_extend"}
    assert [p["exposed_s"] for p in prof.source.details["phases"]] == pytest.approx([33 * US, 60 * US, 5 * US, 10 * US], abs=TOL)


def test_num_draft_tokens_sets_verify_tokens() -> None:
    r = ingest([GPU], IngestOptions(num_draft_tokens=8), jobs=1)
    assert _phase(r, "verify").tokens == 8
    assert _phase(r, "decode").tokens == 1


def _rewrite(tmp_path: Path, keep) -> Path:
    out = tmp_path / "traces"
    out.mkdir()
    for src in sorted(GPU.iterdir()):
        raw = src.read_bytes()
        d = json.loads(gzip.decompress(raw) if src.suffix == ".gz" else raw)
        d["traceEvents"] = [e for e in d["traceEvents"] if keep(e)]
        (out / src.name.replace(".gz", "")).write_text(json.dumps(d))
    return out


def test_correlation_fallback_without_gpu_annotations(tmp_path: Path, gpu_result) -> None:
    # older profilers emit no gpu_user_annotation: kernels are found via their launch correlation
    traces = _rewrite(tmp_path, lambda e: e.get("cat") != "gpu_user_annotation")
    r = ingest([traces], jobs=1)
    assert {t.attribution for t in r.traces} == {"correlation"}
    for kind in ("decode", "verify", "draft", "draft_extend"):
        a, b = _phase(r, kind), _phase(gpu_result, kind)
        for f in ("span_s", "busy_s", "allreduce_s", "exposed_s", "compute_s", "other_s", "skew_s"):
            assert getattr(a, f) == pytest.approx(getattr(b, f), abs=TOL), (kind, f)


def test_profiler_step_used_only_without_labels(tmp_path: Path) -> None:
    def relabel(e):
        if e.get("cat") in ("user_annotation", "gpu_user_annotation") and e["name"] == "step[VERIFY bs=1]":
            e["name"] = "ProfilerStep#7"
        return e.get("cat") not in ("user_annotation", "gpu_user_annotation") or e["name"] == "ProfilerStep#7"
    traces = _rewrite(tmp_path, relabel)
    r = ingest([traces], IngestOptions(step_kind="decode", step_batch=2), jobs=1)
    (d,) = r.phases
    assert (d.kind, d.batch, d.tokens, d.samples) == ("decode", 2, 2, 4)
    assert d.allreduce_s == pytest.approx(80 * US, abs=TOL)
    assert any("ProfilerStep" in n for n in r.notes)


def test_no_decode_rows_means_no_profile() -> None:
    r = ingest([GPU], jobs=1)
    from dataclasses import replace
    only_verify = replace(r, phases=tuple(p for p in r.phases if p.kind == "verify"))
    with pytest.raises(SpecmodelError, match="no decode forward passes"):
        build_profile(only_verify, name="x", opts=IngestOptions())


@pytest.mark.parametrize(("name", "expected"), [
    ("step[VERIFY bs=4]", ("verify", 4, 16)),
    ("step[DECODE bs=8]", ("decode", 8, 8)),
    ("step[EXTEND bs=2 toks=300]", ("extend", 2, 300)),
    ("step[DRAFT bs=3]", ("draft", 3, 6)),
    ("step[TARGET_VERIFY bs=2]", ("verify", 2, 8)),
    ("specmodel.verify[bs=1,toks=4]", ("verify", 1, 4)),
    ("draft_extend", ("draft_extend", 5, 20)),
    ("ProfilerStep#3", ("decode", 1, 1)),
    ("draft", ("draft", 5, 10)),  # SGLang 0.5.23 stage span
    ("step[IDLE bs=0]", None), ("specmodel.allreduce[bs=1,toks=1]", None), ("aten::mm", None),
])
def test_phase_names(name: str, expected) -> None:
    assert phase_of(name, IngestOptions(num_draft_tokens=4, topk=2), last_batch=5) == expected
