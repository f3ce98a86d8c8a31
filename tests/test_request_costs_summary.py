"""`specmodel vllm --summarize` records what a request costs beside its decode steps (the profile's
``requests``): the prompt length profiled, the speculative server's own prefill rows (the drafter
over the prompt included) and, from each server's kept ``/metrics`` page (``metrics.prom``), the
time per request spent outside the engine's steps; and `specmodel vllm` keeps that page while the
server runs. Synthetic logs (helpers as in tests/test_hook_summary.py), a fake HTTP server."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from specmodel.engines.vllm.hooklog import summarize
from specmodel.errors import SpecmodelError
from specmodel.schema.profile import load_profile, profile_from_dict, profile_to_dict
from tests.conftest import DATA, run_cli, specmodel_exe
from tests.test_hook_summary import NG, _meta, _step, _write

# (the synthetic-log helpers are the hook summary tests': every step's gap 1 ms, under max_gap_s --
# host time, except before a prefill)
DM = {"method": "draft_model", "num_speculative_tokens": 3}


def _base(d: Path, *, prefill: bool = True) -> Path:
    st = [_step("decode") for _ in range(10)]
    if prefill:
        # tokens per request: 60 x5, 40, 200 (b2 t400) -> median 60 (the mean would be 77)
        st += [_step("extend", 1, 60, ctx=0.0, fwd=0.02) for _ in range(5)]
        st += [_step("extend", 1, 40, ctx=0.0, fwd=0.02), _step("extend", 2, 400, ctx=0.0, fwd=0.03)]
    return _write(d, _meta(), st)


def _ngram(d: Path, *, prefill: bool = True) -> Path:
    st = [_step("verify", 1, 4, method="ngram", k=3, draft=0.0002, spec_tokens=3) for _ in range(10)]
    st += [_step("decode", method="ngram", k=3, draft=0.0001) for _ in range(10)]
    if prefill:
        # prefill b1 t50: forward 10 ms + lookup over the prompt 0.5 ms + host 3 ms + gap 1 ms
        st += [_step("extend", 1, 50, ctx=0.0, fwd=0.010, host=0.003, method="ngram", k=3, draft=0.0005)
               for _ in range(5)]
        st += [_step("extend", 2, 100, ctx=0.0, fwd=0.9, method="ngram", k=3, draft=0.001)]  # seen once: a ramp
    return _write(d, _meta(spec=NG), st)


def _draft_model(d: Path) -> Path:
    st = [_step("verify", 1, 4, method="draft_model", k=3, draft=0.006, spec_tokens=3) for _ in range(10)]
    # prefill b1 t60: forward 10 ms + the drafter over the prompt 20 ms + host 3 ms + gap 1 ms; the
    # drafter's time differs per step so the row is a median, not a constant
    st += [_step("extend", 1, 60, ctx=0.0, fwd=0.010, host=0.003, method="draft_model", k=3, draft=dr)
           for dr in (0.018, 0.020, 0.020, 0.025, 0.019)]
    return _write(d, _meta(spec=DM), st)


def _hist(name: str, what: str, per_engine: list[tuple[float, float]]) -> str:
    """A vLLM histogram as prometheus_client writes it: (count, sum) per engine."""
    out = [f"# HELP {name} {what}", f"# TYPE {name} histogram"]
    for eng, (count, total) in enumerate(per_engine):
        lab = f'engine="{eng}",model_name="tiny"'
        out += [f'{name}_bucket{{engine="{eng}",le="0.3",model_name="tiny"}} {count}',
                f'{name}_bucket{{engine="{eng}",le="+Inf",model_name="tiny"}} {count}',
                f"{name}_count{{{lab}}} {count}", f"{name}_sum{{{lab}}} {total}"]
    out += [f"# HELP {name}_created {what}", f"# TYPE {name}_created gauge"]
    out += [f'{name}_created{{engine="{eng}",model_name="tiny"}} 1.7961174223616815e+09'
            for eng in range(len(per_engine))]
    return "\n".join(out) + "\n"


def _page(e2e: list[tuple[float, float]], queue: list[float], infer: list[float]) -> str:
    """A /metrics page: e2e (count, sum) per engine, queue and inference sums per engine."""
    counts = [c for c, _ in e2e]
    return ("# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            'vllm:num_requests_running{engine="0",model_name="tiny"} 0.0\n'
            + _hist("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", e2e)
            + _hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.",
                    list(zip(counts, queue, strict=True)))
            + _hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.",
                    list(zip(counts, infer, strict=True))))


# baseline: 7 requests, (2.8 - 0.007 - 2.772) / 7 = 3 ms each outside the engine's steps
BASE_PAGE = _page([(7.0, 2.8)], [0.007], [2.772])
# speculative: two engines (4 + 3 requests), summed: (2.7 - 0.003 - 2.66) / 7
SPEC_PAGE = _page([(4.0, 1.5), (3.0, 1.2)], [0.001, 0.002], [1.46, 1.2])


# --------------------------------------------------------------------------- prompt and prefill rows


def test_prompt_tokens_is_the_baselines_median_and_the_spec_prefill_rows_carry_the_drafter(tmp_path: Path) -> None:
    base, ng, dm = _base(tmp_path / "base"), _ngram(tmp_path / "ng"), _draft_model(tmp_path / "dm")
    prof = summarize([base, ng], name="x")
    rq = prof.requests
    assert rq is not None and rq.prompt_tokens == 60  # not the ngram server's 50
    (row,) = rq.spec_prefill  # b2 t100 was seen once among cells seen 5 times: a ramp step, left out
    assert (row.kind, row.batch, row.tokens, row.samples) == ("extend", 1, 50, 5)
    # the lookup is part of it; the gap before a prefill (the engine waiting for the request) is not
    assert row.total_s == pytest.approx(0.010 + 0.0005 + 0.003)

    prof = summarize([base, dm], name="x")
    rq = prof.requests
    assert rq is not None and rq.prompt_tokens == 60
    (row,) = rq.spec_prefill
    assert (row.batch, row.tokens, row.context_tokens) == (1, 60, 0)
    # median drafter time 20 ms: forward 10 + draft 20 + host 3 (the gap before a prefill is not in it)
    assert row.total_s == pytest.approx(0.033)
    assert row.compute_s == pytest.approx(0.030) and row.other_s == pytest.approx(0.003)


def test_the_costs_rows_do_not_change(tmp_path: Path) -> None:
    """The speculative server's prefill goes to requests.spec_prefill only: the cost table is what
    the same logs gave without it (the baseline's extend rows, nothing of the speculative server's)."""
    base = _base(tmp_path / "base")
    with_pf = summarize([base, _ngram(tmp_path / "ng")], name="x")
    without = summarize([base, _ngram(tmp_path / "ng2", prefill=False)], name="x")
    assert with_pf.costs == without.costs
    assert {(r.batch, r.tokens) for r in with_pf.rows("extend")} == {(1, 60)}  # 40 and 400: ramp cells, as before


def test_prompt_tokens_falls_back_to_the_speculative_server_and_no_prefill_is_none(tmp_path: Path) -> None:
    prof = summarize([_base(tmp_path / "base", prefill=False), _ngram(tmp_path / "ng")], name="x")
    assert prof.requests is not None and prof.requests.prompt_tokens == 50
    prof = summarize([_base(tmp_path / "b2", prefill=False), _ngram(tmp_path / "n2", prefill=False)], name="x")
    assert prof.requests is None
    assert any(n.startswith("requests: not recorded") for n in prof.notes)


# --------------------------------------------------------------------------- time outside the engine


def test_outside_time_per_request_comes_from_each_servers_metrics_page(tmp_path: Path) -> None:
    base, ng = _base(tmp_path / "base"), _ngram(tmp_path / "ng")
    (base / "metrics.prom").write_text(BASE_PAGE)
    (ng / "metrics.prom").write_text(SPEC_PAGE)
    prof = summarize([base, ng], name="x")
    rq = prof.requests
    assert rq is not None
    assert rq.baseline_outside_s == pytest.approx(0.021 / 7) and rq.baseline_requests == 7
    assert rq.spec_outside_s == pytest.approx(0.037 / 7) and rq.spec_requests == 7  # both engines summed
    (note,) = [n for n in prof.notes if n.startswith("requests:")]
    assert "prompt 60 tokens" in note and "baseline 3.0 ms over 7 request(s)" in note
    assert "speculative 5.3 ms over 7 request(s)" in note
    # the order of the directories does not decide which server is which
    rq2 = summarize([ng, base], name="x").requests
    assert rq2 is not None and rq2.baseline_outside_s == rq.baseline_outside_s


def test_without_metrics_the_outside_time_is_none_and_the_note_says_why(tmp_path: Path) -> None:
    base, ng = _base(tmp_path / "base"), _ngram(tmp_path / "ng")
    prof = summarize([base, ng], name="x")
    rq = prof.requests
    assert rq is not None and rq.baseline_outside_s is None and rq.spec_outside_s is None
    assert rq.baseline_requests == rq.spec_requests == 0
    assert any("no metrics.prom" in n for n in prof.notes)
    # one server's page only: the other's stays None
    (ng / "metrics.prom").write_text(SPEC_PAGE)
    rq = summarize([base, ng], name="x").requests
    assert rq is not None and rq.baseline_outside_s is None and rq.spec_requests == 7


def test_no_finished_request_or_a_missing_series_is_none_and_a_negative_rest_is_zero(tmp_path: Path) -> None:
    base, ng = _base(tmp_path / "base"), _ngram(tmp_path / "ng")
    (base / "metrics.prom").write_text(_page([(0.0, 0.0)], [0.0], [0.0]))
    (ng / "metrics.prom").write_text(BASE_PAGE.replace("vllm:request_queue_time_seconds", "vllm:other"))
    rq = summarize([base, ng], name="x").requests
    assert rq is not None and (rq.baseline_outside_s, rq.baseline_requests) == (None, 0)
    assert (rq.spec_outside_s, rq.spec_requests) == (None, 0)
    # queue + inference above the end-to-end sum (clocks of two processes): clamped at 0, not negative
    (base / "metrics.prom").write_text(_page([(2.0, 1.0)], [0.01], [1.0]))
    rq = summarize([base, ng], name="x").requests
    assert rq is not None and rq.baseline_outside_s == 0.0 and rq.baseline_requests == 2


def test_a_malformed_metrics_page_is_one_line_naming_the_file(tmp_path: Path) -> None:
    base, ng = _base(tmp_path / "base"), _ngram(tmp_path / "ng")
    bad = ng / "metrics.prom"
    bad.write_text(SPEC_PAGE + "<html>502 Bad Gateway</html>\n")
    with pytest.raises(SpecmodelError) as exc:
        summarize([base, ng], name="x")
    assert str(bad) in str(exc.value) and "\n" not in str(exc.value)
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(ng), "-o", str(tmp_path / "p"), timeout=300)
    assert r.returncode == 2 and str(bad) in r.stderr and "Traceback" not in r.stderr


def test_the_recorded_cpu_servers_pages_give_their_outside_time(tmp_path: Path) -> None:
    """The recordings' metrics.txt is the page vLLM 0.32 serves: (e2e - queue - inference) / count."""
    rec = DATA / "vllm_cpu_032"
    dirs = []
    for name in ("tp1_none", "tp1_draft_model"):
        d = tmp_path / name
        d.mkdir()
        for f in (rec / name / "hook").glob("rank*.jsonl"):
            (d / f.name).write_bytes(f.read_bytes())
        (d / "metrics.prom").write_bytes((rec / name / "metrics.txt").read_bytes())
        dirs.append(d)
    rq = summarize(dirs, name="x").requests
    assert rq is not None and rq.prompt_tokens == 60 and rq.baseline_requests == rq.spec_requests == 4
    assert rq.baseline_outside_s == pytest.approx((4.8251307010650635 - 0.0001354479998099123
                                                   - 4.392234537000149) / 4)
    assert rq.spec_outside_s == pytest.approx((2.6622884273529053 - 0.00015069399978528963
                                               - 2.3719881000001806) / 4)
    assert {(r.batch, r.tokens) for r in rq.spec_prefill} == {(1, 60), (2, 64)}


