"""`specmodel vllm --summarize` keeps each server's steps apart, measures a host proposer's rate,
lookup and no-proposal steps, splits rows by context band, refuses logs that contradict each
other, and validates every field it reads. Real recordings: tests/data/vllm_cpu_032/ (vLLM 0.32
CPU); synthetic logs where a case needs a value the recordings do not have."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from specmodel.commands.flags import flag_of
from specmodel.engines.vllm.hooklog import summarize
from specmodel.engines.vllm.steplog import read_step_log
from specmodel.errors import FieldError, SpecmodelError
from specmodel.model.accept import from_mean
from specmodel.model.inputs import OperatingPoint
from specmodel.model.predict import predict
from specmodel.schema.profile import load_profile, profile_from_dict, profile_to_dict
from tests.conftest import DATA, baseline_standin, run_cli

REC = DATA / "vllm_cpu_032"
BASE, NGRAM, NGRAM2 = REC / "tp1_none" / "hook", REC / "tp1_ngram" / "hook", REC / "tp2_ngram" / "hook"
HDR = {"schema": "specmodel.vllm_step", "schema_version": 1}


def _steps(d: Path) -> list[dict[str, Any]]:
    return [s for f in sorted(d.glob("rank*.jsonl")) for s in read_step_log(f).steps]


def _meta(rank: int = 0, tp: int = 1, spec: dict[str, Any] | None = None, model: str = "/m/tiny",
          version: str = "0.32.0", **more: Any) -> dict[str, Any]:
    return {**HDR, "type": "meta", "vllm_version": version, "rank": str(rank), "tp_size": tp, "device": "cpu",
            "model_path": model, "spec": spec, "clock": "perf_counter", **more}


def _step(kind: str = "decode", batch: int = 1, tokens: int = 1, ctx: float = 100.0, fwd: float = 0.004,
          host: float = 0.002, method: str | None = None, k: int | None = None, draft: float | None = None,
          spec_tokens: int = 0) -> dict[str, Any]:
    return {**HDR, "type": "step", "kind": kind, "batch": batch, "tokens": tokens, "spec_tokens": spec_tokens,
            "context_tokens": ctx, "draft_method": method, "draft_k": k, "gap_s": 0.001,
            "step_s": fwd + host + (draft or 0.0), "forward_s": fwd, "forward_allreduce_s": 0.0,
            "forward_n_allreduce": 0, "draft_s": draft, "draft_allreduce_s": 0.0 if draft is not None else None,
            "draft_n_allreduce": 0 if draft is not None else None, "overhead_s": host}


def _write(d: Path, meta: dict[str, Any], steps: list[dict[str, Any]], name: str = "rank0.jsonl") -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_text("".join(json.dumps(x) + "\n" for x in [meta, *steps]))
    return d


NG = {"method": "ngram", "num_speculative_tokens": 3}


def _ngram_run(d: Path, *, miss_fwd: float = 0.004, miss_host: float = 0.002, n_verify: int = 10, n_miss: int = 10,
               **meta: Any) -> Path:
    st = [_step("verify", 1, 4, method="ngram", k=3, draft=0.0002, spec_tokens=3) for _ in range(n_verify)]
    st += [_step("decode", fwd=miss_fwd, host=miss_host, method="ngram", k=3, draft=0.0001) for _ in range(n_miss)]
    return _write(d, _meta(spec=NG, **meta), st)


# --------------------------------------------------------------------------- each server apart


def test_decode_rows_come_from_the_baseline_and_the_ngram_runs_decode_steps_are_their_own_rows() -> None:
    """The issue's reproduction: the baseline server's decode steps (a loaded box: 44 ms) and the
    ngram server's decode-shaped steps (7 ms) were pooled into one median before."""
    prof = summarize([BASE, NGRAM], name="messy")
    base_decode = [s for s in _steps(BASE) if s["kind"] == "decode" and s["batch"] == 1]
    ngram_decode = [s for s in _steps(NGRAM) if s["kind"] == "decode" and s["batch"] == 1]
    dec = [r for r in prof.rows("decode") if r.batch == 1]
    assert sum(r.samples for r in dec) == len(base_decode)  # none of the ngram server's steps
    hp = prof.host_proposer
    assert hp is not None and hp.method == "ngram"
    own = [r for r in hp.decode if r.batch == 1]
    assert sum(r.samples for r in own) == len(ngram_decode)
    assert own[0].total_s < 0.5 * dec[0].total_s  # the contradiction the consistency check reads
    # the profile on disk says so too
    doc = profile_to_dict(prof)
    # (v4: the logs' prefill steps give it a requests block too)
    assert doc["schema_version"] == 4 and doc["host_proposer"]["decode"][0]["kind"] == "decode"


