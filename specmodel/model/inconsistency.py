"""What every consistency check shares: the :class:`Inconsistency` record (which check, refuse or
qualify, both figures named), and the noise rule two medians are compared by (:func:`disagree`: two
standard errors of their difference plus a relative tolerance) with the rows a lookup read as evidence.
The checks themselves: :mod:`specmodel.model.consistency` (the cycle's costs against each other) and
:mod:`specmodel.model.boxcheck` (the box's condition under the two recordings)."""

from __future__ import annotations

from dataclasses import dataclass

from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import Profile
from specmodel.stats import median_se
from specmodel.units import ms

SEVERITIES = ("refuse", "qualify")

CHECKS = ("verify_below_decode", "break_even_below_one", "decode_disagrees", "running_max", "beyond_range",
          "box_condition")


@dataclass(frozen=True, kw_only=True)
class Inconsistency:
    """Two figures that contradict each other, named with where each came from."""

    check: str
    severity: str
    message: str
    to_measure: str
    #: the contradiction is an extrapolation's (beyond the measured range), not two recordings'
    beyond_range: bool = False
    #: one clause naming the guard that fired, for the line where P(speedup > 1) is not given ("": the check's own)
    guard: str = ""

    def __post_init__(self) -> None:
        if self.check not in CHECKS:
            raise ValueError(f"inconsistency: unknown check {self.check!r}")
        if self.severity not in SEVERITIES:
            raise ValueError(f"inconsistency: unknown severity {self.severity!r}")

    @property
    def refuses(self) -> bool:
        return self.severity == "refuse"

    def to_dict(self) -> dict[str, str | bool]:
        return {"check": self.check, "severity": self.severity, "message": self.message,
                "to_measure": self.to_measure, "beyond_range": self.beyond_range}


def near_rows(rows: tuple[CostRow, ...], tokens: float, context_tokens: float) -> list[CostRow]:
    """The rows bracketing (tokens, context): what a lookup there reads."""
    if not rows:
        return []
    ctxs = sorted({r.context_tokens for r in rows})
    lo = [c for c in ctxs if c <= context_tokens]
    hi = [c for c in ctxs if c >= context_tokens]
    keep = {*(lo[-1:] or ctxs[:1]), *(hi[:1] or ctxs[-1:])}
    at = [r for r in rows if r.context_tokens in keep]
    below = [r for r in at if r.tokens <= tokens]
    above = [r for r in at if r.tokens >= tokens]
    return ([max(below, key=lambda r: r.tokens)] if below else []) + ([min(above, key=lambda r: r.tokens)] if above else [])


def tokens_text(n: float) -> str:
    return f"{n:g} token" + ("" if n == 1 else "s")


def rows_text(profile: Profile, kind: str, tokens: float, context_tokens: float) -> str:
    """``decode b1 t1: 66 steps, IQR 45.42 ms``: the rows a lookup read, as evidence."""
    parts = [f"{r.kind} b{r.batch} t{r.tokens}" + (f" L{r.context_tokens}" if r.context_tokens else "")
             + (f": {r.samples} steps, IQR {ms(r.spread_s)}" if r.samples else "")
             for r in near_rows(profile.rows(kind), tokens, context_tokens)]
    return ", ".join(dict.fromkeys(parts)) or "no rows"


def median_se_s(row: CostRow) -> float:
    """Standard error of a row's median (:func:`specmodel.stats.median_se` of its IQR and samples);
    0 when the row carries no spread (reference profiles, plain numbers)."""
    return median_se(row.spread_s, row.samples)


def noise_s(profile: Profile, kind: str, tokens: float, context_tokens: float) -> float:
    """The largest median standard error of the ``kind`` rows a lookup at (tokens, context) reads."""
    return max((median_se_s(r) for r in near_rows(profile.rows(kind), tokens, context_tokens)), default=0.0)


def disagree(low_s: float, high_s: float, se_a_s: float, se_b_s: float, rel_tol: float) -> bool:
    """``low_s`` sits below ``high_s`` by more than noise: two standard errors of the difference of the
    two medians plus ``rel_tol`` of the larger (medians of steps move with the box by a few %)."""
    return high_s - low_s > 2.0 * (se_a_s**2 + se_b_s**2) ** 0.5 + rel_tol * high_s
