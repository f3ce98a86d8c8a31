"""Forward cost curves T_fwd(n_tokens), split into all-reduce / compute / other seconds."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def _aggregate(rows: tuple[CostRow, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Collapse rows to one point per token count (mean over batch splits); components (ar, comp, other)."""
    by_tok: dict[int, list[CostRow]] = {}
    for r in rows:
        by_tok.setdefault(r.tokens, []).append(r)
    toks = np.array(sorted(by_tok), dtype=float)
    comps = np.array([[np.mean([getattr(r, c) for r in by_tok[int(t)]]) for c in ("allreduce_s", "compute_s", "other_s")]
                      for t in toks])
    return toks, comps


def _monotone(values: np.ndarray) -> np.ndarray:
    """Running maximum down the token axis: a forward over more tokens never costs less.

    Measured medians can dip from noise; the model must not reward verifying more tokens.
    """
    return np.maximum.accumulate(values, axis=0)


def interpolate(toks: np.ndarray, comps: np.ndarray, n: float) -> tuple[np.ndarray, bool]:
    """Piecewise-linear interpolation of each component at ``n`` tokens.

    Below the first point: the first point (a forward has a fixed floor: kernel launches,
    latency-bound all-reduces). Above the last: linear extrapolation along the last segment
    (slope clamped ≥ 0), flagged as extrapolated.
    """
    comps = _monotone(comps)
    if len(toks) == 1 or n <= toks[0]:
        return comps[0].copy(), bool(n > toks[-1])
    if n <= toks[-1]:
        return np.array([np.interp(n, toks, comps[:, c]) for c in range(comps.shape[1])]), False
    slope = np.maximum((comps[-1] - comps[-2]) / (toks[-1] - toks[-2]), 0.0)
    return comps[-1] + slope * (n - toks[-1]), True


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