def test_the_lookup_is_timed_on_every_step_that_ran_it_and_the_rate_counted_per_request_step() -> None:
    prof = summarize([BASE, NGRAM], name="x")
    ran = [s for s in _steps(NGRAM) if s["kind"] in ("decode", "verify") and s["draft_s"] is not None]
    assert any(s["kind"] == "decode" for s in ran)  # misses ran the lookup too
    hp = prof.host_proposer
    assert hp.lookup_steps == len(ran)
    xs = sorted(s["draft_s"] for s in ran)
    mid = (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2
    assert prof.overhead_s == pytest.approx(mid) == pytest.approx(hp.lookup_s)
    every = [s for s in _steps(NGRAM) if s["draft_s"] is not None]
    assert hp.request_steps == sum(s["batch"] for s in every)
    proposed = sum(min(s["batch"], math.ceil(s["spec_tokens"] / 3)) for s in every if s["spec_tokens"])
    assert hp.proposed_request_steps == proposed and hp.proposal_rate == pytest.approx(proposed / hp.request_steps)
    assert 0.3 < hp.proposal_rate < 0.7  # the recording proposed on about half of its request-steps


def test_predict_defaults_to_the_measured_proposal_rate_and_says_so(tmp_path: Path) -> None:
    out = tmp_path / "p"
    # the recorded baseline ran on a loaded box (predict refuses it: test_consistency.py); a clean one stands in
    base = baseline_standin(NGRAM, tmp_path / "base")
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(NGRAM), "-o", str(out))
    assert r.returncode == 0, r.stderr
    prof = load_profile(out)
    rate = prof.host_proposer.proposal_rate
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.97")
    assert r.returncode == 0, r.stderr
    assert f"{rate:.0%} of request-steps proposed (measured by the hook in profile p" in r.stdout
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.97", "--json")
    d = json.loads(r.stdout)
    d = d.get("prediction", d)
    assert d["proposal_rate"] == pytest.approx(rate) and "measured by the hook" in d["proposal_rate_source"]
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.97", "--proposal-rate", "1", "--json")
    d1 = json.loads(r.stdout)
    d1 = d1.get("prediction", d1)
    assert d1["proposal_rate"] == 1.0 and d1["proposal_rate_source"] == "--proposal-rate"
    assert d1["speedup"] > d["speedup"]
    # plan prices every cell at the same measured rate and says so
    r = run_cli("plan", "--profile", str(out), "--accept-len", "2.97")
    assert r.returncode == 0, r.stderr
    assert f"proposal rate {rate:.0%} of request-steps: measured by the hook in profile p" in r.stdout


def test_a_proposer_that_proposes_nothing_predicts_the_slowdown_it_measured(tmp_path: Path) -> None:
    """Rate 0: every step is the speculative server's no-proposal step + the lookup, priced from
    that server's own decode-shaped steps (here 30 % slower than the baseline's: host work of
    speculation), so the prediction is a slowdown and the verdict NO-GO."""
    base = _write(tmp_path / "base", _meta(), [_step() for _ in range(10)])
    spec = _ngram_run(tmp_path / "ng", miss_fwd=0.004, miss_host=0.0038)
    out = tmp_path / "p"
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(out))
    assert r.returncode == 0, r.stderr
    prof = load_profile(out)
    p = predict(prof, from_mean(2.5, 4), OperatingPoint(batch=1, proposal_rate=0.0))
    t_base = 0.004 + 0.002 + 0.001
    t_miss = 0.004 + 0.0038 + 0.001 + 0.00015  # + the median lookup over hits (0.2 ms) and misses (0.1 ms)
    assert p.costs.baseline_step_s == pytest.approx(t_base) and p.costs.mean_step_s == pytest.approx(t_miss)
    assert p.figures.speedup == pytest.approx(t_base / t_miss) and p.figures.speedup < 0.85 and p.outcome.verdict == "NO-GO"
    assert not p.figures.break_even_reachable
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5", "--proposal-rate", "0", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    d = d.get("prediction", d)
    assert d["speedup"] == pytest.approx(t_base / t_miss, rel=1e-6) and d["break_even_accept_tokens"] is None
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5", "--proposal-rate", "0")
    assert r.returncode == 0 and "break-even   none: nothing is proposed" in r.stdout and "inf" not in r.stdout
    assert "verdict      NO-GO" in r.stdout


# --------------------------------------------------------------------------- context bands


