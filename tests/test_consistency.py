"""Inputs that contradict each other never become a verdict (model/consistency.py).

Each check is exercised on a profile built so that exactly one contradiction holds, with the
numbers worked out by hand, and on the project's own recording of a loaded box
(tests/data/vllm_cpu_032: the baseline server ran with load average ~11, so its decode step,
36 ms median, costs five times the speculative server's 4-token verify step, ~7 ms).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

import specmodel
from specmodel.errors import SpecmodelError
from specmodel.model.accept import from_mean
from specmodel.model.costs import forward_cost
from specmodel.model.inconsistency import Inconsistency, median_se_s
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict, require_consistent
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "vllm_cpu_032"
SPEC = SpecConfig(algorithm="EAGLE3", steps=3, topk=1, num_draft_tokens=4)


def _row(kind: str, b: int, t: int, total_ms: float, *, iqr_ms: float = 0.0, n: int = 1) -> CostRow:
    s = total_ms / 1e3
    return CostRow(kind=kind, batch=b, tokens=t, total_s=s, allreduce_s=0.0, compute_s=s, other_s=0.0,
                   spread_s=iqr_ms / 1e3, samples=n)


def _profile(decode_ms: float, verify_ms: float, *, iqr_ms: float = 0.0, n: int = 1,
             extra: tuple[CostRow, ...] = ()) -> Profile:
    rows = (_row("decode", 1, 1, decode_ms, iqr_ms=iqr_ms, n=n), _row("verify", 1, 4, verify_ms, iqr_ms=iqr_ms, n=n),
            _row("draft", 1, 1, 0.2), *extra)
    return Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=rows, spec=SPEC,
                   overhead_s=1e-4)


def _checks(p: object) -> list[str]:
    return [i.check for i in p.outcome.inconsistencies]  # type: ignore[attr-defined]


def test_verify_cheaper_than_decode_refuses_with_both_numbers() -> None:
    p = predict(_profile(36.0, 7.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC))
    assert p.outcome.verdict == "INCONSISTENT" and not p.consistent
    assert "verify_below_decode" in _checks(p) and "break_even_below_one" in _checks(p)
    assert "verify 7.00 ms over 4 tokens" in p.outcome.reason and "decode step 36.00 ms over 1 token" in p.outcome.reason
    assert p.p_text.startswith("not given") and p.to_dict()["p_speedup_gt_1"] is None
    assert p.verdict_label == "INCONSISTENT"
    with pytest.raises(SpecmodelError, match="inconsistent inputs: verify 7.00 ms"):
        specmodel.predict(_profile(36.0, 7.0), accept=3.0)
    loose = specmodel.predict(_profile(36.0, 7.0), accept=3.0, strict=False)
    assert loose.outcome.verdict == "INCONSISTENT"


def test_a_verify_within_noise_of_decode_is_not_a_contradiction() -> None:
    # 10 % tolerance of the larger: 9.5 ms against 10 ms is noise, 8.5 ms is not (0.10 x 10 = 1.0 ms)
    assert "verify_below_decode" not in _checks(predict(_profile(10.0, 9.5), from_mean(3.0, 4),
                                                        OperatingPoint(spec=SPEC)))
    assert "verify_below_decode" in _checks(predict(_profile(10.0, 8.5), from_mean(3.0, 4), OperatingPoint(spec=SPEC)))
    # the same 1.5 ms gap with noisy medians: IQR 10 ms over 9 steps -> SE = 1.253 * 10/1.349 / 3 = 3.10 ms each,
    # two SE of the difference = 8.76 ms + 1.0 ms > 1.5 ms: not a contradiction
    row = _row("decode", 1, 1, 10.0, iqr_ms=10.0, n=9)
    assert median_se_s(row) == pytest.approx(1.253 * 10e-3 / 1.349 / 3, rel=1e-9)
    assert "verify_below_decode" not in _checks(predict(_profile(10.0, 8.5, iqr_ms=10.0, n=9), from_mean(3.0, 4),
                                                        OperatingPoint(spec=SPEC)))


def test_break_even_below_one_from_plain_numbers_is_refused(tmp_path: Path) -> None:
    # baseline 10 tok/s = 100 ms a step; a 20 ms verify + 3 x 1 ms draft: break-even 0.23 tokens/step
    r = run_cli("predict", "--baseline-tps", "10", "--verify-ms", "20", "--draft-ms", "1", "--accept-len", "2",
                cwd=tmp_path)
    assert r.returncode == 2 and r.stdout == ""
    line = r.stderr.strip().splitlines()
    assert len(line) == 1 and "inconsistent inputs:" in line[0] and "Traceback" not in r.stderr
    assert "20.00 ms" in line[0] and "100.00 ms" in line[0] and "your flag --verify-ms 20" in line[0]


def test_running_max_override_is_shown_and_qualifies() -> None:
    # verify at 8 tokens measured 5 ms, cheaper than the 4-token verify's 8 ms, one step each: the
    # monotone fit pools the two into their mean, 6.5 ms at both (a forward over more tokens never costs less)
    extra = (_row("decode", 2, 2, 4.2), _row("verify", 2, 8, 5.0), _row("draft", 2, 2, 0.3))
    prof = _profile(4.0, 8.0, extra=extra)
    assert forward_cost(prof, "verify", 8).total_s == pytest.approx(6.5e-3)
    assert forward_cost(prof, "verify", 4).total_s == pytest.approx(6.5e-3)
    p = predict(prof, from_mean(3.0, 4), OperatingPoint(batch=2, spec=SPEC))
    assert p.consistent and _checks(p) == ["running_max"]
    assert p.costs.verify_s == pytest.approx(6.5e-3)
    assert "verify at 8 tokens: measured 5.00 ms, used 6.50 ms (monotone fit: 4 tokens measured 8.00 ms" \
        in p.verdict_label
    assert p.figures.p_withheld and any("re-measure verify at 8 and 4 tokens" in m for m in p.to_measure)
    # weighted by the steps behind each: 10 steps at 8 ms against 200 at 5 ms pool to
    # (10·8 + 200·5) / 210 = 5.143 ms; the running max carried the 10-step row's 8 ms to the 200-step one
    heavy = dataclasses.replace(prof, costs=(_row("decode", 1, 1, 4.0, n=200), _row("verify", 1, 4, 8.0, n=10),
                                             _row("draft", 1, 1, 0.2), _row("decode", 2, 2, 4.2, n=200),
                                             _row("verify", 2, 8, 5.0, n=200), _row("draft", 2, 2, 0.3)))
    assert forward_cost(heavy, "verify", 8).total_s == pytest.approx((10 * 8.0 + 200 * 5.0) / 210 * 1e-3, rel=1e-9)
    # a dip inside the tolerance is the surface's business, not a finding
    small = _profile(4.0, 8.0, extra=(_row("decode", 2, 2, 4.2), _row("verify", 2, 8, 7.5), _row("draft", 2, 2, 0.3)))
    assert predict(small, from_mean(3.0, 4), OperatingPoint(batch=2, spec=SPEC)).outcome.inconsistencies == ()
    # the 3 ms dip of noisy medians (IQR 6 ms over 4 steps each: SE 2.79 ms, two SE of the difference 7.9 ms)
    noisy = (_row("decode", 2, 2, 4.2), _row("verify", 2, 8, 5.0, iqr_ms=6.0, n=4), _row("draft", 2, 2, 0.3))
    prof_noisy = dataclasses.replace(prof, costs=(_row("decode", 1, 1, 4.0), _row("verify", 1, 4, 8.0, iqr_ms=6.0, n=4),
                                                  _row("draft", 1, 1, 0.2), *noisy))
    assert predict(prof_noisy, from_mean(3.0, 4), OperatingPoint(batch=2, spec=SPEC)).outcome.inconsistencies == ()


def test_inconsistency_vocabulary_is_closed() -> None:
    with pytest.raises(ValueError):
        Inconsistency(check="nope", severity="refuse", message="m", to_measure="t")
    with pytest.raises(ValueError):
        Inconsistency(check="running_max", severity="maybe", message="m", to_measure="t")


def test_consistent_profile_keeps_its_plain_verdict() -> None:
    p = predict(_profile(10.0, 12.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC))
    # by hand: a cycle is the 12 ms verify + 3 draft steps of 0.2 ms + 0.1 ms overhead = 12.7 ms for
    # 3 tokens, 236.2 tok/s against the 10 ms decode step's 100 tok/s: 2.362x, far past GO's 1.10x
    assert p.figures.speedup == pytest.approx(2.36220, rel=1e-5)
    assert p.consistent and p.outcome.inconsistencies == () and p.outcome.verdict == "GO"
    assert not p.figures.p_withheld and p.figures.p_speedup_gt_1 is not None and p.p_text == f"{p.figures.p_speedup_gt_1:.2f}"


def test_tp1_all_reduce_is_none_not_unknown() -> None:
    p = predict(_profile(10.0, 12.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC))
    assert p.no_allreduce and p.source.allreduce_known and p.allreduce_word == "none (TP 1)"
    assert dict(p.source.cost_sources)["all-reduce"].startswith("none: TP 1")


@pytest.fixture(scope="module")
def messy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("messy") / "messy"
    r = run_cli("vllm", "--summarize", str(DATA / "tp1_none" / "hook"), "--summarize", str(DATA / "tp1_ngram" / "hook"),
                "-o", str(out))
    assert r.returncode == 0, r.stderr
    return out


def test_the_loaded_box_recording_is_refused_by_predict(messy: Path, tmp_path: Path) -> None:
    r = run_cli("predict", "--profile", str(messy), "--accept-log", str(DATA / "tp1_ngram" / "server.log"), cwd=tmp_path)
    assert r.returncode == 2, r.stdout
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specmodel: error: inconsistent inputs:")
    # the loaded baseline's step, named; the verify is its 13 steps at 4 tokens pooled with the 6 dearer
    # ones at 2 tokens by the monotone fit: (6 x 7.45 + 13 x 6.12) / 19 = 6.54 ms
    assert "decode step 44.03 ms" in err[0] and "verify 6.54 ms" in err[0]
    j = run_cli("predict", "--json", "--profile", str(messy), "--accept-len", "2.97", cwd=tmp_path)
    assert j.returncode == 2 and j.stdout == ""


def test_a_log_of_another_method_is_refused_then_repriced_on_purpose(messy: Path, tmp_path: Path) -> None:
    log = str(DATA / "tp1_draft_model" / "server.log")
    r = run_cli("predict", "--profile", str(messy), "--accept-log", log, cwd=tmp_path)
    assert r.returncode == 2 and "ran draft_model" in r.stderr and "measured ngram" in r.stderr
    assert "--method draft_model" in r.stderr
    bad = run_cli("predict", "--profile", str(messy), "--accept-log", log, "--method", "ngram", cwd=tmp_path)
    assert bad.returncode == 2 and "contradicts the log" in bad.stderr


def test_method_reprices_with_the_assumption_named(tmp_path: Path) -> None:
    # an ngram-free forward profile priced as ngram: no drafter, the lookup assumed 0 s and said
    prof = _profile(10.0, 12.0)
    p = specmodel.predict(prof, accept=2.5, method="ngram")
    assert p.costs.draft_s == 0.0 and any(a.kind == "proposal" for a in p.outcome.assumed) and p.figures.p_withheld
    # priced as draft_model from an EAGLE3 profile: the EAGLE3 drafter's forward stands in, named
    q = specmodel.predict(prof, accept=2.5, method="draft_model")
    assert q.costs.draft_s > 0 and any("eagle3 drafter's measured forward" in a.label for a in q.outcome.assumed)
    with pytest.raises(SpecmodelError, match="method"):
        specmodel.predict(prof, accept=2.5, method="medusa-9")


def test_k_below_the_profiled_k_interpolates_from_decode() -> None:
    # k = 1 (verify 2 tokens) from a k = 3 profile: between decode (10 ms, 1 token) and verify (12 ms, 4 tokens)
    prof = _profile(10.0, 12.0)
    p = specmodel.predict(prof, accept=1.8, steps=1)
    assert p.outcome.extrapolated == () and p.costs.verify_s == pytest.approx(10e-3 + (2 - 1) / (4 - 1) * 2e-3)


@pytest.mark.slow  # renders PDFs
def test_report_writes_the_pdf_for_the_contradiction(messy: Path, tmp_path: Path) -> None:
    pdf = tmp_path / "messy.pdf"
    r = run_cli("report", "--profile", str(messy), "--accept-len", "2.97", "-o", str(pdf), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert pdf.stat().st_size > 10_000
    doc = json.loads((tmp_path / "messy.json").read_text())
    pred = doc["prediction"]
    assert pred["verdict"] == "INCONSISTENT" and pred["consistent"] is False
    assert pred["p_speedup_gt_1"] is None and pred["inconsistencies"][0]["severity"] == "refuse"
    assert "verdict      INCONSISTENT: no verdict:" in r.stdout
    assert "none: the inputs contradict each other" in r.stdout


def test_dataclass_replace_keeps_checks_frozen() -> None:
    p = predict(_profile(36.0, 7.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC))
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.outcome.inconsistencies = ()  # type: ignore[misc]


def test_the_same_decode_forward_measured_twice_must_agree(messy: Path) -> None:
    from specmodel.schema.costrows import HostProposer

    # the loaded recording: the baseline's decode forward 14.46 ms against the ngram server's own 2.79 ms
    p = specmodel.predict(str(messy), accept=2.97, strict=False)
    dis = [i for i in p.outcome.inconsistencies if i.check == "decode_disagrees"]
    assert dis and dis[0].refuses and "14.46 ms" in dis[0].message and "2.79 ms" in dis[0].message

    def with_spec_decode(fwd_ms: float) -> Profile:
        row = dataclasses.replace(_row("decode", 1, 1, fwd_ms + 2.0, n=20), compute_s=fwd_ms / 1e3, other_s=2e-3)
        hp = HostProposer(method="ngram", proposal_rate=0.5, request_steps=40, proposed_request_steps=20,
                          lookup_s=1e-4, lookup_steps=40, decode=(row,))
        return dataclasses.replace(_profile(10.0, 12.0), host_proposer=hp)

    # same forward (10 ms), the speculative step's host work 2 ms more: agrees; a 5 ms forward does not
    assert "decode_disagrees" not in _checks(predict(with_spec_decode(10.0), from_mean(3.0, 4),
                                                     OperatingPoint(spec=SPEC)))
    cheap = predict(with_spec_decode(5.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC))
    (i,) = [i for i in cheap.outcome.inconsistencies if i.check == "decode_disagrees"]
    assert i.refuses and not cheap.consistent  # the baseline dearer: a false GO in the making

    # the speculative server dearer (14 ms against 10 ms; 20 steps each, no spread: 40 % > the 25 % bound):
    # the verdict stands, qualified with both numbers, and P(speedup > 1) is withheld
    dear = predict(with_spec_decode(14.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC))
    (q,) = [i for i in dear.outcome.inconsistencies if i.check == "decode_disagrees"]
    # the EAGLE cycle is the consistent profile's (12.7 ms for 3 tokens against a 10 ms decode step:
    # 2.362x); its band's low end stays above 1, so the rule still says GO without P
    assert not q.refuses and dear.consistent and dear.outcome.verdict == "GO"
    assert dear.figures.speedup == pytest.approx(2.36220, rel=1e-5) and dear.figures.speedup_low > 1.0
    assert "10.00 ms" in q.message and "14.00 ms" in q.message and "40%" in q.message
    assert "speculative forwards dearer" in dear.verdict_label and "costs replaced" not in dear.verdict_label
    assert dear.p_text.startswith("not given (the two servers' same forward disagrees")
    # inside the bound (12 ms: 20 %) nothing is said
    assert "decode_disagrees" not in _checks(predict(with_spec_decode(12.0), from_mean(3.0, 4),
                                                     OperatingPoint(spec=SPEC)))


def test_extrapolated_curves_that_cross_are_refused_as_a_failed_extrapolation() -> None:
    """Measured at batches 1 and 4 only: decode 4 -> 6 ms (1 -> 4 tokens), verify 7 -> 7.2 ms
    (4 -> 16 tokens). At batch 8 (one doubling: allowed) both are lines through the top half of the
    measured range: decode 6 + 4 x (2 / 3) = 8.67 ms, verify at 32 tokens 7.2 + 16 x (0.2 / 12) =
    7.47 ms -- they cross by 1.2 ms, beyond 10 % of 8.67 (0.87), which no recording says (at batch 4
    verify is dearer). A forward over more tokens cannot cost less: the extrapolation failed, so no
    figure is given there (refused, named as beyond the measured range, not as two recordings that
    contradict each other). At batch 16 (4x the largest measured batch) nothing is extrapolated at all."""
    rows = (_row("decode", 1, 1, 4.0), _row("decode", 4, 4, 6.0), _row("verify", 1, 4, 7.0),
            _row("verify", 4, 16, 7.2), _row("draft", 1, 1, 0.2), _row("draft", 4, 4, 0.3))
    prof = Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=rows, spec=SPEC,
                   overhead_s=1e-4)
    p = predict(prof, from_mean(3.0, 4), OperatingPoint(batch=8, spec=SPEC))
    cross = next(i for i in p.outcome.inconsistencies if i.check == "verify_below_decode")
    assert cross.severity == "refuse" and cross.beyond_range
    assert cross.message.startswith("extrapolated costs cross: verify 7.47 ms over 32 tokens"), cross.message
    assert "decode step 8.67 ms" in cross.message
    assert p.outcome.verdict == "INCONSISTENT" and not p.consistent
    with pytest.raises(SpecmodelError, match=r"^beyond the measured range: extrapolated costs cross"):
        require_consistent(p)
    far = predict(prof, from_mean(3.0, 4), OperatingPoint(batch=16, spec=SPEC))
    assert far.outcome.verdict == "INCONSISTENT" and far.outcome.inconsistencies[0].check == "beyond_range"
    assert far.outcome.inconsistencies[0].message.startswith("batch 16 is 4x the largest measured (4)")
    # inside the measured range the same kind of contradiction still refuses
    assert predict(_profile(36.0, 7.0), from_mean(3.0, 4), OperatingPoint(spec=SPEC)).outcome.verdict == "INCONSISTENT"
