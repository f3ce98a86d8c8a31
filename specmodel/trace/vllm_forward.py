"""Reading back what the vLLM hook (:mod:`specmodel.profile.vllm`) wrote -- one
``specmodel.vllm_step`` JSONL file per rank -- and turning it into a profile. Runs anywhere: no
vLLM, no torch.

What a vLLM profile row means (the cycle model's T_base and T_cycle must both carry what the
engine does around a forward, or a small model's host overhead -- a large share of its step --
would make every drafter look better than it is):

* ``decode`` / ``verify`` / ``extend`` rows are engine steps without the drafter: ``total_s`` =
  median over steps (every rank) of forward + the step's host work (``overhead_s``: input
  preparation, sampling / rejection, bookkeeping) + the gap before the step (the engine core's
  scheduling and output processing); ``allreduce_s`` = the all-reduces timed inside the forward,
  ``compute_s`` = the rest of the forward, ``other_s`` = the host part.
* ``draft`` rows (drafters that run a forward: ``draft_model``, EAGLE, ...): one drafter forward
  = the step's proposal time / k. vLLM's draft-model proposer runs its first forward over the
  verified tokens and the other k − 1 over one token per request; the split is not timed
  separately, so every forward is counted as the mean.
* host-side drafters (``ngram``): no draft row; the median proposal time per step is the
  profile's ``overhead_s`` (added to every speculative cycle, never to the baseline step).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.schema.formats import VLLM_STEP
from specmodel.schema.phases import VLLM_FORWARD_DRAFTERS
from specmodel.stats import iqr, median
from specmodel.units import ms

STEP_KINDS = ("decode", "verify", "extend")
COMMAND = "specmodel vllm"


@dataclass(frozen=True, kw_only=True)
class StepLog:
    """One rank file, validated."""

    path: str
    meta: tuple[dict[str, Any], ...]
    steps: tuple[dict[str, Any], ...]
    truncated: bool = False


def _num(rec: dict[str, Any], key: str, where: str, *, optional: bool = False) -> None:
    v = rec.get(key)
    if v is None and optional:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecmodelError(f"{where}: {key}: expected a finite number >= 0, got {v!r}")


def _check_step(rec: dict[str, Any], where: str) -> None:
    if rec.get("kind") not in STEP_KINDS:
        raise SpecmodelError(f"{where}: kind: expected one of {', '.join(STEP_KINDS)}, got {rec.get('kind')!r}")
    for k in ("batch", "tokens"):
        v = rec.get(k)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecmodelError(f"{where}: {k}: expected an integer >= 1, got {v!r}")
    if rec["tokens"] < rec["batch"]:
        raise SpecmodelError(f"{where}: tokens: must be >= batch ({rec['batch']}), got {rec['tokens']}")
    for k in ("step_s", "overhead_s"):
        _num(rec, k, where)
    for k in ("forward_s", "forward_allreduce_s", "draft_s", "draft_allreduce_s", "gap_s", "context_tokens"):
        _num(rec, k, where, optional=True)


def read_step_log(path: str | os.PathLike[str]) -> StepLog:
    """Read one ``rank<k>.jsonl`` (see :func:`specmodel.trace.hooklog.read_records`)."""
    from specmodel.trace.hooklog import read_records

    recs, truncated = read_records(path, VLLM_STEP, "specmodel vllm step log")
    metas: list[dict[str, Any]] = []
    steps: list[dict[str, Any]] = []
    for where, rec in recs:
        kind = rec.get("type")
        if kind == "meta":
            metas.append(rec)
        elif kind == "step":
            _check_step(rec, where)
            steps.append(rec)
        else:
            raise SpecmodelError(f"{where}: type: expected 'meta' or 'step', got {kind!r}")
    return StepLog(path=str(path), meta=tuple(metas), steps=tuple(steps), truncated=truncated)


def host_s(rec: dict[str, Any]) -> float:
    """The step's host work outside the forward and the drafter (+ the scheduling gap before it)."""
    return float(rec["overhead_s"]) + float(rec.get("gap_s") or 0.0)


MIN_SAMPLES = 5