def test_rows_are_split_by_context_band_and_a_long_prompt_uses_its_own_costs(tmp_path: Path) -> None:
    steps = [_step(ctx=100, fwd=0.004) for _ in range(6)] + [_step(ctx=3000 + i, fwd=0.009) for i in range(6)]
    d = _write(tmp_path / "base", _meta(), steps)
    prof = summarize([d], name="x")
    rows = sorted(prof.rows("decode"), key=lambda r: r.context_tokens)
    assert [r.context_tokens for r in rows] == [100, 3002]
    assert rows[1].total_s == pytest.approx(0.009 + 0.003)
    p = predict(prof, from_mean(2.0, 4), OperatingPoint(batch=1, context_tokens=3002))
    assert p.costs.baseline_step_s == pytest.approx(0.012) and not [e for e in p.outcome.extrapolated if e.axis == "context"]


# --------------------------------------------------------------------------- refusals


def test_logs_of_two_tp_degrees_are_refused_naming_both(tmp_path: Path) -> None:
    with pytest.raises(SpecmodelError, match=r"tp_size 1 but .*tp_size 2|tp_size 2 but .*tp_size 1"):
        summarize([BASE, NGRAM2], name="x")
    r = run_cli("vllm", "--summarize", str(BASE), "--summarize", str(NGRAM2), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and "rank0.jsonl" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "p").exists()


def test_a_tp_flag_the_logs_contradict_is_refused(tmp_path: Path) -> None:
    with pytest.raises(FieldError) as err:
        summarize([BASE, NGRAM], name="x", tp=2)
    assert re.search(r"--tp 2: contradicts .*tp_size 1", err.value.render(flag_of))  # (as the CLI spells it)
    assert summarize([BASE, NGRAM], name="x", tp=1).tp == 1


@pytest.mark.parametrize(("key", "a", "b"), [("model_path", "/m/tiny", "/m/other"), ("vllm_version", "0.32.0", "0.33.0")])
def test_logs_of_two_models_or_engine_versions_are_refused(tmp_path: Path, key: str, a: str, b: str) -> None:
    base = _write(tmp_path / "base", _meta(**{"model" if key == "model_path" else "version": a}),
                  [_step() for _ in range(6)])
    spec = _ngram_run(tmp_path / "ng", **{"model" if key == "model_path" else "version": b})
    with pytest.raises(SpecmodelError, match=rf"{key} {a} but .*{key} {b}"):
        summarize([base, spec], name="x")


def test_the_served_model_name_and_the_model_runner_are_recorded(tmp_path: Path) -> None:
    base = _write(tmp_path / "base", _meta(served_model_name="tiny", model_runner="v1 (forced by specmodel vllm)"),
                  [_step() for _ in range(6)])
    prof = summarize([base], name="x")
    assert prof.model == {"name": "/m/tiny", "path": "/m/tiny", "served_name": "tiny"}
    assert any("model runner: v1 (forced by specmodel vllm)" in n for n in prof.notes)


def test_the_source_counts_runs_and_rank_files(tmp_path: Path) -> None:
    base, spec = tmp_path / "base", tmp_path / "ng"
    for rank in (0, 1):
        _write(base, _meta(rank, tp=2), [_step() for _ in range(5)], f"rank{rank}.jsonl")
        _write(spec, _meta(rank, tp=2, spec=NG), [_step("verify", 1, 4, method="ngram", k=3, draft=1e-4,
                                                        spec_tokens=3) for _ in range(5)], f"rank{rank}.jsonl")
    prof = summarize([base, spec], name="x")
    assert prof.source.description == "vLLM step hook (hook): 20 steps from 2 server run(s), 4 rank file(s), TP 2"
    assert prof.tp == 2 and prof.source.from_hook


def test_a_hook_profile_is_labelled_hook_not_traces() -> None:
    prof = summarize([BASE, NGRAM], name="x")
    p = predict(prof, from_mean(2.0, 4), OperatingPoint(batch=1))
    assert dict(p.source.cost_sources)["baseline"] == "profile x (hook)"


# --------------------------------------------------------------------------- every field read is checked


FIELDS = ("batch", "tokens", "step_s", "overhead_s", "forward_s", "forward_allreduce_s", "forward_n_allreduce",
          "draft_s", "draft_allreduce_s", "draft_n_allreduce", "gap_s", "context_tokens", "spec_tokens", "draft_k",
          "draft_method")


