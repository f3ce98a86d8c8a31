"""Engine-native schedules (model/schedule.py, ``plan --engine``): the plan's per-batch decisions
encoded as vLLM 0.32's ``num_speculative_tokens_per_batch_size`` and SGLang 0.5.23's adaptive
config, held to the rules of those sources (cited per test)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.commands.plan_schedule import check_document
from specmodel.engines.sglang import spec as S
from specmodel.engines.vllm import spec as V
from specmodel.errors import SpecmodelError
from specmodel.model import schedule as sch
from specmodel.model.optimize import Candidate
from specmodel.model.serveplan import PlanCell
from specmodel.schema import formats
from tests.conftest import REFERENCE, run_cli


def cand(batch: int, *, steps: int, speedup: float, topk: int = 1) -> Candidate:
    ndt = steps * topk + 1
    return Candidate(steps=steps, topk=topk, num_draft_tokens=ndt, batch=batch, accept_tokens=2.0, draft_s=0.001,
                     verify_s=0.01, overhead_s=0.0, cycle_s=0.011, baseline_tokens_per_s=100.0 * batch,
                     tokens_per_s=100.0 * batch * speedup, speedup=speedup, cost_extrapolated=False,
                     accept_extrapolated=False)


def cells(decisions: list[int | None], context: int = 0) -> list[PlanCell]:
    """decisions[b-1]: k > 0 speculate with a k-step chain, 0 measured off, None unmeasured."""
    out = []
    for b, k in enumerate(decisions, start=1):
        rec = None if k is None else (cand(b, steps=k, speedup=1.2) if k > 0 else cand(b, steps=1, speedup=0.9))
        dflt = cand(b, steps=3, speedup=1.0)
        out.append(PlanCell(batch=b, context_tokens=context, recommended=rec, best_any=rec or dflt, default=dflt))
    return out


def test_decisions_become_inclusive_ranges_with_the_unmeasured_tail_off() -> None:
    s = sch.batch_schedule(cells([3, 3, 2, 0, 0]), max_batch=256)
    assert [(r.start, r.end, r.k, r.basis) for r in s.ranges] == [
        (1, 2, 3, sch.MEASURED_SPECULATE), (3, 3, 2, sch.MEASURED_SPECULATE), (4, 5, 0, sch.MEASURED_OFF),
        (6, 256, 0, sch.UNMEASURED_OFF)]
    assert s.max_k == 3 and s.switch_off_above == 3
    cfg = V.speculative_config(s, {"method": "eagle3", "model": "d", "num_speculative_tokens": 9})
    assert cfg == {"method": "eagle3", "model": "d", "num_speculative_tokens": 3,
                   "num_speculative_tokens_per_batch_size": [[1, 2, 3], [3, 3, 2], [4, 5, 0], [6, 256, 0]]}


def test_a_marginal_batch_keeps_its_k_where_k0_still_runs_the_drafter() -> None:
    # speculate at 1-2, marginal (1.05x) at 3-4, off (0.9x) at 5. vLLM's draft_model / EAGLE run the
    # drafter's forward at k = 0 (tests/test_schedule_k0_live.py), so k = 0 at 3-4 would cost a decode
    # plus a forward (< 1.00x): worse than keeping k (1.05x) and than no speculation (1.00x)
    cs = cells([3, 3, 0, 0, 0])
    for b in (3, 4):
        rec = cand(b, steps=2, speedup=1.05)
        cs[b - 1] = PlanCell(batch=b, context_tokens=0, recommended=rec, best_any=rec, default=cs[b - 1].default)
    plain = sch.batch_schedule(cs, max_batch=5)
    assert [(r.start, r.end, r.k, r.basis) for r in plain.ranges] == [
        (1, 2, 3, sch.MEASURED_SPECULATE), (3, 4, 0, sch.MEASURED_MARGINAL), (5, 5, 0, sch.MEASURED_OFF)]
    kept = sch.batch_schedule(cs, max_batch=5, k0_runs_drafter=True)
    assert [(r.start, r.end, r.k, r.basis) for r in kept.ranges] == [
        (1, 2, 3, sch.MEASURED_SPECULATE), (3, 4, 2, sch.MEASURED_MARGINAL_KEPT), (5, 5, 0, sch.MEASURED_OFF)]
    assert kept.ranges[1].speedup_min == pytest.approx(1.05)
    # no batch speculates: the engine starts without speculation, which no k = 0 cost touches
    marginal = [PlanCell(batch=b, context_tokens=0, recommended=c.recommended, best_any=c.best_any, default=c.default)
                for b, c in enumerate(cs[2:4], start=1)]
    only_marginal = sch.batch_schedule(marginal, max_batch=2, k0_runs_drafter=True)
    assert only_marginal.max_k == 0 and V.speculative_config(only_marginal, {"method": "eagle3"}) is None
    assert sch.context_schedules(cs, max_batch=5, k0_runs_drafter=True)[0].ranges == kept.ranges


def test_one_k_everywhere_is_a_static_config_and_all_off_is_no_config() -> None:
    # measured to the engine's limit: no tail, one k -> plain num_speculative_tokens (vLLM's dynamic
    # path also stops padding decode requests to a uniform draft length, scheduler.py)
    s = sch.batch_schedule(cells([2, 2, 2]), max_batch=3)
    assert V.speculative_config(s, {"method": "ngram"}) == {"method": "ngram", "num_speculative_tokens": 2}
    assert s.switch_off_above is None
    off = sch.batch_schedule(cells([0, 0]), max_batch=8)
    assert off.switch_off_above == 0
    assert V.speculative_config(off, {"method": "ngram"}) is None
    assert S.adaptive_config(off) is None


def test_sglang_adaptive_config_pins_each_range_start_to_its_k() -> None:
    # adaptive_spec_params.py: keys are batch sizes as strings, the slot is the largest key <= batch,
    # one candidate never moves; 0 disables drafting; --speculative-num-steps must be a candidate
    s = sch.batch_schedule(cells([3, 3, 1, 0]), max_batch=4)
    assert S.adaptive_config(s) == {"1": {"candidate_steps": [3]}, "3": {"candidate_steps": [1]},
                                             "4": {"candidate_steps": [0]}}
    flags = S.adaptive_flags(s, "EAGLE3", "a.json")
    assert flags is not None and "--speculative-num-steps 3" in flags and "--speculative-eagle-topk 1" in flags
    assert S.static_flags(s.ranges[-1], "EAGLE3") is None


def test_plan_cells_must_be_dense_one_context_and_chains_for_vllm() -> None:
    with pytest.raises(SpecmodelError, match="every batch from 1"):
        sch.batch_schedule([c for c in cells([3, 3, 3]) if c.batch != 2], max_batch=8)
    with pytest.raises(SpecmodelError, match="one context"):
        sch.batch_schedule(cells([3]) + cells([3, 3], context=4096)[1:], max_batch=8)
    tree = [PlanCell(batch=1, context_tokens=0, recommended=cand(1, steps=2, topk=2, speedup=1.3),
                     best_any=cand(1, steps=2, topk=2, speedup=1.3), default=cand(1, steps=3, speedup=1.0))]
    with pytest.raises(SpecmodelError, match="chains"):
        sch.batch_schedule(tree, max_batch=8)
    assert sch.batch_schedule(tree, max_batch=8, chains_only=False).ranges[0].topk == 2


def test_context_bands_run_to_the_next_measured_context() -> None:
    scheds = sch.context_schedules(cells([3, 0]) + cells([1, 0], context=32768), max_batch=2)
    assert [(s.context_tokens, s.until_tokens, s.max_k) for s in scheds] == [(0, 32768, 3), (32768, None, 1)]
    doc = {"bands": [s.to_dict() for s in scheds]}
    assert sch.band_for(doc, 100)["context_tokens"] == 0
    assert sch.band_for(doc, 40000)["context_tokens"] == 32768


def _vllm_dynamic_utils() -> ModuleType | None:
    """vLLM's own schedule module (pure Python, no imports), loaded from the installed package."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "v1" / "spec_decode" / "dynamic" / "utils.py"
    if not path.is_file():
        return None
    mspec = importlib.util.spec_from_file_location("_vllm_dynamic_sd_utils", path)
    assert mspec is not None and mspec.loader is not None
    mod = importlib.util.module_from_spec(mspec)
    mspec.loader.exec_module(mod)
    return mod


