"""Report content assembly (no matplotlib): figures come from the Prediction, never recomputed."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from specmodel.model.accept import chain_mean, from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.report.content import build_report, message_bytes
from specmodel.report.markdown import render_markdown
from specmodel.report.view import PAGES
from specmodel.schema.profile import load_profile
from tests.conftest import REFERENCE

REF = load_profile(REFERENCE)


@dataclass(frozen=True)
class _Finding:
    name: str
    status: str
    message: str


@dataclass(frozen=True)
class _DrafterReport:
    findings: tuple[_Finding, ...]
    status: str
    acceptance_ceiling: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "acceptance_ceiling": self.acceptance_ceiling}


def _content(accept: float = 2.0, batch: int = 1, **kw: Any):
    dist = from_mean(accept, 4)
    pred = predict(REF, dist, OperatingPoint(batch=batch, spec=REF.spec))
    return pred, build_report(profile=REF, dist=dist, spec=REF.spec, prediction=pred, max_batch=16, **kw)


def test_content_carries_the_prediction_itself_and_consistent_views() -> None:
    pred, c = _content(batch=2)
    assert c.prediction is pred
    assert c.pages == PAGES
    assert c.whatifs[0].key == "as_is" and c.whatifs[0].tokens_per_s == pred.figures.tokens_per_s
    row = next(r for r in c.batch_sweep if r.batch == 2)
    assert row.speedup == pytest.approx(pred.figures.speedup) and row.tokens_per_s == pytest.approx(pred.figures.tokens_per_s)
    assert sum(s.seconds for s in c.breakdown.cycle) == pytest.approx(pred.costs.cycle_s)
    assert sum(s.seconds for s in c.breakdown.baseline) == pytest.approx(pred.costs.baseline_step_s)
    i = min(range(len(c.curve.accept_grid)), key=lambda j: abs(c.curve.accept_grid[j] - pred.figures.break_even_accept_tokens))
    assert c.curve.tokens_per_s[i] == pytest.approx(pred.figures.baseline_tokens_per_s, rel=0.05)
    assert [b.batch for b in c.batch_sweep] == [1, 2, 4, 8, 16]
    data = c.to_dict()
    json.dumps(data, allow_nan=False)  # strict JSON: no NaN/inf anywhere
    assert data["prediction"] == pred.to_dict()
    assert data["optimizer"]["best"]["tokens_per_s"] >= data["optimizer"]["default"]["tokens_per_s"]


def test_message_sizes_are_what_the_rows_say_per_token() -> None:
    # reference: 7168 hidden x 2 bytes = 14336 bytes per token for decode, verify and draft
    assert message_bytes(REF, "decode", 1) == 14336
    assert message_bytes(REF, "verify", 4) == 4 * 14336
    _, c = _content()
    assert {s.label: s.msg_bytes for s in c.allreduce.sizes} == {"decode": 14336, "verify": 57344, "draft": 14336}


def test_drafter_ceiling_below_the_accept_length_is_a_warning() -> None:
    rep = _DrafterReport(findings=(_Finding("vocab.coverage", "FAIL", "covers 40%"),), status="FAIL",
                         acceptance_ceiling=0.4)
    pred, c = _content(accept=2.0, drafter=rep)
    assert c.pages == (*PAGES, "drafter-check")
    assert c.drafter is not None and c.drafter.ceiling_tokens == pytest.approx(chain_mean(0.4, 3))
    assert c.curve.ceiling_tokens == pytest.approx(chain_mean(0.4, 3))
    assert c.drafter.warning is not None and any("vocabulary ceiling" in w for w in c.warnings)
    md = render_markdown(c)
    assert "## Drafter check: FAIL" in md and "vocab.coverage" in md
    ok = _DrafterReport(findings=(), status="PASS", acceptance_ceiling=0.95)
    _, c2 = _content(accept=2.0, drafter=ok)
    assert c2.drafter is not None and c2.drafter.warning is None


def test_markdown_has_every_section_and_the_same_figures() -> None:
    pred, c = _content(accept=3.2)
    md = render_markdown(c)
    for head in ("## Verdict", "## Where the cycle goes", "## All-reduce", "## What if", "## Recommended configuration"):
        assert head in md
    assert f"{pred.figures.tokens_per_s:.1f} tok/s" in md and f"{pred.figures.speedup:.2f}x" in md
    assert c.optimizer.best.sglang_flags() in md


def test_ngram_report_says_no_drafter_forward_not_free_draft() -> None:
    # priced as ngram from the reference (an EAGLE3 profile): the lookup is an assumption, but there is no
    # drafter forward to call "assumed free"
    import dataclasses

    spec = dataclasses.replace(REF.spec, algorithm="NGRAM")
    dist = from_mean(2.0, 4)
    pred = predict(REF, dist, OperatingPoint(spec=spec, proposal_rate=0.5))
    c = build_report(profile=REF, dist=dist, spec=spec, prediction=pred, max_batch=4)
    text = " | ".join(c.assumptions)
    assert "no drafter forward: ngram proposes on the host" in text
    assert "assumed free" not in text and "50% of request-steps proposed" in text
    eagle = _content()[1]
    assert "no drafter forward" not in " | ".join(eagle.assumptions)
