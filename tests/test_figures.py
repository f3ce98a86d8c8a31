"""Every figure a user reads adds up, comes from their own inputs, and applies to their box.

One test (or more) per way a figure can mislead; each runs the installed command as a user would.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path

import pypdf
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specmodel.engines.logs import parse_log, summarize
from specmodel.engines.sglang.log import parse_config as sglang_config
from specmodel.engines.vllm.log import parse_config as vllm_config
from specmodel.model import cycle as eq
from specmodel.model.allreduce import allreduce_s
from specmodel.model.predict import verdict_for
from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import save_profile
from specmodel.trace.nccl_tests import load_fit_document

from .conftest import DATA, REFERENCE, run_cli

SG055 = str(DATA / "logs_sglang_055" / "server.log")
SG0523_DICT = str(DATA / "logs_sglang_0523_dict" / "server.log")
VNEW = str(DATA / "logs_vllm_new" / "server.log")
VENGINE = str(DATA / "logs_vllm_engine_config" / "server.log")
NCCL8 = str(DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt")


def _json(*args: str, cwd: Path) -> dict:
    r = run_cli("predict", "--json", *args, cwd=cwd)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _err(cmd: str, *args: str, cwd: Path) -> str:
    r = run_cli(cmd, *args, cwd=cwd)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmodel: error: "), r.stderr
    return lines[0]


# --- 1. provenance; plain numbers never borrow another box's costs ---------------------------------------


def test_plain_numbers_alone_are_an_error_naming_the_missing_flags(tmp_path: Path) -> None:
    msg = _err("predict", "--baseline-tps", "100", "--accept-len", "2.0", cwd=tmp_path)
    assert "--verify-ms" in msg and "--draft-ms" in msg and "--profile" in msg
    msg = _err("predict", "--draft-ms", "2", "--accept-len", "2.0", cwd=tmp_path)
    assert "--baseline-tps" in msg and "--verify-ms" in msg


def test_explicit_profile_lends_the_missing_costs_and_says_which(tmp_path: Path) -> None:
    d = _json("--baseline-tps", "100", "--accept-len", "2.0", "--profile", str(REFERENCE), cwd=tmp_path)
    src = d["cost_sources"]
    assert src["baseline"] == "your flag --baseline-tps 100 (at batch 1)"
    assert src["verify"].startswith("profile kimi-k2.5-int4-tp8-pcie (reference")
    assert src["draft"].startswith("profile kimi-k2.5-int4-tp8-pcie (reference")
    assert d["baseline_tokens_per_s"] == pytest.approx(100.0)


def test_every_cost_names_its_origin_in_text_and_json(tmp_path: Path) -> None:
    args = ("--baseline-tps", "82", "--verify-ms", "27", "--draft-ms", "0.85", "--accept-len", "2.0")
    d = _json(*args, cwd=tmp_path)
    assert d["tp"] is None and d["tp_known"] is False  # never a default TP1
    assert d["cost_sources"] == {
        "baseline": "your flag --baseline-tps 82 (at batch 1)", "verify": "your flag --verify-ms 27",
        "draft": "your flag --draft-ms 0.85 (x 3 steps)",
        "overhead": "none: 0 assumed (pass --overhead-ms or --calibrate)",
        "all-reduce": "unknown: not split (pass --allreduce-frac)"}
    out = run_cli("predict", *args, cwd=tmp_path).stdout
    assert "config       TP unknown, batch 1" in out and "TP1" not in out
    assert "             verify:     your flag --verify-ms 27" in out
    # every cost, not only verify: each origin is printed on its own line, named
    lines = out.splitlines()
    for key, origin in d["cost_sources"].items():
        assert any(re.search(rf"\s{re.escape(key)}:\s+{re.escape(origin)}$", ln) for ln in lines), (key, origin)


def test_baseline_sweep_needs_a_draft_cost_and_prints_no_default_tp(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep.csv"
    sweep.write_text("batch,tokens_per_s\n1,82\n4,250\n16,700\n64,1500\n")
    msg = _err("predict", "--baseline-sweep", str(sweep), "--accept-len", "3", cwd=tmp_path)
    assert "--draft-ms" in msg and "--calibrate" in msg
    d = _json("--baseline-sweep", str(sweep), "--accept-len", "3", "--draft-ms", "1.0", cwd=tmp_path)
    assert d["tp"] is None
    assert d["cost_sources"]["baseline"] == f"your sweep {sweep}"
    assert d["cost_sources"]["verify"].startswith(f"fallback: the decode curve of your sweep {sweep}")
    assert d["cost_sources"]["all-reduce"].startswith("unknown")


# --- 2. engine config from the logs ----------------------------------------------------------------------


def test_engine_config_from_every_logged_form() -> None:
    sg = parse_log(SG055).config
    assert sg is not None and (sg.steps, sg.topk, sg.num_draft_tokens, sg.tp, sg.model) == (3, 1, 4, 8, "moonshotai/Kimi-K2.5")
    sgd = parse_log(SG0523_DICT).config
    assert sgd is not None and (sgd.steps, sgd.tp, sgd.decode_log_interval) == (3, 8, 20)
    assert sgd.draft_model == "lightseekorg/kimi-k2.5-eagle3"
    vn = parse_log(VNEW).config  # non-default args
    assert vn is not None and (vn.steps, vn.topk, vn.tp, vn.model) == (3, 1, 4, "Qwen/Qwen3-32B")
    assert vn.draft_model == "RedHatAI/Qwen3-32B-speculator.eagle3"
    ve = parse_log(VENGINE).config  # the engine's resolved SpeculativeConfig repr
    assert ve is not None and (ve.steps, ve.num_draft_tokens, ve.tp, ve.model) == (3, 4, 4, "Qwen/Qwen3-32B")
    assert ve.algorithm == "eagle3"
    # a line with neither is not a config; None values stay unknown
    line = "INFO 11-30 04:32:00 [api_server.py:1] vLLM API server version 0.33.0"
    assert vllm_config(line, "x:1") is None and sglang_config(line, "x:1") is None
    c = sglang_config("[t] server_args=ServerArgs(model_path='m', tp_size=2, speculative_num_steps=None)", "x:1")
    assert c is not None and c.steps is None and c.tp == 2


def test_logged_decode_log_interval_scales_the_sample_count() -> None:
    s = summarize([SG0523_DICT])  # no --steps: taken from the dict-form server_args
    windows = sum(w.batch for w in s.windows)
    assert s.dist.max_tokens == 4 and s.dist.samples == windows * 20


def test_accept_takes_steps_from_the_log_and_refuses_a_contradicting_flag(tmp_path: Path) -> None:
    r = run_cli("accept", SG055, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "server       sglang: model moonshotai/Kimi-K2.5, TP 8, steps 3, topk 1, draft tokens 4" in r.stdout
    msg = _err("accept", SG055, "--steps", "5", cwd=tmp_path)
    assert "--steps 5 contradicts the log: the server ran with 3" in msg and "server.log:1" in msg
    msg = _err("predict", "--accept-log", VENGINE, "--steps", "5", cwd=tmp_path)
    assert "--steps 5" in msg and "ran with 3" in msg
    d = _json("--accept-log", SG055, cwd=tmp_path)
    assert d["steps"] == 3
    assert any("server configuration from the log" in n for n in d["notes"])


def test_validate_refuses_a_log_of_another_model_or_tp(tmp_path: Path) -> None:
    msg = _err("validate", "--profile", str(REFERENCE), VNEW, cwd=tmp_path)
    assert "TP 4" in msg and "TP 8" in msg
    other = tmp_path / "qwen-tp8.log"
    other.write_text(Path(SG055).read_text().replace("moonshotai/Kimi-K2.5", "Qwen/Qwen3-32B"))
    msg = _err("validate", "--profile", str(REFERENCE), str(other), cwd=tmp_path)
    assert "'Qwen/Qwen3-32B'" in msg and "'Kimi-K2.5 INT4'" in msg
    ok = run_cli("validate", "--profile", str(REFERENCE), SG055, cwd=tmp_path)
    assert ok.returncode == 0, ok.stderr


# --- 3. acceptance shapes do what the docs say -----------------------------------------------------------


def test_per_position_shorter_than_steps_asks_or_says_it_extends(tmp_path: Path) -> None:
    msg = _err("predict", "--per-position", "0.8,0.6", cwd=tmp_path)
    assert "pass --steps 2" in msg
    d = _json("--per-position", "0.8,0.6", "--steps", "3", cwd=tmp_path)
    # documented rule: the last conditional rate (0.6 / 0.8) carries on
    assert d["accept_mean_tokens"] == pytest.approx(1 + 0.8 + 0.6 + 0.6 * 0.75)
    assert any("extended to --steps 3 with the last conditional acceptance rate" in n for n in d["notes"])
    short = _json("--per-position", "0.8,0.6", "--steps", "2", cwd=tmp_path)
    assert short["steps"] == 2 and short["accept_mean_tokens"] == pytest.approx(2.4)


def test_saved_distribution_extended_to_more_steps_says_so(tmp_path: Path) -> None:
    saved = tmp_path / "accept.json"
    assert run_cli("accept", VNEW, "-o", str(saved), cwd=tmp_path).returncode == 0
    d = _json("--accept-log", str(saved), "--steps", "5", cwd=tmp_path)
    assert all(p > 0 for p in d["accept_probs"])  # no zero padding
    assert any("extended to steps = 5 with the last observed conditional acceptance rate" in n for n in d["notes"])


def test_fractions_carry_no_sample_size(tmp_path: Path) -> None:
    frac = _json("--accept-hist", "1:0.1,2:0.3,3:0.4,4:0.2", cwd=tmp_path)
    counts = _json("--accept-hist", "1:10,2:30,3:40,4:20", cwd=tmp_path)
    assert frac["accept_mean_tokens"] == pytest.approx(counts["accept_mean_tokens"])
    assert frac["p_speedup_gt_1"] is None and frac["accept_samples_unknown"] is True
    assert counts["p_speedup_gt_1"] is not None and counts["accept_samples"] == 100
    out = run_cli("predict", "--accept-hist", "1:0.1,2:0.3,3:0.4,4:0.2", cwd=tmp_path).stdout
    assert "P(speedup > 1, over 256 tokens, sample size unknown) = needs counts" in out


def test_band_and_p_use_one_standard_error(tmp_path: Path) -> None:
    d = _json("--accept-hist", "1:10,2:30,3:40,4:20", "--batch", "1", cwd=tmp_path)
    e, sd, n = d["accept_mean_tokens"], d["accept_std_tokens"], d["accept_samples"]
    se = eq.accept_mean_se(e, sd, d["generation_tokens"], n)
    assert se == pytest.approx(sd * math.sqrt(1 / (256 / e) + 1 / n))
    # the band printed is E[A] ± 1.96 se over the cycle, and P is Φ(margin / se) with that se
    assert d["tokens_per_s_high"] == pytest.approx((e + 1.96 * se) / d["cycle_s"])
    assert d["p_speedup_gt_1"] == pytest.approx(eq.normal_cdf(d["margin_tokens"] / se))
    assert d["band_label"] == "over 256 tokens, 100 observed steps"


# --- 4. verdict thresholds agree with the displayed figures ------------------------------------------------


def test_the_published_histogram_no_longer_reads_110x_within_10_percent(tmp_path: Path) -> None:
    d = _json("--accept-hist", "1:10,2:30,3:40,4:20", cwd=tmp_path)
    assert 1.095 < d["speedup"] < 1.1  # the value behind the displayed 1.10x
    assert "within 10%" not in d["verdict_reason"]
    assert d["verdict"] == "GO" and "1.10x >= 1.10x" in d["verdict_reason"]


@given(st.floats(0.5, 2.0), st.one_of(st.none(), st.floats(0.0, 1.0)))
def test_verdict_follows_the_figures_as_printed(speedup: float, p: float | None) -> None:
    verdict, reason = verdict_for(speedup, p)
    shown = float(f"{speedup:.2f}")
    p_shown = None if p is None else float(f"{p:.2f}")
    assert f"{shown:.2f}x" in reason
    if shown < 1.0:
        assert verdict == "NO-GO"
    elif shown >= 1.10 and p_shown is not None and p_shown >= 0.90:
        assert verdict == "GO"
    else:
        # an unknown P is not a GO: the rule's P >= 0.90 half cannot be checked
        assert verdict == "MARGINAL"
        if shown >= 1.10:
            assert ("uncertain" if p_shown is not None else "P(speedup>1) unknown") in reason
        else:
            assert "below 1.10x" in reason


# --- 5. what-ifs for this box; NO-GO recommends speculation off ----------------------------------------------


@pytest.fixture(scope="module")
def nogo_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    tmp = tmp_path_factory.mktemp("nogo")
    pdf = tmp / "r.pdf"
    r = run_cli("report", "--accept-len", "2.0", "-o", str(pdf), cwd=tmp)
    assert r.returncode == 0, r.stderr
    return {"pdf": pdf, "json": json.loads(pdf.with_suffix(".json").read_text()),
            "text": [p.extract_text() for p in pypdf.PdfReader(str(pdf)).pages]}


@pytest.mark.slow  # renders a PDF
def test_custom_allreduce_is_not_a_bar_on_an_8_gpu_pcie_box(nogo_report: dict) -> None:
    rows = {w["key"]: w for w in nogo_report["json"]["whatifs"]}
    ca = rows["custom_allreduce"]
    assert ca["verdict"] == "N/A" and ca["unavailable"].startswith("not available")
    assert "more than two GPUs" in ca["unavailable"] and "PCIe" in ca["unavailable"]
    # the reference records its weights (~595 GB INT4) and GPU memory (96 GB), so TP 4
    # is N/A with the reason instead of a gain that assumes the model fits
    tp4 = rows["tp4"]
    assert tp4["label"] == "TP 4 instead of 8" and tp4["verdict"] == "N/A"
    assert tp4["memory"].startswith("does not fit: weights 148.8 GB per GPU on TP 4 vs 96.0 GB")
    assert tp4["unavailable"] == f"not available: {tp4['memory']}"
    page5 = nogo_report["text"][4]
    assert "N/A" in page5 and "does not fit" in page5


def test_memory_fit_decides_a_tp_change_when_known() -> None:
    from specmodel.model.whatif import standard_whatifs
    from specmodel.schema.profile import load_profile

    ref = load_profile(REFERENCE / "profile.json")
    big = dataclasses.replace(ref, model={**ref.model, "weight_bytes": 600e9},
                              hardware={**ref.hardware, "gpu_memory_bytes": 96e9})
    tp4 = {w.key: w for w in standard_whatifs(big)[0]}["tp4"]
    assert tp4.memory.startswith("does not fit") and tp4.unavailable.startswith("not available")
    small = dataclasses.replace(big, model={**ref.model, "weight_bytes": 200e9})
    tp4 = {w.key: w for w in standard_whatifs(small)[0]}["tp4"]
    assert tp4.memory.startswith("fits: weights 50.0 GB per GPU on TP 4") and not tp4.unavailable


@pytest.mark.slow  # renders a PDF
def test_nogo_report_recommends_turning_speculation_off(nogo_report: dict) -> None:
    opt = nogo_report["json"]["optimizer"]
    assert nogo_report["json"]["verdict"] == "NO-GO"
    assert opt["best"]["speedup"] < 1.0 and opt["recommends_off"] is True
    assert opt["recommendation"].startswith("turn speculation off")
    page1 = nogo_report["text"][0]
    assert "turn speculation off" in page1 and "best: steps" not in page1


# --- 6. measured all-reduce counts -------------------------------------------------------------------------


def test_allreduce_fit_recosts_every_call_and_changes_the_prediction(tmp_path: Path) -> None:
    fit_path = tmp_path / "fit.json"
    assert run_cli("nccl-tests", NCCL8, "-o", str(fit_path), cwd=tmp_path).returncode == 0
    fit, _ = load_fit_document(fit_path)
    base = _json("--accept-len", "3.2", cwd=tmp_path)
    d = _json("--accept-len", "3.2", "--allreduce-fit", str(fit_path), cwd=tmp_path)
    # verify at 4 tokens: 123 calls of 4 x 14336 bytes under the fit, the reference records no skew
    assert d["verify_allreduce_s"] == pytest.approx(123 * allreduce_s(4 * 14336, 8, fit), rel=1e-6)
    assert d["baseline_allreduce_s"] == pytest.approx(123 * allreduce_s(14336, 8, fit), rel=1e-6)
    assert d["tokens_per_s"] != pytest.approx(base["tokens_per_s"])
    assert d["cost_sources"]["all-reduce"].startswith(f"nccl-tests fit {fit_path}")


@pytest.mark.slow  # renders a PDF
def test_the_report_uses_the_allreduce_fit_as_predict_does(tmp_path: Path) -> None:
    fit_path = tmp_path / "fit.json"
    assert run_cli("nccl-tests", NCCL8, "-o", str(fit_path), cwd=tmp_path).returncode == 0
    d = _json("--accept-len", "3.2", "--allreduce-fit", str(fit_path), cwd=tmp_path)
    rep = run_cli("report", "--accept-len", "3.2", "--allreduce-fit", str(fit_path), "-o", str(tmp_path / "r.pdf"),
                  cwd=tmp_path)
    assert rep.returncode == 0, rep.stderr
    assert json.loads((tmp_path / "r.json").read_text())["prediction"]["tokens_per_s"] == d["tokens_per_s"]


def test_nccl_tests_into_a_profile_is_named_as_derived_from_both(tmp_path: Path) -> None:
    out = tmp_path / "profiles" / "kimi-nccl"
    r = run_cli("nccl-tests", NCCL8, "--profile", str(REFERENCE), "-o", str(out), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    assert doc["name"] == "kimi-nccl" and doc["source"]["kind"] == "derived"
    assert "kimi-k2.5-int4-tp8-pcie" in doc["source"]["description"] and NCCL8 in doc["source"]["description"]
    ref = _json("--accept-len", "3.2", "--profile", str(REFERENCE), cwd=tmp_path)
    new = _json("--accept-len", "3.2", "--profile", str(out), cwd=tmp_path)
    assert new["profile_source_kind"] == "derived" and new["verify_s"] < ref["verify_s"]


def test_allreduce_fit_at_another_tp_is_refused(tmp_path: Path) -> None:
    fit_path = tmp_path / "fit4.json"
    doc = json.loads(run_cli("nccl-tests", NCCL8, "--json", cwd=tmp_path).stdout)
    doc["allreduce_fit"]["tp"] = 4
    doc["allreduce_points"] = [dict(p, tp=4) for p in doc["allreduce_points"]]
    for k in ("relative_errors",):
        doc.pop(k, None)
    fit_path.write_text(json.dumps(doc))
    msg = _err("predict", "--accept-len", "3", "--allreduce-fit", str(fit_path), cwd=tmp_path)
    assert "TP 4" in msg and "TP 8" in msg


# --- 7. figures add up on screen -----------------------------------------------------------------------------


def _profile_with_extend(tmp_path: Path, *, kind: str = "measured", overhead_s: float = 0.4e-3) -> Path:
    from tests.test_report_cli import measured_like_profile

    p = measured_like_profile()
    ext = [CostRow(kind="draft_extend", batch=b, tokens=4 * b, total_s=1.0e-3 + 0.2e-3 * b, allreduce_s=0.3e-3,
                   compute_s=0.6e-3 + 0.2e-3 * b, other_s=0.1e-3) for b in (1, 2, 4, 8)]
    p = dataclasses.replace(p, costs=p.costs + tuple(ext), overhead_s=overhead_s,
                            source={**p.source.to_dict(), "kind": kind})
    return save_profile(p, tmp_path / "profiles" / "x")


def test_draft_shows_extend_plus_steps_and_adds_up(tmp_path: Path) -> None:
    path = _profile_with_extend(tmp_path)
    out = run_cli("predict", "--profile", str(path), "--accept-len", "3", cwd=tmp_path).stdout
    m = re.search(r"draft +([\d.]+) ms +\(extend ([\d.]+) ms \+ 2 x ([\d.]+) ms\)", out)
    assert m is not None, out
    total, extend, step = (float(x) for x in m.groups())
    assert total == pytest.approx(extend + 2 * step, abs=0.011)


def test_missing_overhead_carries_the_same_caveat_as_a_missing_draft(tmp_path: Path) -> None:
    path = _profile_with_extend(tmp_path, kind="ingested", overhead_s=0.0)
    d = _json("--profile", str(path), "--accept-len", "3", cwd=tmp_path)
    assert any(w.startswith("no per-cycle overhead measured or given (0.00 ms): tok/s is an upper bound")
               for w in d["warnings"])
    assert d["cost_sources"]["overhead"].startswith("none: 0 assumed")
    given = _json("--profile", str(path), "--accept-len", "3", "--overhead-ms", "0.5", cwd=tmp_path)
    assert not any("overhead" in w for w in given["warnings"])
    assert given["cost_sources"]["overhead"] == "your flag --overhead-ms 0.5"


# --- 9. the default profile is deterministic ------------------------------------------------------------------


def _measured_copy(root: Path, name: str) -> None:
    data = json.loads((REFERENCE / "profile.json").read_text())
    data["name"] = name
    data["source"] = {"kind": "measured", "description": "measured here"}
    (root / "profiles" / name).mkdir(parents=True)
    (root / "profiles" / name / "profile.json").write_text(json.dumps(data))


def test_two_measured_profiles_need_a_choice(tmp_path: Path) -> None:
    _measured_copy(tmp_path, "a")
    r = run_cli("predict", "--accept-len", "3", cwd=tmp_path)
    assert r.stdout.splitlines()[0] == ("note: using your measured profile profiles/a (the only measured, ingested "
                                        "or derived profile under profiles/; pass --profile to choose)")
    _measured_copy(tmp_path, "b")
    msg = _err("predict", "--accept-len", "3", cwd=tmp_path)
    assert "profiles/a" in msg and "profiles/b" in msg and "--profile" in msg


# --- 10. small ones --------------------------------------------------------------------------------------------


def test_accept_len_below_one_suggests_the_drafts_convention(tmp_path: Path) -> None:
    assert "--accept-convention drafts" in _err("predict", "--accept-len", "0.5", cwd=tmp_path)
    assert "--accept-convention drafts" not in _err("predict", "--accept-len", "9", cwd=tmp_path)


def test_sglang_with_no_forwards_does_not_suggest_summarize(tmp_path: Path) -> None:
    r = run_cli("sglang", "--out", str(tmp_path / "fw"), "--", sys.executable, "-c", "pass", cwd=tmp_path)
    assert r.returncode == 0
    last = r.stderr.strip().splitlines()[-1]
    assert "0 forwards" in last and "nothing to summarize" in last and "--summarize" not in last


def test_d2t_mismatch_cites_this_drafters_figures(tmp_path: Path) -> None:
    import numpy as np

    from specmodel.drafter.checks import check_drafter
    from tests.test_drafter_checks import published_pair

    d, tgt, r, k2, ref = published_pair(tmp_path)
    rep = check_drafter(drafter_dir=d, target_dir=tgt, reference_dir=r)
    f = rep.finding("d2t.reference_mismatch")
    assert f is not None and f.status == "FAIL"
    differ = int(np.count_nonzero(k2 != ref))
    assert f"{differ:,} of this drafter's 32,000 lm_head rows" in f.message
    assert "0.58" not in f.message and "published" not in f.message


@given(st.lists(st.integers(0, 400), min_size=4, max_size=4).filter(lambda c: sum(c) > 1),
       st.integers(16, 4096))
def test_band_never_straddles_the_baseline_next_to_a_certain_p(counts: list[int], gen: int) -> None:
    """The issue's PDF showed a band below the baseline beside P = 1.00: one se makes that impossible."""
    from specmodel.model.accept import from_histogram
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict
    from specmodel.schema.profile import load_profile

    prof = load_profile(REFERENCE / "profile.json")
    dist = from_histogram({j + 1: c for j, c in enumerate(counts)}, max_tokens=4)
    p = predict(prof, dist, OperatingPoint(generation_tokens=gen))
    assert p.figures.p_speedup_gt_1 is not None
    if p.figures.tokens_per_s_low < p.figures.baseline_tokens_per_s * (1 - 1e-9) and p.accept.mean_tokens - 1.0 > 1e-9:
        assert p.figures.p_speedup_gt_1 < 0.976
    if p.figures.p_speedup_gt_1 >= 0.976:
        assert p.figures.tokens_per_s_low >= p.figures.baseline_tokens_per_s * (1 - 1e-9)


