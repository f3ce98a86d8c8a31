"""A real Prometheus (Debian's 2.42, started here on 127.0.0.1 with a temp config and data dir, stopped
by its pid) scraping two live vLLM CPU servers and the fleet watch's exporter: one server paying (ngram
k = 3 on a prompt whose n-grams recur: ~3 tokens per verify against a break-even of ~1.1) and one not
(a drafter of random weights: ~1.0 tokens per verify, below any break-even). The fleet watch reads
Prometheus and gives each its verdict; the exporter's gauges come back through Prometheus; the
recording rules' margin and the alert say the same; every query of the Grafana dashboard answers
with the series it is meant to show. The bad replica's drafter is then swapped back: its process is
replaced by one running ngram (service discovery re-points the replica, as a rolling replacement
does) and the alert clears while the rules read that replica's margin positive again -- not merely
because its series went quiet. The replacement is started beside the first two rather than after
the swap: on a loaded 2-core box a vLLM start alone was seen to take 5 min (importing vllm), and what
Prometheus and the watch see of the swap -- the replica's counters starting again from a process
with another drafter -- is the same.

Time scaled down, nothing else: 2 s scrapes, rules over a 10 s window held 3 s (the shipped defaults
are 5 m and 10 m), a fleet window of 12 s. Every wait is for a condition (bounded), none for a timer.
Added CI time: three server starts side by side (one start's wall time, ~35 s idle), ~1 min of readings."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import DATA, run_cli, specmodel_exe
from tests.vllm_engine import (
    ENV_PYTHON,
    KILL_TIMEOUT_S,
    PROMPT,
    VllmServer,
    draft_spec,
    free_port,
    ngram_spec,
    stop_group,
)

pytestmark = [pytest.mark.slow, pytest.mark.vllm]
NGRAM_PROFILE = DATA / "vllm_cpu_032_watch" / "tp1_ngram" / "profile"
DRAFT_PROFILE = DATA / "vllm_oos_tp1_1023" / "profile_base_draft_noisy.json"
SCRAPE_S = 2
RULES_WINDOW, RULES_FOR = "10s", "3s"
WAIT_S = 240.0
QUERY_WAIT_S = 180.0


def _wait_for(what: str, cond: Callable[[], Any], timeout_s: float = WAIT_S,
              show: Callable[[], Any] = lambda: None) -> Any:
    """Poll ``cond`` until it returns something truthy; fail after ``timeout_s`` showing ``show()``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.5)
    raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}; now: {show()!r}")


