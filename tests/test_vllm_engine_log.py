"""vLLM's own step log (``--enable-logging-iteration-details``) read into a profile: the parser on
lines made with vLLM's real format string, the rows it sorts them into, a whole-step verify row
priced without adding a drafter, and bad input as one line, exit 2.

The format string is vLLM's, copied from ``vllm/v1/metrics/loggers.py:200-203`` (0.32.0 CPU,
identical in 0.33.0 and 0.34.0) and filled with ``%`` as its ``logger.info`` does (loggers.py:199)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmodel.engines.vllm.enginelog import sort_steps
from specmodel.engines.vllm.enginerun import parse_lines
from specmodel.errors import SpecmodelError
from tests.conftest import run_cli

#: vllm/v1/metrics/loggers.py:200-203 (0.32.0)
FMT = ("%sIteration(%d): %d context requests, %d context tokens, "
       "%d generation requests, %d generation tokens, "
       "iteration elapsed time: %.2f ms%s, "
       "%s KV cache usage: %.1f%%%s")
#: what vLLM's logging puts before the message (its default format, as a CPU server printed it)
PREFIX = "(APIServer pid=15092) INFO 12-06 05:38:49 [loggers.py:199] "


def line(n: int, c: int, t: int, g_req: int, g_tok: int, ms: float, *, dummy: bool = False, engine: int = 0) -> str:
    return PREFIX + FMT % (f"Engine {engine:03d}: ", n, c, t, g_req, g_tok, ms, " (dummy)" if dummy else "", "CPU",
                           1.5, "")


def test_parser_reads_the_real_format() -> None:
    lines = ["INFO starting", line(0, 1, 60, 0, 0, 15.07), line(1, 3, 180, 1, 1, 15.41),
             line(2, 0, 0, 4, 16, 8.25), line(3, 0, 0, 0, 0, 0.0, dummy=True),
             PREFIX + FMT % ("", 4, 0, 0, 2, 2, 3.5, "", "GPU", 10.0, ", encoder inputs: 1, encoder output embeddings: 9")]
    its = parse_lines(lines, "x.log")
    assert [(i.index, i.ctx_requests, i.ctx_tokens, i.gen_requests, i.gen_tokens, i.dummy) for i in its] == [
        (0, 1, 60, 0, 0, False), (1, 3, 180, 1, 1, False), (2, 0, 0, 4, 16, False), (3, 0, 0, 0, 0, True),
        (4, 0, 0, 2, 2, False)]
    assert its[2].elapsed_s == pytest.approx(0.00825)
    assert its[4].elapsed_s == pytest.approx(0.0035)


def test_steps_sorted_into_decode_verify_extend_and_mixed_left_out() -> None:
    its = parse_lines([line(0, 1, 60, 0, 0, 15.0), line(1, 3, 180, 1, 1, 15.0),  # prefill; mixed
                       line(2, 0, 0, 4, 16, 8.0), line(3, 0, 0, 4, 10, 7.0),     # verify all 4 / some proposed
                       line(4, 0, 0, 4, 4, 5.0), line(5, 0, 0, 0, 0, 0.0, dummy=True)], "x.log")
    c = sort_steps(its, speculative=True)
    assert set(c.cells) == {("extend", 1, 60), ("verify", 4, 16), ("verify", 4, 10)}
    assert set(c.misses) == {("decode", 4, 4)}
    assert (c.mixed, c.dummy) == (1, 1)
    # drafted tokens: (16 − 4) + (10 − 4) + 0 = 18 over 12 request-steps (k = 3: a rate of 18/36 = 0.5)
    assert (c.drafted_tokens, c.request_steps) == (18, 12)
    with pytest.raises(SpecmodelError, match="without speculation"):
        sort_steps(its, speculative=False)


@pytest.mark.parametrize("bad", [
    PREFIX + "Engine 000: Iteration(7): 0 context requests, 0 context tokens, 4 generation requests, "
             "iteration elapsed time: 5.00 ms, CPU KV cache usage: 1.0%",          # a field gone
    PREFIX + FMT % ("", 7, 0, 0, 4, 2, 5.0, "", "CPU", 1.0, ""),                    # fewer tokens than requests
])
def test_a_bad_line_names_file_and_line(bad: str) -> None:
    with pytest.raises(SpecmodelError, match=r"^x\.log:3: not a vLLM iteration line .*loggers\.py:200"):
        parse_lines(["a", line(0, 0, 0, 1, 1, 1.0), bad], "x.log")


def _run_dir(d: Path, command: list[str], lines: list[str], *, hook: bool = False) -> Path:
    d.mkdir(parents=True)
    (d / "engine_run.json").write_text(json.dumps({"schema": "specmodel.vllm_engine_run", "schema_version": 1,
                                                   "command": command, "hook": hook, "added": [],
                                                   "log": "server.log"}))
    (d / "server.log").write_text("\n".join(["INFO Initializing a V1 LLM engine (v0.32.0) with config: ...", *lines])
                                  + "\n")
    return d


SERVER = ["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "/m/tiny", "--distributed-executor-backend",
          "mp"]


def _base_and_draft(tmp_path: Path) -> tuple[Path, Path]:
    # baseline decode at batch 4: 5, 5, 5, 6, 5, 4 ms -> median 5.0 ms; batch 1: 3 ms
    base = [line(i, 0, 0, 4, 4, ms) for i, ms in enumerate((5, 5, 5, 6, 5, 4))]
    base += [line(10 + i, 0, 0, 1, 1, 3.0) for i in range(5)] + [line(20, 1, 60, 0, 0, 12.0)]
    # draft_model k=3: whole steps of 8 ms at batch 4 (16 tokens), one ramp step at batch 3 (left out)
    spec = [line(i, 0, 0, 4, 16, 8.0) for i in range(7)] + [line(9, 0, 0, 3, 12, 7.0)]
    sc = json.dumps({"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3})
    return (_run_dir(tmp_path / "base", SERVER, base),
            _run_dir(tmp_path / "spec", [*SERVER, "--speculative-config", sc], spec))


def test_summarize_engine_log_prices_the_whole_step_once(tmp_path: Path) -> None:
    base, spec = _base_and_draft(tmp_path)
    out = tmp_path / "prof"
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(out))
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    rows = {(c["kind"], c["batch"], c["tokens"]): c for c in doc["costs"]}
    assert rows[("decode", 4, 4)]["total_s"] == pytest.approx(0.005)
    assert rows[("verify", 4, 16)]["total_s"] == pytest.approx(0.008)
    assert ("verify", 3, 12) not in rows  # seen once: a ramp step
    assert not any(k[0].startswith("draft") for k in rows)
    assert doc["source"]["clock"] == "engine_log"
    # hand-derived: a cycle is the 8 ms step (draft inside it) for E = 3 tokens, the baseline 5 ms per token:
    # speedup = (3 / 8) / (1 / 5) = 1.875 -- the drafter is not added a second time
    p = run_cli("predict", "--json", "--profile", str(out), "--batch", "4", "--steps", "3", "--accept-len", "3",
                "--accept-shape", "point")
    assert p.returncode == 0, p.stderr
    pred = json.loads(p.stdout)
    assert pred["speedup"] == pytest.approx(1.875, rel=1e-3)
    assert "draft assumed free" not in p.stdout


def test_engine_log_host_proposer_rate(tmp_path: Path) -> None:
    base = [line(i, 0, 0, 2, 2, 4.0) for i in range(6)]
    # ngram k=3 at batch 2: 4 steps where both proposed (8 tokens), 4 where one did (5 tokens), 5 misses
    spec = ([line(i, 0, 0, 2, 8, 6.0) for i in range(4)] + [line(10 + i, 0, 0, 2, 5, 5.5) for i in range(4)]
            + [line(20 + i, 0, 0, 2, 2, 4.4) for i in range(5)])
    sc = json.dumps({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4})
    b = _run_dir(tmp_path / "base", SERVER, base)
    s = _run_dir(tmp_path / "spec", [*SERVER, "--speculative-config", sc], spec)
    out = tmp_path / "prof"
    r = run_cli("vllm", "--summarize", str(b), "--summarize", str(s), "-o", str(out), "--min-samples", "4")
    assert r.returncode == 0, r.stderr
    hp = json.loads((out / "profile.json").read_text())["host_proposer"]
    # drafted (4·6 + 4·3) = 36 of k·ΣG = 3·26 = 78: 36/3 = 12 proposing request-steps of 26
    assert hp["proposal_rate"] == pytest.approx(36 / 78)
    assert (hp["proposed_request_steps"], hp["request_steps"]) == (12, 26)
    assert [(d["batch"], d["total_s"]) for d in hp["decode"]] == [(2, pytest.approx(0.0044))]


def test_engine_log_host_proposer_rate_whole_request_steps(tmp_path: Path) -> None:
    """Drafted tokens not a multiple of k (a request proposing fewer than k): the proposing
    request-steps are drafted/k rounded, the rate their share (the profile checks the two agree).
    ngram k=3 at batch 3: 5 steps of 3 + 4 drafts (7 tokens), 5 of 3 + 5 (8), one of 3 + 1 (4):
    46 drafted over 33 request-steps -> round(46/3) = 15 of 33 (not 46/99 beside 15 whole ones)."""
    base = [line(i, 0, 0, 3, 3, 4.0) for i in range(6)]
    spec = ([line(i, 0, 0, 3, 7, 6.0) for i in range(5)] + [line(10 + i, 0, 0, 3, 8, 6.5) for i in range(5)]
            + [line(20, 0, 0, 3, 4, 5.0)])
    sc = json.dumps({"method": "ngram", "num_speculative_tokens": 3})
    b = _run_dir(tmp_path / "base", SERVER, base)
    s = _run_dir(tmp_path / "spec", [*SERVER, "--speculative-config", sc], spec)
    r = run_cli("vllm", "--summarize", str(b), "--summarize", str(s), "-o", str(tmp_path / "prof"))
    assert r.returncode == 0, r.stderr
    hp = json.loads((tmp_path / "prof" / "profile.json").read_text())["host_proposer"]
    assert (hp["proposed_request_steps"], hp["request_steps"]) == (15, 33)
    assert hp["proposal_rate"] == pytest.approx(15 / 33)


def test_missing_and_bad_logs_are_one_line_exit_2(tmp_path: Path) -> None:
    base, spec = _base_and_draft(tmp_path)
    (spec / "server.log").write_text("INFO nothing here\n")
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"))
    assert r.returncode == 2
    assert r.stderr.count("\n") == 1 and "server.log: no 'Iteration(N)" in r.stderr
    (spec / "server.log").write_text(line(0, 0, 0, 4, 16, 8.0) + "\n" + line(1, 0, 0, 4, 16, 8.0)[:-25] + "\n")
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert f"{spec / 'server.log'}:2: not a vLLM iteration line" in r.stderr
    (spec / "server.log").unlink()
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "server.log: missing" in r.stderr


def test_a_cpu_tp1_uni_run_is_refused_not_priced(tmp_path: Path) -> None:
    """Under the uni executor a CPU forward ends before vLLM's timer starts
    (vllm/v1/executor/uniproc_executor.py:108-115): its steps hold no forward, one line, exit 2."""
    base, spec = _base_and_draft(tmp_path)
    doc = json.loads((spec / "engine_run.json").read_text())
    doc["command"] = [a for a in doc["command"] if a not in ("--distributed-executor-backend", "mp")]
    (spec / "engine_run.json").write_text(json.dumps(doc))
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1
    assert "uni executor" in r.stderr and str(spec / "server.log") in r.stderr


def test_host_gap_from_the_decode_time_hand_derived(tmp_path: Path) -> None:
    """Every request in a step waits X + gap: Σ decode time = Σ G·(X + gap). Baseline: 6 steps of 4
    requests at 5 ms (Σ G·X = 0.120 s over 24 request-steps) and a decode time of 0.144 s summed
    over its requests: gap 1 ms, so the decode row is 6 ms. The speculative server: 6 steps of 4
    requests at 8 ms (0.192 s) and 0.240 s: gap 2 ms, verify row 10 ms. Speedup at E = 3:
    (3/10)/(1/6) = 1.8 (1.875 without the gaps)."""
    base = [line(i, 0, 0, 4, 4, 5.0) for i in range(6)]
    spec = [line(i, 0, 0, 4, 16, 8.0) for i in range(6)]
    sc = json.dumps({"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 3})
    b = _run_dir(tmp_path / "base", SERVER, base)
    s = _run_dir(tmp_path / "spec", [*SERVER, "--speculative-config", sc], spec)
    for d, dec in ((b, 0.144), (s, 0.240)):
        (d / "metrics.prom").write_text(f'vllm:request_decode_time_seconds_sum{{engine="0",model_name="tiny"}} {dec}\n'
                                        f'vllm:request_decode_time_seconds_count{{engine="0",model_name="tiny"}} 4\n')
    out = tmp_path / "prof"
    r = run_cli("vllm", "--summarize", str(b), "--summarize", str(s), "-o", str(out))
    assert r.returncode == 0, r.stderr
    rows = {(c["kind"], c["batch"]): c for c in json.loads((out / "profile.json").read_text())["costs"]}
    assert rows[("decode", 4)]["total_s"] == pytest.approx(0.006)
    assert rows[("decode", 4)]["other_s"] == pytest.approx(0.001)
    assert rows[("verify", 4)]["total_s"] == pytest.approx(0.010)
    p = run_cli("predict", "--json", "--profile", str(out), "--batch", "4", "--steps", "3", "--accept-len", "3",
                "--accept-shape", "point")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["speedup"] == pytest.approx(1.8, rel=1e-3)


FAKE = r'''
import http.server, json, os, sys, threading
port = int(sys.argv[sys.argv.index("--port") + 1])
print("ARGV " + json.dumps(sys.argv[1:]), flush=True)
print("PYTHONPATH " + os.environ.get("PYTHONPATH", ""), flush=True)
print(%r, flush=True)

class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass

srv = http.server.ThreadingHTTPServer(("127.0.0.1", port), H)
threading.Timer(3.0, srv.shutdown).start()
srv.serve_forever()
'''


def _port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize("hook", [False, True])
def test_the_run_turns_the_step_log_on_and_keeps_the_output(tmp_path: Path, hook: bool) -> None:
    """``--no-hook``: the server's environment as it was (no shim on PYTHONPATH), the step log and
    (TP 1) the mp executor added; with the hook: the shim, the step log, the user's executor."""
    import sys

    from specmodel.engines.hook.shim import SHIM_DIR

    fake = tmp_path / "fake.py"
    fake.write_text(FAKE % line(0, 0, 0, 1, 1, 2.5))
    out = tmp_path / "out"
    r = run_cli("vllm", *([] if hook else ["--no-hook"]), "--out", str(out), "--health-timeout", "30", "--",
                sys.executable, str(fake), "--port", str(_port()), timeout=120)
    assert r.returncode == 0, r.stderr
    run = json.loads((out / "engine_run.json").read_text())
    added = ["--enable-logging-iteration-details"] + ([] if hook else ["--distributed-executor-backend", "mp"])
    assert run["hook"] is hook and run["added"] == added
    text = (out / "server.log").read_text()
    argv = json.loads(next(ln for ln in text.splitlines() if ln.startswith("ARGV "))[5:])
    assert argv[-len(added):] == added  # what the server was given
    pythonpath = next(ln for ln in text.splitlines() if ln.startswith("PYTHONPATH"))
    assert (str(SHIM_DIR) in pythonpath) is hook
    assert "Iteration(0)" in text and "Iteration(0)" in r.stderr  # kept, and still shown
    assert "1 engine steps in" in r.stderr  # (no hook file either way: the fake server is no vLLM)
