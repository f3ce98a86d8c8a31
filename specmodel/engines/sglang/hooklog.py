"""Reading back what the SGLang hook (:mod:`specmodel.engines.sglang.hook`) wrote: one JSONL file per
rank (``specmodel.sglang_forward`` records). :func:`read_forward_log` validates a file (a
truncated last line is ignored with a warning); :func:`summarize` turns rank logs into an
"ingested" profile (median per phase x batch x tokens). Runs anywhere: no SGLang, no torch.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.engines.hook.records import check_place
from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.limits import MAX_BATCH, MAX_DRAFT_TOKENS, MAX_HOOK_STEP_S, MAX_STEP_TOKENS, MAX_TP
from specmodel.schema.formats import PROBE, SGLANG_FORWARD
from specmodel.schema.phases import FORWARD_KINDS, draft_steps
from specmodel.stats import iqr, median, series_median_ci95_rel

log = logging.getLogger("specmodel.sglang")


@dataclass(frozen=True, kw_only=True)
class ForwardLog:
    """One rank file, validated."""

    path: str
    meta: tuple[dict[str, Any], ...]
    forwards: tuple[dict[str, Any], ...]
    truncated: bool = False
    #: (meta, its forwards) per server process that wrote to the file
    runs: tuple[tuple[dict[str, Any], tuple[dict[str, Any], ...]], ...] = ()
    #: (index into ``runs``, record) of each calibration probe (:mod:`specmodel.engines.hook.probe`)
    probes: tuple[tuple[int, dict[str, Any]], ...] = ()
    #: (index into ``runs``, record) of each scheduler step (v2 logs; v1 logs hold none)
    steps: tuple[tuple[int, dict[str, Any]], ...] = ()




def _check_forward(rec: dict[str, Any], where: str) -> None:
    if rec.get("phase") not in FORWARD_KINDS:
        raise SpecmodelError(f"{where}: phase: expected one of {', '.join(FORWARD_KINDS)}, got {rec.get('phase')!r}")
    for k, hi in (("batch", MAX_BATCH), ("tokens", MAX_STEP_TOKENS), ("forwards", MAX_DRAFT_TOKENS)):
        v = rec.get(k, 1 if k == "forwards" else None)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecmodelError(f"{where}: {k}: expected an integer >= 1, got {v!r}")
        if v > hi:
            raise SpecmodelError(f"{where}: {k}: expected at most {hi}, got {v}")
    secs = [k for k in ("gpu_s", "cpu_s") if k in rec]
    if len(secs) != 1:
        raise SpecmodelError(f"{where}: expected exactly one of gpu_s / cpu_s")
    v = rec[secs[0]]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_HOOK_STEP_S:  # NaN fails it too
        raise SpecmodelError(f"{where}: {secs[0]}: expected a finite number in 0..{MAX_HOOK_STEP_S:g} s, got {v!r}")
    if rec.get("runner") not in ("target", "draft"):
        raise SpecmodelError(f"{where}: runner: expected 'target' or 'draft', got {rec.get('runner')!r}")
    lost = rec.get("dropped_forwards")
    if lost is not None and (isinstance(lost, bool) or not isinstance(lost, int) or not 0 <= lost <= MAX_STEP_TOKENS):
        raise SpecmodelError(f"{where}: dropped_forwards: expected an integer in 0..{MAX_STEP_TOKENS}, got {lost!r}")


STEP_CLOCKS = ("cuda_event", "perf_counter")


def _check_step(rec: dict[str, Any], where: str) -> None:
    b = rec.get("batch")
    if b is not None and (isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= MAX_BATCH):
        raise SpecmodelError(f"{where}: batch: expected an integer in 1..{MAX_BATCH} or null, got {b!r}")
    if rec.get("forward_mode") is not None and not isinstance(rec["forward_mode"], str):
        raise SpecmodelError(f"{where}: forward_mode: expected a string or null, got {rec['forward_mode']!r}")
    if rec.get("clock") not in STEP_CLOCKS:
        raise SpecmodelError(f"{where}: clock: expected one of {', '.join(STEP_CLOCKS)}, got {rec.get('clock')!r}")
    ph = rec.get("phases")
    if not isinstance(ph, dict) or not all(k in FORWARD_KINDS and isinstance(v, int) and not isinstance(v, bool)
                                           and 1 <= v <= MAX_DRAFT_TOKENS for k, v in ph.items()):
        raise SpecmodelError(f"{where}: phases: expected an object of phase -> count (1..{MAX_DRAFT_TOKENS}), "
                             f"got {ph!r}")
    for k in ("step_s", "forwards_s", "overhead_s", "host_s"):
        v = rec.get(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= MAX_HOOK_STEP_S:  # NaN fails too
            raise SpecmodelError(f"{where}: {k}: expected a finite number in 0..{MAX_HOOK_STEP_S:g} s, got {v!r}")


def _check_meta(rec: dict[str, Any], where: str) -> None:
    from specmodel.engines.seams import check_seams_meta

    check_seams_meta(rec, where)
    tp = rec.get("tp_size")
    if tp is not None and (isinstance(tp, bool) or not isinstance(tp, int) or not 1 <= tp <= MAX_TP):
        raise SpecmodelError(f"{where}: tp_size: expected an integer in 1..{MAX_TP} or null, got {tp!r}")
    for k in ("sglang_version", "model_path", "served_model_name", "device", "device_name"):
        if rec.get(k) is not None and not isinstance(rec[k], str):
            raise SpecmodelError(f"{where}: {k}: expected a string or null, got {rec[k]!r}")
    rank = rec.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, (str, int))):
        raise SpecmodelError(f"{where}: rank: expected a string or an integer, got {rank!r}")
    if rec.get("spec") is not None and not isinstance(rec["spec"], dict):
        raise SpecmodelError(f"{where}: spec: expected an object or null, got {rec['spec']!r}")
    check_place(rec, where, ("tp_rank", "pp_rank", "dp_rank", "pp_size", "dp_size", "max_pending_forwards"))


def read_forward_log(path: str | os.PathLike[str]) -> ForwardLog:
    """Read one rank file (``rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl``, or v1's ``rank<k>.jsonl``). A truncated (unterminated, undecodable) last line is ignored
    with a warning (the process died mid-write); anything else malformed raises
    :class:`SpecmodelError` naming the file and line."""
    from specmodel.engines.hook.probe import check_probe
    from specmodel.engines.hook.records import Runs, read_records

    recs, truncated = read_records(path, SGLANG_FORWARD, "a specmodel sglang forward log")
    runs = Runs()
    fwds: list[dict[str, Any]] = []
    probes: list[tuple[int, dict[str, Any]]] = []
    steps: list[tuple[int, dict[str, Any]]] = []
    for where, rec in recs:
        kind = rec.get("type")
        if kind == "step":
            _check_step(rec, where)
            steps.append((runs.current(), rec))
        elif PROBE.matches(rec):
            check_probe(rec, where)
            probes.append((runs.current(), rec))
        elif kind == "meta":
            _check_meta(rec, where)
            runs.meta(rec)
        elif kind == "forward":
            _check_forward(rec, where)
            fwds.append(rec)
            runs.add(rec)
        else:
            raise SpecmodelError(f"{where}: type: expected 'meta', 'forward' or 'step', got {kind!r}")
    return ForwardLog(path=str(path), meta=tuple(runs.metas), forwards=tuple(fwds), truncated=truncated,
                      runs=runs.frozen(), probes=tuple(probes), steps=tuple(steps))


def log_files(dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    from specmodel.engines.hook import records as hooklog

    return hooklog.log_files(dirs, "specmodel sglang")


def summarize(dirs: Sequence[str | os.PathLike[str]], *, name: str, tp: int | None = None,
              dp_rank: int | None = None) -> Any:
    """Aggregate rank logs into an "ingested" :class:`~specmodel.schema.profile.Profile`.

    Per phase × batch × tokens: ``total_s`` = median over every recorded forward of every rank
    (a replay covering ``forwards`` drafter forwards counts as ``seconds / forwards`` each),
    ``spread_s`` = interquartile range. CUDA events time the whole forward, so the all-reduce
    share is unknown: it is put in ``other_s`` and the notes say so. ``decode`` and ``extend``
    rows come from the target runner only. Several directories may be combined (e.g. a
    baseline run for ``decode`` rows and a speculative run for the rest). A recording of several
    data-parallel replicas is read one replica at a time (``dp_rank``); pipeline parallelism is
    refused (:func:`specmodel.engines.hook.records.pick_replica`).

    The scheduler's host work (``step`` records, v2 logs): a ``decode`` row is the decode forward
    + the median host work of its server's decode steps at that batch, a ``verify`` row the verify
    forward + the median host work of a speculative cycle (a step holding a verify) at that batch,
    as a vLLM profile's rows carry the step's host work; the cycle is then draft + verify + host
    work and ``source.host_work`` is "in_rows". Where any server run logged no step (v1 logs, a
    Scheduler seam not found) no row gets any (the notes say why) and predict qualifies the verdict.
    """
    from specmodel.engines.hook.probe import conditions_note, conditions_of
    from specmodel.engines.hook.records import Drops, check_one_server_kind, dp_replica, pick_replica
    from specmodel.engines.seams import missing_from_meta, seams_notes
    from specmodel.schema.costrows import CostRow
    from specmodel.schema.profile import Profile
    from specmodel.schema.source import Source

    files = log_files(dirs)
    logs = [read_forward_log(f) for f in files]
    replica = pick_replica([(m, lg.path) for lg in logs for m, _ in lg.runs if m], dp_rank,
                           ", ".join(str(d) for d in dirs))
    drops = Drops("forward")  # forwards the hook dropped (its queue of GPU timings full)
    groups: dict[tuple[str, int, int], list[float]] = {}
    spec_decode: dict[tuple[str, int, int], list[float]] = {}  # decode/extend of a speculative server
    clocks: set[str] = set()
    versions: dict[str, str] = {}
    metas: list[dict[str, Any]] = []  # the meta lines read (their seams_missing)
    spec_meta: dict[str, Any] = {}
    tp_sizes: dict[int, str] = {}
    run_ranks: dict[tuple[str, int, int], set[str]] = {}  # (directory, DP replica, segment) -> ranks
    devices: set[str] = set()
    models: dict[str, str] = {}
    served: set[str] = set()
    draft_fwds: list[int] = []
    mle_fwds = 0  # multi-layer EAGLE's per-layer draft-extend replays
    n_fwds = 0
    probes: dict[bool, list[dict[str, Any]]] = {False: [], True: []}  # speculative server? -> its probes
    # the scheduler's host work per step (step span - its forwards, one clock), by the rows it joins:
    # (speculative server?, "decode" | "verify") -> batch -> seconds
    host: dict[tuple[bool, str], dict[int, list[float]]] = {}
    runs_without_steps = 0
    for lg in logs:
        for seg, rec in lg.probes:
            if replica is None or dp_replica(lg.runs[seg][0]) == replica:
                probes[isinstance(lg.runs[seg][0].get("spec"), dict)].append(rec)
        for seg, rec in lg.steps:
            if replica is not None and dp_replica(lg.runs[seg][0]) != replica:
                continue  # another DP replica: another engine
            kind = "verify" if "verify" in rec["phases"] else "decode" if "decode" in rec["phases"] else None
            if kind is not None and rec.get("batch") is not None:
                host.setdefault((isinstance(lg.runs[seg][0].get("spec"), dict), kind), {}) \
                    .setdefault(int(rec["batch"]), []).append(float(rec["overhead_s"]))
        stepped = {seg for seg, _ in lg.steps}
        runs_without_steps += sum(1 for seg, (m, fwds) in enumerate(lg.runs)
                                  if fwds and seg not in stepped and (replica is None or dp_replica(m) == replica))
        for seg, (m, fwds) in enumerate(lg.runs):
            if replica is not None and dp_replica(m) != replica:
                continue  # another DP replica: another engine
            drops.add_run(m, fwds, "phase")
            if m:
                metas.append(m)
                versions.setdefault(str(m.get("sglang_version")), lg.path)
            if m.get("tp_size") is not None:
                tp_sizes.setdefault(m["tp_size"], lg.path)
            run_ranks.setdefault((os.path.dirname(lg.path), dp_replica(m), seg), set()).add(str(m.get("rank", lg.path)))
            if m.get("device_name"):
                devices.add(str(m["device_name"]))
            if m.get("model_path"):
                models.setdefault(str(m["model_path"]), lg.path)
            if m.get("served_model_name"):
                served.add(str(m["served_model_name"]))
            speculative = isinstance(m.get("spec"), dict)
            if speculative and not spec_meta:
                spec_meta = m["spec"]
            n_fwds += len(fwds)
            for r in fwds:
                if r["phase"] in ("decode", "extend") and r["runner"] != "target":
                    continue
                # a forward on the draft runner is the drafter's whatever its mode: a log written before
                # the hook knew it (DFlash's TARGET_VERIFY draft block) never pools into the verify rows
                ph = "draft" if r["phase"] == "verify" and r["runner"] == "draft" else r["phase"]
                clock = "gpu_s" if "gpu_s" in r else "cpu_s"
                clocks.add(clock)
                n = int(r.get("forwards", 1))
                if ph == "draft":
                    draft_fwds.append(n)
                if str(r.get("member", "")).startswith(MLE_MEMBERS):
                    mle_fwds += 1
                into = spec_decode if speculative and ph in ("decode", "extend") else groups
                into.setdefault((ph, r["batch"], r["tokens"]), []).append(float(r[clock]) / n)
    where = ", ".join(str(d) for d in dirs)
    check_one_server_kind(tp=tp, tp_sizes=tp_sizes, models=models, versions=versions, version_key="sglang_version",
                          engine="SGLang")
    baseline = any(k[0] == "decode" for k in groups)
    if not baseline:
        # no server without speculation was given: its decode forwards stand in (said in the notes)
        for k, v in spec_decode.items():
            groups.setdefault(k, []).extend(v)
    if not groups:
        raise SpecmodelError(f"{where}: no forwards recorded (the logs hold only meta lines)")
    if not any(k[0] == "decode" for k in groups):
        raise FieldError(None, f"{verbatim(where)}: no target decode forwards recorded; a profile needs the baseline decode "
                               "step: also run the server without speculative decoding under `specmodel sglang` "
                               "and pass both directories to {summarize}")
    kept = {k: median(xs) for k, xs in sorted(groups.items()) if k[2] >= k[1]}  # tokens < batch: idle padding
    kept = {k: m for k, m in kept.items() if m > 0}
    # decode rows come from the servers without speculation when one was given (else the speculative one's)
    host_by = {"decode": host.get((not baseline, "decode"), {}), "verify": host.get((True, "verify"), {})}
    host_rows = [k for k in kept if k[0] in host_by]
    host_work = runs_without_steps == 0 and bool(host_rows) and all(k[1] in host_by[k[0]] for k in host_rows)
    rows = []
    for (ph, b, t), med in kept.items():
        xs = groups[(ph, b, t)]
        # the row as a cycle pays it: the forward + the median host work of its server's steps at this batch
        total = med + (median(host_by[ph][b]) if host_work and ph in host_by else 0.0)
        rows.append(CostRow(kind=ph, batch=b, tokens=t, total_s=total, allreduce_s=0.0, compute_s=0.0, other_s=total,
                            spread_s=iqr(xs), samples=len(xs), ci95_rel=series_median_ci95_rel(xs)))
    ranks_per_run = max(len(v) for v in run_ranks.values()) if run_ranks else 1
    tp_val = tp if tp is not None else (next(iter(tp_sizes)) if tp_sizes else ranks_per_run)
    spec = _spec_from(spec_meta, groups, draft_fwds)
    notes = ["Timed with CUDA events around each forward: the all-reduce share is not separable, so all "
             "time is in other_s (allreduce_s = compute_s = 0); ingest a Kineto trace for the split."
             if clocks == {"gpu_s"} else
             "Timed with perf_counter (CPU stand-in or CPU device), not CUDA events: not GPU figures."]
    if mle_fwds and not draft_fwds:
        notes.append(MLE_NOTE)
    if draft_fwds and max(draft_fwds) > 1:
        notes.append("draft rows: a CUDA-graph replay covers several drafter forwards; each counts as "
                     "replay seconds / forwards.")
    if spec_decode and not baseline:
        notes.append("decode rows come from the speculative server's own decode forwards (no server without "
                     "speculation was summarized with it)")
    elif spec_decode:
        notes.append("decode / extend rows come from the server without speculation; the speculative server's own "
                     f"decode / extend forwards ({sum(len(v) for v in spec_decode.values())}) are left out")
    notes.append(_host_work_note(host_work, host, runs_without_steps, clocks))
    conditions = conditions_of(probes[False], probes[True])
    if conditions is not None:
        notes.append(conditions_note(conditions))
    missing = missing_from_meta(metas, engine="sglang", version_key="sglang_version")
    notes.extend(seams_notes(missing))
    lost_note = drops.note()
    if lost_note:
        notes.append(lost_note)
    source = Source.hook_summary(engine="sglang", engine_version=", ".join(sorted(versions)),
                                 files=tuple(str(f) for f in files),
                                 clock="cuda_event" if clocks == {"gpu_s"} else "perf_counter",
                                 host_work_in_rows=host_work,
                                 description=f"SGLang forward-pass hook (hook): {n_fwds} forwards from "
                                             f"{len(run_ranks)} server run(s), {len(files)} rank file(s), TP {tp_val}")
    # the hook times whole forwards: the split is unknown, and saying so here is what keeps every
    # printer from showing "all-reduce 0.00 ms = 0.0 %"
    source = source.with_origins({"allreduce": "unknown: the SGLang hook times whole forwards (no all-reduce split; "
                                               "ingest a Kineto trace of the same run for it)"})
    return Profile(name=name, source=source, tp=tp_val, costs=tuple(rows), spec=spec,
                   hardware={"gpu": sorted(devices)[0]} if devices else {},
                   model=({"path": next(iter(models)), **({"served_name": ", ".join(sorted(served))} if served else {})}
                          if models else {}), notes=tuple(notes), conditions=conditions, missing_seams=missing)


def _host_work_note(measured: bool, host: dict[tuple[bool, str], dict[int, list[float]]], runs_without_steps: int,
                    clocks: set[str]) -> str:
    """What the rows say about the scheduler's host work (the verdict is qualified without it)."""
    if measured:
        clock = "CUDA events on the forwards' stream" if clocks == {"gpu_s"} else "perf_counter"
        cycles = sum(len(v) for v in host.get((True, "verify"), {}).values())
        return ("decode and verify rows carry the scheduler's host work: the forward + the median over that "
                "server's steps at the row's batch of (step span - the forwards inside it), both on one clock "
                f"({clock}); a cycle's host work is in its verify row ({cycles} cycles timed); draft, "
                "draft_extend and extend rows are forwards only.")
    why = (f"{runs_without_steps} server run(s) logged no scheduler step (a log older than step timing, or a "
           "version whose Scheduler seams were not found)" if runs_without_steps
           else "the steps logged do not cover every decode / verify row's batch")
    return (f"SGLang host work not measured ({why}): rows are forwards only, so a cycle counts its forwards "
            "only (an optimistic cost); record both servers again under `specmodel sglang` to time it.")


#: members of the hook's multi-layer EAGLE seams (:data:`specmodel.engines.sglang.targets.DRAFTER_TARGETS_0523`)
MLE_MEMBERS = ("MultiLayerEagleDraftExtendCudaGraphRunner.", "OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner.")
#: what a multi-layer EAGLE profile says: its draft is timed, but not in the shape the cycle prices
MLE_NOTE = ("multi-layer EAGLE: the draft is steps draft-extend forwards, one per MTP layer (timed: the draft_extend "
            "rows, one layer each); it has no draft step of batch x topk tokens, so the cycle (draft-extend + "
            "(steps - 1) draft steps) has no draft row and prices the draft as free -- the verdict says so; pass the "
            "per-layer draft_extend time as the draft step cost to price it")
#: speculative algorithms whose draft the cycle's (steps, topk) shape does not describe
BLOCK_DRAFTERS = ("DFLASH",)


def _spec_from(meta: dict[str, Any], groups: dict[tuple[str, int, int], list[float]], draft_fwds: list[int]) -> Any:
    """Spec shape from the server args when logged, else inferred from what ran
    (verify tokens per request, draft tokens per request = topk, draft forwards + 1 = steps)."""
    from specmodel.schema.costrows import SpecConfig

    def ratio(kind: str) -> int | None:
        rs = {t // b for (k, b, t) in groups if k == kind and t % b == 0}
        return max(rs) if rs else None

    algo = str(meta["algorithm"]) if isinstance(meta.get("algorithm"), str) else "EAGLE3"
    if algo.upper() in BLOCK_DRAFTERS:
        # DFlash (0.5.23 dflash_worker_v2.py): one draft forward over a block of num_draft_tokens per request,
        # steps forced to 1 (arg_groups/speculative_hook.py l. 329-366): no steps x topk tree to price
        raise SpecmodelError(f"forward logs: {algo} drafts a block of {meta.get('num_draft_tokens')} tokens in one "
                             "drafter forward (timed: the draft rows); specmodel's cycle model prices steps x topk "
                             "drafts and cannot describe it, so no profile is built from these logs")
    steps = meta.get("steps") if isinstance(meta.get("steps"), int) else None
    topk = meta.get("topk") if isinstance(meta.get("topk"), int) else None
    ndt = meta.get("num_draft_tokens") if isinstance(meta.get("num_draft_tokens"), int) else None
    topk = topk or ratio("draft") or 1
    ndt = ndt or ratio("verify")
    steps = steps or ((max(draft_fwds) + 1) if draft_fwds else (draft_steps(ndt, topk) if ndt and topk == 1 else None))
    if ndt is None or steps is None:
        return SpecConfig()
    try:
        return SpecConfig(algorithm=algo, steps=steps, topk=topk, num_draft_tokens=ndt)
    except SpecmodelError as exc:
        raise SpecmodelError(f"forward logs: inconsistent speculative shape: {exc}") from None