def test_accept_json_records_the_servers_config(tmp_path: Path) -> None:
    r = run_cli("accept", SG0523_DICT, "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    server = json.loads(r.stdout)["server"]
    assert server["engine"] == "sglang" and server["steps"] == 3 and server["decode_log_interval"] == 20
    assert server["where"].endswith("server.log:1")


def test_memory_fit_from_the_profiled_models_config() -> None:
    """A full-size profile carries its model's shape: the weights per GPU follow from it."""
    from specmodel.model.memory import per_rank_weight_bytes
    from specmodel.model.whatif import memory_fit
    from tests.test_report_cli import measured_like_profile

    target = {"name": "llama-8b-like", "family": "llama", "model_type": "llama", "architecture": "LlamaForCausalLM",
              "hidden_size": 4096, "num_layers": 32, "vocab_size": 128256, "num_heads": 32, "num_kv_heads": 8,
              "head_dim": 128, "intermediate_size": 14336}
    p = measured_like_profile()
    p = dataclasses.replace(p, model={**p.model, "target": target, "activation_bytes": 2, "dtype": "bfloat16",
                                      "scaling": {"scaled": False}},
                            hardware={**p.hardware, "gpu_memory_bytes": 24e9})
    from specmodel.schema.shapes import ModelShape

    per_layer, outside = per_rank_weight_bytes(ModelShape(**target), 1, 2)
    want = (per_layer * 32 + outside) / 1e9
    assert 15 < want < 17  # ~8B parameters in bf16
    assert memory_fit(p, 1).startswith(f"fits: weights {want:.1f} GB per GPU on TP 1")
    small = dataclasses.replace(p, hardware={**p.hardware, "gpu_memory_bytes": 16e9})
    assert memory_fit(small, 1).startswith("does not fit")
    scaled = dataclasses.replace(p, model={**p.model, "scaling": {"scaled": True}})
    assert memory_fit(scaled, 1).startswith("unknown: model weight size")
