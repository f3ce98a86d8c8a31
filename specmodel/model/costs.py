"""Forward cost surfaces T_fwd(kind, tokens, context), split into all-reduce / compute / other seconds.

A profile's rows of one kind are measurements at (tokens, context_tokens) points. The
lookup interpolates piecewise-linearly in both axes, context linear in L as KV reads are
(:func:`context_axis`), and never hides a value nobody measured: outside the measured
range on any axis the result carries an :class:`Extrapolation` per axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from specmodel.errors import SpecmodelError
from specmodel.limits import OVERRIDE_REL_TOL
from specmodel.schema import phases
from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import Profile
from specmodel.stats import median_se

#: When a kind is missing, the kind whose curve stands in for it (the forward-kind table,
#: :data:`specmodel.schema.phases.KIND_TABLE`): a verify forward is a target forward over more
#: tokens, so the decode surface at the same total tokens (B × draft tokens) and the same context
#: is its proxy; a draft-extend is a drafter forward over more tokens. A cost from it is *assumed*.
FALLBACK = phases.FALLBACK

#: Axis names in :class:`Extrapolation`. A decode row has one token per request, so its
#: token axis is the batch; other kinds report total tokens (B × tokens per request).
AXES = ("batch", "tokens", "context")


@dataclass(frozen=True, kw_only=True)
class Extrapolation:
    """A lookup outside the measured range on one axis (requested vs the measured [min, max])."""

    kind: str
    axis: str
    requested: float
    measured_min: float
    measured_max: float

    def __post_init__(self) -> None:
        if self.axis not in AXES:
            raise SpecmodelError(f"extrapolation: unknown axis {self.axis!r}")

    @property
    def label(self) -> str:
        """``batch 32 > measured 16`` / ``context 131072 > measured 32768`` / ``verify tokens 2 < measured 4``."""
        name = self.axis if self.axis != "tokens" else f"{self.kind} tokens"
        if self.requested > self.measured_max:
            return f"{name} {self.requested:g} > measured {self.measured_max:g}"
        return f"{name} {self.requested:g} < measured {self.measured_min:g}"

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "axis": self.axis, "requested": self.requested,
                "measured_min": self.measured_min, "measured_max": self.measured_max}


@dataclass(frozen=True, kw_only=True)
class Override:
    """A measured row the monotone cost surface lifted: a forward over fewer tokens (or less
    context) measured dearer than this one, so the model used a dearer cost here (the weighted
    isotonic fit along tokens, the running max along context: a forward over more tokens never
    costs less). Shown beside the verdict with the value measured: either row may be the noisy
    one, and only a re-measurement tells which."""

    kind: str
    tokens: float
    context_tokens: float
    measured_s: float
    used_s: float
    by_tokens: float
    by_context_tokens: float
    #: what the knot that lifted it measured (None: ``used_s``, as a running max carries it)
    by_measured_s: float | None = None

    @property
    def label(self) -> str:
        """``verify at 8 tokens: measured 5.10 ms, used 6.20 ms (monotone fit: 4 tokens measured 6.40 ms)``."""
        from specmodel.units import ms

        at = f"{self.tokens:g} tokens" + (f", context {self.context_tokens:g}" if self.context_tokens else "")
        by = (f"{self.by_tokens:g} tokens" + (f", context {self.by_context_tokens:g}"
                                              if self.by_context_tokens != self.context_tokens else ""))
        by_s = self.used_s if self.by_measured_s is None else self.by_measured_s
        return (f"{self.kind} at {at}: measured {ms(self.measured_s)}, used {ms(self.used_s)} (monotone fit: "
                f"{by} measured {ms(by_s)}; a forward over more tokens or context never costs less)")

    @property
    def to_measure(self) -> str:
        return (f"re-measure {self.kind} at {self.tokens:g} and {self.by_tokens:g} tokens (context "
                f"{self.context_tokens:g}): the larger forward measured cheaper")

    def to_dict(self) -> dict[str, object]:
        return {"kind": self.kind, "tokens": self.tokens, "context_tokens": self.context_tokens,
                "measured_s": self.measured_s, "used_s": self.used_s, "by_tokens": self.by_tokens,
                "by_context_tokens": self.by_context_tokens, "by_measured_s": self.by_measured_s}


@dataclass(frozen=True, kw_only=True)
class ForwardCost:
    """Cost of one forward pass at ``tokens`` tokens over ``context_tokens`` of KV per request."""

    kind: str
    tokens: float
    total_s: float
    allreduce_s: float
    compute_s: float
    other_s: float
    context_tokens: float = 0.0
    extrapolations: tuple[Extrapolation, ...] = ()
    from_kind: str = ""  # kind whose measurements were used (fallback), "" = same kind
    #: measured rows at the knots this cost was read from that the monotone fit lifted
    overrides: tuple[Override, ...] = ()
    #: how the cost was read when it is neither a plain lookup nor a fallback (e.g. a verify below
    #: the measured verify tokens, between the decode forward and the verify rows)
    note: str = ""

    @property
    def extrapolated(self) -> bool:
        return bool(self.extrapolations)

    def scaled(self, factor: float) -> ForwardCost:
        return ForwardCost(kind=self.kind, tokens=self.tokens, total_s=self.total_s * factor,
                           allreduce_s=self.allreduce_s * factor, compute_s=self.compute_s * factor,
                           other_s=self.other_s * factor, context_tokens=self.context_tokens,
                           extrapolations=self.extrapolations, from_kind=self.from_kind,
                           overrides=self.overrides, note=self.note)


ZERO_COST = ForwardCost(kind="none", tokens=0, total_s=0.0, allreduce_s=0.0, compute_s=0.0, other_s=0.0)


Components = tuple[float, float, float]  # (allreduce_s, compute_s, other_s)


def context_axis(context_tokens: float) -> float:
    """x(L) = L: the coordinate context is interpolated in, so between measured contexts

        T(n, L) = T(n, L_j) + (L − L_j) / (L_{j+1} − L_j) · (T(n, L_{j+1}) − T(n, L_j)).

    Why linear: a decode/verify step reads every request's KV cache once, so its attention time
    grows as bytes_KV ∝ L (memory-bound decode attention; FlashDecoding, Dao et al. 2023,
    "Flash-Decoding for long-context inference"); the rest of the step does not depend on L.
    Checked by leaving one measured context out and interpolating between its neighbours
    (``scripts/context_loo.py``; docs/context.md): on published step times of another model
    family (8 GPUs, PCIe, contexts 0–128K) linear in L misses by 0.3–0.4 %
    median, ≤ 1.4 % max, where ln(1 + L) missed by 4–7 % median, up to 24 %; on GLM-5.1 TP8
    (tests/data/glm51_rtx6kpro_tp8_mtp, DCP8 / DCP1) linear misses by 0.47 % / 0.87 % median,
    3.4 % / 1.1 % max, ln(1 + L) by 0.16 % / 1.29 %, 1.1 % / 1.8 %. A log axis puts a 1K lookup
    between contexts 0 and 32K already 67 % of the way to the 32K cost; linear puts it at 3 %.
    """
    return max(float(context_tokens), 0.0)


def _aggregate(rows: tuple[CostRow, ...]) -> tuple[list[float], list[Components], list[float]]:
    """Collapse rows to one point per token count (mean over batch splits), with its weight: the
    steps measured there (the rows' ``samples`` summed)."""
    by_tok: dict[int, list[CostRow]] = {}
    for r in rows:
        by_tok.setdefault(r.tokens, []).append(r)
    toks = sorted(by_tok)
    comps: list[Components] = []
    weights: list[float] = []
    for t in toks:
        rs = by_tok[t]
        comps.append((sum(r.allreduce_s for r in rs) / len(rs), sum(r.compute_s for r in rs) / len(rs),
                      sum(r.other_s for r in rs) / len(rs)))
        weights.append(float(sum(max(r.samples, 1) for r in rs)))
    return [float(t) for t in toks], comps, weights


def _cummax(values: list[Components]) -> list[Components]:
    out: list[Components] = []
    for v in values:
        out.append(v if not out else (max(out[-1][0], v[0]), max(out[-1][1], v[1]), max(out[-1][2], v[2])))
    return out


def _pava(ys: list[float], ws: list[float]) -> list[float]:
    """Weighted isotonic (non-decreasing) least-squares fit, pool-adjacent-violators (Barlow et al.
    1972, *Statistical Inference under Order Restrictions*): adjacent values that fall are pooled
    into their weighted mean until none does."""
    blocks: list[list[float]] = []  # [Σ w·y, Σ w, count]
    for y, w in zip(ys, ws, strict=True):
        blocks.append([y * w, w, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            b = blocks.pop()
            blocks[-1] = [blocks[-1][0] + b[0], blocks[-1][1] + b[1], blocks[-1][2] + b[2]]
    out: list[float] = []
    for sw, w, c in blocks:
        out += [sw / w] * int(c)
    return out


def _monotone(values: list[Components], weights: list[float] | None = None) -> list[Components]:
    """Non-decreasing down the token axis, per component: a forward over more tokens never costs
    less, and the model must not reward verifying more. Measured medians dip from noise; which
    of two knots is the noisy one the steps measured at each tell: the weighted isotonic fit
    (:func:`_pava`, weights = steps measured) pools a fall into the weighted mean, so a ramp cell
    of 15 steps (batch 3 between waves of 4: 3.63 ms) no longer lifts the 2,017-step batch-4 row
    (3.19 ms) to its own cost, as the running max did (measured on the vLLM CPU engine). Without
    weights: the running max."""
    if weights is None:
        return _cummax(values)
    cols = [_pava([v[i] for v in values], weights) for i in range(3)]
    return [(cols[0][j], cols[1][j], cols[2][j]) for j in range(len(values))]


def interpolate(toks: list[float], comps: list[Components], n: float,
                weights: list[float] | None = None) -> tuple[Components, bool]:
    """Piecewise-linear interpolation of each component at ``n`` tokens.

    Below the first point: the first point (a forward has a fixed floor: kernel launches,
    latency-bound all-reduces). Above the last: linear extrapolation along the top half of the
    measured range -- the line through the last knot and the largest knot at or below half its
    tokens (the first knot when none is) -- slope clamped ≥ 0. Not the last segment: two knots
    one token apart divide both medians' noise by one token, and that slope is carried over every
    token beyond. Measured on the vLLM CPU engine (benchmarks/results/vllm_cli_2026-12-02_1639.md): verify rows at
    15 tokens (6 steps) and 16 tokens (181 steps) 4.6 ms apart made verify at 64 tokens 219 ms;
    through 8 and 16 tokens it is 88 ms, and the engine's step there took ~90 ms. The top half,
    not a fit over every knot: a forward bends (a latency floor at few tokens, compute-bound
    after), and the top half is the regime being extended. The flag is True outside
    [first, last] on either side.
    """
    comps = _monotone(comps, weights)
    outside = n < toks[0] or n > toks[-1]
    if len(toks) == 1 or n <= toks[0]:
        return comps[0], outside
    if n > toks[-1]:
        j = max((i for i, t in enumerate(toks[:-1]) if t <= toks[-1] / 2.0), default=0)
        x0, x1 = toks[j], toks[-1]
        c0, c1 = comps[j], comps[-1]
        ext = tuple(c1[i] + max((c1[i] - c0[i]) / (x1 - x0), 0.0) * (n - x1) for i in range(3))
        return (ext[0], ext[1], ext[2]), True
    hi = next(i for i, t in enumerate(toks) if t >= n)
    x0, x1 = toks[hi - 1], toks[hi]
    c0, c1 = comps[hi - 1], comps[hi]
    w = (n - x0) / (x1 - x0)
    lin = tuple(c0[i] + w * (c1[i] - c0[i]) for i in range(3))
    return (lin[0], lin[1], lin[2]), False


def _token_axis(kind: str, rows: tuple[CostRow, ...]) -> str:
    return "batch" if kind == "decode" and all(r.tokens == r.batch for r in rows) else "tokens"


def surface(rows: tuple[CostRow, ...], kind: str, tokens: float,
            context_tokens: float) -> tuple[Components, tuple[Extrapolation, ...]]:
    """T(n, L) from rows measured at several (tokens, context) points.

    For each measured context L_j the token curve is interpolated at n (:func:`interpolate`);
    the values are made non-decreasing in L (running maximum: more KV never costs less), then

        T(n, L) = (1 − w)·T(n, L_j) + w·T(n, L_{j+1}),   w = (x(L) − x(L_j)) / (x(L_{j+1}) − x(L_j)),

    with x(L) = L (:func:`context_axis`: KV reads grow linearly in L) and L_j ≤ L ≤ L_{j+1}. A convex combination of
    curves non-decreasing in n is non-decreasing in n, so the surface is monotone in both axes.
    Below the smallest measured context: that context's curve; above the largest: linear in
    L along the last segment (slope ≥ 0), constant with one measured context. Every axis
    outside its measured range is reported as an :class:`Extrapolation`.
    """
    by_ctx: dict[int, list[CostRow]] = {}
    for r in rows:
        by_ctx.setdefault(r.context_tokens, []).append(r)
    ctxs = sorted(by_ctx)
    curves = {c: _aggregate(tuple(by_ctx[c])) for c in ctxs}
    axis = _token_axis(kind, rows)
    L = float(context_tokens)
    x = context_axis(L)
    if len(ctxs) == 1 or L <= ctxs[0]:
        used = [ctxs[0]]
    elif L >= ctxs[-1]:
        used = ctxs[-2:]
    else:
        hi = next(i for i, c in enumerate(ctxs) if c >= L)
        used = ctxs[hi - 1:hi + 1]
    # the running max in L needs every context up to the last one used
    upto = ctxs[:ctxs.index(used[-1]) + 1]
    vals: list[Components] = []
    extrap: list[Extrapolation] = []
    for c in upto:
        toks, comps, weights = curves[c]
        v, out = interpolate(toks, comps, float(tokens), weights)
        vals.append(v)
        if out and c in used and not any(e.axis == axis for e in extrap):
            extrap.append(Extrapolation(kind=kind, axis=axis, requested=float(tokens),
                                        measured_min=toks[0], measured_max=toks[-1]))
    vals = _cummax(vals)
    if len(used) == 1:
        res = vals[-1]
    else:
        c0, c1 = vals[-2], vals[-1]
        x0, x1 = context_axis(used[0]), context_axis(used[1])
        w = (x - x0) / (x1 - x0)
        if w > 1.0:
            # beyond the last context: T(n, L1) + (w − 1)·D(n), D = the last segment's rise, taken as its
            # running max over the token knots ≤ n so the extrapolation stays non-decreasing in n
            # (the rise itself can shrink with n; a negative weight on T(n, L0) would then reward
            # more tokens). D ≥ 0 after the running max in L.
            d = _rise_upto(curves, upto, float(tokens))
            res = (c1[0] + (w - 1.0) * d[0], c1[1] + (w - 1.0) * d[1], c1[2] + (w - 1.0) * d[2])
        else:
            res = (c0[0] + w * (c1[0] - c0[0]), c0[1] + w * (c1[1] - c0[1]), c0[2] + w * (c1[2] - c0[2]))
    if L < ctxs[0] or L > ctxs[-1]:
        extrap.append(Extrapolation(kind=kind, axis="context", requested=L, measured_min=float(ctxs[0]),
                                    measured_max=float(ctxs[-1])))
    return res, tuple(extrap)


def _rise_upto(curves: dict[int, tuple[list[float], list[Components], list[float]]], upto: list[int],
               tokens: float) -> Components:
    """max over n' ∈ {token knots ≤ n} ∪ {n} of T(n', L_last) − T(n', L_prev), per component, with T
    made non-decreasing in L exactly as :func:`surface` does (running max over the contexts)."""
    knots = sorted({t for c in upto for t in curves[c][0] if t <= tokens} | {tokens})
    best = (0.0, 0.0, 0.0)
    for n in knots:
        vals = _cummax([interpolate(curves[c][0], curves[c][1], n, curves[c][2])[0] for c in upto])
        a, b = vals[-2], vals[-1]
        best = (max(best[0], b[0] - a[0]), max(best[1], b[1] - a[1]), max(best[2], b[2] - a[2]))
    return best


def forward_cost(profile: Profile, kind: str, tokens: float, context_tokens: float | None = None) -> ForwardCost:
    """T_fwd for ``kind`` at ``tokens`` total tokens (batch × tokens per request) and
    ``context_tokens`` of KV per request (default: the smallest context measured for it).

    Uses the profile's rows of that kind, or the documented :data:`FALLBACK` kind at the same
    total tokens and the same context. Raises :class:`SpecmodelError` when neither is measured.
    """
    if tokens <= 0:
        raise SpecmodelError(f"forward cost: tokens must be > 0, got {tokens}")
    if context_tokens is not None and (not math.isfinite(context_tokens) or context_tokens < 0):
        raise SpecmodelError(f"forward cost: context must be a finite number >= 0, got {context_tokens}")
    use = kind
    if not profile.has(kind):
        use = FALLBACK.get(kind, "")
        if not use or not profile.has(use):
            raise SpecmodelError(f"profile {profile.name}: no '{kind}' cost rows"
                                 + (f" (nor '{FALLBACK[kind]}' to stand in)" if kind in FALLBACK else ""))
    rows = profile.rows(use)
    ctx = float(min(r.context_tokens for r in rows)) if context_tokens is None else float(context_tokens)
    rows, note = _with_decode_anchor(profile, kind, use, rows, float(tokens))
    vals, extrap = surface(rows, kind, float(tokens), ctx)
    ar, comp, other = (float(v) for v in vals)
    return ForwardCost(kind=kind, tokens=float(tokens), total_s=ar + comp + other, allreduce_s=ar,
                       compute_s=comp, other_s=other, context_tokens=ctx, extrapolations=extrap,
                       from_kind="" if use == kind else use, overrides=overrides(rows, kind, float(tokens), ctx),
                       note=note)


def _with_decode_anchor(profile: Profile, kind: str, use: str, rows: tuple[CostRow, ...],
                        tokens: float) -> tuple[tuple[CostRow, ...], str]:
    """A forward over fewer tokens than any measured one lies between two measured forwards of the
    same model: a verify at k = 2 from a k = 3 profile between the decode step (one token per
    request is a verify of no draft) and the smallest verify; the drafter's first forward over the
    verified tokens (``draft_extend``, B·(k+1)) at k = 1 between a single-token drafter forward
    (``draft``, B tokens) and the smallest measured one. Those rows below the smallest measured
    one, at contexts where it was measured, become the lower knots, so the lookup interpolates
    instead of extrapolating below the range."""
    anchor_kind = _ANCHORS.get(kind)
    if anchor_kind is None or use != kind or not profile.has(anchor_kind):
        return rows, ""
    vmin = min(r.tokens for r in rows)
    if tokens >= vmin:
        return rows, ""
    ctxs = {r.context_tokens for r in rows}
    # The forward interpolates; the step's other time does not: a speculative step's host work
    # (rejection sampling, the proposer's bookkeeping) is the smallest measured verify's at that
    # context, not the baseline's decode step's. On the vLLM CPU engine (bench_vllm_cli) a
    # verify step's other time was 2.20 ms at 4 tokens against 1.28 ms for a
    # decode step, so k = 1 (2 tokens) read half-way between the two steps priced the verify
    # 0.5 ms cheap and predicted 1.02x where the engine ran 0.79x.
    smallest = {c: min((r for r in rows if r.context_tokens == c), key=lambda r: r.tokens) for c in ctxs}
    anchors = tuple(_anchor(r, kind, smallest[r.context_tokens].other_s if kind == "verify" else r.other_s)
                    for r in profile.rows(anchor_kind) if r.tokens < vmin and r.context_tokens in ctxs)
    if not anchors:
        return rows, ""
    lo = min(a.tokens for a in anchors)
    what = {"verify": "the decode forward", "draft_extend": "a single-token drafter forward"}[kind]
    return rows + anchors, (f"{kind} at {tokens:g} tokens read between {what} ({lo:g} tokens) and the "
                            f"smallest measured {kind} ({vmin:g} tokens)")


#: kind -> the measured forward of the same model over one token per request that anchors it below
_ANCHORS = {"verify": "decode", "draft_extend": "draft"}


def _anchor(row: CostRow, kind: str, other_s: float) -> CostRow:
    """``row`` as a knot of ``kind``: its forward (all-reduce + compute) with ``other_s`` beside it."""
    return replace(row, kind=kind, other_s=other_s, total_s=row.allreduce_s + row.compute_s + other_s)


def overrides(rows: tuple[CostRow, ...], kind: str, tokens: float, context_tokens: float) -> tuple[Override, ...]:
    """The measured knots a lookup at (``tokens``, ``context_tokens``) reads that the monotone fit
    (:func:`_monotone` along tokens, the running max along context) lifted by more than noise -- two standard
    errors of the two medians' difference (:func:`specmodel.stats.median_se`) plus
    :data:`~specmodel.limits.OVERRIDE_REL_TOL` of the value used: each with the value measured, the value used and
    the knot whose cost replaced it."""
    by_ctx: dict[int, list[CostRow]] = {}
    for r in rows:
        by_ctx.setdefault(r.context_tokens, []).append(r)
    ctxs = sorted(by_ctx)
    lo_c = [c for c in ctxs if c <= context_tokens]
    hi_c = [c for c in ctxs if c >= context_tokens]
    used_ctx = sorted({*(lo_c[-1:] or ctxs[:1]), *(hi_c[:1] or ctxs[-1:])})
    out: list[Override] = []
    best_by_ctx: list[tuple[float, float, float]] = []  # (total, tokens, context) running max over contexts
    for c in ctxs[:ctxs.index(used_ctx[-1]) + 1]:
        toks, comps, weights = _aggregate(tuple(by_ctx[c]))
        raw = [sum(v) for v in comps]
        lifted = [sum(v) for v in _monotone(comps, weights)]  # what the surface uses at each knot (per component)
        se = [max(median_se(r.spread_s, r.samples) for r in by_ctx[c] if r.tokens == t) for t in toks]
        lo_t = [i for i, t in enumerate(toks) if t <= tokens]
        hi_t = [i for i, t in enumerate(toks) if t >= tokens]
        knots = sorted({*(lo_t[-1:] or [0]), *(hi_t[:1] or [len(toks) - 1])})
        for i in knots:
            j = max(range(i + 1), key=lambda m: raw[m])  # the dearest knot at or below i: what lifted it
            used = lifted[i]
            prev = max((b for b in best_by_ctx if b[1] == toks[i]), default=None, key=lambda b: b[0])
            by_t, by_c, by_s = toks[j], float(c), raw[j]
            if prev is not None and prev[0] > used:
                used, by_t, by_c, by_s = prev[0], prev[1], prev[2], prev[0]
            # lifted beyond noise: two standard errors of the two medians' difference + the tolerance
            noise = 2.0 * (se[i] ** 2 + se[j] ** 2) ** 0.5 + OVERRIDE_REL_TOL * used
            if c in used_ctx and used - raw[i] > noise:
                out.append(Override(kind=kind, tokens=toks[i], context_tokens=float(c), measured_s=raw[i],
                                    used_s=used, by_tokens=by_t, by_context_tokens=by_c, by_measured_s=by_s))
        best_by_ctx.extend((raw[i], toks[i], float(c)) for i in range(len(toks)))
    return tuple(dict.fromkeys(out))


def measured_tokens(profile: Profile, kind: str) -> tuple[int, ...]:
    return tuple(sorted({r.tokens for r in profile.rows(kind)}))


def measured_contexts(profile: Profile, kind: str | None = None) -> tuple[int, ...]:
    """Contexts with measured rows (of ``kind``, else of any kind), ascending."""
    return tuple(sorted({r.context_tokens for r in profile.costs if kind is None or r.kind == kind}))


def default_context(profile: Profile) -> int:
    """The context a prediction uses when none is asked for: the smallest measured decode context."""
    return measured_contexts(profile, "decode")[0]
