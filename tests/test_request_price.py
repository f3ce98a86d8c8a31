"""A request priced end to end (specmodel.model.request, ``predict --request-tokens``): prefill and
the time outside the engine's steps beside the decode phase.

Hand-derived figures: a round of B requests of P prompt tokens that each generate N tokens takes
T = prefill(B·P) + outside + (N − 1)·B / X (X the decode phase's total tok/s); the request's
speedup is g(s) = (F_base + D) / (F_spec + D/s) for a decode phase s times faster, and breaks
even at s* = D / (F_base + D − F_spec).

Why it matters (cited, the project's own CLI benchmark, 2026-12-03 14:45 UTC, TP 1 batch 1,
128-token requests, benchmarks/results/vllm_cli_2026-12-03_1445.md): the steps spanned 704 of the
baseline's 818 ms per request; predicted 2.02x for the decode phase, 1.68x measured by a client
timing whole requests.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.model.accept import from_histogram
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.model.request import decode_speedup_needed, prefill_s, request_speedup
from specmodel.schema.costrows import CostRow, RequestCosts, prompt_tokens_of
from specmodel.schema.profile import load_profile, profile_from_dict, profile_to_dict
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
DRAFT = REPO / "tests" / "data" / "vllm_oos_tp1_1023" / "profile_base_draft_noisy.json"  # 0.34x at E[A] 3
NGRAM = REPO / "tests" / "data" / "vllm_oos_tp1_1023" / "profile_base_ngram.json"  # 1.54x at E[A] 3
#: 500 observed verify steps, mean 3.0 tokens/step (k = 3)
DIST = from_histogram({1: 50, 2: 100, 3: 150, 4: 200}, max_tokens=4)


def _extend(tokens: int, total_ms: float, batch: int = 1) -> CostRow:
    s = total_ms / 1e3
    return CostRow(kind="extend", batch=batch, tokens=tokens, total_s=s, allreduce_s=0.0, compute_s=s, samples=8)


def test_prefill_is_a_line_through_the_measured_rows_and_says_when_outside() -> None:
    rows = [_extend(60, 6.0), _extend(240, 15.0, batch=4)]  # 8 steps each: the line through both
    s, e = prefill_s(rows, 120)  # a = 3 ms, b = 9 ms / 180 tokens = 0.05 ms/token: 3 + 6 = 9 ms
    assert s == pytest.approx(9.0e-3) and e is None
    s, e = prefill_s(rows, 30)
    assert s == pytest.approx(4.5e-3) and e is not None and e.label == "extend tokens 30 < measured 60"
    s, e = prefill_s(rows, 480)
    assert s == pytest.approx(27.0e-3) and e is not None and "> measured 240" in e.label
    s, _ = prefill_s([_extend(60, 6.0)], 120)  # one size: proportional to the tokens
    assert s == pytest.approx(12.0e-3)
    # rows that fall with the tokens (a step after an idle engine, measured: 37 ms at 60 tokens,
    # 19 ms at 181) are noise, not a cheaper large prefill: slope 0, their weighted mean
    noisy = [_extend(60, 37.0), _extend(181, 19.0, batch=4)]
    assert prefill_s(noisy, 500)[0] == pytest.approx(28.0e-3)
    # an intercept below zero (the line through both rows: b = 19/100 ms, a = 1 − 19 = −18 ms) is
    # clamped: the line through the origin, least squares, b = Σ T·c / Σ T² = (100·1 + 200·20) /
    # (100² + 200²) = 4100 / 50000 = 0.082 ms/token, so 150 tokens cost 12.3 ms
    steep = [_extend(100, 1.0), _extend(200, 20.0)]
    assert prefill_s(steep, 150)[0] == pytest.approx(12.3e-3)


def test_request_speedup_hand_example() -> None:
    # F_base = 10 ms, F_spec = 12 ms (the drafter's prefill), D = 300 ms, decode phase 2x: the baseline
    # request takes 10 + 300 = 310 ms, the speculative one 12 + 300/2 = 162 ms, 310/162 = 1.9136x;
    # break-even where 12 + 300/s = 310: s* = 300/298 = 1.00671
    assert request_speedup(2.0, fixed_base_s=0.010, fixed_spec_s=0.012, decode_base_s=0.300) == pytest.approx(
        1.91358, rel=1e-5)
    assert decode_speedup_needed(fixed_base_s=0.010, fixed_spec_s=0.012, decode_base_s=0.300) == pytest.approx(
        1.00671, rel=1e-5)
    # a speculative fixed cost larger than the baseline's whole request: no decode speedup pays
    assert decode_speedup_needed(fixed_base_s=0.0, fixed_spec_s=0.5, decode_base_s=0.3) == math.inf


@given(s=st.floats(0.05, 20.0), f=st.floats(0.0, 1.0), d=st.floats(1e-3, 10.0), extra=st.floats(0.0, 0.5))
def test_fixed_cost_pulls_toward_one_and_breaks_even_at_s_star(s: float, f: float, d: float, extra: float) -> None:
    g = request_speedup(s, fixed_base_s=f, fixed_spec_s=f, decode_base_s=d)
    assert min(1.0, s) - 1e-9 <= g <= max(1.0, s) + 1e-9  # equal fixed costs: between 1 and s
    star = decode_speedup_needed(fixed_base_s=f, fixed_spec_s=f + extra, decode_base_s=d)
    if math.isfinite(star):
        assert request_speedup(star, fixed_base_s=f, fixed_spec_s=f + extra, decode_base_s=d) == pytest.approx(1.0)
    assert request_speedup(s * 1.1, fixed_base_s=f, fixed_spec_s=f + extra, decode_base_s=d) >= request_speedup(
        s, fixed_base_s=f, fixed_spec_s=f + extra, decode_base_s=d) - 1e-12


def _with_requests(outside_ms: float | None, spec_prefill_ms: float | None, prompt: int = 60,  # type: ignore[no-untyped-def]
                   path: Path = NGRAM, spec_outside_ms: float | None = None):
    prof = load_profile(path)
    rows = () if spec_prefill_ms is None else (_extend(60, spec_prefill_ms), _extend(240, 4 * spec_prefill_ms, 4))
    out = None if outside_ms is None else outside_ms / 1e3
    s_out = out if spec_outside_ms is None else spec_outside_ms / 1e3
    rq = RequestCosts(prompt_tokens=prompt, spec_prefill=rows, baseline_outside_s=out, spec_outside_s=s_out,
                      baseline_requests=0 if out is None else 10, spec_requests=0 if s_out is None else 10)
    return dataclasses.replace(prof, requests=rq)


def _simulate_request(*, outside_s: float, prefill_step_s: float, tokens: int, step_s: float,
                      tokens_per_step: int) -> float:
    """A tiny event simulation of one request at batch 1, written apart from model/request.py: the
    server's front end (time outside the engine's steps), one prefill step that samples the first
    token, then decode steps of ``step_s`` seconds that each emit ``tokens_per_step`` tokens; the
    clock when the last token is out."""
    clock, out = outside_s + prefill_step_s, 1
    while out < tokens:
        clock += step_s
        out += tokens_per_step
    assert out == tokens  # the request ends on a step boundary: no partial step to price
    return clock


def test_predict_request_against_an_event_simulation() -> None:
    # a forward drafter: its server's own prefill rows are its prefill (40 ms at 60 tokens, 160 ms at
    # 240: the line through them is 2/3 ms per token from 0, so 40 ms for the 60-token prompt); the
    # baseline's extend rows replaced by two hand-chosen ones, 10 ms at 60 tokens and 28 ms at 240 (8
    # steps each): b = 18 ms / 180 tokens = 0.1 ms/token, a = 10 − 6 = 4 ms, so 10 ms at 60 tokens
    prof = _with_requests(outside_ms=8.0, spec_prefill_ms=40.0, path=DRAFT)
    prof = dataclasses.replace(prof, costs=tuple(r for r in prof.costs if r.kind != "extend")
                               + (_extend(60, 10.0), _extend(240, 28.0, batch=4)))
    dec = predict(prof, DIST, OperatingPoint(batch=1))
    # 127 tokens: the prefill's first, then 126 = 42 cycles of DIST's mean 3 accepted tokens
    p = predict(prof, DIST, OperatingPoint(batch=1, request_tokens=127))
    rq = p.request
    assert rq is not None and dec.request is None
    # the decode phase is untouched by pricing the request
    assert (p.figures.speedup, p.figures.tokens_per_s) == (dec.figures.speedup, dec.figures.tokens_per_s)
    assert rq.base_prefill_s == pytest.approx(10e-3) and rq.spec_prefill_s == pytest.approx(40e-3)
    # the decode phase's own figures drive the simulation: a baseline step emits one token in
    # 1 / X_base s, a speculative cycle DIST's 3 tokens in 3 / X_spec s
    base = _simulate_request(outside_s=8e-3, prefill_step_s=10e-3, tokens=127, step_s=1.0 / p.figures.baseline_tokens_per_s,
                             tokens_per_step=1)
    spec = _simulate_request(outside_s=8e-3, prefill_step_s=40e-3, tokens=127, step_s=3.0 / p.figures.tokens_per_s,
                             tokens_per_step=3)
    assert rq.base_s == pytest.approx(base, rel=1e-9) and rq.spec_s == pytest.approx(spec, rel=1e-9)
    assert rq.speedup == pytest.approx(base / spec, rel=1e-9)
    assert rq.tokens_per_s == pytest.approx(127 / spec, rel=1e-9)
    assert p.figures.speedup < rq.speedup < 1.0  # a loss shrinks toward 1 ...
    assert rq.speedup_low <= rq.speedup <= rq.speedup_high
    assert p.measured and p.p_text != "" and "per request" in p.outcome.reason
    # ... and so does a gain; a host proposer's prefill is the baseline's (+ its lookup when measured):
    # its own prefill rows measure the same forward with their own noise
    fast = predict(_with_requests(outside_ms=8.0, spec_prefill_ms=40.0), DIST,
                   OperatingPoint(batch=1, request_tokens=128))
    frq = fast.request
    assert frq is not None and 1.0 < frq.speedup < fast.figures.speedup
    assert frq.spec_prefill_s == pytest.approx(frq.base_prefill_s)
    # its break-even accept length is above the decode phase's when the speculative side pays more
    dear = predict(_with_requests(outside_ms=8.0, spec_prefill_ms=None, spec_outside_ms=60.0), DIST,
                   OperatingPoint(batch=1, request_tokens=128))
    assert dear.figures.request_break_even_accept_tokens > dear.figures.break_even_accept_tokens


def test_a_short_request_turns_a_decode_go_into_no_go() -> None:
    # the speculative server's front end 400 ms slower per request (a fixed cost of that side only)
    prof = _with_requests(outside_ms=8.0, spec_prefill_ms=None, spec_outside_ms=400.0)
    assert predict(prof, DIST, OperatingPoint(batch=1)).outcome.verdict == "GO"
    p = predict(prof, DIST, OperatingPoint(batch=1, request_tokens=16))
    assert p.request is not None and p.request.speedup < 1.0 and p.outcome.verdict == "NO-GO"
    assert p.figures.p_speedup_gt_1 is not None and p.figures.p_speedup_gt_1 < 0.5
    assert predict(prof, DIST, OperatingPoint(batch=1,  # a long request still pays
                                              request_tokens=4096)).outcome.verdict == "GO"


def test_unmeasured_parts_are_named_and_withhold_p() -> None:
    p = predict(_with_requests(outside_ms=None, spec_prefill_ms=None, path=DRAFT), DIST,
                OperatingPoint(batch=1, request_tokens=128))
    kinds = {a.kind for a in p.outcome.assumed}
    assert {"time outside the engine's steps", "speculative prefill"} <= kinds
    assert "not measured" in p.verdict_label and p.figures.p_withheld
    assert any("specmodel vllm" in m for m in p.to_measure)


def test_profile_v4_round_trip_and_old_readers_keep_their_version() -> None:
    prof = _with_requests(outside_ms=3.0, spec_prefill_ms=9.0)
    d = profile_to_dict(prof)
    assert d["schema_version"] == 4 and d["requests"]["prompt_tokens"] == 60
    back = profile_from_dict(json.loads(json.dumps(d)), "p.json")
    assert back.requests == prof.requests
    assert profile_to_dict(load_profile(DRAFT))["schema_version"] == 2
    d["schema_version"] = 3
    with pytest.raises(SpecmodelError, match="requests: needs schema_version 4"):
        profile_from_dict(d, "p.json")
    d["schema_version"] = 4
    d["requests"]["spec_outside_s"] = float("inf")
    with pytest.raises(SpecmodelError, match="p.json: requests: spec_outside_s"):
        profile_from_dict(d, "p.json")


def test_cli_request_json_and_refusals(tmp_path: Path) -> None:
    prof = _with_requests(outside_ms=8.0, spec_prefill_ms=40.0)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(profile_to_dict(prof)))
    r = run_cli("predict", "--profile", str(path), "--accept-hist", "1:100,2:100,3:100,4:200", "--request-tokens",
                "128", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == "specmodel.prediction" and doc["request"] is not None
    req = doc["request"]
    assert req["request_tokens"] == 128 and req["prompt_tokens"] == 60
    assert req["speedup"] < doc["speedup"] and req["baseline_outside_s"] == pytest.approx(8e-3)
    text = run_cli("predict", "--profile", str(path), "--accept-len", "3", "--request-tokens", "128")
    assert text.returncode == 0 and "per request" in text.stdout and "spec " in text.stdout
    bad = run_cli("predict", "--profile", str(path), "--accept-len", "3", "--prompt-tokens", "500")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--request-tokens" in bad.stderr
    plan = run_cli("plan", "--profile", str(path), "--accept-len", "3", "--request-tokens", "64")
    assert plan.returncode == 2 and "plan prices the decode phase" in plan.stderr
    assert json.loads(run_cli("predict", "--profile", str(path), "--accept-len", "3", "--json").stdout)["request"] is None


def test_another_drafter_kind_does_not_borrow_the_profiled_servers_prefill() -> None:
    # a draft-model profile priced as ngram (--method): the draft server's prefill (its drafter over
    # the prompt) is not ngram's; ngram's prefill is the baseline's
    prof = _with_requests(outside_ms=8.0, spec_prefill_ms=40.0, path=DRAFT)
    own = predict(prof, DIST, OperatingPoint(batch=1, request_tokens=128)).request
    spec = dataclasses.replace(prof.spec, algorithm="NGRAM")
    other = predict(prof, DIST, OperatingPoint(batch=1, spec=spec, request_tokens=128)).request
    assert own is not None and other is not None
    assert own.spec_prefill_s == pytest.approx(40e-3)
    assert other.spec_prefill_s == pytest.approx(other.base_prefill_s)


def test_the_prompt_is_read_off_single_request_prefills() -> None:
    # the 14:45 run's baseline hook: 28 prefills of one 60-token prompt, 12 steps of 4 requests at
    # 181 tokens (three prompts + one decode), 4 at 240
    assert prompt_tokens_of([(1, 60, 28), (4, 181, 12), (4, 240, 4)]) == 60
    # no single-request step: tokens per request, weighted by the steps (the mixed step reads low)
    assert prompt_tokens_of([(4, 181, 12), (4, 240, 4)]) == 45
    # a v2 profile's extend rows (the draft server's run): its batch-1 row, not the rows' median (46)
    p = predict(load_profile(DRAFT), DIST, OperatingPoint(batch=1, request_tokens=64))
    assert p.request is not None and p.request.prompt_tokens == 60


def test_the_1620_runs_draft_server_per_request_within_ten_percent() -> None:
    """Validation (cited, not tuned to): the CLI benchmark's TP 1 draft_model k = 3 server of
    2026-12-03 16:20 (benchmarks/results/vllm_cli_2026-12-03_1620.json), measured by a client timing
    whole 128-token requests at batch 1 and 4; its own hook profile and server log
    (tests/data/vllm_cli_1620_tp1), predicted per request as the benchmark does."""
    run = REPO / "tests" / "data" / "vllm_cli_1620_tp1"
    res = json.loads((REPO / "benchmarks" / "results" / "vllm_cli_2026-12-03_1620.json").read_text())
    for batch in (1, 4):
        (row,) = [r for r in res["rows"] if (r["tp"], r["drafter"], r["batch"]) == (1, "draft_noisy", batch)]
        r = run_cli("predict", "--json", "--profile", str(run / "profile_draft.json"), "--accept-log",
                    str(run / "draft_noisy.log"), "--batch", str(batch), "--steps", "3", "--request-tokens", "128")
        assert r.returncode == 0, r.stderr
        doc = json.loads(r.stdout)
        rq = doc["request"]
        assert rq["speedup"] == pytest.approx(row["measured_speedup"], rel=0.10)  # 0.73x / 0.77x measured
        assert doc["verdict"] == "NO-GO"
        # the fixed cost this box measured: a 7 ms prefill (16 ms with the drafter's), 8-13 ms outside the engine
        assert rq["spec_prefill_s"] > rq["baseline_prefill_s"] > 0 and 0 < rq["baseline_outside_s"] < 0.05