def test_k_lookup_is_vllms_on_the_docstring_example() -> None:
    # build_dynamic_sd_schedule_lookup: "[(1, 16, 3), (32, 128, 2)] should map batch sizes 17-31 to K=3";
    # the tail keeps the last K; every K is capped at num_speculative_tokens
    dense = V.k_lookup([[1, 16, 3], [32, 128, 2]], max_num_seqs=200, num_speculative_tokens=3)
    assert dense[17:32] == [3] * 15 and dense[32] == 2 and dense[200] == 2
    assert V.k_lookup([[1, 4, 5]], max_num_seqs=8, num_speculative_tokens=2)[1:] == [2] * 8


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=40), st.integers(0, 60))
def test_the_engine_runs_the_k_the_plan_chose_at_every_batch(decisions: list[int | None], extra: int) -> None:
    # unmeasured cells only at the end (beyond the largest measured batch), as the plan makes them
    ks = [d for d in decisions if d is not None] or [0]
    decided: list[int | None] = list(ks)
    decided += [None] * (len(decisions) - len(ks))
    s = sch.batch_schedule(cells(decided), max_batch=len(decided) + extra)
    cfg = V.speculative_config(s, {"method": "ngram"})
    want = [d if d is not None else 0 for d in decided] + [0] * extra
    if cfg is None:
        assert max(want) == 0
        return
    entries = cfg.get("num_speculative_tokens_per_batch_size", [[1, len(want), cfg["num_speculative_tokens"]]])
    dense = V.k_lookup(entries, max_num_seqs=len(want) + 5, num_speculative_tokens=cfg["num_speculative_tokens"])
    assert dense[1:len(want) + 1] == want
    assert dense[len(want) + 1:] == [want[-1]] * 5  # past the schedule the last k holds (vLLM carries it)
    real = _vllm_dynamic_utils()
    if real is not None:  # vLLM's own lookup, where vLLM is installed, agrees with ours
        assert real.build_dynamic_sd_schedule_lookup(entries, len(want) + 5, cfg["num_speculative_tokens"]) == dense


