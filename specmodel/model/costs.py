"""Forward cost curves T_fwd(n_tokens), split into all-reduce / compute / other seconds."""

from __future__ import annotations

from dataclasses import dataclass

from specmodel.errors import SpecmodelError
from specmodel.schema.profile import CostRow, Profile

#: When a kind is missing, the kind whose curve stands in for it (documented fallbacks):
#: a verify forward is a target forward over more tokens, so the decode curve T_fwd(n)
#: is its best proxy; a draft-extend is a drafter forward over more tokens.
FALLBACK = {"verify": "decode", "draft_extend": "draft"}


@dataclass(frozen=True, kw_only=True)
class ForwardCost:
    """Cost of one forward pass at ``tokens`` tokens (interpolated)."""

    kind: str
    tokens: float
    total_s: float
    allreduce_s: float
    compute_s: float
    other_s: float
    extrapolated: bool = False
    from_kind: str = ""  # kind whose measurements were used (fallback), "" = same kind

    def scaled(self, factor: float) -> ForwardCost:
        return ForwardCost(kind=self.kind, tokens=self.tokens, total_s=self.total_s * factor,
                           allreduce_s=self.allreduce_s * factor, compute_s=self.compute_s * factor,
                           other_s=self.other_s * factor, extrapolated=self.extrapolated,
                           from_kind=self.from_kind)


ZERO_COST = ForwardCost(kind="none", tokens=0, total_s=0.0, allreduce_s=0.0, compute_s=0.0, other_s=0.0)


Components = tuple[float, float, float]  # (allreduce_s, compute_s, other_s)


def _aggregate(rows: tuple[CostRow, ...]) -> tuple[list[float], list[Components]]:
    """Collapse rows to one point per token count (mean over batch splits)."""
    by_tok: dict[int, list[CostRow]] = {}
    for r in rows:
        by_tok.setdefault(r.tokens, []).append(r)
    toks = sorted(by_tok)
    comps: list[Components] = []
    for t in toks:
        rs = by_tok[t]
        comps.append((sum(r.allreduce_s for r in rs) / len(rs), sum(r.compute_s for r in rs) / len(rs),
                      sum(r.other_s for r in rs) / len(rs)))
    return [float(t) for t in toks], comps


def _monotone(values: list[Components]) -> list[Components]:
    """Running maximum down the token axis, per component: a forward over more tokens never
    costs less. Measured medians can dip from noise; the model must not reward verifying more.
    """
    out: list[Components] = []
    for v in values:
        out.append(v if not out else (max(out[-1][0], v[0]), max(out[-1][1], v[1]), max(out[-1][2], v[2])))
    return out


def interpolate(toks: list[float], comps: list[Components], n: float) -> tuple[Components, bool]:
    """Piecewise-linear interpolation of each component at ``n`` tokens.

    Below the first point: the first point (a forward has a fixed floor: kernel launches,
    latency-bound all-reduces). Above the last: linear extrapolation along the last segment
    (slope clamped ≥ 0), flagged as extrapolated.
    """
    comps = _monotone(comps)
    if len(toks) == 1 or n <= toks[0]:
        return comps[0], n > toks[-1]
    if n > toks[-1]:
        x0, x1 = toks[-2], toks[-1]
        c0, c1 = comps[-2], comps[-1]
        ext = tuple(c1[i] + max((c1[i] - c0[i]) / (x1 - x0), 0.0) * (n - x1) for i in range(3))
        return (ext[0], ext[1], ext[2]), True
    hi = next(i for i, t in enumerate(toks) if t >= n)
    x0, x1 = toks[hi - 1], toks[hi]
    c0, c1 = comps[hi - 1], comps[hi]
    w = (n - x0) / (x1 - x0)
    lin = tuple(c0[i] + w * (c1[i] - c0[i]) for i in range(3))
    return (lin[0], lin[1], lin[2]), False


def forward_cost(profile: Profile, kind: str, tokens: float) -> ForwardCost:
    """T_fwd for ``kind`` at ``tokens`` total tokens (batch × tokens per request).

    Uses the profile's rows of that kind, or the documented :data:`FALLBACK` kind.
    Raises :class:`SpecmodelError` when neither is measured.
    """
    if tokens <= 0:
        raise SpecmodelError(f"forward cost: tokens must be > 0, got {tokens}")
    use = kind
    if not profile.has(kind):
        use = FALLBACK.get(kind, "")
        if not use or not profile.has(use):
            raise SpecmodelError(f"profile {profile.name}: no '{kind}' cost rows"
                                 + (f" (nor '{FALLBACK[kind]}' to stand in)" if kind in FALLBACK else ""))
    toks, comps = _aggregate(profile.rows(use))
    vals, extrap = interpolate(toks, comps, float(tokens))
    ar, comp, other = (float(v) for v in vals)
    return ForwardCost(kind=kind, tokens=float(tokens), total_s=ar + comp + other, allreduce_s=ar,
                       compute_s=comp, other_s=other, extrapolated=extrap,
                       from_kind="" if use == kind else use)


def measured_tokens(profile: Profile, kind: str) -> tuple[int, ...]:
    return tuple(sorted({r.tokens for r in profile.rows(kind)}))
