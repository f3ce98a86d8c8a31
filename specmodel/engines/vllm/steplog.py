"""One vLLM hook rank file (``specmodel.vllm_step`` JSONL, written by
:mod:`specmodel.engines.vllm.hook`) read back and validated: every field the summary reads is
checked here, so a malformed record is one line naming the file, line and field.
Runs anywhere: no vLLM, no torch."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from specmodel.engines.hook.records import check_place
from specmodel.errors import SpecmodelError
from specmodel.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_HOOK_STEP_S,
    MAX_LAYERS,
    MAX_STEP_TOKENS,
    MAX_TP,
)
from specmodel.schema.formats import PROBE, VLLM_STEP

STEP_KINDS = ("decode", "verify", "extend")
#: the seconds fields of a step record (null allowed where the part did not run)
_SECONDS = ("forward_s", "forward_allreduce_s", "draft_s", "draft_allreduce_s", "gap_s", "draft_first_s",
            "draft_first_allreduce_s", "host_step_s", "gpu_step_s", "gpu_gap_s")
_COUNTS = ("forward_n_allreduce", "draft_n_allreduce", "spec_tokens", "draft_first_n_allreduce", "dropped_steps")
#: ``step_clock`` of a v2 step: the clock ``step_s`` / ``overhead_s`` (and the gap a row adds) are on
CLOCKS = ("cuda_event", "perf_counter")
#: the meta line's place of the process (v2): ranks and sizes
_PLACE = ("tp_rank", "pp_rank", "dp_rank", "pp_size", "dp_size", "max_pending_steps")


@dataclass(frozen=True, kw_only=True)
class StepLog:
    """One rank file, validated. ``runs``: (meta, its steps) per server process that wrote to the
    file (a meta line starts one; steps before any meta belong to an empty one)."""

    path: str
    meta: tuple[dict[str, Any], ...]
    steps: tuple[dict[str, Any], ...]
    truncated: bool = False
    runs: tuple[tuple[dict[str, Any], tuple[dict[str, Any], ...]], ...] = ()
    #: the calibration probes (:mod:`specmodel.engines.hook.probe`), in file order
    probes: tuple[dict[str, Any], ...] = ()


def _num(rec: dict[str, Any], key: str, where: str, *, optional: bool = False, hi: float = MAX_HOOK_STEP_S) -> None:
    v = rec.get(key)
    if v is None and optional:
        return
    # (a range test, not math.isfinite: NaN fails it, and a 400-digit integer does not overflow it)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
        raise SpecmodelError(f"{where}: {key}: expected a finite number in 0..{hi:g}, got {v!r}")


def _int(rec: dict[str, Any], key: str, where: str, *, lo: int, hi: int, optional: bool = False) -> None:
    v = rec.get(key)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise SpecmodelError(f"{where}: {key}: expected an integer in {lo}..{hi}, got {v!r}")


def _str(rec: dict[str, Any], key: str, where: str) -> None:
    v = rec.get(key)
    if v is not None and not isinstance(v, str):
        raise SpecmodelError(f"{where}: {key}: expected a string or null, got {v!r}")


def _check_step(rec: dict[str, Any], where: str) -> None:
    """Every field the summary (:func:`specmodel.engines.vllm.hooklog.summarize`) reads, checked (a
    string, NaN or infinity is one line, not a crash)."""
    if rec.get("kind") not in STEP_KINDS:
        raise SpecmodelError(f"{where}: kind: expected one of {', '.join(STEP_KINDS)}, got {rec.get('kind')!r}")
    _int(rec, "batch", where, lo=1, hi=MAX_BATCH)
    _int(rec, "tokens", where, lo=1, hi=MAX_STEP_TOKENS)
    if rec["tokens"] < rec["batch"]:
        raise SpecmodelError(f"{where}: tokens: must be >= batch ({rec['batch']}), got {rec['tokens']}")
    for k in ("step_s", "overhead_s"):
        _num(rec, k, where)
    for k in _SECONDS:
        _num(rec, k, where, optional=True)
    _num(rec, "context_tokens", where, optional=True, hi=MAX_CONTEXT_TOKENS)
    for k in _COUNTS:
        _int(rec, k, where, lo=0, hi=MAX_STEP_TOKENS, optional=True)
    # (v3: 0 -- a V2 step whose proposal drafted nothing: skip_drafts, or K = 0 under a per-batch schedule)
    _int(rec, "draft_k", where, lo=0, hi=MAX_DRAFT_TOKENS, optional=True)
    _str(rec, "draft_method", where)
    if rec.get("step_clock") is not None and rec["step_clock"] not in CLOCKS:
        raise SpecmodelError(f"{where}: step_clock: expected one of {', '.join(CLOCKS)} or null, "
                             f"got {rec['step_clock']!r}")
    if rec.get("step_clock") == "cuda_event" and rec.get("gpu_step_s") is None:
        raise SpecmodelError(f"{where}: gpu_step_s: a step on the cuda_event clock needs its GPU span")


def _check_meta(rec: dict[str, Any], where: str) -> None:
    from specmodel.engines.seams import check_seams_meta

    check_seams_meta(rec, where)
    _int(rec, "tp_size", where, lo=1, hi=MAX_TP, optional=True)
    for k in ("vllm_version", "model_path", "served_model_name", "device", "device_name", "cpu_name", "clock",
              "model_runner", "model_runner_changed"):
        _str(rec, k, where)
    rank = rec.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, (str, int))):
        raise SpecmodelError(f"{where}: rank: expected a string or an integer, got {rank!r}")
    check_place(rec, where, _PLACE)
    layers = rec.get("num_hidden_layers")  # (v3) {"target": n | null, "draft": n | null}
    if layers is not None:
        if not isinstance(layers, dict):
            raise SpecmodelError(f"{where}: num_hidden_layers: expected an object or null, got {layers!r}")
        for k in ("target", "draft"):
            _int(layers, k, f"{where}: num_hidden_layers", lo=1, hi=MAX_LAYERS, optional=True)
    comp = rec.get("compilation")  # (v3) the engine's compilation settings, as it names them
    if comp is not None and not isinstance(comp, dict):
        raise SpecmodelError(f"{where}: compilation: expected an object or null, got {comp!r}")
    spec = rec.get("spec")
    if spec is not None:
        if not isinstance(spec, dict):
            raise SpecmodelError(f"{where}: spec: expected an object or null, got {spec!r}")
        _str(spec, "method", f"{where}: spec")
        _int(spec, "num_speculative_tokens", f"{where}: spec", lo=1, hi=MAX_DRAFT_TOKENS, optional=True)


def read_step_log(path: str | os.PathLike[str]) -> StepLog:
    """Read one rank file (``rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl``, or v1's ``rank<k>.jsonl``; see
    :func:`specmodel.engines.hook.records.read_records`)."""
    from specmodel.engines.hook.probe import check_probe
    from specmodel.engines.hook.records import Runs, read_records

    recs, truncated = read_records(path, VLLM_STEP, "specmodel vllm step log")
    runs = Runs()
    steps: list[dict[str, Any]] = []
    probes: list[dict[str, Any]] = []
    for where, rec in recs:
        kind = rec.get("type")
        if PROBE.matches(rec):
            check_probe(rec, where)
            probes.append(rec)
        elif kind == "meta":
            _check_meta(rec, where)
            runs.meta(rec)
        elif kind == "step":
            _check_step(rec, where)
            steps.append(rec)
            runs.add(rec)
        else:
            raise SpecmodelError(f"{where}: type: expected 'meta' or 'step', got {kind!r}")
    return StepLog(path=str(path), meta=tuple(runs.metas), steps=tuple(steps), truncated=truncated,
                   runs=runs.frozen(), probes=tuple(probes))