@pytest.mark.parametrize("entries, msg", [
    ([], "non-empty"), ([[2, 4, 1]], "start at batch 1"), ([[1, 4, 1], [4, 8, 0]], "overlap"),
    ([[1, 4, -1]], "k >= 0"), ([[1, 4]], "integers"), ([[1, True, 2]], "integers")])
def test_schedules_vllm_would_refuse_are_refused_here(entries: list, msg: str) -> None:
    with pytest.raises(SpecmodelError, match=msg):
        V.validate_schedule(entries)
    real = _vllm_dynamic_utils()
    if real is not None and msg != "integers":
        with pytest.raises(ValueError):
            real.validate_and_normalize_dynamic_sd_schedule(entries)


def test_target_engine_mismatch_names_what_differs() -> None:
    kw = {"profile_name": "p", "profile_model": "/models/Qwen3-0.6B", "profile_tp": 2, "profile_tp_known": True}
    sch.check_target(**kw, serve_model="Qwen/qwen3-0.6b", serve_tp=2)  # same model by hub id or path
    with pytest.raises(SpecmodelError, match="serve_tp: the engine runs TP1, profile p was measured at TP2"):
        sch.check_target(**kw, serve_model=None, serve_tp=1)
    with pytest.raises(SpecmodelError, match="serve_model: the engine serves other, profile p was measured on"):
        sch.check_target(**kw, serve_model="other", serve_tp=None)


# ---- the command ------------------------------------------------------------------------------


def test_plan_engine_vllm_json_and_export_are_one_validated_document(tmp_path: Path) -> None:
    out = tmp_path / "sched.json"
    r = run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", "--engine", "vllm", "--drafter", "/d",
                "--json", "--export", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert formats.SCHEDULE.check(doc, "stdout") == 1 and list(doc)[:2] == ["schema", "schema_version"]
    assert json.loads(out.read_text()) == doc
    check_document(doc, "stdout")
    band = doc["bands"][0]
    cfg = band["vllm"]["speculative_config"]
    # the reference at 2.8 tokens/step pays >= 1.10x at small batches only: on, then off (marginal, then no gain), then the unmeasured tail
    assert cfg["model"] == "/d" and cfg["method"] == "eagle3"
    ks = [k for _, _, k in cfg["num_speculative_tokens_per_batch_size"]]
    assert ks[0] > 0 and ks[-1] == 0 and band["switch_off_above"] is not None
    # eagle3's k = 0 still runs its forward: the marginal batches keep their k, none is written as 0
    bases = [rg["basis"] for rg in band["ranges"]]
    assert sch.MEASURED_MARGINAL_KEPT in bases and sch.MEASURED_MARGINAL not in bases, band["ranges"]
    assert all(rg["k"] > 0 for rg in band["ranges"] if rg["basis"] == sch.MEASURED_MARGINAL_KEPT)
    # ngram's k = 0 is free (a host lookup, no forward): its marginal batches are written as 0
    r = run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", "--engine", "vllm", "--json",
                "--speculative-config", '{"method": "ngram"}', cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ng = json.loads(r.stdout)["bands"][0]["ranges"]
    assert [rg["k"] for rg in ng if rg["basis"] == sch.MEASURED_MARGINAL] == [0], ng
    assert band["vllm"]["args"].startswith("--speculative-config '{")
    # re-exporting overwrites its own document; a different file is never overwritten
    assert run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", "--engine", "vllm",
                   "--export", str(out), cwd=tmp_path).returncode == 0
    other = tmp_path / "profile.json"
    other.write_text('{"schema": "specmodel.profile"}')
    r = run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", "--engine", "vllm", "--export", str(other),
                cwd=tmp_path)
    assert r.returncode == 2 and "not overwritten" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert other.read_text() == '{"schema": "specmodel.profile"}'


