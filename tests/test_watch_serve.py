"""`specmodel watch URL --serve PORT`: one server's verdict as the fleet exporter's gauges, named by the
server's host:port; the figures are the reading's own (the two recorded vLLM pages, hand-derived
acceptance); a log source has no target labels and is refused in one line."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import DATA, specmodel_exe
from tests.metrics_server import PageServer
from tests.vllm_engine import free_port

VW = DATA / "vllm_cpu_032_watch" / "tp1_ngram"


def _gauges(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_single_server_watch_serves_its_reading_as_gauges():
    port = free_port()
    with PageServer([(VW / "metrics_0.txt").read_text(), (VW / "metrics_1.txt").read_text()]) as srv:
        proc = subprocess.Popen(specmodel_exe() + ["watch", srv.url, "--profile", str(VW / "profile"), "--method",
                                                   "ngram", "--interval", "0.2", "--window", "100", "--json",
                                                   "--serve", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            got: dict = {}
            deadline = time.monotonic() + 60
            while not any(k[0] == "specmodel_verdict_info" for k in got):
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.stderr else ""
                try:
                    got = _gauges(f"http://127.0.0.1:{port}/metrics")
                except OSError:
                    time.sleep(0.2)
        finally:
            proc.terminate()
            out, err = proc.communicate(timeout=30)
    doc = json.loads(out.splitlines()[0])  # the last page repeats: every reading is this one
    inst = (("instance", srv.url.split("/")[2]),)
    # hand-derived from the two pages: drafts 3 -> 208, accepted 5 -> 426
    assert got[("specmodel_observed_accept_tokens", inst)] == pytest.approx(1 + 421 / 205, rel=1e-9)
    assert got[("specmodel_predicted_speedup_ratio", inst)] == pytest.approx(doc["speedup"], rel=1e-9)
    assert got[("specmodel_break_even_accept_tokens", inst)] == pytest.approx(doc["break_even_accept_tokens"])
    assert got[("specmodel_speculation_pays", inst)] == (1.0 if doc["verdict"] == "GO" else 0.0)
    (verdict,) = [dict(k[1]) for k in got if k[0] == "specmodel_verdict_info"]
    assert verdict["verdict"] == doc["verdict"] and verdict["advice"] == doc["advice"]
    assert "Traceback" not in err


def test_serve_with_a_log_source_is_one_line_exit_2(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("")
    r = subprocess.run(specmodel_exe() + ["watch", str(log), "--serve", "0", "--once"], capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--serve" in r.stderr, r.stderr