@pytest.mark.parametrize("field", FIELDS)
@pytest.mark.parametrize("bad", ["x", "NaN", "Infinity", "-Infinity", "1e999", "[1]"])
def test_a_bad_value_in_any_field_summarize_reads_is_one_line_naming_it(tmp_path: Path, field: str, bad: str) -> None:
    if field == "draft_method" and bad == "x":
        return  # a string is a method name
    good = _step("verify", 1, 4, method="draft_model", k=3, draft=0.003, spec_tokens=3)
    line = json.dumps(good).replace(f'"{field}": {json.dumps(good[field])}',
                                    f'"{field}": {bad if bad != "x" else json.dumps(bad)}')
    assert line != json.dumps(good)
    d = tmp_path / "h"
    d.mkdir()
    (d / "rank0.jsonl").write_text(json.dumps(_meta()) + "\n" + json.dumps(_step()) + "\n" + line + "\n")
    with pytest.raises(SpecmodelError, match=rf"rank0.jsonl: line 3: {field}: "):
        summarize([d], name="x")


@pytest.mark.parametrize(("field", "bad"), [("tp_size", '"2"'), ("tp_size", "NaN"), ("spec", "[1]"),
                                            ("model_path", "3"), ("rank", "[0]"), ("model_runner", "{}")])
def test_a_bad_meta_field_is_one_line_naming_it(tmp_path: Path, field: str, bad: str) -> None:
    meta = json.dumps({**_meta(), field: "@@"}).replace('"@@"', bad)
    d = tmp_path / "h"
    d.mkdir()
    (d / "rank0.jsonl").write_text(meta + "\n" + json.dumps(_step()) + "\n")
    with pytest.raises(SpecmodelError, match=rf"rank0.jsonl: line 1: {field}: "):
        summarize([d], name="x")


# --------------------------------------------------------------------------- the profile format


def test_host_proposer_is_validated_and_versioned(tmp_path: Path) -> None:
    doc = profile_to_dict(summarize([BASE, NGRAM], name="x"))
    assert profile_from_dict(json.loads(json.dumps(doc))).host_proposer is not None
    old = {**doc, "schema_version": 2}
    with pytest.raises(SpecmodelError, match="host_proposer: needs schema_version 3"):
        profile_from_dict(old)
    bad = json.loads(json.dumps(doc))
    bad["host_proposer"]["proposal_rate"] = 1.5
    with pytest.raises(SpecmodelError, match="host_proposer: proposal_rate"):
        profile_from_dict(bad)
    bad["host_proposer"]["proposal_rate"] = 0.9
    with pytest.raises(SpecmodelError, match="host_proposer: proposal_rate 0.9 is not"):
        profile_from_dict(bad)
    # a profile with neither is still a v2 file (what older readers read), and v2 files still load
    plain = profile_to_dict(dataclasses.replace(summarize([BASE], name="x"), requests=None))
    assert plain["schema_version"] == 2 and "host_proposer" not in plain
    ref = DATA / "vllm_oos_tp1_1023" / "profile_base_ngram.json"
    assert json.loads(ref.read_text())["schema_version"] == 2 and load_profile(ref).host_proposer is None


# --------------------------------------------------------------------------- the SGLang twin


SG_HDR = {"schema": "specmodel.sglang_forward", "schema_version": 1}


def _sg_run(d: Path, *, tp: int = 1, spec: dict[str, Any] | None = None, decode_s: float = 0.01,
            model: str = "/m/tiny") -> Path:
    meta = {**SG_HDR, "type": "meta", "sglang_version": "0.5.5", "rank": "0", "tp_size": tp, "model_path": model,
            "spec": spec, "served_model_name": "tiny"}
    fw = [{**SG_HDR, "type": "forward", "phase": "decode", "batch": 1, "tokens": 1, "runner": "target",
           "gpu_s": decode_s} for _ in range(5)]
    if spec:
        fw += [{**SG_HDR, "type": "forward", "phase": "verify", "batch": 1, "tokens": 4, "runner": "target",
                "gpu_s": 0.012} for _ in range(5)]
    d.mkdir(parents=True)
    (d / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [meta, *fw]))
    return d


EAGLE = {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "num_draft_tokens": 4}


