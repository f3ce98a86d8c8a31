"""``specmodel plan --engine sglang --dspark-tables DIR``: SGLang 0.5.23's DSpark step-cost table per
context band, checked by SGLang's OWN loader (``srt/speculative/dspark_components/dspark_sps.py``
``load_sps_table_from_path`` and ``SpsAdditiveCostTable.step_time``, taken from the 0.5.23 wheel:
tests/engine_wheel_cache.py) at the measured points against specmodel's cycle (within 1 %)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import specmodel.api as api
from specmodel.schema.profile import load_profile, save_profile
from tests.conftest import REFERENCE, run_cli
from tests.engine_wheel_cache import engine_module

DSPARK_SPS = "sglang/srt/speculative/dspark_components/dspark_sps.py"
LONG = 32768
GROWTH = {"decode": 1.5, "verify": 1.4, "draft": 1.2, "draft_extend": 1.2, "extend": 1.0}


@pytest.fixture(scope="module")
def sps() -> object:
    return engine_module("sglang", "0.5.23", DSPARK_SPS)


def _two_context_profile(tmp_path: Path) -> Path:
    """The reference profile plus every row again at a 32K context, each cost grown by its kind's factor."""
    p = load_profile(REFERENCE)
    longer = tuple(replace(r, context_tokens=LONG, total_s=r.total_s * GROWTH[r.kind],
                           allreduce_s=r.allreduce_s * GROWTH[r.kind], compute_s=r.compute_s * GROWTH[r.kind],
                           other_s=r.other_s * GROWTH[r.kind]) for r in p.costs if r.context_tokens == 0)
    out = tmp_path / "two-contexts"
    save_profile(replace(p, name="two-contexts", costs=p.costs + longer), out)
    return out


def test_sglangs_loader_prices_every_measured_point_as_specmodels_cycle(tmp_path: Path, sps: object) -> None:
    prof = _two_context_profile(tmp_path)
    tabs = tmp_path / "tables"
    r = run_cli("plan", "--profile", str(prof), "--accept-len", "2.8", "--engine", "sglang", "--dspark-tables",
                str(tabs), "--export", str(tmp_path / "sched.json"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert f"DSpark step-cost table, context {LONG}: {tabs / f'dspark-sps-ctx{LONG}.json'}" in r.stdout
    doc = json.loads((tmp_path / "sched.json").read_text())
    listed = doc["dspark_tables"]["tables"]
    assert [t["context_tokens"] for t in listed] == [0, LONG]
    profile = load_profile(prof)
    ndt = profile.spec.num_draft_tokens
    batches = sorted({row.batch for row in profile.rows("verify")})
    assert len(batches) >= 3
    for ctx in (0, LONG):
        table = sps.load_sps_table_from_path(str(tabs / f"dspark-sps-ctx{ctx}.json"))  # type: ignore[attr-defined]
        assert type(table).__name__ == "SpsAdditiveCostTable"  # the additive form, as the loader sniffs it
        for b in batches:
            cycle = api.predict(profile, accept=2.8, batch=b, context=ctx).costs.cycle_s
            # one step at b requests, each verifying its root + (ndt - 1) draft tokens
            assert table.step_time(num_reqs=b, budget=b * (ndt - 1)) == pytest.approx(cycle, rel=0.01), (ctx, b)
    # the user's path: `specmodel predict` at the long context prices the cycle the table gives SGLang
    r = run_cli("predict", "--profile", str(prof), "--accept-len", "2.8", "--batch", "16", "--context", "32K", "--json")
    assert r.returncode == 0, r.stderr
    long_table = sps.load_sps_table_from_path(str(tabs / f"dspark-sps-ctx{LONG}.json"))  # type: ignore[attr-defined]
    assert long_table.step_time(num_reqs=16, budget=16 * (ndt - 1)) == pytest.approx(json.loads(r.stdout)["cycle_s"],
                                                                                      rel=0.01)
    # and the long context's steps cost more than the short one's: the bands are not one table
    short = sps.load_sps_table_from_path(str(tabs / "dspark-sps-ctx0.json"))  # type: ignore[attr-defined]
    assert long_table.step_time(num_reqs=16, budget=48) > short.step_time(num_reqs=16, budget=48) * 1.2


@pytest.mark.parametrize(("engine", "message"), [
    ((), "--dspark-tables: needs --engine sglang (a table SGLang's DSpark planner reads)"),
    (("--engine", "vllm"), "--dspark-tables: needs --engine sglang (a table SGLang's DSpark planner reads)"),
])
def test_a_table_without_sglang_is_one_line(tmp_path: Path, engine: tuple[str, ...], message: str) -> None:
    r = run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", *engine, "--dspark-tables",
                str(tmp_path / "t"), cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.strip() == f"specmodel: error: {message}"
    assert not (tmp_path / "t").exists()


def test_a_cycle_resting_on_an_unmeasured_draft_writes_no_table(tmp_path: Path) -> None:
    p = load_profile(REFERENCE)
    bare = tmp_path / "no-draft"
    save_profile(replace(p, name="no-draft", costs=tuple(r for r in p.costs if r.kind not in ("draft", "draft_extend"))),
                 bare)
    r = run_cli("plan", "--profile", str(bare), "--accept-len", "2.8", "--engine", "sglang", "--dspark-tables",
                str(tmp_path / "t"), cwd=tmp_path)
    assert r.returncode == 2
    assert r.stderr.startswith("specmodel: error: DSpark table at context 0: batch 1: the cycle rests on ")
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "t").exists()
