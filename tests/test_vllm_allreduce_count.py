"""The all-reduce count checks itself: a TP > 1 row whose wrapper saw fewer all-reduces per forward
than the forward runs (the most any forward of that model showed, raised to 2 per layer + 1 where
the meta line gives the model's layers) is partial -- it takes the capture's share or says unknown,
never ``allreduce_source: "wrapper"`` with a partial sum. Synthetic rank files (vllm_step v3, TP 2,
a 4-layer target: 9 all-reduces per forward, as the live CPU engine shows, tests/test_vllm_live.py);
the numbers each test expects are written out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm import capture_ingest
from specmodel.engines.vllm.capture_ingest import CaptureShares
from specmodel.engines.vllm.hooklog import summarize
from specmodel.model.accept import from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.trace.collectives import ALL_REDUCE, FUSED_IMPLEMENTATIONS, classify_kernel

HDR = {"schema": "specmodel.vllm_step", "schema_version": 3}
DM = {"method": "draft_model", "num_speculative_tokens": 3, "draft_model": "/m/draft"}
COMP = {"mode": "VLLM_COMPILE", "cudagraph_mode": "NONE", "fuse_allreduce_rms": True, "enforce_eager": False}


def _meta(spec: dict[str, Any] | None, layers: dict[str, int | None] | None) -> dict[str, Any]:
    m = {**HDR, "type": "meta", "vllm_version": "0.34.0", "rank": "0", "tp_size": 2, "device": "cpu",
         "model_path": "/m/target", "spec": spec, "clock": "perf_counter", "compilation": COMP}
    if layers is not None:
        m["num_hidden_layers"] = layers
    return m


def _step(kind: str, batch: int, tokens: int, n_ar: int, *, draft_n: int | None = None,
          spec_tokens: int = 0) -> dict[str, Any]:
    """A step whose forward took 4 ms, 1 ms of it in the all-reduces the wrapper saw (n_ar of them);
    a drafter proposal (draft_model, k = 3) of 3 ms, 0.6 ms of it in draft_n all-reduces."""
    spec = draft_n is not None
    return {**HDR, "type": "step", "kind": kind, "batch": batch, "tokens": tokens, "spec_tokens": spec_tokens,
            "context_tokens": 100.0, "draft_method": "draft_model" if spec else None, "draft_k": 3 if spec else None,
            "gap_s": 0.0005, "step_s": 0.006 + (0.003 if spec else 0.0), "forward_s": 0.004,
            "forward_allreduce_s": 0.001 if n_ar else 0.0, "forward_n_allreduce": n_ar,
            "draft_s": 0.003 if spec else None, "draft_allreduce_s": 0.0006 if spec else None,
            "draft_n_allreduce": draft_n, "overhead_s": 0.002 + (0.0 if spec else 0.0)}


def _write(d: Path, meta: dict[str, Any], steps: list[dict[str, Any]]) -> Path:
    d.mkdir(parents=True)
    (d / "rank0-dp0-pp0-pid1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [meta, *steps]))
    return d


def _runs(tmp: Path, *, decode_n: int, verify_n: int, draft_n: int, prefill_n: int | None = 9,
          layers: dict[str, int | None] | None = None) -> tuple[Path, Path]:
    """A baseline server (decode steps, and prefills when prefill_n is given) and a draft_model one (verify)."""
    base = [_step("decode", 1, 1, decode_n) for _ in range(6)]
    spec = [_step("verify", 1, 4, verify_n, draft_n=draft_n, spec_tokens=3) for _ in range(6)]
    if prefill_n is not None:
        base += [_step("extend", 1, 64, prefill_n) for _ in range(6)]
        # the drafter after a prefill: its first forward over the prompt (V1 splits it off) sees all 9
        spec += [{**_step("extend", 1, 64, prefill_n, draft_n=9 + 2 * (draft_n // 3)), "draft_first_s": 0.002,
                  "draft_first_allreduce_s": 0.0003, "draft_first_n_allreduce": 9} for _ in range(6)]
    return (_write(tmp / "base", _meta(None, layers), base), _write(tmp / "spec", _meta(DM, layers), spec))


def _rows(prof: Any) -> dict[str, Any]:
    return {r.kind: r for r in prof.costs if r.batch == 1}


def _known(prof: Any) -> bool:
    p = predict(prof, from_mean(2.5, 3), OperatingPoint(batch=1))
    return bool(p.source.allreduce_known)


def test_every_forward_whole_keeps_the_wrappers_measurement(tmp_path: Path) -> None:
    base, spec = _runs(tmp_path, decode_n=9, verify_n=9, draft_n=27, layers={"target": 4, "draft": 4})
    prof = summarize([base, spec], name="whole", min_samples=3)
    rows = _rows(prof)
    for kind in ("decode", "verify"):
        assert rows[kind].allreduce_source == "wrapper" and rows[kind].allreduce_s == pytest.approx(0.001)
    assert rows["draft"].allreduce_source == "wrapper" and rows["draft"].allreduce_s == pytest.approx(0.0002)
    assert _known(prof)
    assert any("every forward the wrapper timed ran 9 (target), 9 (drafter)" in n and "fuse_allreduce_rms True" in n
               for n in prof.notes)


def test_a_short_count_is_partial_and_its_allreduce_unknown(tmp_path: Path) -> None:
    """The prefills show 9 all-reduces, the verify forwards 5 and the drafter's 15 of 27 (the fused op
    ran the rest): their timed sums are partial -- unknown, not the wrapper's; decode stays whole."""
    base, spec = _runs(tmp_path, decode_n=9, verify_n=5, draft_n=15, layers=None)
    prof = summarize([base, spec], name="partial", min_samples=3)
    rows = _rows(prof)
    assert rows["decode"].allreduce_source == "wrapper"
    for kind in ("verify", "draft"):
        r = rows[kind]
        assert r.allreduce_source == "" and r.allreduce_s == 0.0, r
        assert r.compute_s == pytest.approx(0.004 if kind == "verify" else 0.001)  # the whole forward
    assert not _known(prof)
    (note,) = [n for n in prof.notes if "fewer all-reduces than a forward runs" in n]
    assert "verify b1 t4 (5 of 9)" in note and "draft b1 t1 (5 of 9)" in note
    assert "unknown for some rows" in dict(prof.source.origins)["allreduce"]