# --------------------------------------------------------------------------- on disk


def test_requests_round_trip_as_v4_and_a_profile_without_them_keeps_the_old_version(tmp_path: Path) -> None:
    base, ng, dm = _base(tmp_path / "base"), _ngram(tmp_path / "ng"), _draft_model(tmp_path / "dm")
    (base / "metrics.prom").write_text(BASE_PAGE)
    (dm / "metrics.prom").write_text(SPEC_PAGE)
    prof = summarize([base, dm], name="x")
    doc = profile_to_dict(prof)
    assert doc["schema_version"] == 4 and doc["requests"]["prompt_tokens"] == 60
    back = profile_from_dict(json.loads(json.dumps(doc)))
    assert back.requests == prof.requests
    old = profile_to_dict(replace(prof, requests=None))
    assert old["schema_version"] == 2 and "requests" not in old
    hp = summarize([base, ng], name="x")
    assert hp.host_proposer is not None
    old = profile_to_dict(replace(hp, requests=None))
    assert old["schema_version"] == 3 and "requests" not in old


def test_the_summarize_command_writes_requests_and_prints_the_note(tmp_path: Path) -> None:
    base, dm = _base(tmp_path / "base"), _draft_model(tmp_path / "dm")
    (base / "metrics.prom").write_text(BASE_PAGE)
    (dm / "metrics.prom").write_text(SPEC_PAGE)
    out = tmp_path / "p"
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(dm), "-o", str(out), timeout=300)
    assert r.returncode == 0, r.stderr
    assert "note: requests: prompt 60 tokens" in r.stdout
    rq = load_profile(out).requests
    assert rq is not None and rq.baseline_requests == 7 and len(rq.spec_prefill) == 1


