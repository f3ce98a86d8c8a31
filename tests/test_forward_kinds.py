"""The forward-kind table (schema/phases.py) and the one judgement of a cycle's costs (CycleCosts):
every consumer reads them; "measured" has one definition."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.engines.sglang import targets as sgtargets
from specmodel.model.accept import from_mean, from_per_position
from specmodel.model.costs import FALLBACK
from specmodel.model.cyclecost import cycle_costs
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import accept_model, evaluate, evaluate_all, optimize
from specmodel.model.predict import predict
from specmodel.model.serveplan import serve_plan
from specmodel.profile.plan import sweep_points
from specmodel.schema import phases
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import load_profile
from specmodel.schema.shapes import ModelShape
from specmodel.trace.kineto import IngestOptions
from tests.conftest import REFERENCE

REF = load_profile(REFERENCE)


def test_the_table_is_the_vocabulary() -> None:
    assert phases.FORWARD_KINDS == tuple(k.name for k in phases.KIND_TABLE)
    assert phases.CYCLE_KINDS == ("decode", "verify", "draft", "draft_extend")
    assert set(phases.DRAFT_KINDS) == {"draft", "draft_extend"}
    assert set(phases.TARGET_KINDS) == {"decode", "verify", "extend"}
    assert FALLBACK == {"verify": "decode", "draft_extend": "draft"}  # the cost model reads the table's
    for k in phases.KIND_TABLE:  # a fallback is a measured kind of the same model
        if k.fallback:
            assert phases.KIND[k.fallback].model == k.model and phases.KIND[k.fallback].fallback is None


@given(st.integers(1, 64), st.integers(1, 8), st.integers(1, 8))
def test_tokens_per_forward_follow_the_configuration(batch: int, steps: int, topk: int) -> None:
    ndt = phases.default_num_draft_tokens(steps, topk)
    spec = SpecConfig(steps=steps, topk=topk, num_draft_tokens=ndt)
    assert phases.forward_tokens("decode", batch, spec) == batch
    assert phases.forward_tokens("verify", batch, spec) == batch * ndt
    assert phases.forward_tokens("draft", batch, spec) == batch * topk
    assert phases.forward_tokens("draft_extend", batch, spec) == batch * ndt
    # the ingest reader asks the same table
    opts = IngestOptions(num_draft_tokens=ndt, topk=topk)
    for kind in phases.CYCLE_KINDS:
        assert opts.tokens(kind, batch) == phases.forward_tokens(kind, batch, spec)
    # the shallowest tree that holds ndt - 1 drafts never exceeds the steps that produced them
    assert 1 <= phases.draft_steps(ndt, topk) <= steps


def test_default_draft_tokens_is_one_rule() -> None:
    # SGLang resets num_draft_tokens to steps + 1 at topk 1 (server_args.py)
    assert [phases.default_num_draft_tokens(s, 1) for s in (1, 3, 5)] == [2, 4, 6]
    assert phases.default_num_draft_tokens(3, 4) == 8 and phases.default_num_draft_tokens(1, 2) == 3
    assert phases.default_num_draft_tokens(3, 4, tree_cap=6) == 6


def test_sweep_points_take_tokens_from_the_table() -> None:
    pts = sweep_points(kinds=phases.CYCLE_KINDS, batches=(1, 4), verify_tokens=(2, 4), topk=2, num_draft_tokens=5)
    by = {(p.kind, p.batch): p.per_request for p in pts if not (p.kind == "verify" and p.batch == 1)}
    assert by == {("decode", 1): 1, ("decode", 4): 1, ("verify", 4): 5, ("draft", 1): 2, ("draft", 4): 2,
                  ("draft_extend", 1): 5, ("draft_extend", 4): 5}
    assert sorted(p.per_request for p in pts if p.kind == "verify" and p.batch == 1) == [2, 4]
    assert {p.model for p in pts if p.kind.startswith("draft")} == {"drafter"}


def test_collectives_per_forward() -> None:
    assert phases.collectives_per_forward("decode", 61) == phases.collectives_per_forward("verify", 61) == 123
    assert phases.collectives_per_forward("draft", 61) == phases.collectives_per_forward("draft_extend", 61) == 3
    shape = ModelShape(name="m", family="f", model_type="t", architecture="a", hidden_size=8, num_layers=4,
                       vocab_size=16, num_heads=2, num_kv_heads=2, head_dim=4, intermediate_size=16)
    assert shape.allreduce_per_forward == 9


def test_sglang_modes_one_map_for_the_hook_and_the_trace_reader() -> None:
    # the hook's ForwardMode map and the trace reader's step-span map are the same table now (they
    # disagreed: the reader did not know MIXED / SPLIT_PREFILL, the hook did not know VERIFY / DRAFT)
    for mode, kind in phases.SGLANG_MODE_KINDS.items():
        if mode != "DECODE":
            assert sgtargets.MODE_PHASES[mode] == kind
    assert sgtargets.MODE_PHASES["IDLE"] is None and "DECODE" not in sgtargets.MODE_PHASES
    assert phases.SGLANG_MODE_KINDS["TARGET_VERIFY"] == "verify"
    assert phases.SGLANG_MODE_KINDS["DRAFT_EXTEND_V2"] == "draft_extend"


def _with_short_draft_extend() -> object:
    """The reference profile plus draft_extend rows that stop at 4 tokens (batch 1 x 4)."""
    de = CostRow(kind="draft_extend", batch=1, tokens=4, total_s=0.9e-3, allreduce_s=0.6e-3, compute_s=0.3e-3)
    return dataclasses.replace(REF, costs=(*REF.costs, de))


def test_measured_has_one_definition_draft_extend_included() -> None:
    # predict says draft_extend is extrapolated at batch 4 (16 tokens > measured 4); an optimizer
    # re-deriving the check without draft_extend would call it measured
    prof = _with_short_draft_extend()
    spec = SpecConfig(steps=3, topk=1, num_draft_tokens=4)
    cc = cycle_costs(prof, batch=4, spec=spec)  # type: ignore[arg-type]
    assert any(e.kind == "draft_extend" for e in cc.extrapolations) and not cc.measured
    p = predict(prof, from_mean(3.0, 3), OperatingPoint(batch=4, spec=spec))  # type: ignore[arg-type]
    assert any(e.kind == "draft_extend" and e.requested == 16 for e in p.outcome.extrapolated)
    assert any("draft_extend cost is extrapolated" in w for w in p.outcome.warnings)
    rates = [0.8, 0.6, 0.45]
    model = accept_model(from_per_position(rates), rates=rates, max_steps=8)  # measured to depth 3
    c = evaluate(prof, model, batch=4, steps=3, topk=1, num_draft_tokens=4)  # type: ignore[arg-type]
    assert c.cost_extrapolated and not c.measured
    same = next(x for x in evaluate_all(prof, model, batch=4) if x.key == (3, 1, 4))  # type: ignore[arg-type]
    assert same.cost_extrapolated and not same.measured
    # so nothing at batch 4 is recommended (every ndt >= 2 verifies > 4 draft_extend tokens), while
    # the same acceptance on the profile without those rows recommends (3, 1, 4)
    assert optimize(prof, model, batch=4, default=spec).recommended is None  # type: ignore[arg-type]
    ref = optimize(REF, model, batch=4, default=spec)
    assert ref.recommended is not None and ref.recommended.key == (3, 1, 4)
    # at batch 1, 4 draft tokens are inside the measured draft_extend range: recommendable
    one = evaluate(prof, model, batch=1, steps=3, topk=1, num_draft_tokens=4)  # type: ignore[arg-type]
    assert one.measured and cycle_costs(prof, batch=1, spec=spec).measured  # type: ignore[arg-type]


def test_assumed_is_decided_by_cycle_costs_and_read_by_the_optimizer_and_plan() -> None:
    no_verify = dataclasses.replace(REF, costs=tuple(r for r in REF.costs if r.kind != "verify"))
    spec = SpecConfig(steps=3, topk=1, num_draft_tokens=4)
    cc = cycle_costs(no_verify, batch=2, spec=spec, context_tokens=0)
    assert [(a.kind, a.fallback, a.tokens) for a in cc.assumptions] == [("verify", "decode", 8.0)]
    assert cc.assumed and not cc.extrapolated and not cc.measured
    assert cycle_costs(REF, batch=2, spec=spec).measured  # the reference has verify rows: measured
    model = accept_model(from_mean(3.0, 3), max_steps=8)
    c = evaluate(no_verify, model, batch=2, steps=3, topk=1, num_draft_tokens=4)
    assert c.cost_assumed and not c.cost_extrapolated and not c.measured
    plan = serve_plan(no_verify, model, batches=(1, 2), contexts=(0,), default=spec)
    assert all(cell.region == "ASSUMED" and cell.recommended is None for cell in plan.cells)
    ok = serve_plan(REF, model, batches=(1, 2), contexts=(0,), default=spec)
    assert all(cell.region == "measured" for cell in ok.cells)


def test_unknown_kind_names_itself() -> None:
    from specmodel.errors import SpecmodelError

    with pytest.raises(SpecmodelError, match="forward kind: unknown 'prefill'"):
        phases.kind("prefill")