def test_the_model_config_catches_a_count_short_in_every_forward(tmp_path: Path) -> None:
    """No prefill and every forward short by the same amount: only the model config (4 layers:
    2 * 4 + 1 = 9) says the 5 the wrapper saw is not a whole forward. Without the config nothing can."""
    base, spec = _runs(tmp_path / "cfg", decode_n=5, verify_n=5, draft_n=15, prefill_n=None,
                       layers={"target": 4, "draft": 4})
    prof = summarize([base, spec], name="cfg", min_samples=3)
    assert {k: r.allreduce_source for k, r in _rows(prof).items()} == {"decode": "", "verify": "", "draft": ""}
    assert not _known(prof)
    base, spec = _runs(tmp_path / "nocfg", decode_n=5, verify_n=5, draft_n=15, prefill_n=None, layers=None)
    prof = summarize([base, spec], name="nocfg", min_samples=3)
    assert {r.allreduce_source for r in _rows(prof).values()} == {"wrapper"}


def test_a_partial_row_takes_the_captures_share(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    base, spec = _runs(tmp_path, decode_n=9, verify_n=5, draft_n=15, layers={"target": 4, "draft": 4})
    cap = CaptureShares(directory=str(spec), windows=(), shares=((("verify", 1, 4), 0.4), (("draft", 1, 1), 0.3)),
                        passes=((("verify", 1, 4), 8), (("draft", 1, 1), 8)), files=("t",), mode="gpu",
                        attribution="correlation", fused=(("flashinfer_trtllm_fused", "rms_norm"),))
    monkeypatch.setattr(capture_ingest, "read_capture", lambda d: cap if Path(d) == spec else None)
    prof = summarize([base, spec], name="cap", min_samples=3)
    rows = _rows(prof)
    assert rows["verify"].allreduce_source == "capture" and rows["verify"].allreduce_s == pytest.approx(0.4 * 0.004)
    assert rows["draft"].allreduce_source == "capture" and rows["draft"].allreduce_s == pytest.approx(0.3 * 0.001)
    assert rows["decode"].allreduce_source == "wrapper"
    assert any("flashinfer_trtllm_fused (with rms_norm)" in n for n in prof.notes)


@pytest.mark.parametrize("name,impl", [
    ("void flashinfer::trtllm_allreduce_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8, true>"
     "(flashinfer::trtllm_allreduce_fusion::AllReduceFusionParams<__nv_bfloat16>)", "flashinfer_trtllm_fused"),
    ("void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_twoshot_sync<2, __nv_bfloat16, true>(...)",
     "flashinfer_trtllm_fused"),
    ("aiter::all_reduce_rmsnorm", "aiter_fused"),
])
def test_the_fused_allreduce_norm_kernels_are_allreduce_with_the_norm_inside(name: str, impl: str) -> None:
    c = classify_kernel(name)
    assert c is not None and (c.collective, c.implementation, c.fused) == (ALL_REDUCE, impl, "rms_norm")
    assert FUSED_IMPLEMENTATIONS[impl] == "rms_norm"
    plain = classify_kernel("void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(...)")
    assert plain is not None and plain.fused == ""