class Prometheus:
    """Debian's server on 127.0.0.1 with its own config and data dir; stopped by its own process group."""

    def __init__(self, tmp: Path, targets_sd: Path, rules: Path, exporter: str) -> None:
        exe = shutil.which("prometheus")
        if exe is None:
            if os.environ.get(ENV_PYTHON):  # under `make test`, which installs it: a missing server fails
                pytest.fail("prometheus missing: `make prometheus` installs Debian's package")
            pytest.skip("prometheus missing: `make prometheus` installs Debian's package (`make test` does it)")
        cfg = {"global": {"scrape_interval": f"{SCRAPE_S}s", "scrape_timeout": f"{SCRAPE_S}s",
                          "evaluation_interval": "1s"},
               "rule_files": [str(rules)],
               "scrape_configs": [
                   {"job_name": "vllm", "file_sd_configs": [{"files": [str(targets_sd)], "refresh_interval": "1s"}]},
                   # the exporter's series carry each server's own job/instance labels
                   {"job_name": "specmodel", "honor_labels": True, "static_configs": [{"targets": [exporter]}]}]}
        (tmp / "prometheus.yml").write_text(json.dumps(cfg))
        self.url = f"http://127.0.0.1:{free_port()}"
        self.log = open(tmp / "prometheus.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([exe, f"--config.file={tmp / 'prometheus.yml'}",
                                      f"--storage.tsdb.path={tmp / 'data'}",
                                      f"--web.listen-address={self.url.removeprefix('http://')}"],
                                     stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)
        _wait_for("Prometheus ready", self._ready, 60)

    def _ready(self) -> bool:
        assert self.proc.poll() is None, (Path(self.log.name).read_text()[-2000:])
        try:
            with urllib.request.urlopen(self.url + "/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query now; a refusal fails the test with Prometheus' own error. A query that
        times out is asked again: on a 2-core box running three engines a starved Prometheus answers
        late, which is no answer about the fleet (bounded: QUERY_WAIT_S in all)."""
        url = f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}"
        deadline = time.monotonic() + QUERY_WAIT_S
        while True:
            try:
                with urllib.request.urlopen(url, timeout=30) as r:
                    doc = json.loads(r.read())
                break
            except urllib.error.HTTPError as exc:
                doc = json.loads(exc.read())
                break
            except (TimeoutError, urllib.error.URLError, ConnectionError):
                assert self.proc.poll() is None, (Path(self.log.name).read_text()[-2000:])
                if time.monotonic() > deadline:
                    raise
                time.sleep(1)
        assert doc["status"] == "success", (expr, doc)
        return list(doc["data"]["result"])

    def by_instance(self, expr: str) -> dict[str, float]:
        return {s["metric"].get("instance", ""): float(s["value"][1]) for s in self.query(expr)}

    def stop(self) -> None:
        stop_group(self.proc, term_wait_s=30)
        self.log.close()


def _write_sd(path: Path, replicas: dict[str, tuple[VllmServer, str]]) -> None:
    """File service discovery: each replica's address, its name and the drafter it runs as target
    labels (atomic rename: Prometheus never reads half a file)."""
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [srv.url.removeprefix("http://")],
                                "labels": {"instance": name, "model": "tiny", "drafter": d}}
                               for name, (srv, d) in replicas.items()]))
    tmp.replace(path)


class Load:
    """One client per server, each looping greedy completions of the repetitive prompt until stopped;
    a request to a server being restarted fails and is tried again."""

    def __init__(self, servers: dict[str, VllmServer]) -> None:
        self.servers, self.stop_ev = servers, threading.Event()
        self.threads = [threading.Thread(target=self._loop, args=(k,), daemon=True) for k in servers]
        for t in self.threads:
            t.start()

    def _loop(self, key: str) -> None:
        while not self.stop_ev.is_set():
            try:
                self.servers[key].complete(PROMPT, max_tokens=32, timeout_s=60)
            except Exception:  # noqa: BLE001 - the server is restarting: try again
                time.sleep(0.5)

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(timeout=90)


class FleetWatch:
    """``specmodel watch --prometheus … --serve``: its JSON lines kept per server as they come."""

    def __init__(self, prom_url: str, targets: Path, serve: str) -> None:
        self.proc = subprocess.Popen(specmodel_exe() + [
            "watch", "--prometheus", prom_url, "--selector", '{job="vllm"}', "--targets", str(targets),
            "--window", "12", "--interval", "1", "--json", "--serve", serve],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.docs: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for ln in self.proc.stdout or ():
            if ln.strip():
                with self.lock:
                    self.docs.append(json.loads(ln))

    def latest(self) -> dict[str, dict[str, Any]]:
        with self.lock:
            return {d["server"]: d for d in self.docs if "server" in d}

    def since(self, n: int) -> list[dict[str, Any]]:
        with self.lock:
            return self.docs[n:]

    def stop(self) -> str:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            _, err = self.proc.communicate(timeout=KILL_TIMEOUT_S)
        return err or ""


def _verdicts(watch: FleetWatch, good: str, bad: str, bad_verdict: str) -> dict[str, Any] | None:
    assert watch.proc.poll() is None, f"the fleet watch exited: {watch.stop()[-3000:]}"
    docs = watch.latest()
    g, b = docs.get(good, {}), docs.get(bad, {})
    return docs if g.get("verdict") == "GO" and b.get("verdict") == bad_verdict else None


def _brief(docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    keys = ("verdict", "advice", "speedup", "break_even_accept_tokens", "best_steps", "switch_off_above_batch",
            "event", "detail")
    return {k: {f: d.get(f) for f in keys if f in d} | {"observed": d.get("observed")} for k, d in docs.items()}


def _dashboard_mismatches(prom: Prometheus, dash: dict[str, Any], good: str, bad: str) -> list[str]:
    """Every dashboard query, variables set as Grafana would (all servers, the rules' window), run: those
    a panel draws per server answer for both servers (ALERTS: the bad one only); the advised k and batch
    limit (absent where the optimizer ranks nothing at the observed point: this profile measured context
    0 only) and the event table may be empty, never another server."""
    from specmodel.live.dashboard import queries

    both, out = {good, bad}, []
    for title, ref, expr in queries(dash):
        q = expr.replace("$instance", ".*").replace("$window", RULES_WINDOW)
        inst = {s["metric"].get("instance") for s in prom.query(q)}
        if expr.startswith("ALERTS"):
            ok = inst == {bad}
        elif any(n in expr for n in ("advised_switch_off_above_batch_requests", "advised_draft_steps",
                                     "server_event_info")):
            ok = inst <= both
        else:
            ok = inst == both
        if not ok:
            out.append(f"{title} {ref}: {q} -> {sorted(map(str, inst))}")
    return out


def test_prometheus_scraping_two_live_servers_gives_each_its_verdict_and_the_alert_follows_the_drafter(
        vllm_python: Path, tiny_models: Any, tmp_path: Path) -> None:
    t0 = time.monotonic()
    phases: list[str] = []

    def phase(name: str) -> None:
        phases.append(f"{name} {time.monotonic() - t0:.0f}s")
    # the rules and the dashboard, as an operator writes them (the fleet runs ngram: its profile's break-even)
    rules, dash_path = tmp_path / "rules.yml", tmp_path / "dashboard.json"
    r = run_cli("plan", "--profile", str(NGRAM_PROFILE), "--accept-len", "3", "--steps", "3", "--prometheus-rules",
                str(rules), "--rules-window", RULES_WINDOW, "--rules-for", RULES_FOR, "--grafana-dashboard",
                str(dash_path), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    dash = json.loads(dash_path.read_text())
    targets = tmp_path / "fleet.json"
    targets.write_text(json.dumps({"targets": [
        {"match": {"drafter": "ngram"}, "profile": str(NGRAM_PROFILE), "method": "ngram"},
        {"match": {"drafter": "draft_random"}, "profile": str(DRAFT_PROFILE), "method": "draft_model"}]}))

    a_srv = VllmServer(python=vllm_python, model=tiny_models.target, spec=ngram_spec(3))
    b_srv = VllmServer(python=vllm_python, model=tiny_models.target, spec=draft_spec(tiny_models.draft_random, 3),
                       env={"VLLM_CPU_OMP_THREADS_BIND": "1"})  # the other core
    b_next = VllmServer(python=vllm_python, model=tiny_models.target, spec=ngram_spec(3),
                        env={"VLLM_CPU_OMP_THREADS_BIND": "1"})  # idle until it replaces b_srv
    good, bad = "replica-a", "replica-b"
    servers = {good: a_srv, bad: b_srv}
    exporter = f"127.0.0.1:{free_port()}"
    sd = tmp_path / "sd.json"
    prom = watch = load = None
    try:
        starts = [threading.Thread(target=s.start) for s in (a_srv, b_srv, b_next)]  # side by side
        for t in starts:
            t.start()
        for t in starts:
            t.join()
        for s in (a_srv, b_srv, b_next):
            assert s.proc is not None and s.proc.poll() is None, s.log_tail()
            s.wait_healthy()
        phase("servers up")
        _write_sd(sd, {good: (a_srv, "ngram"), bad: (b_srv, "draft_random")})
        prom = Prometheus(tmp_path, sd, rules, exporter)
        load = Load(servers)
        # an operator's Prometheus has scraped its fleet before anyone asks it (a selector matching nothing
        # on the first reading is the watch's error): wait for the servers' spec-decode series
        _wait_for("Prometheus' first scrapes of both servers' drafts", lambda: set(prom.by_instance(
            'vllm:spec_decode_num_drafts_total{job="vllm"} > 0')) == {good, bad}, show=lambda: prom.query("up"))
        watch = FleetWatch(prom.url, targets, exporter)
        phase("watch started")

        # 1. the fleet watch: each server against the profile its labels map to
        docs = _wait_for("the fleet watch's GO for ngram and NO-GO for the random drafter",
                         lambda: _verdicts(watch, good, bad, "NO-GO"), show=watch.latest)
        assert docs[good]["observed"]["accept_mean_tokens"] > docs[good]["break_even_accept_tokens"]
        assert docs[bad]["observed"]["accept_mean_tokens"] < 1.2  # a random drafter: (almost) nothing accepted
        assert docs[bad]["observed"]["method"] == "draft_model" and docs[bad]["speedup"] < 1
        phase("verdicts")
        # 2. the exporter's gauges, read back through Prometheus (honor_labels: each server's own labels)
        pays = _wait_for("the exporter's verdicts in Prometheus",
                         lambda: (lambda p: p if p == {good: 1.0, bad: 0.0} else None)(
                             prom.by_instance("specmodel_speculation_pays")))
        assert pays == {good: 1.0, bad: 0.0}
        info = {s["metric"]["instance"]: s["metric"]["verdict"] for s in prom.query("specmodel_verdict_info")}
        assert info == {good: "GO", bad: "NO-GO"}
        # 3. the rules, evaluated by Prometheus from the engine's counters: the bad server alerts, the good one not
        firing = 'ALERTS{alertname="SpeculationBelowBreakEven", alertstate="firing"}'
        _wait_for("the alert on the random drafter only", lambda: set(prom.by_instance(firing)) == {bad})
        margin = prom.by_instance("specmodel:accept_margin_tokens")
        assert margin[good] > 0 > margin[bad], margin
        phase("alert fired")
        # 4. every dashboard query answers with the servers it draws
        _wait_for("every dashboard query's series", lambda: not _dashboard_mismatches(prom, dash, good, bad), 60,
                  show=lambda: (_dashboard_mismatches(prom, dash, good, bad), _brief(watch.latest())))
        phase("dashboard")

        # 5. the drafter swapped back: the replica's process replaced by one running ngram
        mark = len(watch.since(0))
        b_srv.stop()
        _write_sd(sd, {good: (a_srv, "ngram"), bad: (b_next, "ngram")})
        servers[bad] = b_next
        _wait_for("the fleet watch's GO for the replaced replica", lambda: _verdicts(watch, good, bad, "GO"),
                  show=watch.latest)
        events = {d.get("event") for d in watch.since(mark) if d.get("server") == bad}
        assert events & {"server gone", "counter reset"}, events  # the restart was said, not averaged over

        def cleared() -> dict[str, float] | None:  # no alert while the rules read the margin positive
            m = prom.by_instance("specmodel:accept_margin_tokens")
            return m if m.get(bad, -1) > 0 and not prom.by_instance(firing) else None

        margin = _wait_for("the alert to clear with the replica's margin positive", cleared)
        assert margin[good] > 0 and margin[bad] > 0
        phase("alert cleared")
        print(f"\nfleet live: {', '.join(phases)}")
    finally:
        if load is not None:
            load.stop()
        err = watch.stop() if watch is not None else ""
        if prom is not None:
            prom.stop()
        for s in (a_srv, b_srv, b_next):
            s.stop()
    assert "Traceback" not in err, err[-3000:]