@pytest.mark.parametrize("args, msg", [
    (["--serve-tp", "2"], "--serve-tp: the engine runs TP2, profile kimi-k2.5-int4-tp8-pcie was measured at TP8"),
    (["--serve-model", "Qwen/Qwen3-0.6B"], "--serve-model: the engine serves Qwen/Qwen3-0.6B, profile kimi-k2.5-int4"),
    (["--speculative-config", "[1]"], "--speculative-config: expected a JSON object"),
    (["--speculative-config", "{bad"], "--speculative-config"),
])
def test_plan_engine_bad_input_is_one_line_exit_2(args: list[str], msg: str, tmp_path: Path) -> None:
    r = run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "3.2", "--engine", "vllm", *args,
                "--export", str(tmp_path / "s.json"), cwd=tmp_path)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert not (tmp_path / "s.json").exists()


def test_export_without_engine_is_refused(tmp_path: Path) -> None:
    r = run_cli("plan", "--accept-len", "3.2", "--export", str(tmp_path / "s.json"), cwd=tmp_path)
    assert r.returncode == 2 and "--export: needs --engine" in r.stderr


@pytest.mark.slow  # the plan over every topk at every batch 1..64: ~8 s on a loaded 2-core box
def test_plan_engine_sglang_writes_the_adaptive_file_body(tmp_path: Path) -> None:
    r = run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", "--engine", "sglang", "--json",
                cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    band = json.loads(r.stdout)["bands"][0]
    body = band["sglang"]["adaptive_config"]
    starts = sorted(int(k) for k in body)
    assert starts == [rg["start"] for rg in band["ranges"]]
    assert all(len(v["candidate_steps"]) == 1 for v in body.values())
    assert body[str(starts[-1])]["candidate_steps"] == [0]


@pytest.mark.parametrize("extra, msg", [
    (["--tp", "1"], "tp: the schedule is for TP8, the engine runs TP1"),
    (["--tp", "8", "--target", "/m/other"], "model: the schedule is for 'Kimi-K2.5 INT4'"),
])
def test_head_to_head_refuses_a_schedule_for_another_engine(extra: list[str], msg: str, tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.conftest import REPO

    sched = tmp_path / "s.json"
    assert run_cli("plan", "--profile", str(REFERENCE), "--accept-len", "2.8", "--engine", "vllm", "--export",
                   str(sched), cwd=tmp_path).returncode == 0
    args = ["--target", "/m/target", *extra] if "--target" not in extra else extra
    r = subprocess.run([sys.executable, str(REPO / "benchmarks" / "bench_schedule_h2h.py"), "--schedule", str(sched),
                        *args], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and msg in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def _doc() -> dict:
    s = sch.batch_schedule(cells([3, 0]), max_batch=4)
    return sch.schedule_document([s], engine=V.SPEC, algorithm="EAGLE3", base={"method": "eagle3", "model": "d"},
                                 options={}, header=formats.SCHEDULE.header(),
                                 about={"profile": "p", "model": "m", "tp": 1})


@pytest.mark.parametrize("mutate, msg", [
    (lambda d: d.update(engine="trt"), "engine: expected one of"),
    (lambda d: d.pop("tp"), "tp: missing"),
    (lambda d: d.update(bands=[]), "bands: expected a non-empty list"),
    (lambda d: d["bands"][0]["ranges"].pop(0), "start at batch 1"),
    (lambda d: d["bands"][0]["vllm"]["speculative_config"].update(num_speculative_tokens=2), "exceeds"),
    (lambda d: d["bands"][0]["vllm"]["speculative_config"].update(num_speculative_tokens_per_batch_size=[[1, 2, 3],
                                                                                                          [2, 4, 0]]),
     "overlap"),
    (lambda d: d["bands"][0].update(context_tokens=-1), "context_tokens"),
])
def test_a_schedule_document_is_validated_on_load(mutate, msg: str) -> None:  # type: ignore[no-untyped-def]
    d = _doc()
    check_document(d, "s.json")
    mutate(d)
    with pytest.raises(SpecmodelError, match=f"s.json: .*{msg}"):
        check_document(d, "s.json")
