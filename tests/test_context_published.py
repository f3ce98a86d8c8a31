"""Context + batch prediction checked against published measurements.

Data: GLM-5.1 NVFP4, vLLM TP8 on 8x RTX PRO 6000 (PCIe), baseline and MTP (3 speculative
tokens) decode throughput over concurrency x context, from local-inference-lab/rtx6kpro at
d6cb558 (see tests/data/glm51_rtx6kpro_tp8_mtp/README.md for the citation and method).

Method, as a user would run it: ``--baseline-sweep baseline_dcpN.csv`` (with a context column)
plus ONE calibration point, the MTP run's batch 1 / context 0 cell, and the drafter's measured
acceptance (pooled over the MTP cells); every other MTP cell is predicted at its own batch and
context. Nothing is fitted to the predicted cells; no constant was tuned to this data.

Measured errors (cells whose costs are inside the measured range), reported honestly:
  DCP8: 14 cells, median |error| 1.6 %, max 14.4 % (batch 16 / context 0; batch 8 +5.9 %, +5.0 %)
        -> meets the 3 % median target, MISSES the 8 % max target: the MTP server's step time
           jumps from batch 8 up, which the non-speculative sweep does not show.
  DCP1:  4 cells, median |error| 0.9 %, max 5.0 % -> meets both targets.
"""

from __future__ import annotations

import csv
import statistics
from pathlib import Path

import pytest

from specmodel.model.accept import from_mean
from specmodel.model.calibrate import Observation
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.model.prediction import Prediction
from specmodel.schema.costrows import SpecConfig
from specmodel.trace.sweep import sweep_profile

CASE = Path(__file__).resolve().parent / "data" / "glm51_rtx6kpro_tp8_mtp"
SPEC = SpecConfig(algorithm="MTP", steps=3, topk=1, num_draft_tokens=4)  # num_speculative_tokens = 3
CALIBRATION = (1, 0)  # (batch, context) of the one calibration point


def _mtp_cells(dcp: int) -> list[tuple[int, int, float, float]]:
    with (CASE / f"mtp1_dcp{dcp}.csv").open() as fh:
        rows = list(csv.DictReader(line for line in fh if not line.startswith("#")))
    return [(int(r["batch"]), int(r["context"]), float(r["tokens_per_s"]), float(r["accept_rate"])) for r in rows]


def _predictions(dcp: int, *, sweep: str | None = None) -> dict[tuple[int, int], tuple[float, Prediction]]:
    profile = sweep_profile(sweep or str(CASE / f"baseline_dcp{dcp}.csv"), 8)
    cells = _mtp_cells(dcp)
    accept = 1.0 + SPEC.steps * statistics.fmean(c[3] for c in cells)  # vLLM: 1 + accepted/drafts per step
    dist = from_mean(accept, SPEC.max_accept_tokens, shape="point")
    cal = next(c for c in cells if c[:2] == CALIBRATION)
    obs = Observation(batch=cal[0], context_tokens=cal[1], accept_tokens=accept, tokens_per_s=cal[2])
    return {(b, L): (t, predict(profile, dist, OperatingPoint(batch=b, spec=SPEC, observation=obs, context_tokens=L)))
            for b, L, t, _ in cells}


def _errors(preds: dict[tuple[int, int], tuple[float, Prediction]]) -> dict[tuple[int, int], float]:
    return {k: (p.figures.tokens_per_s - t) / t for k, (t, p) in preds.items() if k != CALIBRATION and not p.outcome.extrapolated}


def test_calibration_point_is_reproduced() -> None:
    for dcp in (8, 1):
        t, p = _predictions(dcp)[CALIBRATION]
        assert p.figures.tokens_per_s == pytest.approx(t, rel=1e-9)


def test_dcp8_inside_the_measured_range() -> None:
    preds = _predictions(8)
    errs = _errors(preds)
    inside = {(1, 16384), (1, 32768), (1, 65536), (1, 131072), (2, 0), (4, 0), (8, 0), (16, 0),
              (2, 16384), (4, 16384), (8, 16384), (2, 32768), (4, 32768), (2, 65536)}
    assert set(errs) == inside
    # outside it the verify (B x 4 tokens at L) was not measured: flagged, never silent
    for k, (_, p) in preds.items():
        if k not in inside and k != CALIBRATION:
            assert any(e.axis == "tokens" for e in p.outcome.extrapolated)
    med = statistics.median(abs(e) for e in errs.values())
    assert med < 0.03  # the median target: met
    assert med == pytest.approx(0.016, abs=0.002)
    # the max target (8 %) is missed at batch >= 8 (see the module docstring): pin what we report
    worst = max(errs, key=lambda k: abs(errs[k]))
    assert worst == (16, 0) and errs[worst] == pytest.approx(0.144, abs=0.002)
    assert {k for k, e in errs.items() if abs(e) > 0.08} == {(16, 0)}
    assert all(abs(e) < 0.06 for k, e in errs.items() if k[0] <= 4)


def test_dcp1_inside_the_measured_range() -> None:
    errs = _errors(_predictions(1))
    assert set(errs) == {(1, 16384), (2, 0), (4, 0), (8, 0)}
    med = statistics.median(abs(e) for e in errs.values())
    assert med < 0.03 and max(abs(e) for e in errs.values()) < 0.08
    assert med == pytest.approx(0.009, abs=0.002)


def test_context_zero_sweep_is_flagged_at_long_context(tmp_path: Path) -> None:
    # the misuse the issue describes: a context-0 sweep used for 16K-128K predictions; it must be
    # flagged as extrapolated in context, not silently wrong
    src = (CASE / "baseline_dcp8.csv").read_text().splitlines()
    zero = [ln for ln in src if ln.startswith("#") or ln.startswith("batch") or ln.split(",")[1] == "0"]
    p = tmp_path / "ctx0.csv"
    p.write_text("\n".join(zero) + "\n")
    preds = _predictions(8, sweep=str(p))
    for (b, L), (_, pred) in preds.items():
        if L > 0:
            assert any(e.axis == "context" and e.measured_max == 0 for e in pred.outcome.extrapolated), (b, L)
            # a sweep has no verify rows: qualified for that first, then the context
            assert pred.verdict_label.startswith(f"{pred.outcome.verdict} (verify not measured at "), pred.verdict_label
            assert "extrapolated: context" in pred.verdict_label
