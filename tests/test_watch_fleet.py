"""`specmodel watch --prometheus URL`: a fleet read from a Prometheus API (tests/fake_prometheus.py
holds recorded vLLM pages stamped with scrape times), each server against the profile its labels map
to; bad input one line per server with the others still read; the exporter's gauges."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import DATA, specmodel_exe
from tests.fake_prometheus import FakePrometheus
from tests.vllm_engine import free_port

VW = DATA / "vllm_cpu_032_watch" / "tp1_ngram"
P0, P1 = (VW / "metrics_0.txt").read_text(), (VW / "metrics_1.txt").read_text()
A = {"job": "vllm", "instance": "a:8000", "model": "tiny", "tp": "1"}


def _targets(tmp_path: Path, *entries: dict) -> str:
    p = tmp_path / "fleet.json"
    p.write_text(json.dumps({"targets": list(entries) or [{"match": {"model": "tiny"}, "profile": str(VW / "profile"),
                                                            "method": "ngram"}]}))
    return str(p)


def _fleet(url: str, targets: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(specmodel_exe() + ["watch", "--prometheus", url, "--selector", '{job="vllm"}',
                                             "--targets", targets, "--window", "60", *args],
                          capture_output=True, text=True, timeout=timeout)


def _docs(out: str) -> dict[str, dict]:
    docs = [json.loads(ln) for ln in out.splitlines() if ln.strip()]
    assert all(d["schema"] == "specmodel.watch" for d in docs)
    return {d["server"]: d for d in docs}


def test_fleet_reading_is_the_counters_over_the_window_and_agrees_with_watching_the_server(tmp_path):
    now = time.time()
    with FakePrometheus() as fp:
        fp.add(A, now - 30, P0)
        fp.add(A, now - 5, P1)
        r = _fleet(fp.url, _targets(tmp_path), "--once", "--json")
    assert r.returncode == 0, r.stderr
    d = _docs(r.stdout)["a:8000"]
    # hand-derived from the two pages: drafts 3 -> 208, accepted 5 -> 426, per position 3/1/1 -> 182/133/111
    assert d["observed"]["accept_mean_tokens"] == pytest.approx(1 + 421 / 205, abs=1e-9)
    assert d["observed"]["per_position"] == pytest.approx([179 / 205, 132 / 205, 110 / 205])
    assert d["observed"]["steps"] == 3 and d["observed"]["method"] == "ngram"
    assert d["labels"]["model"] == "tiny" and 4 <= d["age_s"] <= 30
    # the same two pages served to the single-server watch: the same verdict and prediction
    from tests.metrics_server import PageServer

    with PageServer([P0, P1]) as srv:
        one = subprocess.run(specmodel_exe() + ["watch", srv.url, "--profile", str(VW / "profile"), "--method", "ngram",
                                                "--interval", "0.2", "--window", "100", "--once", "--json"],
                             capture_output=True, text=True, timeout=300)
    assert one.returncode == 0, one.stderr
    single = json.loads(one.stdout.splitlines()[-1])
    for k in ("verdict", "advice", "speedup", "break_even_accept_tokens"):
        assert d[k] == pytest.approx(single[k]) if isinstance(d[k], float) else d[k] == single[k], k


def test_bad_servers_are_one_line_each_and_the_others_still_read(tmp_path):
    now = time.time()
    other_model = {**A, "instance": "b:8000", "model": "other"}
    other_tp = {**A, "instance": "c:8000", "tp": "2"}
    down = {**A, "instance": "d:8000"}
    with FakePrometheus() as fp:
        for t in (A, other_model, other_tp, down):
            fp.add(t, now - 30, P0)
            fp.add(t, now - 20, P1)
        fp.add(A, now - 5, P1)
        fp.add(other_model, now - 5, P1)
        fp.add(other_tp, now - 5, P1)
        fp.add_down(down, now - 5)
        r = _fleet(fp.url, _targets(tmp_path), "--once")
    assert r.returncode == 0, r.stderr
    lines = {ln.split()[1]: ln for ln in r.stdout.splitlines() if not ln.startswith(" ")}
    assert set(lines) == {"a:8000", "b:8000", "c:8000", "d:8000"}
    assert "speedup" in lines["a:8000"] and "GO" in lines["a:8000"]
    assert "no profile" in lines["b:8000"] and 'model="other"' in lines["b:8000"]
    assert "TP 2" in lines["c:8000"] and "TP 1" in lines["c:8000"]
    assert "server gone" in lines["d:8000"] and "up == 0" in lines["d:8000"]
    assert "Traceback" not in r.stderr


def test_a_restart_inside_the_window_is_said_not_averaged(tmp_path):
    now = time.time()
    with FakePrometheus() as fp:
        fp.add(A, now - 40, P1)
        fp.add(A, now - 30, P0)  # counters went backwards: the server restarted
        fp.add(A, now - 5, P1)
        r = _fleet(fp.url, _targets(tmp_path), "--count", "2", "--interval", "0.2", "--json")
    assert r.returncode == 0, r.stderr
    docs = [json.loads(ln) for ln in r.stdout.splitlines()]
    assert docs[0]["event"] == "counter reset"
    # the next interval reads only the scrapes since the restart: P0 -> P1, not P1 -> P0 -> P1
    assert docs[1]["observed"]["accept_mean_tokens"] == pytest.approx(1 + 421 / 205, abs=1e-9)
    assert docs[1]["observed"]["span_s"] == pytest.approx(25, abs=0.01)


@pytest.mark.parametrize("case, args, expect", [
    ("unreachable", [], "Connection refused"),
    ("no match", ["--selector", '{job="nothing"}'], "matches no series"),
    ("bad selector", ["--selector", "up{job=\"x\"}"], "label matchers only"),
])
def test_bad_fleet_input_is_one_line_exit_2(tmp_path, case, args, expect):
    with FakePrometheus() as fp:
        fp.add(A, time.time() - 5, P1)
        url = f"http://127.0.0.1:{free_port()}" if case == "unreachable" else fp.url
        r = subprocess.run(specmodel_exe() + ["watch", "--prometheus", url, "--targets", _targets(tmp_path),
                                              "--selector", '{job="vllm"}', "--once", *args],
                           capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and expect in r.stderr, r.stderr


def test_targets_file_errors_name_the_field(tmp_path):
    bad = tmp_path / "t.json"
    bad.write_text(json.dumps({"targets": [{"match": {"model": "tiny"}, "profile": "p", "steps": "three"}]}))
    r = subprocess.run(specmodel_exe() + ["watch", "--prometheus", "http://127.0.0.1:1", "--targets", str(bad)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "targets[0].steps" in r.stderr and "Traceback" not in r.stderr


def _scrape(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(url, timeout=10).read().decode()
    assert "# HELP specmodel_predicted_speedup_ratio" in text and "# TYPE specmodel_predicted_speedup_ratio gauge" in text
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_exporter_serves_each_servers_reading_as_labelled_gauges(tmp_path):
    now = time.time()
    b = {**A, "instance": "b:8000", "model": "other"}
    port = free_port()
    with FakePrometheus() as fp:
        for t in (A, b):
            fp.add(t, now - 30, P0)
            fp.add(t, now - 5, P1)
        proc = subprocess.Popen(specmodel_exe() + ["watch", "--prometheus", fp.url, "--selector", '{job="vllm"}',
                                                   "--targets", _targets(tmp_path), "--window", "60", "--json",
                                                   "--interval", "1", "--count", "4", "--serve", str(port)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            got: dict = {}
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    got = _scrape(f"http://127.0.0.1:{port}/metrics")
                except OSError:
                    got = {}
                if any(k[0] == "specmodel_verdict_info" for k in got):
                    break
                time.sleep(0.2)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 0, err
    first = json.loads(out.splitlines()[0])
    key = tuple(sorted(A.items()))  # the server's target labels (those every series of it carries, `up` too)
    assert got[("specmodel_observed_accept_tokens", key)] == pytest.approx(1 + 421 / 205, rel=1e-9)
    assert got[("specmodel_predicted_speedup_ratio", key)] == pytest.approx(first["speedup"], rel=1e-9)
    assert got[("specmodel_break_even_accept_tokens", key)] == pytest.approx(first["break_even_accept_tokens"])
    assert got[("specmodel_speculation_pays", key)] == (1.0 if first["verdict"] == "GO" else 0.0)
    verdicts = [k for k in got if k[0] == "specmodel_verdict_info" and ("instance", "a:8000") in k[1]]
    assert len(verdicts) == 1 and ("verdict", first["verdict"]) in verdicts[0][1]
    # the server without a profile: an event series, no figures
    assert any(k[0] == "specmodel_server_event_info" and ("event", "no profile") in k[1] for k in got)
    assert not any(k[0] == "specmodel_predicted_speedup_ratio" and ("instance", "b:8000") in k[1] for k in got)
    ages = [v for k, v in got.items() if k[0] == "specmodel_reading_age_seconds" and ("instance", "a:8000") in k[1]]
    assert len(ages) == 1 and 4 <= ages[0] <= 70
