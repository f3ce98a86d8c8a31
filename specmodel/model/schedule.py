"""Engine-native speculation schedules: a serve plan's per-batch decisions as the batch-size
schedule an engine runs, one per measured context.

Input: the cells of a :class:`~specmodel.model.serveplan.ServePlan` at one context, one cell
per batch 1..B (the plan decides; this module only encodes). Each batch gets k, the draft
tokens verified per request per step: the recommended configuration's ``num_draft_tokens − 1``
where the plan says *speculate*, 0 where it says *off*, and 0 where nothing was measured
(beyond the largest measured batch: speculation is never recommended on costs nobody measured).
Equal neighbours merge into inclusive ranges ``[start, end, k]``.

Engine encodings are the engines' own: each engine record of the registry (an
:class:`EngineEncoding`: ``write_band`` / ``check_band``, with the sources they were read from)
turns a :class:`ContextSchedule` into its flags; this module names no engine and imports no
engine code. The caller passes the record.

Pure functions; no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from specmodel.errors import FieldError, SpecmodelError
from specmodel.model.decision import GO_MIN_SPEEDUP
from specmodel.model.serveplan import MARGINAL, OFF, SPECULATE, PlanCell


class EngineEncoding(Protocol):
    """What a schedule document needs of an engine's record (the registry's ``EngineSpec`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def schedule_source(self) -> str: ...
    @property
    def write_band(self) -> Callable[[Any, Any, str, dict[str, Any], dict[str, Any]], dict[str, Any]]: ...
    @property
    def check_band(self) -> Callable[[dict[str, Any], str], None]: ...

#: Why a range has its k.
MEASURED_SPECULATE = "measured: speculation pays"
MEASURED_OFF = "measured: no configuration beats the baseline"
#: predict's MARGINAL band (a gain under 1.10x): the plan runs no speculation there
MEASURED_MARGINAL = f"measured: gain under the {GO_MIN_SPEEDUP:.2f}x go threshold (marginal)"
UNMEASURED_OFF = "not measured: speculation off"
#: where k = 0 still runs the drafter's forward (vLLM's draft_model / EAGLE), a marginal batch
#: (predicted >= 1.00x) keeps its k: k = 0 there costs a decode plus a drafter forward (< 1.00x)
MEASURED_MARGINAL_KEPT = f"measured: gain under {GO_MIN_SPEEDUP:.2f}x, k kept (k = 0 still runs the drafter)"
_K_BASES = (MEASURED_SPECULATE, MEASURED_MARGINAL_KEPT)

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
    if c.action == SPECULATE or (keep_marginal and c.action == MARGINAL and c.recommended is not None):
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


# ---- the target engine and the exported document (specmodel.schedule) -----------------------


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


def schedule_document(schedules: Sequence[ContextSchedule], *, engine: EngineEncoding, algorithm: str,
                      base: dict[str, Any], options: dict[str, Any], header: Mapping[str, Any],
                      about: Mapping[str, Any], static: Sequence[ContextSchedule] | None = None) -> dict[str, Any]:
    """The ``specmodel.schedule`` document: ``header`` (the format's), ``about`` (profile,
    model, TP, acceptance source…), then one band per context with the engine's settings
    (``engine.write_band``). ``static``: the schedules over every topk for an engine whose static
    flags may run trees (``engine.static_trees``), per context like ``schedules``; default: ``schedules``."""
    stat = list(static) if static is not None else list(schedules)
    if [s.context_tokens for s in stat] != [s.context_tokens for s in schedules]:
        raise SpecmodelError("schedule: the static schedules must cover the same contexts")
    bands = []
    for s, s_static in zip(schedules, stat, strict=True):
        band: dict[str, Any] = s.to_dict()
        band[engine.name] = engine.write_band(s, s_static, algorithm, base, options)
        bands.append(band)
    return {**header, **about, "engine": engine.name, "encoding_read_from": engine.schedule_source,
            "algorithm": algorithm, "bands": bands}


def band_for(doc: Mapping[str, Any], context_tokens: int) -> Mapping[str, Any]:
    """The band of a (validated) schedule document that serves ``context_tokens``."""
    bands = doc["bands"]
    chosen = bands[0]
    for b in bands:
        if b["context_tokens"] <= context_tokens:
            chosen = b
    return chosen


def check_schedule_document(doc: Any, where: str, engine_of: Callable[[str], EngineEncoding],
                            engines: Sequence[str]) -> None:
    """Validate a ``specmodel.schedule`` body (after the format header was checked): every band's
    ranges contiguous from 1 (the shape every engine's schedule has) and the engine's own settings
    (``engine.check_band``). ``engine_of``: the registry's lookup; ``engines``: the names it knows."""
    def bad(msg: str) -> SpecmodelError:
        return SpecmodelError(f"{where}: {msg}")
    if doc.get("engine") not in engines:
        raise bad(f"engine: expected one of {', '.join(engines)}, got {doc.get('engine')!r}")
    engine = engine_of(doc["engine"])
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
        _check_ranges(entries, f"{w}.ranges", bad)
        try:
            engine.check_band(b, w)
        except SpecmodelError as e:
            raise bad(str(e)) from None


def _check_ranges(entries: list[Any], w: str, bad: Callable[[str], SpecmodelError]) -> None:
    """Integer [start, end, k] ranges, contiguous from batch 1, k >= 0."""
    prev = 0
    for e in entries:
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in e):
            raise bad(f"{w}: entry {e!r} is not [start, end, k] integers")
        s, t, k = e
        if s != prev + 1 or t < s or k < 0:
            raise bad(f"{w}: entry {e!r} must start at batch {prev + 1}, with end >= start and k >= 0")
        prev = t
