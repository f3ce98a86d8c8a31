"""The toy server's ``/metrics`` page: monotone counters (``toy:drafts_total`` ...) and a gauge."""

from __future__ import annotations

from specmodel.engines.base import MetricsFormat, MetricsSample
from specmodel.engines.prom import model_name, parse_page, total

NAME = "toy-metrics"
DRAFTS, ACCEPTED, GEN, RUNNING = "toy:drafts_total", "toy:accepted_total", "toy:generated_total", "toy:running"


def sniff(text: str) -> bool:
    return "toy:" in text


def parse(text: str, where: str) -> MetricsSample:
    page = parse_page(text, where)
    return MetricsSample(engine="toy", drafts=total(page, DRAFTS), accepted_tokens=total(page, ACCEPTED),
                         gen_tokens=total(page, GEN), running=total(page, RUNNING), model=model_name(page))


def page(drafts: float, accepted: float, generated: float, running: float = 2.0, model: str = "moonshotai/Kimi-K2.5") -> str:
    """One page as the toy server would serve it."""
    lab = f'{{model_name="{model}"}}'
    return (f"# TYPE {DRAFTS} counter\n{DRAFTS}{lab} {drafts}\n{ACCEPTED}{lab} {accepted}\n"
            f"{GEN}{lab} {generated}\n{RUNNING}{lab} {running}\n")


FORMAT = MetricsFormat(name=NAME, description="toy /metrics page", help_name="toy /metrics", sniff=sniff, parse=parse)
