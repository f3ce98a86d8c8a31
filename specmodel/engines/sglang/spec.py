"""SGLang as a record of the engine registry: its methods, and the flags and schedule it reads.
Readers: :mod:`sglang_log`, :mod:`sglang_metrics`; the hook: ``specmodel.engines.sglang.hook``.

Schedule encoding: SGLang 0.5.23 ``--speculative-adaptive --speculative-adaptive-config FILE``
(``srt/speculative/adaptive_spec_params.py``): a JSON object keyed by batch size (the slot used is
the largest key <= the batch, after padding the batch up to a CUDA-graph size), each
``{"candidate_steps": [...]}``; one candidate pins the steps, 0 disables drafting; topk 1 only.
SGLang 0.5.5 has no per-batch control: static flags per range and the switch-off batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specmodel.engines.base import GAUGES, ConfigLike, EngineSpec, RangeLike, ScheduleLike
from specmodel.engines.sglang import log as sglang_log
from specmodel.engines.sglang import metrics as sglang_metrics
from specmodel.errors import SpecmodelError
from specmodel.schema.phases import is_host_proposer, methods_of

NAME = "sglang"
ADAPTIVE_SOURCE = "sglang 0.5.23: srt/speculative/adaptive_spec_params.py, srt/arg_groups/fields/spec.py"
STATIC_SOURCE = "sglang 0.5.5: srt/server_args.py (no per-batch speculation control)"
DEFAULT_CONFIG_PATH = "adaptive.json"


def method_for(algorithm: str) -> str:
    return algorithm.upper()


def paste(c: ConfigLike, algorithm: str) -> str | None:
    return (f"--speculative-algorithm {method_for(algorithm)} --speculative-num-steps {c.steps} "
            f"--speculative-eagle-topk {c.topk} --speculative-num-draft-tokens {c.num_draft_tokens}")


def base_config(algorithm: str, user: dict[str, Any] | None, drafter: str | None) -> dict[str, Any]:
    return {}


def adaptive_config(sched: ScheduleLike) -> dict[str, Any] | None:
    """``--speculative-adaptive-config`` body: one slot per range start, each pinned to its k (one
    candidate, so the EMA never moves it). None when k is 0 everywhere."""
    if sched.max_k == 0:
        return None
    return {str(r.start): {"candidate_steps": [r.k]} for r in sched.ranges}


def adaptive_flags(sched: ScheduleLike, algorithm: str, config_path: str) -> str | None:
    if sched.max_k == 0:
        return None
    return (f"--speculative-algorithm {method_for(algorithm)} --speculative-adaptive --speculative-adaptive-config "
            f"{config_path} --speculative-num-steps {sched.max_k} --speculative-eagle-topk 1")


def static_flags(r: RangeLike, algorithm: str) -> str | None:
    """Static flags for one range (any SGLang version); None where speculation is off."""
    if r.k == 0:
        return None
    return paste(r, algorithm)


def write_band(sched: ScheduleLike, static: ScheduleLike, algorithm: str, base: dict[str, Any],
               options: dict[str, Any]) -> dict[str, Any]:
    path = str(options.get("sglang_config_path") or DEFAULT_CONFIG_PATH)
    if is_host_proposer(algorithm):
        # adaptive steps retune a drafter's forwards (EAGLE-family workers); NGRAM has none: static flags only
        return {"adaptive_config": None, "adaptive_flags": None,
                "static": [{"start": r.start, "end": r.end, "flags": static_flags(r, algorithm)} for r in static.ranges]}
    return {"adaptive_config": adaptive_config(sched), "adaptive_flags": adaptive_flags(sched, algorithm, path),
            "static": [{"start": r.start, "end": r.end, "flags": static_flags(r, algorithm)} for r in static.ranges]}


def check_band(band: dict[str, Any], where: str) -> None:
    sg = band.get(NAME)
    if not isinstance(sg, dict) or not isinstance(sg.get("static"), list):
        raise SpecmodelError(f"{where}.sglang: expected an object with a static list")


def format_band(band: dict[str, Any]) -> list[str]:
    import json

    sg, out = band[NAME], []
    if sg["adaptive_flags"]:
        out.append(f"    SGLang >= 0.5.23: {sg['adaptive_flags']}")
        out.append(f"      with {json.dumps(sg['adaptive_config'], separators=(',', ':'))} in that file")
    for st in sg["static"]:
        out.append(f"    SGLang 0.5.5 batch {st['start']}-{st['end']}: {st['flags'] or 'no speculative flags'}")
    return out


def schedule_notes(scheds: Sequence[ScheduleLike], base: dict[str, Any]) -> list[str]:
    return ["SGLang >= 0.5.23 pads the batch up to a CUDA-graph batch size before it picks the slot "
            "(adaptive_spec_params.py), so each switch lands on the next CUDA-graph size; 0.5.5 cannot "
            "switch at run time: serve batches above the switch-off point without speculation"]


SPEC = EngineSpec(
    name=NAME, label="SGLang", metrics_kind=GAUGES, metrics_format=sglang_metrics.NAME, log_format=sglang_log.NAME,
    metric_names=(sglang_metrics.ACCEPT_LEN,), methods=tuple(m.name for m in methods_of(NAME)), method_for=method_for,
    chains_only=False, static_trees=True, paste=paste, base_config=base_config, write_band=write_band,
    check_band=check_band, format_band=format_band, schedule_notes=schedule_notes,
    schedule_source=f"{ADAPTIVE_SOURCE}; {STATIC_SOURCE}", hook_module="specmodel.engines.sglang.hook",
    step_format="sglang-forward")
