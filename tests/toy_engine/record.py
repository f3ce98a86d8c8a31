"""The toy engine's record: counters on its page, chains only, its flags and per-batch schedule."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from specmodel.engines.base import COUNTERS, ConfigLike, EngineSpec, ScheduleLike
from specmodel.errors import SpecmodelError
from tests.toy_engine import log, metrics

NAME = "toy"
SOURCE = "tests/toy_engine/record.py"


def paste(c: ConfigLike, algorithm: str) -> str | None:
    return f"--toy-draft {c.num_draft_tokens - 1}" if c.topk == 1 else None


def write_band(sched: ScheduleLike, static: ScheduleLike, algorithm: str, base: dict[str, Any],
               options: dict[str, Any]) -> dict[str, Any]:
    return {"per_batch": [[r.start, r.end, r.k] for r in sched.ranges]}


def check_band(band: dict[str, Any], where: str) -> None:
    if not isinstance(band.get(NAME), dict) or "per_batch" not in band[NAME]:
        raise SpecmodelError(f"{where}.toy.per_batch: missing")


def format_band(band: dict[str, Any]) -> list[str]:
    return [f"    toy:    {json.dumps(band[NAME]['per_batch'])}"]


def schedule_notes(scheds: Sequence[ScheduleLike], base: dict[str, Any]) -> list[str]:
    return []


SPEC = EngineSpec(name=NAME, label="Toy", metrics_kind=COUNTERS, metrics_format=metrics.NAME, log_format=log.NAME,
                  metric_names=(metrics.DRAFTS, metrics.ACCEPTED), methods=("EAGLE3",), method_for=str.upper,
                  chains_only=True, static_trees=False, paste=paste, base_config=lambda a, u, d: {},
                  write_band=write_band, check_band=check_band, format_band=format_band,
                  schedule_notes=schedule_notes, schedule_source=SOURCE)