def test_sglang_summarize_takes_decode_from_the_baseline_and_refuses_contradictions(tmp_path: Path) -> None:
    from specmodel.engines.sglang.hooklog import summarize as sg_summarize

    base = _sg_run(tmp_path / "base", decode_s=0.01)
    spec = _sg_run(tmp_path / "spec", spec=EAGLE, decode_s=0.03)
    prof = sg_summarize([base, spec], name="x")
    assert [r.total_s for r in prof.rows("decode")] == [0.01]  # not the median of 0.01 and 0.03 steps
    assert prof.source.description == "SGLang forward-pass hook (hook): 15 forwards from 2 server run(s), " \
                                      "2 rank file(s), TP 1"
    assert prof.model == {"path": "/m/tiny", "served_name": "tiny"}
    with pytest.raises(SpecmodelError, match=r"tp_size 1 but .*tp_size 2"):
        sg_summarize([base, _sg_run(tmp_path / "tp2", tp=2, spec=EAGLE)], name="x")
    with pytest.raises(SpecmodelError, match=r"model_path /m/tiny but .*model_path /m/big"):
        sg_summarize([base, _sg_run(tmp_path / "big", spec=EAGLE, model="/m/big")], name="x")
    r = run_cli("sglang", "--summarize", str(base), "--summarize", str(spec), "--tp", "4", "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and "--tp 4: contradicts" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_vllm_summarize_does_not_import_the_sglang_command() -> None:
    from tests.conftest import run_python

    r = run_python("import sys, specmodel.commands.vllm, specmodel.engines.hook.run\n"
                   "assert 'specmodel.commands.sglang' not in sys.modules, 'imported'\n")
    assert r.returncode == 0, r.stderr


def test_a_re_costed_profile_does_not_price_misses_from_steps_measured_beside_the_old_costs(tmp_path: Path) -> None:
    """A what-if (here all-reduce 2x faster) re-costs the rows: the no-proposal steps measured
    beside the old rows no longer apply; the rate and the lookup do."""
    from specmodel.model.hostdraft import no_proposal_step
    from specmodel.model.whatif import allreduce_faster

    prof = summarize([BASE, NGRAM], name="x")
    assert no_proposal_step(prof, batch=1, spec=prof.spec)[1]
    moved = allreduce_faster(prof, 2.0)
    assert moved.host_proposer.decode == () and moved.host_proposer.proposal_rate == prof.host_proposer.proposal_rate
    assert not no_proposal_step(moved, batch=1, spec=moved.spec)[1]


def test_watch_on_a_proposer_that_proposes_nothing_advises_switching_off(tmp_path: Path) -> None:
    """vLLM counters over a window: tokens generated, no draft. Not "idle": an observation at
    rate 0, priced from the profile's measured no-proposal steps -> a slowdown -> switch off."""
    from specmodel.engines.base import MetricsSample
    from specmodel.live.watch import assess
    from specmodel.live.window import MetricsWindow, Scrape, observe_metrics

    base = _write(tmp_path / "base", _meta(), [_step() for _ in range(10)])
    spec = _ngram_run(tmp_path / "ng", miss_host=0.0038)
    prof = summarize([base, spec], name="p")
    def window(window_s: float) -> MetricsWindow:
        win = MetricsWindow(window_s=window_s)
        for t, gen in ((0.0, 100.0), (10.0, 400.0)):
            win.push(Scrape(t_s=t, sample=MetricsSample(engine="vllm", drafts=50.0, draft_tokens=150.0,
                                                        accepted_tokens=90.0, accepted_per_pos=(40.0, 30.0, 20.0),
                                                        running=1.0, gen_tokens=gen, engine_steps=gen)))
        return win

    # a window shorter than --window may hold only prefills' first tokens: not yet a reading
    assert str(observe_metrics(window(60), 3)).startswith("busy, no drafts yet")
    obs = observe_metrics(window(10), 3)
    assert not isinstance(obs, str) and obs.proposal_rate == 0.0 and obs.batch == pytest.approx(1.0)
    reading = assess(prof, obs, prof.spec)
    assert reading.speedup < 0.85 and reading.advice == "switch off"
    json.dumps(reading.to_dict(), allow_nan=False)  # what `watch --json` prints
    assert "nothing proposed" in reading.line("t") and "inf" not in reading.line("t")


def test_a_no_proposal_step_is_the_baseline_forward_plus_the_speculative_servers_host_work(tmp_path: Path) -> None:
    """T_miss = the target's decode forward (the baseline's row: every step of that run) + the host
    work of the speculative server's own decode-shaped steps. Those steps are few in a run that
    proposes; a disturbed forward among them (9 ms here against the baseline's 4 ms) must not
    become the price of every step that proposes nothing."""
    from specmodel.model.hostdraft import no_proposal_step

    base = _write(tmp_path / "base", _meta(), [_step(fwd=0.004, host=0.002) for _ in range(20)])
    spec = _ngram_run(tmp_path / "ng", miss_fwd=0.009, miss_host=0.005)
    prof = summarize([base, spec], name="p")
    (own,) = prof.host_proposer.decode
    assert own.other_s == pytest.approx(0.005 + 0.001, rel=1e-9)  # its overhead + the gap before it
    miss, measured = no_proposal_step(prof, batch=1, spec=prof.spec)
    assert measured and miss == pytest.approx(0.004 + 0.006, rel=1e-9)
    assert miss < own.total_s  # not the disturbed step's 15 ms