def summarize(dirs: Sequence[str | os.PathLike[str]], *, name: str, tp: int | None = None,
              max_gap_s: float = 1.0, min_samples: int = MIN_SAMPLES) -> Any:
    """Aggregate rank logs into an "ingested" :class:`~specmodel.schema.profile.Profile`
    (see the module docstring for what the rows mean). Steps whose ``gap_s`` exceeds
    ``max_gap_s`` follow an idle engine: their gap is not scheduling and is left out of the host
    time. Several directories may be combined (a baseline run for ``decode``, a speculative one).

    A (kind, batch, tokens) cell seen fewer than ``min_samples`` times (per rank) is left out: such
    cells are the ramp of a request wave (batch 3 on the way from 4 to 0), one step each, and a
    single slow one (a 78 ms step, measured) would otherwise become a cost row that the running-max
    cost surface carries to every larger batch. A kind is kept whole when none of its cells
    reaches the bound (a short run still yields a profile, with a note)."""
    from specmodel.schema.profile import CostRow, Profile, Source, SpecConfig
    from specmodel.trace.hooklog import log_files

    files = log_files(dirs, COMMAND)
    logs = [read_step_log(f) for f in files]
    rows_in: dict[tuple[str, int, int], dict[str, list[float]]] = {}
    drafts: dict[int, dict[str, list[float]]] = {}
    host_proposals: list[float] = []
    versions: set[str] = set()
    clocks: set[str] = set()
    tps: set[int] = set()
    ranks: set[str] = set()
    models: set[str] = set()
    devices: set[str] = set()
    cpu_names: set[str] = set()
    spec_meta: dict[str, Any] = {}
    contexts: list[float] = []
    no_ar_timed = 0
    step_spec: set[tuple[str, int]] = set()  # (method, k) of the verify steps: what actually ran
    for lg in logs:
        for m in lg.meta:
            versions.add(str(m.get("vllm_version")))
            clocks.add(str(m.get("clock") or "perf_counter"))
            if isinstance(m.get("tp_size"), int):
                tps.add(m["tp_size"])
            ranks.add(str(m.get("rank")))
            if m.get("model_path"):
                models.add(str(m["model_path"]))
            if m.get("device_name"):
                devices.add(str(m["device_name"]))
            if str(m.get("device") or "").startswith("cpu"):
                cpu_names.add(str(m.get("cpu_name") or "CPU"))
            if isinstance(m.get("spec"), dict) and not spec_meta:
                spec_meta = m["spec"]
        for r in lg.steps:
            if r.get("forward_s") is None:
                continue  # the forward was not seen (a step that ran no model)
            gap = r.get("gap_s")
            host = float(r["overhead_s"]) + (float(gap) if gap is not None and gap <= max_gap_s else 0.0)
            g = rows_in.setdefault((r["kind"], r["batch"], r["tokens"]),
                                   {"total": [], "ar": [], "fwd": [], "n_ar": []})
            ar = float(r.get("forward_allreduce_s") or 0.0)
            g["total"].append(float(r["forward_s"]) + host)
            g["ar"].append(ar)
            g["fwd"].append(float(r["forward_s"]))
            g["n_ar"].append(float(r.get("forward_n_allreduce") or 0))
            if r["kind"] in ("decode", "verify") and r.get("context_tokens") is not None:
                contexts.append(float(r["context_tokens"]))
            if r.get("draft_s") is None or r["kind"] != "verify":
                continue
            k = r.get("draft_k")
            if r.get("draft_method") in VLLM_FORWARD_DRAFTERS and isinstance(k, int) and k >= 1:
                d = drafts.setdefault(r["batch"], {"total": [], "ar": [], "n_ar": []})
                d["total"].append(float(r["draft_s"]) / k)
                d["ar"].append(float(r.get("draft_allreduce_s") or 0.0) / k)
                d["n_ar"].append(float(r.get("draft_n_allreduce") or 0) / k)
            else:
                host_proposals.append(float(r["draft_s"]))
            if isinstance(r.get("draft_method"), str) and isinstance(k, int):
                step_spec.add((r["draft_method"], k))
    where = ", ".join(str(d) for d in dirs)
    if not rows_in:
        raise SpecmodelError(f"{where}: no engine steps recorded (the logs hold only meta lines; did the server "
                             "serve a request under `specmodel vllm`?)")
    if not any(k[0] == "decode" for k in rows_in):
        raise SpecmodelError(f"{where}: no decode steps recorded; a profile needs the baseline step: also run the "
                             "server without --speculative-config under `specmodel vllm` and pass both directories "
                             "to --summarize")
    tp_val = tp if tp is not None else (max(tps) if tps else max(1, len(ranks)))
    n_ranks = max(1, len(ranks))
    dropped: list[str] = []
    few_kinds: list[str] = []
    for kind in {k[0] for k in rows_in}:
        cells = [c for c in rows_in if c[0] == kind]
        if all(len(rows_in[c]["total"]) < min_samples * n_ranks for c in cells):
            few_kinds.append(kind)
            continue
        for c in cells:
            if len(rows_in[c]["total"]) < min_samples * n_ranks:
                dropped.append(f"{kind} b{c[1]} t{c[2]} ({len(rows_in[c]['total'])})")
                del rows_in[c]
    costs = []
    for (kind, b, t), g in sorted(rows_in.items()):
        total = median(g["total"])
        if total <= 0:
            continue
        ar = min(median(g["ar"]), total)
        compute = min(max(median(g["fwd"]) - ar, 0.0), total - ar)
        if tp_val > 1 and max(g["n_ar"]) == 0:
            no_ar_timed += 1
        costs.append(CostRow(kind=kind, batch=b, tokens=t, total_s=total, allreduce_s=ar, compute_s=compute,
                             other_s=max(total - ar - compute, 0.0), n_allreduce=round(median(g["n_ar"])),
                             spread_s=iqr(g["total"]), samples=len(g["total"])))
    if any(len(d["total"]) >= min_samples * n_ranks for d in drafts.values()):
        for b in [b for b, d in drafts.items() if len(d["total"]) < min_samples * n_ranks]:
            dropped.append(f"draft b{b} ({len(drafts[b]['total'])})")
            del drafts[b]
    for b, d in sorted(drafts.items()):
        total = median(d["total"])
        if total <= 0:
            continue
        ar = min(median(d["ar"]), total)
        costs.append(CostRow(kind="draft", batch=b, tokens=b, total_s=total, allreduce_s=ar, compute_s=total - ar,
                             n_allreduce=round(median(d["n_ar"])), spread_s=iqr(d["total"]), samples=len(d["total"])))
    if len(step_spec) > 1:
        raise SpecmodelError(f"{where}: the logs mix speculative configurations "
                             f"({', '.join(f'{m} k={k}' for m, k in sorted(step_spec))}); summarize one at a time")
    method, k = next(iter(step_spec)) if step_spec else (spec_meta.get("method"), spec_meta.get("num_speculative_tokens"))
    method = method if isinstance(method, str) else None
    k = k if isinstance(k, int) else None
    spec = SpecConfig(algorithm=str(method).upper(), steps=k, topk=1, num_draft_tokens=k + 1) if method and k else SpecConfig()
    overhead = median(host_proposals) if host_proposals and not drafts else 0.0
    clock = "cuda_event" if clocks == {"cuda_event"} else "perf_counter"
    notes = ["vLLM rows are engine steps: forward (all-reduce split timed around vLLM's all-reduce) + the step's "
             "host work (sampling/rejection, bookkeeping, input prep, scheduling gap) in other_s; draft rows are "
             "one drafter forward = proposal time / k."]
    if overhead:
        notes.append(f"host-side drafter ({method}): median proposal time {ms(overhead, 3)} per step is the "
                     "profile's overhead_s (per speculative cycle).")
    if clock == "perf_counter":
        notes.append("Timed with perf_counter on the host (a CPU engine): not GPU figures.")
    if no_ar_timed:
        notes.append(f"{no_ar_timed} row(s) at TP {tp_val} timed no all-reduce (CUDA-graph replays bypass Python): "
                     "their all-reduce share is unknown, not zero.")
    if contexts:
        notes.append(f"context: median {median(contexts):.0f} tokens of KV per request over the decode/verify steps "
                     "(rows are not split by context)")
    if dropped:
        notes.append(f"{len(dropped)} cell(s) seen fewer than {min_samples} times per rank left out (ramp steps): "
                     + ", ".join(sorted(dropped)[:8]) + (" …" if len(dropped) > 8 else ""))
    if few_kinds:
        notes.append(f"{', '.join(sorted(few_kinds))}: no cell seen {min_samples} times per rank; every cell kept "
                     "(a short run: costs rest on few steps)")
    if len(versions) > 1:
        notes.append(f"logs come from several vLLM versions: {', '.join(sorted(versions))}")
    source = Source.hook_summary(engine="vllm", engine_version=", ".join(sorted(versions)),
                                 files=tuple(str(f) for f in files), clock=clock,
                                 description=f"vLLM step hook, {sum(len(g['total']) for g in rows_in.values())} "
                                             f"steps from {len(files)} rank file(s)")
    if no_ar_timed:
        source = source.with_origins({"allreduce": "unknown for some rows: CUDA-graph replays bypass the hook"})
    # the keys the model/device checks read (validation.profile_device, check_log_model_matches_profile):
    # vLLM logs the model as the --model value, which is what the hook recorded
    hardware: dict[str, Any] = {}
    if devices:
        hardware = {"gpu_name": sorted(devices)[0], "gpu_count": tp_val}
    elif cpu_names:
        hardware = {"cpu_name": sorted(cpu_names)[0]}
    model = {"name": sorted(models)[0], "path": sorted(models)[0]} if models else {}
    return Profile(name=name, source=source, tp=tp_val, costs=tuple(costs), spec=spec, overhead_s=overhead,
                   hardware=hardware, model=model, notes=tuple(notes))


def step_files(dirs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    from specmodel.trace.hooklog import log_files

    return log_files(dirs, COMMAND)
