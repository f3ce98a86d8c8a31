"""No verdict that the inputs or the physics contradict: a withheld P decides nothing, a speedup
never exceeds the tokens a step emits, a cost is not extrapolated further than one doubling past
the measured range, someone else's costs are said in the verdict, and a priced request's band is
over the request's own tokens."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import specmodel
from specmodel.live.watch import assess, spec_for
from specmodel.live.window import Observed
from specmodel.model import decision as D
from specmodel.model.accept import from_histogram, from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import accept_model
from specmodel.model.predict import predict
from specmodel.model.serveplan import serve_plan
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile, load_profile
from specmodel.schema.source import Source
from tests.conftest import REFERENCE, run_cli

SPEC = SpecConfig(steps=3, topk=1, num_draft_tokens=4)
REF = load_profile(REFERENCE)
#: a hooked TP 1 ngram profile measured at batches 1, 3 and 4 (vLLM CPU engine)
NGRAM = Path(__file__).parent / "data" / "vllm_cli_1620_tp1" / "profile_ngram.json"


def _row(kind: str, batch: int, tokens: int, total_ms: float, spread_ms: float = 0.0, samples: int = 0) -> CostRow:
    return CostRow(kind=kind, batch=batch, tokens=tokens, total_s=total_ms / 1e3, allreduce_s=0.0,
                   compute_s=total_ms / 1e3, other_s=0.0, spread_s=spread_ms / 1e3, samples=samples)


def _measured(rows: tuple[CostRow, ...]) -> Profile:
    return Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=rows, spec=SPEC,
                   overhead_s=0.0)


# ---- a withheld P decides nothing ------------------------------------------------------------------

def test_decide_with_p_withheld_reads_the_band_not_the_hidden_p() -> None:
    # the hidden P would say GO (0.99); the band shown reaches 0.95x: a loss is inside what is shown
    d = D.decide(1.48, 0.99, withheld="rests on a cost extrapolated beyond the measured range", speedup_low=0.95)
    assert d.verdict == D.MARGINAL and "0.95x" in d.reason and "not given" in d.reason
    assert "0.99" not in d.reason
    # the same speedup whose shown band clears 1 is GO, still saying P was not given
    up = D.decide(1.48, 0.10, withheld="x", speedup_low=1.21)
    assert up.verdict == D.GO and "1.21x" in up.reason and "not given (x)" in up.reason
    # no band to read: nothing shown vouches for the gain
    assert D.decide(1.48, 0.99, withheld="x").verdict == D.MARGINAL
    # the speedup thresholds stand as before: below 1 is NO-GO, below 1.10 MARGINAL
    assert D.decide(0.90, 0.99, withheld="x", speedup_low=0.8).verdict == D.NO_GO
    assert D.decide(1.05, 0.99, withheld="x", speedup_low=1.01).verdict == D.MARGINAL


def test_decide_on_a_speedup_that_is_not_a_number_gives_no_verdict() -> None:
    for bad in (math.nan, math.inf):
        d = D.decide(bad, 0.99)
        assert d.verdict == D.INCONSISTENT and "0.90" not in d.reason and "0.99" not in d.reason
    # a P that is not a number is an unknown P: never GO on it
    assert D.decide(1.5, math.nan).verdict == D.MARGINAL


def test_predict_with_p_withheld_by_an_extrapolation_decides_from_its_band() -> None:
    """Measured at batches 1 and 2 (32 steps each, IQR 1 ms); batch 4 is one doubling beyond, so P
    is withheld. By hand at batch 4: decode 10.5 + 2 x 0.5 = 11.5 ms, verify (16 tokens)
    12.6 + 8 x 0.15 = 13.8 ms, cycle 13.8 + 3 x 0.5 = 15.3 ms, so speedup = E[A] x 11.5 / 15.3.
    Counts {1: 3, 2: 1, 3: 1, 4: 1}: E[A] = 2.0, speedup 1.50x; their std ~1.15 over 6 counted steps
    gives se = 1.15 x sqrt(1/128 + 1/6) ~ 0.48 tokens, a band down to E ~ 1.06 (~0.8x): MARGINAL,
    whatever the hidden P. The same shape over 6,000 steps: se ~ 0.10, band from E ~ 1.8 (~1.35x): GO."""
    rows = (_row("decode", 1, 1, 10.0, 1.0, 32), _row("decode", 2, 2, 10.5, 1.0, 32),
            _row("verify", 1, 4, 12.0, 1.0, 32), _row("verify", 2, 8, 12.6, 1.0, 32),
            _row("draft", 1, 1, 0.5, 0.1, 32), _row("draft", 2, 2, 0.5, 0.1, 32))
    prof = _measured(rows)
    few = from_histogram({1: 3, 2: 1, 3: 1, 4: 1})  # 6 steps, mean 2.0
    p = predict(prof, few, OperatingPoint(batch=4, spec=SPEC))
    assert p.figures.p_withheld.startswith("rests on a cost extrapolated")
    assert p.figures.speedup >= 1.10 and p.figures.speedup_low < 1.0
    assert p.outcome.verdict == "MARGINAL" and "not given" in p.outcome.reason
    assert p.figures.speedup == pytest.approx(2.0 * 11.5 / 15.3, rel=1e-6)
    many = from_histogram({1: 3000, 2: 1000, 3: 1000, 4: 1000})  # the same shape, 6,000 steps
    q = predict(prof, many, OperatingPoint(batch=4, spec=SPEC))
    assert q.figures.speedup_low >= 1.0 and q.outcome.verdict == "GO"
    # watch acts on the prediction's own decision, not on the hidden P
    obs = Observed(engine="vllm", dist=few, rates=None, steps=3, batch=4.0, context_tokens=0.0, tokens_per_s=None,
                   span_s=10.0, verify_steps=6.0, method="EAGLE3")
    r = assess(prof, obs, spec_for(prof, obs, None))
    assert r.verdict == "MARGINAL" and not r.advice.startswith("keep")


# ---- physical bounds ----------------------------------------------------------------------------------

@settings(max_examples=80, deadline=None)
@given(decode_ms=st.floats(1.0, 50.0), verify_rel=st.floats(0.5, 3.0), draft_ms=st.floats(0.05, 5.0),
       accept=st.floats(1.0, 4.0), batch=st.sampled_from([1, 2, 3, 4, 6, 8]))
def test_no_speedup_above_the_tokens_a_step_emits(decode_ms: float, verify_rel: float, draft_ms: float,
                                                  accept: float, batch: int) -> None:
    """Whatever the costs say -- a verify priced below the decode step included -- a speculative
    step holds a verify forward over at least the baseline's tokens, so the speedup is at most
    E[A] (the tokens one step emits); a cycle is never cheaper than its own verify forward."""
    rows = (_row("decode", 1, 1, decode_ms, 0.5, 20), _row("decode", 4, 4, decode_ms * 1.2, 0.5, 20),
            _row("verify", 1, 4, decode_ms * verify_rel, 0.5, 20),
            _row("verify", 4, 16, decode_ms * verify_rel * 1.2, 0.5, 20),
            _row("draft", 1, 1, draft_ms, 0.1, 20), _row("draft", 4, 4, draft_ms, 0.1, 20))
    p = predict(_measured(rows), from_mean(accept, 4), OperatingPoint(batch=batch, spec=SPEC))
    assert p.figures.speedup <= p.accept.mean_tokens + 1e-9
    assert p.costs.cycle_s >= p.costs.verify_s - 1e-15
    if p.consistent and p.outcome.verdict != "NO-GO":
        assert p.figures.speedup_low <= p.figures.speedup <= p.figures.speedup_high


def test_batch_far_beyond_the_measured_ones_is_refused_with_the_range(tmp_path: Path) -> None:
    # the profile measured batches 1-4: batch 1024 read off lines through them gave a 17x "GO"
    r = run_cli("predict", "--profile", str(NGRAM), "--accept-len", "2.5", "--batch", "1024", cwd=tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("specmodel: error: beyond the measured range: batch 1024 is 256x the largest measured (4)")
    # one doubling beyond is still predicted (and says it is extrapolated)
    ok = run_cli("predict", "--profile", str(NGRAM), "--accept-len", "2.5", "--batch", "8", "--json", cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["extrapolated"] and doc["speedup"] <= doc["accept_mean_tokens"]
    assert doc["schema_version"] == 6 and doc["foreign_costs"] == ""


def test_the_plan_prices_no_cell_beyond_the_allowed_range() -> None:
    prof = load_profile(NGRAM)
    plan = serve_plan(prof, accept_model(from_mean(2.5, prof.spec.max_accept_tokens)), batches=(1, 4, 8, 1024),
                      contexts=(0,), default=prof.spec)
    far = plan.cell(1024, 0)
    assert far.beyond_range and far.beyond_range[0].startswith("batch 1024 is 256x")
    assert far.to_run is None and far.to_dict()["best_extrapolated"] is None
    assert not plan.cell(8, 0).beyond_range  # one doubling: extrapolated, listed, never recommended
    assert plan.cell(8, 0).recommended is None


def test_watch_at_a_batch_far_beyond_the_profile_gives_no_advice() -> None:
    prof = load_profile(NGRAM)
    dist = dataclasses.replace(from_mean(2.5, prof.spec.max_accept_tokens), samples=5000, samples_unknown=False)
    obs = Observed(engine="vllm", dist=dist, rates=None, steps=prof.spec.steps, batch=1024.0, context_tokens=None,
                   tokens_per_s=None, span_s=10.0, verify_steps=5000.0, method="ngram")
    r = assess(prof, obs, spec_for(prof, obs, None))
    assert r.verdict == "INCONSISTENT" and r.advice.startswith("no advice: re-measure")


# ---- someone else's costs are said -------------------------------------------------------------------

def test_a_verdict_on_the_shipped_reference_says_whose_costs(tmp_path: Path) -> None:
    r = run_cli("predict", "--accept-len", "3.2", "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["verdict"] == "GO" and doc["verdict_label"].startswith("GO (on another box's costs: the shipped "
                                                                      "reference profile kimi-k2.5-int4-tp8-pcie")
    assert "kimi-k2.5-int4-tp8-pcie" in doc["foreign_costs"]
    # the API too; a profile of the user's own box is not qualified
    assert specmodel.predict(accept=3.2).source.foreign_costs
    own = dataclasses.replace(REF, source=Source.measured(tool="t", description="own", created_utc="", method=""))
    assert predict(own, from_mean(3.2, 4), OperatingPoint(spec=SPEC)).verdict_label == "GO"


@pytest.mark.slow  # renders PDFs
def test_the_report_page_one_carries_the_qualification(tmp_path: Path) -> None:
    from pdfminer.high_level import extract_text

    pdf = tmp_path / "r.pdf"
    r = run_cli("report", "--accept-len", "3.2", "-o", str(pdf), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    page1 = " ".join(extract_text(str(pdf), page_numbers=[0]).split())
    assert "on another box's costs" in page1 and "kimi-k2.5-int4-tp8-pcie" in page1
    doc = json.loads(pdf.with_suffix(".json").read_text())
    assert "on another box's costs" in doc["verdict_label"]


def test_an_accept_log_of_a_server_at_another_tp_qualifies_the_verdict(tmp_path: Path) -> None:
    # the user's own TP 1 profile, priced for a server whose log says it ran TP 2
    log = Path(__file__).parent / "data" / "vllm_cpu_032" / "tp2_ngram" / "server.log"
    r = run_cli("predict", "--profile", str(NGRAM), "--accept-log", str(log), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["foreign_costs"] == "profile ngram is TP 1, the logged server ran TP 2"
    assert doc["verdict_label"].startswith(doc["verdict"] + " (on another box's costs: profile ngram is TP 1")
    # the same log against a profile of its own TP is not qualified on that ground
    own = run_cli("predict", "--profile", str(NGRAM), "--accept-log",
                  str(Path(__file__).parent / "data" / "vllm_cpu_032" / "tp1_ngram" / "server.log"), "--json",
                  cwd=tmp_path)
    assert own.returncode == 0, own.stderr
    assert json.loads(own.stdout)["foreign_costs"] == ""


# ---- a priced request's band is over its own tokens -------------------------------------------------

def test_request_tokens_set_the_band_and_p_over_the_request() -> None:
    """Reference costs, a stated mean of 3.2 (no sample count): the band's half-width in tokens per
    step is 1.96·σ/√C over the C = N/E[A] cycles one N-token generation takes. With --request-tokens
    64 it is 1.96·σ·√(3.2/64), four times the half-width over 1,024 tokens (√(1024/64) = 4)."""
    d = from_mean(3.2, 4)
    short = predict(REF, d, OperatingPoint(spec=SPEC, request_tokens=64, prompt_tokens=100, generation_tokens=1024))
    long_ = predict(REF, d, OperatingPoint(spec=SPEC, request_tokens=1024, prompt_tokens=100, generation_tokens=64))
    w_short = short.figures.tokens_per_s_high - short.figures.tokens_per_s_low
    w_long = long_.figures.tokens_per_s_high - long_.figures.tokens_per_s_low
    assert w_short / w_long == pytest.approx(4.0, rel=1e-9)
    half_tokens = 1.96 * d.std_tokens * math.sqrt(3.2 / 64)
    assert (short.figures.tokens_per_s_high - short.figures.tokens_per_s) * short.costs.cycle_s == pytest.approx(half_tokens, rel=1e-9)
    assert "over 64 tokens" in short.band_label and "over 1024 tokens" in long_.band_label


@pytest.mark.slow  # renders PDFs
def test_the_report_batch_sweep_stops_where_a_prediction_may_no_longer_go(tmp_path: Path) -> None:
    # measured batches 1-4: batch 8 is one doubling (drawn, extrapolated); 16, 32, 64 are not priced
    pdf = tmp_path / "n.pdf"
    r = run_cli("report", "--profile", str(NGRAM), "--accept-len", "2.5", "--max-batch", "64", "-o", str(pdf),
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(pdf.with_suffix(".json").read_text())
    assert [row["batch"] for row in doc["batch_sweep"]] == [1, 2, 4, 8]
    assert any(w.startswith("batch sweeps stop at batch 8: from batch 16 on") for w in doc["warnings"])
    assert all(row["speedup"] <= 2.5 for row in doc["batch_sweep"])
