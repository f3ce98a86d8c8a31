"""The host-proposer (ngram / suffix) cycle (specmodel.model.hostdraft).

Validation set (cited, not tuned to): a TP 1 run of benchmarks/bench_vllm_oos.py (load average
5.4-7.7), raw figures in
benchmarks/results/vllm_oos_tp1_2026-12-01_1023.json. tests/data/vllm_oos_tp1_1023/ holds that
run's own profile (hook on the baseline + draft_model noisy k=3 servers, `specmodel vllm
--summarize`: profile_base_draft_noisy.json) and the same baseline summarized with the ngram
server's hook logs (profile_base_ngram.json: its proposal time measured, 0.121 ms per step).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.model.accept import from_mean
from specmodel.model.cycle import speedup
from specmodel.model.hostdraft import host_cycle_costs, host_mean_step_s
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import is_host_proposer
from specmodel.schema.profile import load_profile
from tests.conftest import run_cli

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data" / "vllm_oos_tp1_1023"
RESULTS = REPO / "benchmarks" / "results" / "vllm_oos_tp1_2026-12-01_1023.json"
NGRAM = SpecConfig(algorithm="NGRAM", steps=3, topk=1, num_draft_tokens=4)


def mixed_speedup(accept: float, r: float, base: float, cycle: float, prop: float = 0.0) -> float:
    """The B = 1 mixture, written out here as the oracle (the model computes it through
    host_mean_step_s): (r·E[A] + 1 − r)·T_base / (r·T_cycle + (1 − r)·(T_base + T_propose))."""
    return (r * accept + 1 - r) * base / (r * cycle + (1 - r) * (base + prop))


def _row(drafter: str, batch: int) -> dict[str, float]:
    rows = json.loads(RESULTS.read_text())["rows"]
    return next(r for r in rows if r["drafter"] == drafter and r["batch"] == batch)


def test_batch1_row_rederived_from_the_profile() -> None:
    """README's hand derivation of the TP 1 ngram batch-1 row, from the profile's rows:
    verify forward at 4 tokens 4.598 ms (compute; no all-reduce at TP 1) + the baseline decode
    step's host work 1.485 ms + proposal 0 (assumed) = T_cycle 6.083 ms; T_base 3.445 ms;
    E[A] 3.111, r 0.692 (the run's counters) -> (0.692·3.111 + 0.308)·3.445 /
    (0.692·6.083 + 0.308·3.445) = 1.61x (the README: 1.60x by hand); measured 1.187x."""
    p = load_profile(DATA / "profile_base_draft_noisy.json")
    row = _row("ngram", 1)
    cc = host_cycle_costs(p, batch=1, spec=NGRAM)
    assert cc.verify.compute_s == pytest.approx(4.598e-3, abs=0.002e-3)
    assert cc.verify.other_s == pytest.approx(1.485e-3, abs=0.002e-3)  # decode's host work, not verify's 12.3 ms
    assert cc.base.total_s == pytest.approx(3.445e-3, abs=0.002e-3)
    assert cc.cycle_s == pytest.approx(6.083e-3, abs=0.005e-3)
    assert cc.draft_total_s == 0.0 and cc.draft_allreduce_s == 0.0
    sp = mixed_speedup(row["accept_tokens"], row["proposal_rate"], cc.base.total_s, cc.cycle_s, cc.overhead_s)
    assert sp == pytest.approx(1.609, abs=0.005)
    # against the live engine: +36 % (go/no-go right: both > 1); the old borrowed-step figure was 0.66x
    assert sp / row["measured_speedup"] - 1 == pytest.approx(0.355, abs=0.01)
    assert (sp > 1) == (row["measured_speedup"] > 1)


def test_the_proposal_time_is_flagged_when_no_ngram_run_was_profiled() -> None:
    p = load_profile(DATA / "profile_base_draft_noisy.json")
    pr = predict(p, from_mean(3.11, 4), OperatingPoint(batch=1, spec=NGRAM))
    assert not pr.measured
    assert [a.kind for a in pr.outcome.assumed] == ["proposal"]
    assert "proposal not measured: assumed 0 s" in pr.verdict_label
    assert "specmodel vllm" in pr.to_measure[0]
    assert pr.costs.overhead_s == 0.0
    assert "proposes on the host" in dict(pr.source.cost_sources)["draft"]


def test_an_ngram_profile_supplies_its_own_verify_host_work_and_proposal_time() -> None:
    """profile_base_ngram.json: verify at 4 tokens from the ngram run's own rows (forward 3.576 ms;
    host 3.146 ms, the weighted monotone fit over its 2/3/4-token rows 3.264/2.945/3.120 ms of
    14/3/40 steps, (14 x 3.264 + 3 x 2.945 + 40 x 3.120) / 57, costs.py's monotone rule), its median
    proposal 0.121 ms measured: T_cycle = 6.844 ms, nothing assumed."""
    p = load_profile(DATA / "profile_base_ngram.json")
    pr = predict(p, from_mean(3.11, 4), OperatingPoint(batch=1, spec=NGRAM))
    assert pr.measured and pr.outcome.assumed == ()
    assert pr.costs.overhead_s == pytest.approx(0.121e-3, abs=0.001e-3)
    host = (14 * 3.264 + 3 * 2.945 + 40 * 3.120) / 57 * 1e-3
    assert pr.costs.verify_other_s == pytest.approx(host, abs=0.002e-3)  # its own verify steps: no forward drafter
    assert pr.costs.cycle_s == pytest.approx(3.576e-3 + host + 0.121e-3, abs=0.005e-3)
    # T_cycle = verify forward + the step's host work + the lookup
    assert pr.costs.cycle_s == pytest.approx(pr.costs.verify_compute_s + pr.costs.verify_allreduce_s + pr.costs.verify_other_s + pr.costs.overhead_s,
                                       rel=1e-12)
    assert "measured ngram proposal" in dict(pr.source.cost_sources)["overhead"]


def test_draft_model_predictions_are_unchanged() -> None:
    """The forward-drafter path still uses the verify step and k drafter forwards: the
    in-sample noisy draft_model row at batch 1 stays at the results file's 0.376x, within the
    weighted monotone fit's pooling of the 1- and 2-step ramp rows (batch 2 and 3: host work 8.70 and
    11.56 ms) into the 59-step 4-token row (12.345 ms): (59 x 12.345 + 8.700 + 2 x 11.560) / 62 = 12.261 ms."""
    p = load_profile(DATA / "profile_base_draft_noisy.json")
    row = _row("draft_noisy", 1)
    spec = SpecConfig(algorithm="DRAFT_MODEL", steps=3, topk=1, num_draft_tokens=4)
    pr = predict(p, from_mean(row["accept_tokens"], 4), OperatingPoint(batch=1, spec=spec))
    assert pr.figures.speedup == pytest.approx(row["predicted_speedup"], rel=0.005)
    assert pr.costs.verify_other_s == pytest.approx((59 * 12.345 + 8.700 + 2 * 11.560) / 62 * 1e-3, abs=0.002e-3)
    assert pr.costs.cycle_s == pytest.approx(30.83e-3 - (12.345 - 12.261) * 1e-3, abs=0.01e-3)


def test_is_host_proposer() -> None:
    assert is_host_proposer("ngram") and is_host_proposer("NGRAM") and is_host_proposer("suffix")
    assert not is_host_proposer("draft_model") and not is_host_proposer("EAGLE3") and not is_host_proposer("")


@given(r=st.floats(0, 1))
def test_the_mean_step_at_batch_1_is_the_mixture_of_cycle_and_lookup_step(r: float) -> None:
    """At B = 1 host_mean_step_s is r·T_cycle + (1 − r)·(T_base + T_propose) (a profile with no
    no-proposal rows of its own: T_miss = T_base); r = 1 the cycle, r = 0 a decode that paid the lookup."""
    p = load_profile(DATA / "profile_base_ngram.json")
    cc = host_cycle_costs(p, batch=1, spec=NGRAM)
    t = host_mean_step_s(p, batch=1, spec=NGRAM, proposal_rate=r)
    assert t == pytest.approx(r * cc.cycle_s + (1 - r) * (cc.base.total_s + cc.overhead_s), rel=1e-9)
    assert mixed_speedup(3.0, 1.0, 1.0, 1.5) == pytest.approx(speedup(3.0, 1.0, 1.5), rel=1e-12)


def test_predict_cli_on_an_ngram_profile_uses_the_host_cycle() -> None:
    """`specmodel predict` takes the algorithm from the profile (NGRAM): same 6.844 ms cycle as above."""
    r = run_cli("predict", "--profile", str(DATA / "profile_base_ngram.json"), "--accept-len", "3.11", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    d = d.get("prediction", d)
    assert d["cycle_s"] == pytest.approx(6.844e-3, abs=0.005e-3)
    assert d["draft_s"] == 0.0 and d["assumed"] == []


def test_predict_takes_the_share_of_steps_that_proposed() -> None:
    """predict(proposal_rate=r) gives the mixture speedup of the benchmark's hand blend, on the
    same profile and the same row (r 0.692, E[A] 3.111 of the 10:23 run): 1.609x as above."""
    p = load_profile(DATA / "profile_base_draft_noisy.json")
    row = _row("ngram", 1)
    dist = from_mean(row["accept_tokens"], 4)
    full = predict(p, dist, OperatingPoint(batch=1, spec=NGRAM))
    mixed = predict(p, dist, OperatingPoint(batch=1, spec=NGRAM, proposal_rate=row["proposal_rate"]))
    assert mixed.figures.speedup == pytest.approx(1.609, abs=0.005)
    assert mixed.figures.speedup < full.figures.speedup  # steps without a match emit one token
    assert mixed.accept.proposal_rate == pytest.approx(0.692, abs=0.001)
    # mean step r·T_cycle + (1 − r)·T_base (proposal time 0 here)
    assert mixed.costs.mean_step_s == pytest.approx(0.692 * 6.083e-3 + 0.308 * 3.445e-3, rel=2e-3)
    # break-even stays in E[A] of the proposing steps: at it the mixture speedup is exactly 1
    be = mixed.figures.break_even_accept_tokens
    assert mixed_speedup(be, row["proposal_rate"], mixed.costs.baseline_step_s, mixed.costs.cycle_s, mixed.costs.overhead_s) == \
        pytest.approx(1.0, rel=1e-9)
    # at batch 1 with a free lookup a step that proposes nothing is itself at break-even (one token
    # in one base step), so the break-even of the proposing steps does not move with r ...
    assert be == pytest.approx(full.figures.break_even_accept_tokens, rel=1e-9)
    # ... while a lookup that costs time on every step moves it up
    ng = load_profile(DATA / "profile_base_ngram.json")  # its lookup measured: 0.121 ms per step
    assert ng.overhead_s > 0
    slow = predict(ng, dist, OperatingPoint(batch=1, spec=NGRAM, proposal_rate=row["proposal_rate"]))
    assert slow.figures.break_even_accept_tokens > predict(ng, dist, OperatingPoint(batch=1,
                                                                            spec=NGRAM)).figures.break_even_accept_tokens
    assert full.accept.proposal_rate == 1.0 and full.costs.mean_step_s == full.costs.cycle_s


def test_proposal_rate_is_refused_for_a_drafter_forward() -> None:
    from specmodel.errors import FieldError

    p = load_profile(DATA / "profile_base_draft_noisy.json")
    with pytest.raises(FieldError, match="proposal_rate"):
        predict(p, from_mean(2.0, 4), OperatingPoint(batch=1, proposal_rate=0.5))  # the profile's DRAFT_MODEL
    r = run_cli("predict", "--profile", str(DATA / "profile_base_draft_noisy.json"), "--accept-len", "2",
                "--proposal-rate", "0.5")
    assert r.returncode == 2 and "--proposal-rate" in r.stderr and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = run_cli("predict", "--profile", str(DATA / "profile_base_ngram.json"), "--accept-len", "3", "--proposal-rate", "1.5")
    assert r.returncode == 2 and "--proposal-rate" in r.stderr


def test_proposal_rate_from_the_cli_the_api_and_plan_agree() -> None:
    import specmodel

    prof = DATA / "profile_base_ngram.json"
    r = run_cli("predict", "--profile", str(prof), "--accept-len", "3.11", "--proposal-rate", "0.69", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    api = specmodel.predict(str(prof), accept=3.11, proposal_rate=0.69)
    assert d["speedup"] == pytest.approx(api.figures.speedup, rel=1e-12) and d["proposal_rate"] == 0.69
    plain = specmodel.predict(str(prof), accept=3.11)
    assert api.figures.speedup < plain.figures.speedup
    text = run_cli("predict", "--profile", str(prof), "--accept-len", "3.11", "--proposal-rate", "0.69")
    assert "69% of request-steps proposed" in text.stdout
    # the plan's default (measured) configuration at batch 1 carries the same mixture
    pl = run_cli("plan", "--profile", str(prof), "--accept-len", "3.11", "--proposal-rate", "0.69", "--json")
    assert pl.returncode == 0, pl.stderr
    cells = [c for c in json.loads(pl.stdout)["cells"] if c["batch"] == 1]
    dflt = cells[0]["default"]
    assert dflt["speedup"] == pytest.approx(api.figures.speedup, rel=1e-9)
