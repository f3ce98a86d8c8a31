"""A profile without an all-reduce split (a throughput sweep, the SGLang hook's
whole-forward timing) prints the all-reduce share as unknown everywhere — CLI, JSON, report — never 0.00 ms / 0.0 %."""
from __future__ import annotations

import json
from pathlib import Path

from specmodel.model.accept import from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.report.content import _breakdown
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile
from specmodel.schema.source import Source
from tests.conftest import run_cli

SPEC = SpecConfig(algorithm="EAGLE3", steps=3, topk=1, num_draft_tokens=4)


def _profile(allreduce_s: float) -> Profile:
    rows = [CostRow(kind=k, batch=1, tokens=t, total_s=s, allreduce_s=allreduce_s * s, compute_s=(1 - allreduce_s) * s,
                    other_s=0.0, n_allreduce=9 if allreduce_s else 0)
            for k, t, s in (("decode", 1, 0.010), ("verify", 4, 0.012), ("draft", 1, 0.001), ("draft_extend", 4, 0.001))]
    return Profile(name="p", source=Source.numbers(tp_known=True), tp=2, costs=tuple(rows), spec=SPEC)


def test_the_split_is_known_only_where_a_row_records_allreduce_time() -> None:
    assert _profile(0.5).has_allreduce_split and not _profile(0.0).has_allreduce_split
    known, unknown = (predict(_profile(f), from_mean(2.5, 4), OperatingPoint(batch=1, spec=SPEC)) for f in (0.5, 0.0))
    assert known.source.allreduce_known and not unknown.source.allreduce_known
    d = unknown.to_dict()
    assert d["cycle_allreduce_frac"] is None and d["verify_allreduce_s"] is None and d["allreduce_known"] is False
    assert known.to_dict()["cycle_allreduce_frac"] > 0
    labels = [s.label for s in _breakdown(unknown).cycle]
    assert not any(lab == "verify all-reduce" for lab in labels) and "unknown" in labels[0]
    assert any(s.label == "verify all-reduce" for s in _breakdown(known).cycle)


def test_predict_on_a_sweep_profile_says_unknown_not_zero(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("batch,context,tokens_per_s\n1,0,100\n4,0,320\n")
    r = run_cli("predict", "--baseline-sweep", str(sweep), "--verify-ms", "12", "--draft-ms", "1", "--accept-len", "2.5",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cycle_ar = [ln for ln in r.stdout.splitlines() if ln.startswith("  all-reduce ")]
    assert cycle_ar and all("unknown" in ln for ln in cycle_ar), r.stdout
    assert "0.0% of the cycle" not in r.stdout and "all-reduce 0.00 ms" not in r.stdout
    j = run_cli("predict", "--baseline-sweep", str(sweep), "--verify-ms", "12", "--draft-ms", "1", "--accept-len", "2.5",
                "--json", cwd=tmp_path)
    assert j.returncode == 0, j.stderr
    assert json.loads(j.stdout)["cycle_allreduce_frac"] is None


def test_rows_a_graph_replay_hid_the_allreduce_of_are_unknown_not_zero() -> None:
    """A TP 2 hook profile whose prefill ran eagerly (its all-reduces timed: 0.4 of 10 ms) while the
    decode, verify and draft forwards replayed CUDA graphs (the wrapper never ran: 0 recorded). At TP > 1
    every forward all-reduces, so those zeros are unseen, not zero: the cycle's split is unknown, the JSON
    says null and the all-reduce what-ifs are not available, naming the rows."""
    rows = [CostRow(kind=k, batch=1, tokens=t, total_s=s, allreduce_s=0.0, compute_s=s, other_s=0.0)
            for k, t, s in (("decode", 1, 0.010), ("verify", 4, 0.012), ("draft", 1, 0.001))]
    rows.append(CostRow(kind="extend", batch=1, tokens=64, total_s=0.010, allreduce_s=0.004, compute_s=0.006,
                        other_s=0.0, n_allreduce=9))
    prof = Profile(name="p", source=Source.numbers(tp_known=True), tp=2, costs=tuple(rows), spec=SPEC)
    assert [r.kind for r in prof.allreduce_unseen] == ["decode", "verify", "draft"]
    assert not prof.has_allreduce_split
    p = predict(prof, from_mean(2.5, 4), OperatingPoint(batch=1, spec=SPEC))
    assert not p.source.allreduce_known and p.to_dict()["cycle_allreduce_frac"] is None
    from specmodel.model.whatif import no_allreduce_split

    why = no_allreduce_split(prof)
    assert why.startswith("not available: 3 decode, verify, draft row(s) at TP 2 timed no all-reduce")
    # the same rows at TP 1 record no all-reduce because there is none: known, zero
    tp1 = Profile(name="p", source=Source.numbers(tp_known=True), tp=1, costs=tuple(rows), spec=SPEC)
    assert tp1.allreduce_unseen == () and predict(tp1, from_mean(2.5, 4), OperatingPoint(batch=1,
                                                                                         spec=SPEC)).no_allreduce
