"""Reading back what the SGLang hook (:mod:`specmodel.profile.sglang`) wrote: one JSONL file per
rank (``specmodel.sglang_forward`` records). :func:`read_forward_log` validates a file (a
truncated last line is ignored with a warning); :func:`summarize` turns rank logs into an
"ingested" profile (median per phase x batch x tokens). Runs anywhere: no SGLang, no torch.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.schema.formats import SGLANG_FORWARD
from specmodel.schema.phases import FORWARD_KINDS
from specmodel.stats import iqr, median

log = logging.getLogger("specmodel.sglang")


@dataclass(frozen=True, kw_only=True)
class ForwardLog:
    """One rank file, validated."""

    path: str
    meta: tuple[dict[str, Any], ...]
    forwards: tuple[dict[str, Any], ...]
    truncated: bool = False




def _check_forward(rec: dict[str, Any], where: str) -> None:
    if rec.get("phase") not in FORWARD_KINDS:
        raise SpecmodelError(f"{where}: phase: expected one of {', '.join(FORWARD_KINDS)}, got {rec.get('phase')!r}")
    for k in ("batch", "tokens", "forwards"):
        v = rec.get(k, 1 if k == "forwards" else None)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecmodelError(f"{where}: {k}: expected an integer >= 1, got {v!r}")
    secs = [k for k in ("gpu_s", "cpu_s") if k in rec]
    if len(secs) != 1:
        raise SpecmodelError(f"{where}: expected exactly one of gpu_s / cpu_s")
    v = rec[secs[0]]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SpecmodelError(f"{where}: {secs[0]}: expected a finite number >= 0, got {v!r}")
    if rec.get("runner") not in ("target", "draft"):
        raise SpecmodelError(f"{where}: runner: expected 'target' or 'draft', got {rec.get('runner')!r}")


def read_forward_log(path: str | os.PathLike[str]) -> ForwardLog:
    """Read one ``rank<k>.jsonl``. A truncated (unterminated, undecodable) last line is ignored
    with a warning (the process died mid-write); anything else malformed raises
    :class:`SpecmodelError` naming the file and line."""
    from specmodel.trace.hooklog import read_records

    recs, truncated = read_records(path, SGLANG_FORWARD, "a specmodel sglang forward log")
    metas: list[dict[str, Any]] = []
    fwds: list[dict[str, Any]] = []
    for where, rec in recs:
        kind = rec.get("type")
        if kind == "meta":
            metas.append(rec)
        elif kind == "forward":
            _check_forward(rec, where)
            fwds.append(rec)
        else:
            raise SpecmodelError(f"{where}: type: expected 'meta' or 'forward', got {kind!r}")
    return ForwardLog(path=str(path), meta=tuple(metas), forwards=tuple(fwds), truncated=truncated)


def log_files(dirs: Iterable[str | os.PathLike[str]]) -> list[Path]:
    from specmodel.trace import hooklog

    return hooklog.log_files(dirs, "specmodel sglang")


def summarize(dirs: Sequence[str | os.PathLike[str]], *, name: str, tp: int | None = None) -> Any:
    """Aggregate rank logs into an "ingested" :class:`~specmodel.schema.profile.Profile`.

    Per phase × batch × tokens: ``total_s`` = median over every recorded forward of every rank
    (a replay covering ``forwards`` drafter forwards counts as ``seconds / forwards`` each),
    ``spread_s`` = interquartile range. CUDA events time the whole forward, so the all-reduce
    share is unknown: it is put in ``other_s`` and the notes say so. ``decode`` and ``extend``
    rows come from the target runner only. Several directories may be combined (e.g. a
    baseline run for ``decode`` rows and a speculative run for the rest).
    """
    from specmodel.schema.profile import CostRow, Profile, Source

    files = log_files(dirs)
    logs = [read_forward_log(f) for f in files]
    groups: dict[tuple[str, int, int], list[float]] = {}
    clocks: set[str] = set()
    versions: set[str] = set()
    spec_meta: dict[str, Any] = {}
    tp_sizes: set[int] = set()
    ranks: set[str] = set()
    devices: set[str] = set()
    models: set[str] = set()
    draft_fwds: list[int] = []
    for lg in logs:
        for m in lg.meta:
            versions.add(str(m.get("sglang_version")))
            if isinstance(m.get("tp_size"), int):
                tp_sizes.add(m["tp_size"])
            ranks.add(str(m.get("rank")))
            if m.get("device_name"):
                devices.add(str(m["device_name"]))
            if m.get("model_path"):
                models.add(str(m["model_path"]))
            if isinstance(m.get("spec"), dict) and not spec_meta:
                spec_meta = m["spec"]
        for r in lg.forwards:
            if r["phase"] in ("decode", "extend") and r["runner"] != "target":
                continue
            clock = "gpu_s" if "gpu_s" in r else "cpu_s"
            clocks.add(clock)
            n = int(r.get("forwards", 1))
            if r["phase"] == "draft":
                draft_fwds.append(n)
            groups.setdefault((r["phase"], r["batch"], r["tokens"]), []).append(float(r[clock]) / n)
    where = ", ".join(str(d) for d in dirs)
    if not groups:
        raise SpecmodelError(f"{where}: no forwards recorded (the logs hold only meta lines)")
    if not any(k[0] == "decode" for k in groups):
        raise SpecmodelError(f"{where}: no target decode forwards recorded; a profile needs the baseline decode "
                             "step: also run the server without speculative decoding under `specmodel sglang` "
                             "and pass both directories to --summarize")
    rows = []
    for (ph, b, t), xs in sorted(groups.items()):
        if t < b:
            continue  # cannot be a cost row (tokens < batch): idle padding artefacts
        med = median(xs)
        if med <= 0:
            continue
        rows.append(CostRow(kind=ph, batch=b, tokens=t, total_s=med, allreduce_s=0.0, compute_s=0.0, other_s=med,
                            spread_s=iqr(xs), samples=len(xs)))
    tp_val = tp if tp is not None else (max(tp_sizes) if tp_sizes else max(1, len(ranks)))
    spec = _spec_from(spec_meta, groups, draft_fwds)
    notes = ["Timed with CUDA events around each forward: the all-reduce share is not separable, so all "
             "time is in other_s (allreduce_s = compute_s = 0); ingest a Kineto trace for the split."
             if clocks == {"gpu_s"} else
             "Timed with perf_counter (CPU stand-in or CPU device), not CUDA events: not GPU figures."]
    if draft_fwds and max(draft_fwds) > 1:
        notes.append("draft rows: a CUDA-graph replay covers several drafter forwards; each counts as "
                     "replay seconds / forwards.")
    if len(versions) > 1:
        notes.append(f"logs come from several SGLang versions: {', '.join(sorted(versions))}")
    source = Source.hook_summary(engine="sglang", engine_version=", ".join(sorted(versions)),
                                 files=tuple(str(f) for f in files),
                                 clock="cuda_event" if clocks == {"gpu_s"} else "perf_counter",
                                 description=f"SGLang forward-pass hook, {sum(len(v) for v in groups.values())} "
                                             f"forwards from {len(files)} rank file(s)")
    # the hook times whole forwards: the split is unknown, and saying so here is what keeps every
    # printer from showing "all-reduce 0.00 ms = 0.0 %" (issue 18 item 15)
    source = source.with_origins({"allreduce": "unknown: the SGLang hook times whole forwards (no all-reduce split; "
                                               "ingest a Kineto trace of the same run for it)"})
    return Profile(name=name, source=source, tp=tp_val, costs=tuple(rows), spec=spec,
                   hardware={"gpu": sorted(devices)[0]} if devices else {},
                   model={"path": sorted(models)[0]} if models else {}, notes=tuple(notes))


def _spec_from(meta: dict[str, Any], groups: dict[tuple[str, int, int], list[float]], draft_fwds: list[int]) -> Any:
    """Spec shape from the server args when logged, else inferred from what ran
    (verify tokens per request, draft tokens per request = topk, draft forwards + 1 = steps)."""
    from specmodel.schema.profile import SpecConfig

    def ratio(kind: str) -> int | None:
        rs = {t // b for (k, b, t) in groups if k == kind and t % b == 0}
        return max(rs) if rs else None

    steps = meta.get("steps") if isinstance(meta.get("steps"), int) else None
    topk = meta.get("topk") if isinstance(meta.get("topk"), int) else None
    ndt = meta.get("num_draft_tokens") if isinstance(meta.get("num_draft_tokens"), int) else None
    topk = topk or ratio("draft") or 1
    ndt = ndt or ratio("verify")
    steps = steps or ((max(draft_fwds) + 1) if draft_fwds else (ndt - 1 if ndt and topk == 1 else None))
    if ndt is None or steps is None:
        return SpecConfig()
    algo = str(meta["algorithm"]) if isinstance(meta.get("algorithm"), str) else "EAGLE3"
    try:
        return SpecConfig(algorithm=algo, steps=steps, topk=topk, num_draft_tokens=ndt)
    except SpecmodelError as exc:
        raise SpecmodelError(f"forward logs: inconsistent speculative shape: {exc}") from None
