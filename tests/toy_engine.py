"""A made-up third engine, used only by tests/test_engine_spec.py: a counters /metrics plug-in
(``toy:`` metrics) and its EngineSpec record, registered through the registry's own hook. Run as
``python -m tests.toy_engine ARGS`` it is the specmodel CLI with the toy engine registered.

What it needed is what docs/engines.md lists for a new engine: this module (plug-in + record) and
the two registry lines (here: :func:`specmodel.engines.register`)."""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any

from specmodel.engines import register
from specmodel.engines.base import COUNTERS, ConfigLike, EngineSpec, MetricsFormat, MetricsSample, ScheduleLike
from specmodel.engines.prom import model_name, parse_page, total

NAME = "toy"
DRAFTS, ACCEPTED, GEN, RUNNING = "toy:drafts_total", "toy:accepted_total", "toy:generated_total", "toy:running"


def sniff(text: str) -> bool:
    return "toy:" in text


def parse(text: str, where: str) -> MetricsSample:
    page = parse_page(text, where)
    return MetricsSample(engine=NAME, drafts=total(page, DRAFTS), accepted_tokens=total(page, ACCEPTED),
                         gen_tokens=total(page, GEN), running=total(page, RUNNING),
                         model=model_name(page))


def paste(c: ConfigLike, algorithm: str) -> str | None:
    return f"--toy-draft {c.num_draft_tokens - 1}" if c.topk == 1 else None


def write_band(sched: ScheduleLike, static: ScheduleLike, algorithm: str, base: dict[str, Any],
               options: dict[str, Any]) -> dict[str, Any]:
    return {"per_batch": [[r.start, r.end, r.k] for r in sched.ranges]}


def check_band(band: dict[str, Any], where: str) -> None:
    from specmodel.errors import SpecmodelError

    if not isinstance(band.get(NAME), dict) or "per_batch" not in band[NAME]:
        raise SpecmodelError(f"{where}.toy.per_batch: missing")


def format_band(band: dict[str, Any]) -> list[str]:
    return [f"    toy:    {json.dumps(band[NAME]['per_batch'])}"]


def schedule_notes(scheds: Sequence[ScheduleLike], base: dict[str, Any]) -> list[str]:
    return []


METRICS = MetricsFormat(name="toy-metrics", description="toy /metrics page", help_name="toy /metrics",
                        sniff=sniff, parse=parse)
SPEC = EngineSpec(name=NAME, label="Toy", metrics_kind=COUNTERS, metrics_format=METRICS.name, log_format=None,
                  metric_names=(DRAFTS, ACCEPTED), methods=("EAGLE3",), method_for=str.upper, chains_only=True,
                  static_trees=False, paste=paste, base_config=lambda a, u, d: {}, write_band=write_band,
                  check_band=check_band, format_band=format_band, schedule_notes=schedule_notes,
                  schedule_source="tests/toy_engine.py")


def page(drafts: float, accepted: float, generated: float, running: float = 2.0, model: str = "moonshotai/Kimi-K2.5") -> str:
    lab = f'{{model_name="{model}"}}'
    return (f"# TYPE {DRAFTS} counter\n{DRAFTS}{lab} {drafts}\n{ACCEPTED}{lab} {accepted}\n"
            f"{GEN}{lab} {generated}\n{RUNNING}{lab} {running}\n")


register(SPEC, METRICS)

if __name__ == "__main__":
    from specmodel.cli import main

    sys.exit(main(sys.argv[1:]))
