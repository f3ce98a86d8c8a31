"""vLLM 0.34 adaptive verification's start-up table against the profile (model/adaptive.py):
the table times N = B·(k+1) one-token requests at context 8192
(vllm/v1/worker/gpu/spec_decode/adaptive_verification.py:305-327, model_runner.py:911), the real
verify is B requests of k+1 tokens at the served context. Hand-derived numbers, then the plan's text."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmodel.model.adaptive import startup_table_error
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile
from tests.conftest import run_cli

SPEC = SpecConfig(algorithm="EAGLE", steps=3, topk=1, num_draft_tokens=4)


def _row(kind: str, b: int, t: int, ms: float, ctx: int, other_ms: float = 0.0) -> CostRow:
    return CostRow(kind=kind, batch=b, tokens=t, total_s=(ms + other_ms) / 1e3, allreduce_s=0.0,
                   compute_s=ms / 1e3, other_s=other_ms / 1e3, samples=9, context_tokens=ctx)


ROWS = (
    # decode: one token per request; 16 one-token requests at context 8192 take 16 ms (the table's cell)
    _row("decode", 4, 4, 4.0, 0), _row("decode", 16, 16, 10.0, 0),
    _row("decode", 4, 4, 6.0, 8192), _row("decode", 16, 16, 16.0, 8192),
    # verify at batch 4, k = 3 (16 tokens): 8 ms at context 0, 9 ms at 8192; host work 3 ms that the table never sees
    _row("verify", 4, 16, 8.0, 0, other_ms=3.0), _row("verify", 4, 16, 9.0, 8192, other_ms=3.0),
)


def _profile() -> Profile:
    return Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=ROWS, spec=SPEC,
                   overhead_s=0.0)


def test_startup_table_error_hand_derived() -> None:
    errs = startup_table_error(_profile(), batch=4, spec=SPEC, contexts=(0, 4096, 8192))
    assert [e.tokens for e in errs] == [16, 16, 16]
    assert all(e.table_s == pytest.approx(0.016) for e in errs)  # decode(16 requests, context 8192)
    # e = 16/8 − 1 = +100 % at context 0; 16/9 − 1 = +77.8 % at 8192; the verify halfway (8.5 ms) at 4096
    assert [e.error_rel for e in errs] == [pytest.approx(1.0), pytest.approx(16 / 8.5 - 1), pytest.approx(16 / 9 - 1)]
    assert not any(e.extrapolated or e.verify_from_decode for e in errs)


def test_startup_table_agrees_where_the_shapes_cost_the_same() -> None:
    """A box where 16 one-token requests at 8192 cost what 4 × 4 tokens at 8192 do: e = 0 there."""
    rows = (_row("decode", 4, 4, 6.0, 8192), _row("decode", 16, 16, 9.0, 8192), _row("verify", 4, 16, 9.0, 8192))
    prof = Profile(name="t", source={"kind": "measured", "description": "test"}, tp=1, costs=rows, spec=SPEC,
                   overhead_s=0.0)
    (e,) = startup_table_error(prof, batch=4, spec=SPEC, contexts=(8192,))
    assert e.error_rel == pytest.approx(0.0)


def test_plan_engine_vllm_states_the_inherited_error(tmp_path: Path) -> None:
    d = tmp_path / "prof"
    d.mkdir()
    from specmodel.schema.profile import save_profile

    save_profile(_profile(), d)
    r = run_cli("plan", "--profile", str(d), "--engine", "vllm", "--accept-len", "3", "--batch", "4")
    assert r.returncode == 0, r.stderr
    text = r.stdout[r.stdout.index("vLLM adaptive verification"):]
    assert "context 0: table 16.00 ms vs verify 8.00 ms (+100%, outside ±10%)" in text
    assert "context 8192: table 16.00 ms vs verify 9.00 ms (+78%, outside ±10%)" in text
