"""A provisionable Grafana dashboard over the fleet's series (``plan … --grafana-dashboard FILE``).

Two sources side by side, per server: the exporter's gauges (``watch --prometheus … --serve``: the
profile's prediction at the observed acceptance, batch and context, the verdict and the advice) and
the recording rules' series (``plan --prometheus-rules``: the same break-even computed by Prometheus
from the engine's counters, with no process of ours). The engine measures no speedup of its own (no
baseline runs beside it): what is measured is the acceptance and the generated tokens per second.

Variables: ``datasource`` (any Prometheus), ``instance`` (the servers, all by default), ``window``
(the rules' rate window, part of their recorded names: ``specmodel:accept_tokens:rate5m``).
"""

from __future__ import annotations

from typing import Any

from specmodel.engines.vllm import metrics as vm
from specmodel.live.export import PREFIX
from specmodel.live.rules import WINDOW

UID = "specmodel-fleet"
DS = {"type": "prometheus", "uid": "${datasource}"}
SEL = 'instance=~"$instance"'


def _target(expr: str, legend: str, ref: str, *, instant: bool = False) -> dict[str, Any]:
    t: dict[str, Any] = {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": ref}
    if instant:
        t.update({"instant": True, "range": False, "format": "table"})
    return t


def _panel(pid: int, title: str, kind: str, targets: list[dict[str, Any]], grid: tuple[int, int, int, int],
           description: str, unit: str = "none", **extra: Any) -> dict[str, Any]:
    x, y, w, h = grid
    return {"id": pid, "type": kind, "title": title, "description": description, "datasource": DS,
            "gridPos": {"x": x, "y": y, "w": w, "h": h}, "targets": targets,
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []}, "options": {}, **extra}


def panels() -> list[dict[str, Any]]:
    g = PREFIX
    return [
        _panel(1, "Predicted speedup: the profile at the observed point vs the rules from the engine's counters",
               "timeseries", [
                   _target(f"{g}predicted_speedup_ratio{{{SEL}}}", "{{instance}} predicted", "A"),
                   _target(f"{g}predicted_speedup_low_ratio{{{SEL}}}", "{{instance}} band low", "B"),
                   _target(f"{g}predicted_speedup_high_ratio{{{SEL}}}", "{{instance}} band high", "C"),
                   _target(f"specmodel:predicted_speedup_ratio{{{SEL}}}", "{{instance}} rules", "D"),
               ], (0, 0, 12, 8), "Decode tokens/s with speculation over without; below 1 speculation costs.",
               unit="x"),
        _panel(2, "Measured: generated tokens/s and requests per engine step", "timeseries", [
            _target(f"sum without(engine) (rate({vm.GEN_TOKENS}{{{SEL}}}[$window]))", "{{instance}} tok/s", "A"),
            _target(f"specmodel:batch_requests:rate$window{{{SEL}}}", "{{instance}} batch", "B"),
        ], (12, 0, 12, 8), "The engine's own counters over the rules' window."),
        _panel(3, "Acceptance against break-even (tokens per verify step, bonus included)", "timeseries", [
            _target(f"{g}observed_accept_tokens{{{SEL}}}", "{{instance}} observed", "A"),
            _target(f"{g}break_even_accept_tokens{{{SEL}}}", "{{instance}} break-even", "B"),
            _target(f"specmodel:accept_tokens:rate$window{{{SEL}}}", "{{instance}} observed (rules)", "C"),
            _target(f"specmodel:break_even_accept_tokens{{{SEL}}}", "{{instance}} break-even (rules, batch band "
                    "{{batch_band}})", "D"),
        ], (0, 8, 12, 8), "Speculation pays where the observed accept length is above break-even."),
        _panel(4, "Margin to break-even (tokens)", "timeseries", [
            _target(f"{g}accept_margin_tokens{{{SEL}}}", "{{instance}}", "A"),
            _target(f"specmodel:accept_margin_tokens{{{SEL}}}", "{{instance}} (rules)", "B"),
        ], (12, 8, 12, 8), "Observed minus break-even accept length; the alert fires below 0."),
        _panel(5, "Verdict and advice per server", "table", [
            _target(f"{g}verdict_info{{{SEL}}}", "", "A", instant=True),
            _target(f"{g}speculation_pays{{{SEL}}}", "", "B", instant=True),
            _target(f"{g}advised_switch_off_above_batch_requests{{{SEL}}}", "", "C", instant=True),
            _target(f"{g}advised_draft_steps{{{SEL}}}", "", "D", instant=True),
            _target(f"{g}reading_age_seconds{{{SEL}}}", "", "E", instant=True),
        ], (0, 16, 24, 8), "The watch's verdict (GO / MARGINAL / NO-GO), its advice, and the reading's age.",
            transformations=[{"id": "merge", "options": {}}]),
        _panel(6, "Alerts and servers without a reading", "table", [
            _target(f'ALERTS{{alertname=~"Speculation.*", {SEL}}}', "", "A", instant=True),
            _target(f"{g}server_event_info{{{SEL}}}", "", "B", instant=True),
        ], (0, 24, 24, 6), "SpeculationBelowBreakEven / SpeculationCannotPay (the rules), and why a server has "
           "no reading (the watch: no profile, server gone, counter reset)."),
    ]


def dashboard(window: str = WINDOW) -> dict[str, Any]:
    """The dashboard document (Grafana's JSON model), the rules' window as the ``window`` default."""
    return {
        "uid": UID, "title": "specmodel: is speculation paying", "tags": ["specmodel", "speculative-decoding"],
        "schemaVersion": 39, "version": 1, "editable": True, "refresh": "30s", "timezone": "browser",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [
            {"name": "datasource", "label": "Prometheus", "type": "datasource", "query": "prometheus",
             "current": {}, "hide": 0},
            {"name": "instance", "label": "Server", "type": "query", "datasource": DS,
             "query": {"query": f"label_values({PREFIX}reading_timestamp_seconds, instance)", "refId": "instance"},
             "definition": f"label_values({PREFIX}reading_timestamp_seconds, instance)", "refresh": 2,
             "multi": True, "includeAll": True, "allValue": ".*", "current": {"text": "All", "value": "$__all"}},
            {"name": "window", "label": "Rules window", "type": "custom", "query": window,
             "current": {"text": window, "value": window}, "options": [{"text": window, "value": window,
                                                                         "selected": True}], "hide": 2},
        ]},
        "annotations": {"list": []},
        "panels": panels(),
    }


def queries(doc: dict[str, Any]) -> list[tuple[str, str, str]]:
    """(panel title, refId, expr) of every query in the dashboard, as written (variables unexpanded)."""
    return [(p["title"], t["refId"], t["expr"]) for p in doc["panels"] for t in p["targets"]]
