"""The fleet watch at scale, through the installed command: the time one `watch --prometheus`
interval takes for N simulated vLLM servers (a stand-in Prometheus API, tests/fake_prometheus.py,
holding each server's recorded pages at one scrape per SCRAPE_S over the window), and the
exporter's CPU per server per scrape (`--serve`: the process' own CPU time, read from /proc,
across repeated scrapes of its /metrics).

    .venv/bin/python benchmarks/bench_fleet.py [--servers 100] [--scrapes 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.fake_prometheus import FakePrometheus  # noqa: E402
from tests.vllm_engine import free_port  # noqa: E402

VW = REPO / "tests" / "data" / "vllm_cpu_032_watch" / "tp1_ngram"
SCRAPE_S = 5.0
WINDOW_S = 60.0
EXE = str(Path(sys.executable).parent / "specmodel")


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime + stime


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--servers", type=int, default=100)
    ap.add_argument("--scrapes", type=int, default=200)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    p0, p1 = (VW / "metrics_0.txt").read_text(), (VW / "metrics_1.txt").read_text()
    targets = REPO / "benchmarks" / ".fleet_targets.json"
    targets.write_text(json.dumps({"targets": [{"match": {"model": "tiny"}, "profile": str(VW / "profile"),
                                                "method": "ngram"}]}))
    n_scrapes = int(WINDOW_S / SCRAPE_S)

    def populate(fp: FakePrometheus) -> None:
        # the window as it stands now (each run reads a fresh one: the stand-in's clock does not move)
        fp.series.clear()
        now = time.time()
        for i in range(a.servers):
            t = {"job": "vllm", "instance": f"10.0.{i // 250}.{i % 250}:8000", "model": "tiny", "tp": "1"}
            for j in range(n_scrapes):  # the counters grow from page 0 to page 1 over the window
                fp.add(t, now - WINDOW_S + 20 + j * (WINDOW_S - 21) / (n_scrapes - 1), p0 if j == 0 else p1)

    with FakePrometheus() as fp:
        cmd = [EXE, "watch", "--prometheus", fp.url, "--selector", '{job="vllm"}', "--targets", str(targets),
               "--window", str(WINDOW_S), "--json"]
        walls = []
        for _ in range(a.reps):
            populate(fp)
            t0 = time.perf_counter()
            r = subprocess.run(cmd + ["--once"], capture_output=True, text=True, timeout=600)
            walls.append(time.perf_counter() - t0)
            assert r.returncode == 0, r.stderr
            docs = [json.loads(ln) for ln in r.stdout.splitlines()]
            assert len(docs) == a.servers and all("speedup" in d for d in docs), r.stdout[:500]
        # the interval's own share, without the process start: a second round in the same process
        populate(fp)
        t0 = time.perf_counter()
        r = subprocess.run(cmd + ["--count", "2", "--interval", "0.05"], capture_output=True, text=True, timeout=600)
        two = time.perf_counter() - t0
        assert r.returncode == 0, r.stderr
        populate(fp)
        port = free_port()
        proc = subprocess.Popen(cmd + ["--serve", str(port), "--interval", "3600"], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        try:
            assert proc.stdout is not None
            for _ in range(a.servers):
                proc.stdout.readline()  # the first round is printed: the exporter holds every server
            url = f"http://127.0.0.1:{port}/metrics"
            size = len(urllib.request.urlopen(url, timeout=30).read())
            c0 = _cpu_s(proc.pid)
            t0 = time.perf_counter()
            for _ in range(a.scrapes):
                urllib.request.urlopen(url, timeout=30).read()
            wall = time.perf_counter() - t0
            cpu = _cpu_s(proc.pid) - c0
        finally:
            proc.terminate()
            proc.wait(timeout=20)
    targets.unlink()
    out = {
        "servers": a.servers, "samples_per_server": n_scrapes,
        "fleet_once_wall_s_median": statistics.median(walls), "fleet_once_wall_s": walls,
        "fleet_second_interval_wall_s": two - statistics.median(walls),
        "exporter_page_bytes": size, "exporter_scrapes": a.scrapes,
        "exporter_cpu_s_per_scrape": cpu / a.scrapes,
        "exporter_cpu_us_per_server_per_scrape": cpu / a.scrapes / a.servers * 1e6,
        "exporter_wall_s_per_scrape": wall / a.scrapes,
    }
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
