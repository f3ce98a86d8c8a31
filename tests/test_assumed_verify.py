"""No plain GO/NO-GO rests on a verify cost nobody measured at that (tokens, context).

A sweep (decode only) gives qualified verdicts at every context, in predict (text + JSON), the API,
the plan (region ASSUMED, never recommended) and the report; verify rows at the asked context give
plain ones; between two measured verify contexts the interpolation applies, beyond them the verdict
is extrapolated (not assumed)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import specmodel
from specmodel.model.accept import from_mean, from_per_position
from specmodel.model.inputs import OperatingPoint
from specmodel.model.optimize import accept_model
from specmodel.model.predict import predict
from specmodel.model.serveplan import serve_plan
from specmodel.report.content import build_report
from specmodel.report.markdown import render_markdown
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import load_profile
from specmodel.schema.source import Source
from specmodel.trace.sweep import sweep_profile
from tests.conftest import REFERENCE, run_cli

REF = load_profile(REFERENCE)
#: the reference's costs as if measured on the user's own box (a plain verdict needs the user's own costs)
OWN = dataclasses.replace(REF, source=Source.measured(tool="test", description="the reference's costs, as if measured "
                                                      "here", created_utc="", method="EAGLE3"))
SPEC = SpecConfig(steps=3, topk=1, num_draft_tokens=4)
#: decode barely moves with context (104 -> 96 tok/s at batch 1), as in the issue's published case
SWEEP = ("batch,context,tokens_per_s\n"
         "1,0,104\n4,0,380\n1,32768,100\n4,32768,350\n1,131072,96\n4,131072,320\n")


def _sweep(tmp_path: Path) -> Path:
    p = tmp_path / "sweep.csv"
    p.write_text(SWEEP)
    return p


def test_sweep_only_gives_qualified_verdicts_at_every_context(tmp_path: Path) -> None:
    sweep = str(_sweep(tmp_path))
    for ctx, word in (("0", "context 0"), ("32K", "32K"), ("128K", "128K")):
        r = run_cli("predict", "--json", "--baseline-sweep", sweep, "--accept-len", "3.0", "--draft-ms", "1",
                    "--context", ctx, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        d = json.loads(r.stdout)
        assert d["measured"] is False
        [a] = d["assumed"]
        assert (a["kind"], a["fallback"], a["tokens"], a["batch"]) == ("verify", "decode", 4.0, 1)
        assert d["verdict_label"] == f"{d['verdict']} (verify not measured at {word}: assumed = decode at 4 tokens)"
        # what to measure to remove it, at that batch and context
        assert "specmodel profile --phases decode,verify --batches 1 --verify-tokens 4" in a["to_measure"]
        assert "/start_profile" in a["to_measure"] and d["to_measure"] == [a["to_measure"]]
        text = run_cli("predict", "--baseline-sweep", sweep, "--accept-len", "3.0", "--draft-ms", "1",
                       "--context", ctx, cwd=tmp_path).stdout
        verdict = next(ln for ln in text.splitlines() if ln.startswith("verdict"))
        assert verdict.startswith(f"verdict      {d['verdict_label']}:")
        assert any(ln.startswith("to measure   measure verify at batch 1 x 4 tokens") for ln in text.splitlines())


def test_issue_18_item_7_one_row_sweep_with_draft_ms_is_not_a_confident_go(tmp_path: Path) -> None:
    p = tmp_path / "one.csv"
    p.write_text("batch,context,tokens_per_s\n1,0,82\n")
    d = json.loads(run_cli("predict", "--json", "--baseline-sweep", str(p), "--accept-len", "3.2", "--draft-ms", "1",
                           cwd=tmp_path).stdout)
    assert d["verdict"] == "GO"  # the arithmetic says GO...
    assert d["verdict_label"] != "GO" and "verify not measured" in d["verdict_label"]  # ...but not plainly


def test_the_api_carries_the_same_qualification(tmp_path: Path) -> None:
    prof = sweep_profile(str(_sweep(tmp_path)), tp=4)
    p = specmodel.predict(prof, accept=3.0, context="128K")
    # a sweep measured neither verify nor a drafter: both are named, and P(speedup > 1) is not given
    assert [a.kind for a in p.outcome.assumed] == ["verify", "draft"] and not p.measured
    assert "(verify not measured at 128K: assumed = decode at 4 tokens; draft not measured: assumed 0 s" \
        in p.verdict_label
    assert p.figures.p_withheld and p.to_dict()["p_speedup_gt_1"] is None and "not given" in p.p_text
    assert p.to_dict()["assumed"][0]["context_tokens"] == 131072


def test_verify_measured_at_the_context_gives_a_plain_verdict() -> None:
    p = predict(OWN, from_mean(3.2, 4), OperatingPoint(batch=1, spec=SPEC, context_tokens=0))
    assert p.outcome.assumed == () and p.outcome.extrapolated == () and p.measured
    assert p.verdict_label == p.outcome.verdict


def _ref_with_verify_at(contexts: tuple[int, ...]) -> object:
    """The reference with every row copied to each context (costs grow 10 % per step up)."""
    rows = []
    for i, c in enumerate(contexts):
        f = 1.0 + 0.1 * i
        rows += [dataclasses.replace(r, context_tokens=c, total_s=r.total_s * f, allreduce_s=r.allreduce_s * f,
                                     compute_s=r.compute_s * f, other_s=r.other_s * f) for r in REF.costs]
    return dataclasses.replace(OWN, costs=tuple(rows))


def test_between_measured_verify_contexts_interpolated_beyond_extrapolated() -> None:
    prof = _ref_with_verify_at((0, 32768))
    mid = predict(prof, from_mean(3.2, 4), OperatingPoint(batch=1, spec=SPEC,  # type: ignore[arg-type]
                                                          context_tokens=16384))
    assert mid.measured and mid.verdict_label == mid.outcome.verdict
    lo = predict(prof, from_mean(3.2, 4), OperatingPoint(batch=1, spec=SPEC,  # type: ignore[arg-type]
                                                         context_tokens=0))
    hi = predict(prof, from_mean(3.2, 4), OperatingPoint(batch=1, spec=SPEC,  # type: ignore[arg-type]
                                                         context_tokens=32768))
    assert lo.costs.verify_s < mid.costs.verify_s < hi.costs.verify_s
    far = predict(prof, from_mean(3.2, 4), OperatingPoint(batch=1, spec=SPEC,  # type: ignore[arg-type]
                                                          context_tokens=131072))
    assert far.outcome.assumed == () and any(e.axis == "context" for e in far.outcome.extrapolated)
    assert "(extrapolated: context 131072 > measured 32768" in far.verdict_label


def test_plan_never_recommends_from_an_assumed_verify(tmp_path: Path) -> None:
    prof = sweep_profile(str(_sweep(tmp_path)), tp=4)
    rates = [0.8, 0.6, 0.45]
    model = accept_model(from_per_position(rates), rates=rates)
    plan = serve_plan(prof, model, batches=(1, 4), contexts=(0, 32768, 131072), default=SPEC)
    for c in plan.cells:
        assert c.region == "ASSUMED" and c.recommended is None and c.action == "unmeasured"
        assert [(a.kind, a.context_tokens) for a in c.assumed] == [("verify", c.context_tokens),
                                                                   ("draft", c.context_tokens)]
        assert c.best_any.cost_assumed  # listed beside, flagged
    # the same acceptance on a profile whose verify was measured: recommendations, region measured
    ok = serve_plan(REF, model, batches=(1, 4), contexts=(0,), default=SPEC)
    assert all(c.region == "measured" and c.recommended is not None for c in ok.cells)


def test_report_shows_the_same_qualification(tmp_path: Path) -> None:
    prof = sweep_profile(str(_sweep(tmp_path)), tp=4)
    dist = from_mean(3.0, 4)
    p = predict(prof, dist, OperatingPoint(batch=1, spec=SPEC, context_tokens=131072))
    content = build_report(profile=prof, dist=dist, spec=SPEC, prediction=p, notes=(), per_position=None,
                           observation=None, max_batch=8, inputs=[])
    d = content.to_dict()
    assert d["verdict_label"] == p.verdict_label and "verify not measured at 128K" in d["verdict_label"]
    assert d["prediction"]["assumed"][0]["fallback"] == "decode"
    md = render_markdown(content)
    assert f"## Verdict: **{p.verdict_label}**" in md
    # nothing recommendable at any batch: no "does not pay" claim either, nothing was measured to say so
    assert content.optimizer.recommendation.startswith("none: no configuration has measured costs")
    assert content.optimizer.limit_text().startswith("no batch limit: no configuration has measured costs")


def test_validate_marks_windows_predicted_from_an_assumed_verify(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    fmt = ("[2025-11-30 04:32:%02d TP0] Decode batch, #running-req: %d, #token: %d, token usage: 0.01, "
           "accept len: 3.00, accept rate: 0.75, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0, ")
    log.write_text("\n".join(fmt % (i, b, tok, tps) for i, (b, tok, tps) in
                             enumerate([(1, 100, 100.0), (4, 400, 390.0)])) + "\n")
    for with_verify in (False, True):
        prof = tmp_path / "profiles" / f"v{int(with_verify)}"
        prof.mkdir(parents=True)
        rows = []
        for L in (0, 1024):  # the windows sit at 100 tokens of context: inside
            for b in (1, 4):
                kinds = [("decode", b, 0.010), ("draft", b, 0.001)] + ([("verify", 4 * b, 0.015)] if with_verify else [])
                for kind, toks, base in kinds:
                    t = base * (1 + 0.05 * b) * (1 + L / 1e4)
                    rows.append({"kind": kind, "batch": b, "tokens": toks, "context_tokens": L, "total_s": t,
                                 "allreduce_s": 0.0, "compute_s": t, "other_s": 0.0})
        (prof / "profile.json").write_text(json.dumps({"schema": "specmodel.profile", "schema_version": 2,
                                                       "name": prof.name, "source": {"kind": "measured"}, "tp": 2,
                                                       "costs": rows}))
        v = run_cli("validate", "--json", "--profile", str(prof), str(log), "--steps", "3", cwd=tmp_path)
        assert v.returncode == 0, v.stderr
        doc = json.loads(v.stdout)
        if with_verify:
            assert all(w["assumed"] == [] for w in doc["windows"]) and doc["summary"]["windows_assumed"] == 0
            assert doc["summary"]["median_abs_error_measured_range"] is not None
        else:
            for w in doc["windows"]:  # each at its own context (the log's #token / #running-req)
                assert w["assumed"] == [f"verify not measured at {w['context_tokens']:g}: assumed = decode at "
                                        f"{4 * w['batch']} tokens"], w
            assert doc["summary"]["windows_assumed"] == 2
            assert doc["summary"]["median_abs_error_measured_range"] is None  # nothing measured to judge
            assert any("never measured (assumed = the decode curve" in w for w in doc["warnings"])
            text = run_cli("validate", "--profile", str(prof), str(log), "--steps", "3", cwd=tmp_path).stdout
            assert sum(1 for ln in text.splitlines() if "  assumed" in ln) == 2
