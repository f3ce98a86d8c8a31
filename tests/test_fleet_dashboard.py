"""`specmodel plan --grafana-dashboard FILE`: a dashboard whose every query, its variables set as Grafana
sets them, is PromQL that promtool parses (offline: each wrapped as a recording rule) and reads the
series the exporter and the rules write; a bad --rules-window is one line, exit 2. The live check,
every query against a real Prometheus scraping live servers: tests/test_fleet_prometheus_live.py."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from tests.conftest import run_cli

PROMTOOL = shutil.which("promtool")


def _write(tmp_path, *extra: str) -> tuple[dict, dict]:
    dash, rules = tmp_path / "dash.json", tmp_path / "rules.yml"
    r = run_cli("plan", "--accept-len", "3", "--prometheus-rules", str(rules), "--grafana-dashboard", str(dash),
                *extra, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(dash.read_text()), json.loads(rules.read_text())


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing: `make prometheus` installs it")
def test_every_dashboard_query_parses_and_reads_series_the_rules_and_the_exporter_write(tmp_path):
    from specmodel.live.export import GAUGES, PREFIX

    dash, rules = _write(tmp_path, "--rules-window", "2m")
    window = next(v for v in dash["templating"]["list"] if v["name"] == "window")
    assert window["current"]["value"] == "2m"  # the dashboard reads the recorded names of the rules written with it
    exprs = [t["expr"].replace("$instance", ".*").replace("$window", "2m") for p in dash["panels"] for t in p["targets"]]
    assert len(exprs) >= 10 and all("$" not in e for e in exprs)
    check = tmp_path / "dash-as-rules.yml"
    check.write_text(json.dumps({"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:q{i}", "expr": e} for i, e in enumerate(exprs)]}]}))
    r = subprocess.run([PROMTOOL, "check", "rules", str(check)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    # every specmodel series a query names is one the rules record or the exporter serves
    recorded = {g["record"] for grp in rules["groups"] for g in grp["rules"] if "record" in g}
    served = {PREFIX + n for n, _, _ in GAUGES} | {PREFIX + n for n in ("verdict_info", "server_event_info",
                                                                        "reading_age_seconds")}
    named = {m for e in exprs for m in re.findall(r"specmodel[_:][a-z0-9_:]+", e)}
    assert named and named <= recorded | served, named - recorded - served
    assert recorded - {"specmodel:proposal_ratio:rate2m"} <= named  # every figure the rules record is drawn
    # provisionable: a uid, each panel and query on the datasource variable
    assert dash["uid"] and all(p["datasource"]["uid"] == "${datasource}" for p in dash["panels"])


@pytest.mark.parametrize("flag, value", [("--rules-window", "5x"), ("--rules-for", "0m"), ("--rules-window", "")])
def test_a_bad_rules_duration_is_one_line_exit_2(tmp_path, flag, value):
    r = run_cli("plan", "--accept-len", "3", "--prometheus-rules", str(tmp_path / "r.yml"), flag, value)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and flag in r.stderr, r.stderr
    assert not (tmp_path / "r.yml").exists()
