"""Which spans are forward passes in SGLang 0.5.23 traces and with the hook's spans nested in
them. Span names and nesting as SGLang 0.5.23 writes them:
``ModelRunner.forward`` opens ``step[<STAGE> bs=..]`` where every forward of the draft runner is
``step[DRAFT ..]`` (utils/profile_utils.build_step_span_name); eagle_worker_v2 wraps drafting in a
``draft`` stage span and both draft-extends (after a prefill and after a verify) in
``draft_extend`` (speculative/spec_utils.spec_stage_span); a CUDA-graph draft replay runs no
``ModelRunner.forward`` and so opens no ``step[]`` span inside its ``draft`` stage.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmodel.schema.phases import parse_phase_forwards, parse_phase_label, phase_label
from specmodel.trace.ingest import ingest
from specmodel.trace.kineto import IngestOptions

US = 1e-6


class Trace:
    """A one-rank Kineto trace: CPU user_annotations, their gpu_user_annotations (same External
    id, on the device) and kernels."""

    def __init__(self) -> None:
        self.ev: list[dict[str, Any]] = []
        self.ext = 0

    def span(self, name: str, t0: float, t1: float, gpu: bool = True) -> None:
        self.ext += 1
        self.ev.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": 100, "tid": 1, "ts": t0,
                        "dur": t1 - t0, "args": {"External id": self.ext}})
        if gpu:
            self.ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": 7, "ts": t0,
                            "dur": t1 - t0, "args": {"External id": self.ext}})

    def kernel(self, t0: float, t1: float, allreduce: bool = False) -> None:
        name = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(x)" if allreduce else "gemm_kernel"
        self.ev.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t0, "dur": t1 - t0,
                        "args": {"correlation": len(self.ev)}})

    def write(self, path: Path) -> Path:
        path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
                                    "traceEvents": self.ev}))
        return path


def sglang_0523(tmp_path: Path) -> Path:
    t = Trace()
    t.span("step[EXTEND bs=1 toks=20]", 0, 100)  # prefill
    t.kernel(0, 80)
    t.kernel(80, 100, allreduce=True)
    t.span("draft_extend", 110, 150, gpu=False)  # the prefill's draft-extend: not a decode cost
    t.span("step[DRAFT bs=1]", 112, 148)
    t.kernel(112, 140)
    t.kernel(140, 148, allreduce=True)
    t.span("draft", 160, 200)  # CUDA-graph draft replay: steps - 1 = 2 forwards, no step[] inside
    for base in (160, 180):
        t.kernel(base, base + 10)
        t.kernel(base + 10, base + 20, allreduce=True)
    t.span("step[VERIFY bs=1]", 210, 310)
    t.kernel(210, 290)
    t.kernel(290, 310, allreduce=True)
    t.span("draft_extend", 320, 360, gpu=False)  # the decode draft-extend: labelled DRAFT by 0.5.23
    t.span("step[DRAFT bs=1]", 322, 358)
    t.kernel(322, 350)
    t.kernel(350, 358, allreduce=True)
    t.span("draft", 370, 416, gpu=False)  # eager drafting: one step[DRAFT] per forward
    for base in (372, 394):
        t.span("step[DRAFT bs=1]", base, base + 20)
        t.kernel(base, base + 10)
        t.kernel(base + 10, base + 20, allreduce=True)
    return t.write(tmp_path / "sglang-0523-TP-0.trace.json")


def test_0523_draft_spans_classified_by_their_stage(tmp_path: Path) -> None:
    res = ingest([sglang_0523(tmp_path)], IngestOptions(num_draft_tokens=3, steps=3), jobs=1)
    ph = {p.kind: p for p in res.phases}
    assert set(ph) == {"extend", "verify", "draft", "draft_extend"}
    de = ph["draft_extend"]
    assert de.samples == 1  # the decode one; the prefill's is dropped
    assert de.span_s == pytest.approx(36 * US) and de.allreduce_s == pytest.approx(8 * US)
    assert de.tokens == 3  # batch x num_draft_tokens
    dr = ph["draft"]
    assert dr.samples == 3  # 1 replay (2 forwards) + 2 eager steps
    assert dr.span_s == pytest.approx(20 * US)  # per forward: the replay's 40 us / 2
    assert dr.allreduce_s == pytest.approx(10 * US) and dr.n_allreduce == 1
    assert ph["verify"].samples == 1 and ph["extend"].samples == 1


def test_hook_label_carries_its_forward_count() -> None:
    lbl = phase_label("draft", 2, 2, forwards=3)
    assert lbl == "specmodel.draft[bs=2,toks=2,fwd=3]"
    assert parse_phase_label(lbl) == ("draft", 2, 2) and parse_phase_forwards(lbl) == 3
    assert phase_label("verify", 1, 4) == "specmodel.verify[bs=1,toks=4]"
    assert parse_phase_forwards("specmodel.verify[bs=1,toks=4]") == 1


def test_hook_spans_nested_with_sglang_spans_count_once(tmp_path: Path) -> None:
    t = Trace()
    for i, base in enumerate((0, 1000)):
        # the hook wraps ModelRunner.forward, which opens SGLang's own step[] span inside
        t.span("specmodel.verify[bs=1,toks=4]", base, base + 110, gpu=False)
        t.span("step[VERIFY bs=1]", base + 5, base + 105)
        t.kernel(base + 5, base + 85)
        t.kernel(base + 85, base + 105, allreduce=True)
        # the hook around a draft CUDA-graph replay (2 forwards) inside the draft stage
        t.span("draft", base + 200, base + 260, gpu=False)
        t.span("specmodel.draft[bs=1,toks=1,fwd=2]", base + 205, base + 255)
        for k in (205, 230):
            t.kernel(base + k, base + k + 15)
            t.kernel(base + k + 15, base + k + 25, allreduce=True)
        t.span("step[DECODE bs=1]" if i else "specmodel.decode[bs=1,toks=1]", base + 300, base + 350)
        t.kernel(base + 300, base + 350)
    res = ingest([t.write(tmp_path / "rank0.trace.json")], IngestOptions(num_draft_tokens=4, steps=3), jobs=1)
    ph = {p.kind: p for p in res.phases}
    assert ph["verify"].samples == 2  # not 4: the hook span and step[VERIFY] are one forward
    assert ph["verify"].tokens == 4 and ph["verify"].span_s == pytest.approx(100 * US)
    assert ph["draft"].samples == 2 and ph["draft"].span_s == pytest.approx(25 * US)  # 50 us / fwd=2
    assert ph["draft"].allreduce_s == pytest.approx(10 * US) and ph["draft"].n_allreduce == 1
    assert sum(p.samples for p in res.phases if p.kind == "decode") == 2
