"""Acceptance by context band: `accept` groups windows by KV tokens per request,
`predict --context`, `plan` and a saved distribution use the band's acceptance and say which."""

# ruff: noqa: UP031  -- lines are built with SGLang's own printf-style format
from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmodel.engines.logs import summarize
from tests.conftest import REFERENCE

#: scheduler_metrics_mixin.py (0.5.5) decode line
LINE = ("[2025-11-30 04:%02d:%02d TP0] Decode batch, #running-req: %d, #token: %d, token usage: 0.01, "
        "accept len: %.2f, accept rate: 0.70, cuda graph: True, gen throughput (token/s): %.2f, #queue-req: 0, ")
ARGS = ("[2025-11-30 04:00:00] server_args=ServerArgs(model_path='moonshotai/Kimi-K2.5', tp_size=8, "
        "speculative_algorithm='EAGLE3', speculative_num_steps=3, speculative_eagle_topk=1, "
        "speculative_num_draft_tokens=4, decode_log_interval=40)")


def _decaying_log(tmp_path: Path) -> str:
    """Batch 2; acceptance 3.4 at ~500 tokens/request, 2.8 at ~3K, 1.9 at ~20K (as users report: vllm #47602)."""
    rows = []
    for i, (ctx, a) in enumerate([(400, 3.4), (500, 3.4), (600, 3.4), (2900, 2.8), (3000, 2.8), (3100, 2.8),
                                  (19000, 1.9), (20000, 1.9), (21000, 1.9)]):
        rows.append(LINE % (i // 60, i % 60, 2, 2 * ctx, a, 100.0 * a))
    p = tmp_path / "decay.log"
    p.write_text(ARGS + "\n" + "\n".join(rows) + "\n")
    return str(p)


def test_accept_reports_one_distribution_per_band(tmp_path, cli):
    log = _decaying_log(tmp_path)
    s = summarize([log])
    assert s.by_context is not None
    assert [round(b.dist.mean_tokens, 2) for b in s.by_context.bands] == [3.4, 2.8, 1.9]
    assert [b.label for b in s.by_context.bands] == ["0-2K tokens", "2K-16K tokens", ">= 16K tokens"]
    r = cli("accept", log)
    assert r.returncode == 0, r.stderr
    assert "by context" in r.stdout and "2K-16K tokens" in r.stdout


def test_predict_uses_the_band_of_its_context_and_says_so(tmp_path, cli):
    log = _decaying_log(tmp_path)
    docs = {}
    for ctx in ("500", "20000"):
        r = cli("predict", "--profile", str(REFERENCE), "--accept-log", log, "--context", ctx, "--json")
        assert r.returncode == 0, r.stderr
        docs[ctx] = json.loads(r.stdout)
    near, far = docs["500"], docs["20000"]
    assert near["accept_mean_tokens"] == pytest.approx(3.4, abs=0.01)
    assert far["accept_mean_tokens"] == pytest.approx(1.9, abs=0.01)
    assert any("context band 0-2K tokens" in n for n in near["notes"])
    assert any("context band >= 16K tokens" in n for n in far["notes"])
    # a bare figure carries no context: the note says acceptance is assumed constant
    r = cli("predict", "--profile", str(REFERENCE), "--accept-len", "3", "--context", "20000")
    assert r.returncode == 0 and "acceptance assumed constant over context" in r.stdout


def test_plan_takes_each_contexts_band(tmp_path, cli):
    log = _decaying_log(tmp_path)
    r = cli("plan", "--profile", str(REFERENCE), "--accept-log", log, "--batches", "1", "--contexts", "0,3K,20K",
            "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    bands = {b["context_tokens"]: b["band"] for b in doc["accept_by_context"]}
    assert "0-2K" in bands[0] and "2K-16K" in bands[3072] and ">= 16K" in bands[20480]
    t = cli("plan", "--profile", str(REFERENCE), "--accept-log", log, "--batches", "1", "--contexts", "0,20K")
    assert t.returncode == 0 and "acceptance at context 20480: context band >= 16K tokens" in t.stdout
    flat = cli("plan", "--profile", str(REFERENCE), "--accept-len", "3", "--batches", "1", "--contexts", "0,20K")
    assert flat.returncode == 0 and "acceptance assumed constant over context" in flat.stdout


def test_saved_distribution_keeps_its_bands(tmp_path, cli):
    log = _decaying_log(tmp_path)
    out = tmp_path / "a.json"
    assert cli("accept", log, "-o", str(out)).returncode == 0
    doc = json.loads(out.read_text())
    assert len(doc["by_context"]) == 3
    s = summarize([str(out)])
    assert s.by_context is not None and s.by_context.at(20000)[0].mean_tokens == pytest.approx(1.9, abs=0.01)
    # a tampered band is refused on load, naming the field
    doc["by_context"][1]["lo_tokens"] = 5
    out.write_text(json.dumps(doc))
    r = cli("predict", "--accept-log", str(out))
    assert r.returncode == 2 and "by_context" in r.stderr


def test_report_context_page_and_serve_plan_use_the_bands(tmp_path):
    from specmodel.report.content import build_report
    from specmodel.report.markdown import render_markdown
    from specmodel.scenario.args import ScenarioArgs
    from specmodel.scenario.resolve import resolve_scenario, run_prediction

    sc = resolve_scenario(ScenarioArgs(profile=str(REFERENCE), accept_logs=(_decaying_log(tmp_path),)))
    assert sc.accept.by_context is not None
    c = build_report(profile=sc.profile, dist=sc.accept.dist, spec=sc.spec, prediction=run_prediction(sc),
                     notes=sc.notes, per_position=sc.accept.per_position, by_context=sc.accept.by_context)
    assert c.context is not None and "per context band" in c.context.accept_note
    by_l = {r.context_tokens: r for r in c.context.rows}
    assert by_l[0].accept_mean_tokens == pytest.approx(3.4, abs=0.01) and "0-2K" in by_l[0].accept_band
    far = max(by_l)
    assert by_l[far].accept_mean_tokens == pytest.approx(1.9, abs=0.01) and ">= 16K" in by_l[far].accept_band
    assert c.plan is not None and len(c.plan.accept_bands) == len(c.plan.contexts)
    assert "acceptance per context band of the log" in render_markdown(c)
    # without bands the page says acceptance was assumed constant over context
    flat = resolve_scenario(ScenarioArgs(profile=str(REFERENCE), accept_len=3.0))
    c2 = build_report(profile=flat.profile, dist=flat.accept.dist, spec=flat.spec, prediction=run_prediction(flat))
    assert c2.context is not None and "assumed constant over context" in c2.context.accept_note
    assert c2.plan is not None and c2.plan.accept_bands == ()