# --------------------------------------------------------------------------- the runner keeps /metrics

FAKE_SERVER = r'''
import http.server, sys, threading
port = int(sys.argv[sys.argv.index("--port") + 1])
life_s = float(sys.argv[sys.argv.index("--life") + 1])
scrapes = [0]

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        if self.path == "/health":
            body = b""
        elif self.path == "/metrics":
            scrapes[0] += 1
            body = ("# HELP fake_scrapes_total Scrapes served.\n# TYPE fake_scrapes_total counter\n"
                    f"fake_scrapes_total {scrapes[0]}\n").encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass

srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
threading.Timer(life_s, srv.shutdown).start()  # exits by itself, whatever the test does
srv.serve_forever()
'''


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _scrapes(path: Path) -> int:
    (line,) = [ln for ln in path.read_text().splitlines() if ln.startswith("fake_scrapes_total ")]
    return int(line.split()[1])


def test_the_runner_keeps_the_servers_last_metrics_page(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_SERVER)
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_cli("vllm", "--out", str(out), "--health-timeout", "30", "--", sys.executable, str(fake),
                "--port", str(_free_port()), "--life", "7", timeout=90)
    assert r.returncode == 0, r.stderr
    assert time.monotonic() - t0 < 60
    page = out / "metrics.prom"
    assert page.read_text().startswith("# HELP fake_scrapes_total") and _scrapes(page) >= 1
    # no temp file left behind (beside the page: the server's kept output and what ran, engines/vllm/enginelog.py)
    assert sorted(p.name for p in out.iterdir()) == ["engine_run.json", "metrics.prom", "server.log"]
    # a later run into the same directory is refused: the page is an earlier run's file
    r = run_cli("vllm", "--out", str(out), "--", sys.executable, str(fake), timeout=300)
    assert r.returncode == 2 and "already holds metrics.prom" in r.stderr


def test_a_forwarded_sigterm_scrapes_the_page_once_more_first(tmp_path: Path) -> None:
    fake = tmp_path / "fake.py"
    fake.write_text(FAKE_SERVER)
    out = tmp_path / "out"
    page = out / "metrics.prom"
    proc = subprocess.Popen([*specmodel_exe(), "vllm", "--out", str(out), "--health-timeout", "30", "--",
                             sys.executable, str(fake), "--port", str(_free_port()), "--life", "60"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 45
        while not page.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert page.exists(), "no metrics.prom after the server got healthy"
        first = _scrapes(page)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    # the fake server dies of the forwarded SIGTERM (128 + 15); the page was scraped before it
    assert proc.returncode == 143, err.decode(errors="replace")[-2000:]
    assert _scrapes(page) > first
