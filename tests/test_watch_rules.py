"""`specmodel watch`: what a reading rests on. A server restarted without speculation is one line,
a log is followed incrementally within a memory bound, a finished log is named as such, the DP
context sums the engines' KV, a busy server's window is widened until it holds drafts, the
server's own method is used, and nothing non-finite reaches the JSON encoder.
Each test failed on the code before it (named per test)."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from specmodel.engines.base import MetricsSample
from specmodel.engines.vllm import metrics as vllm_metrics
from specmodel.live import sources as WS
from specmodel.live import window as W
from tests.conftest import DATA, REFERENCE, specmodel_exe
from tests.metrics_server import PageServer

VW = DATA / "vllm_cpu_032_watch"
V0 = (VW / "tp1_ngram" / "metrics_0.txt").read_text()
V1 = (VW / "tp1_ngram" / "metrics_1.txt").read_text()
VPROF = VW / "tp1_ngram" / "profile"


def _watch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(specmodel_exe() + ["watch", *args], capture_output=True, text=True, timeout=timeout)


def _docs(out: str) -> list[dict]:
    return [json.loads(ln) for ln in out.splitlines() if ln.strip()]


def _without_spec(page: str) -> str:
    return "\n".join(ln for ln in page.splitlines() if "spec_decode" not in ln) + "\n"


def test_a_server_restarted_without_speculation_is_one_line_not_an_assertion():
    # before: observe_metrics asserted the counters were there (AssertionError traceback)
    win = W.MetricsWindow(window_s=60)
    win.push(W.Scrape(t_s=0.0, sample=vllm_metrics.parse(V0, "a")))
    win.scrapes.append(W.Scrape(t_s=1.0, sample=vllm_metrics.parse(_without_spec(V1), "b")))
    why = W.observe_metrics(win, 3)
    assert isinstance(why, str) and "no speculative decoding" in why
    with PageServer([V0, _without_spec(V1)]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--window", "0.5", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    docs = _docs(r.stdout)
    assert any("no speculative decoding" in d.get("detail", "") for d in docs), docs


def test_a_busy_servers_window_is_widened_until_it_holds_drafts():
    # before: --once compared two scrapes one interval apart; the first two pages carry no step yet
    # (vLLM counts drafts per engine step, v1/metrics/loggers.py -> spec_decode/metrics.py observe;
    # the load's first requests were still in prefill) and the answer was "idle: no drafts in the window"
    with PageServer([V0, V0, V0, V1]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--window", "30", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = _docs(r.stdout)
    a, b = vllm_metrics.parse(V0, "0"), vllm_metrics.parse(V1, "1")
    assert doc["observed"]["verify_steps"] == (b.drafts or 0) - (a.drafts or 0)


def test_no_drafts_while_tokens_are_generated_is_busy_not_idle():
    def s(drafts: float, gen: float) -> MetricsSample:
        return MetricsSample(engine="vllm", drafts=drafts, accepted_tokens=drafts, gen_tokens=gen, running=2)
    win = W.MetricsWindow(window_s=60)
    win.push(W.Scrape(t_s=0.0, sample=s(10, 100)))
    win.push(W.Scrape(t_s=3.0, sample=s(10, 140)))
    assert W.observe_metrics(win, 3) == ("busy, no drafts yet: 40 tokens generated over 3.0 s but no draft counted "
                                         "(widening the window)")
    idle = W.MetricsWindow(window_s=60)
    idle.push(W.Scrape(t_s=3.0, sample=s(10, 140)))
    idle.push(W.Scrape(t_s=6.0, sample=s(10, 140)))
    assert W.observe_metrics(idle, 3) == "idle: no drafts in the window"


def _page_two_engines(usage: tuple[float, float], running: tuple[float, float]) -> str:
    lines = []
    for e, (u, r) in enumerate(zip(usage, running, strict=True)):
        lines += [f'vllm:num_requests_running{{engine="{e}",model_name="tiny"}} {r}',
                  f'vllm:kv_cache_usage_perc{{engine="{e}",model_name="tiny"}} {u}',
                  f'vllm:cache_config_info{{block_size="16",engine="{e}",num_gpu_blocks="100"}} 1.0',
                  f'vllm:spec_decode_num_drafts_total{{engine="{e}",model_name="tiny"}} 5.0']
    return "\n".join(lines) + "\n"


def test_the_data_parallel_context_sums_the_engines_kv():
    # two engines, each with its own pool of 100 x 16 tokens: 800 + 400 tokens in use over 4 requests;
    # before: the mean usage times one pool over all requests (divided by the number of engines): 150
    s = vllm_metrics.parse(_page_two_engines((0.5, 0.25), (2, 2)), "p")
    assert s.running == 4 and s.context_tokens == pytest.approx(300.0)
    one = vllm_metrics.parse(_page_two_engines((0.5, 0.0), (2, 0)), "p")
    assert one.context_tokens == pytest.approx(400.0)


def _shift_to_now(text: str) -> str:
    import datetime as dt

    pat = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"
    last = dt.datetime.strptime(re.findall(pat, text)[-1], "%Y-%m-%d %H:%M:%S")
    shift = dt.datetime.now().replace(microsecond=0) - last
    return re.sub(pat, lambda m: (dt.datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S") + shift)
                  .strftime("%Y-%m-%d %H:%M:%S"), text)


def test_a_log_is_followed_incrementally_within_the_memory_bound(tmp_path, monkeypatch):
    # before: every interval re-read the whole file (and a log past the reader's bound ended watch)
    text = _shift_to_now((DATA / "logs_sglang_055" / "server.log").read_text())
    lines = text.splitlines(keepends=True)
    log = tmp_path / "live.log"
    log.write_text("".join(lines[:10]))
    monkeypatch.setattr(WS, "WATCH_HEAD_LINES", 5)
    monkeypatch.setattr(WS, "WATCH_TAIL_BYTES", 4000)
    src = WS.LogSource(path=str(log))
    first, cfg, eng = src.read()
    assert eng.name == "sglang" and cfg is not None and cfg.steps == 3
    size = log.stat().st_size
    assert src.offset == size
    with log.open("a") as f:
        for _ in range(20):  # the log grows far past the bound
            f.write("".join(lines[10:]))
    windows, _, _ = src.read()
    assert src.offset == log.stat().st_size and src.tail_bytes <= 4000 + max(len(x) for x in lines)
    assert len(src.head) == 5 and windows and windows[-1].line > 0
    obs = W.observe_log(windows, eng, 3, 60)
    assert isinstance(obs, W.Observed) and obs.engine == "sglang"


def test_a_finished_log_is_named_with_the_commands_for_it():
    # before: "idle: no window with running requests and tokens generated yet" (accept finds 31 drafts)
    r = _watch(str(DATA / "vllm_cpu_032" / "tp1_ngram" / "server.log"), "--profile", str(VPROF), "--once", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = _docs(r.stdout)
    assert "log not being written" in doc["detail"] and "specmodel accept" in doc["detail"]
    assert "specmodel validate" in doc["detail"]


def test_a_recent_vllm_window_with_drafts_counts_though_running_was_0_at_log_time():
    # vLLM prints "Running: 0 reqs" after a burst it counted drafts for: the counters measured it
    from specmodel.engines.logs import parse_log

    lf = parse_log(DATA / "vllm_cpu_032" / "tp1_ngram" / "server.log")
    obs = W.observe_log(list(lf.windows), "vllm", 3, 1e9, now=0.0)  # (a clock at the log's time)
    assert isinstance(obs, W.Observed) and (obs.verify_steps or 0) > 0


def test_the_servers_own_method_is_used_and_a_contradicting_one_refused():
    # before: no --method; the profile's method was assumed silently
    with PageServer([V0, V1]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--method", "draft_model")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "the server runs draft_model (a drafter forward)" in r.stderr
    with PageServer([V0, V1]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--method", "ngram", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = _docs(r.stdout)
    assert doc["observed"]["method"] == "ngram" and doc["spec"]["algorithm"] == "ngram"
    assert 0 < doc["observed"]["proposal_rate"] < 1
    with PageServer([V0, V1]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--json")
    (doc,) = _docs(r.stdout)
    assert any("pass --method" in n for n in doc["notes"])


def test_a_log_without_timestamps_reaches_json_without_nan(tmp_path):
    # before: span_s = NaN reached json.dumps(allow_nan=False): ValueError traceback
    text = (DATA / "logs_sglang_055" / "server.log").read_text()
    log = tmp_path / "nostamp.log"
    log.write_text(re.sub(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( TP\d+)?\] ", "", text, flags=re.M))
    r = _watch(str(log), "--profile", str(REFERENCE), "--once", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    (doc,) = _docs(r.stdout)
    assert doc["observed"]["span_s"] is None


def test_a_page_with_infinite_values_gives_no_traceback():
    page = V1.replace('vllm:num_requests_running{engine="0",model_name="tiny"} 0.0',
                      'vllm:num_requests_running{engine="0",model_name="tiny"} +Inf')
    with PageServer([V0, page]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--json")
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    json.loads(r.stdout.splitlines()[-1])


def test_stale_rule_reads_the_clock_in_the_logs_own_format():
    import datetime as dt

    now = dt.datetime(2026, 12, 1, 9, 14, 30).timestamp()
    w = [W.DecodeWindow(file="f", line=1, engine="vllm", batch=1, accept_len=2.0, tokens_per_s=5.0,
                        timestamp="12-01 09:13:51", drafts=3.0, per_position=(0.5, 0.5, 0.0))]
    assert isinstance(W.observe_log(w, "vllm", 3, 60.0, now=now), W.Observed)
    assert "log not being written" in str(W.observe_log(w, "vllm", 3, 30.0, now=now))
