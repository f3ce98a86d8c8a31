"""The one decision rule: GO / MARGINAL / NO-GO / BLOCKED / INCONSISTENT, and the action each one means.

Every verdict and every piece of advice goes through :func:`decide`: ``predict``, ``plan`` (its
cells and the engine schedules), ``report`` (verdict and recommendation), ``watch`` (its advice),
the optimizer (``pays``, ``batch_limit``) and the what-ifs. Thresholds: :data:`specmodel.limits.GO_MIN_SPEEDUP`
and :data:`specmodel.limits.GO_MIN_P`.

* BLOCKED: the drafter check found a FAIL (the engine refuses the drafter or it cannot draft
  right); nothing else is looked at.
* INCONSISTENT: the costs the speedup rests on contradict each other
  (:mod:`specmodel.model.consistency`, a "refuse" finding): no speedup to judge, so no verdict.
* NO-GO: the speedup is below 1 (speculation is slower than the baseline).
* GO: speedup >= GO_MIN_SPEEDUP and, when the sample size is known, P(speedup > 1) >= GO_MIN_P.
* MARGINAL: everything in between (a gain inside the noise, or one the data cannot vouch for).

The thresholds are compared with the figures as displayed (two decimals), so the verdict never
contradicts the number printed next to it. ``p_gt_1`` None means the sample size is unknown: the
P rule cannot be checked, so it is not GO. Callers that have no P at all (the optimizer ranks
configurations, not samples) pass ``certain=True``: only the speedup thresholds apply.

A P that is *withheld* (``withheld``: why it is not shown -- it would rest on an assumed,
extrapolated, contradicted or another box's cost) decides nothing: the rule then reads only what
is shown, the speedup and its band. GO needs the band's lower end at or above 1 (the shown
interval excludes a loss) besides the speedup threshold; anything short of that is MARGINAL, and
the reason says P was not given and why. A speedup that is not a finite number gives no verdict
(INCONSISTENT): no comparison with a threshold means anything then.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from specmodel.limits import GO_MIN_P, GO_MIN_SPEEDUP

GO, MARGINAL, NO_GO, BLOCKED, INCONSISTENT = "GO", "MARGINAL", "NO-GO", "BLOCKED", "INCONSISTENT"
VERDICTS = (GO, MARGINAL, NO_GO, BLOCKED, INCONSISTENT)
#: what each verdict means for a configuration: only GO deploys speculation
SPECULATE, HOLD, OFF, REFUSE, REMEASURE = "speculate", "marginal", "off", "blocked", "re-measure"
ACTIONS = {GO: SPECULATE, MARGINAL: HOLD, NO_GO: OFF, BLOCKED: REFUSE, INCONSISTENT: REMEASURE}

__all__ = ["ACTIONS", "BLOCKED", "GO", "GO_MIN_P", "GO_MIN_SPEEDUP", "HOLD", "INCONSISTENT", "MARGINAL", "NO_GO",
           "OFF", "REFUSE", "REMEASURE", "SPECULATE", "VERDICTS", "Decision", "action_for", "decide", "verdict_for"]


@dataclass(frozen=True, kw_only=True)
class Decision:
    verdict: str
    reason: str

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"decision: verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @property
    def action(self) -> str:
        return ACTIONS[self.verdict]

    @property
    def pays(self) -> bool:
        """Speculation is worth running: GO, nothing less (MARGINAL runs nothing either)."""
        return self.verdict == GO

    def advice(self, *, running: bool = True) -> str:
        """The advice for a server (``running``: speculation is on now) or a plan: keep / switch off."""
        if self.verdict == GO:
            return "keep" if running else "speculate"
        if self.verdict == MARGINAL:
            return f"switch off (MARGINAL: {self.reason})" if running else "off (MARGINAL)"
        if self.verdict == BLOCKED:
            return f"switch off (BLOCKED: {self.reason})" if running else "refused (BLOCKED)"
        if self.verdict == INCONSISTENT:
            return f"no advice: re-measure ({self.reason})"
        return "switch off"


def decide(speedup: float, p_gt_1: float | None = None, *, certain: bool = False,
           blocked_by: Sequence[str] = (), contradictions: Sequence[str] = (), withheld: str = "",
           speedup_low: float | None = None) -> Decision:
    """The verdict for a predicted ``speedup`` (see the module docstring); ``contradictions``: the
    messages of the consistency checks that refuse (the first is the reason); ``withheld``: why P is
    not shown ("" = it is), with ``speedup_low`` the lower end of the speedup's shown band."""
    if blocked_by:
        return Decision(verdict=BLOCKED, reason="check-drafter: " + "; ".join(blocked_by))
    if contradictions:
        return Decision(verdict=INCONSISTENT, reason=f"no verdict: {contradictions[0]}")
    if not math.isfinite(speedup):
        return Decision(verdict=INCONSISTENT, reason=f"no verdict: the predicted speedup is {speedup!r}, not a number "
                                                     "any threshold can be compared with")
    sp = round(speedup, 2)
    if withheld and not certain:
        return _decide_withheld(sp, withheld, speedup_low)
    if certain:
        p: float | None = 1.0
    else:
        p = None if p_gt_1 is None or not math.isfinite(p_gt_1) else round(p_gt_1, 2)
    p_txt = "" if certain else f"; P(speedup>1) = {'needs counts' if p is None else f'{p:.2f}'}"
    if sp < 1.0:
        return Decision(verdict=NO_GO, reason=f"predicted speedup {sp:.2f}x < 1: speculation is slower than the baseline")
    if sp >= GO_MIN_SPEEDUP and p is not None and p >= GO_MIN_P:
        why = f"predicted speedup {sp:.2f}x >= {GO_MIN_SPEEDUP:.2f}x"
        return Decision(verdict=GO, reason=why + (f" with P(speedup>1) = {p:.2f}" if not certain else ""))
    if sp < GO_MIN_SPEEDUP:
        return Decision(verdict=MARGINAL, reason=f"predicted speedup {sp:.2f}x is below {GO_MIN_SPEEDUP:.2f}x (within "
                                                 f"{GO_MIN_SPEEDUP - 1:.0%} of break-even){p_txt}")
    if p is None:
        return Decision(verdict=MARGINAL, reason=f"predicted speedup {sp:.2f}x but P(speedup>1) unknown: GO needs P >= "
                                                 f"{GO_MIN_P:.2f}, which needs the histogram as counts (fractions carry "
                                                 "no sample size)")
    return Decision(verdict=MARGINAL,
                    reason=f"predicted speedup {sp:.2f}x but uncertain: P(speedup>1) = {p:.2f} < {GO_MIN_P:.2f}")


def _decide_withheld(sp: float, withheld: str, speedup_low: float | None) -> Decision:
    """GO / MARGINAL / NO-GO from the speedup and its shown band alone (P withheld: module docstring)."""
    p_txt = f"P(speedup>1) not given ({withheld})"
    if sp < 1.0:
        return Decision(verdict=NO_GO, reason=f"predicted speedup {sp:.2f}x < 1: speculation is slower than the "
                                              f"baseline; {p_txt}")
    if sp < GO_MIN_SPEEDUP:
        return Decision(verdict=MARGINAL, reason=f"predicted speedup {sp:.2f}x is below {GO_MIN_SPEEDUP:.2f}x (within "
                                                 f"{GO_MIN_SPEEDUP - 1:.0%} of break-even); {p_txt}")
    lo = None if speedup_low is None or not math.isfinite(speedup_low) else round(speedup_low, 2)
    if lo is None:
        return Decision(verdict=MARGINAL, reason=f"predicted speedup {sp:.2f}x but {p_txt} and no band to read instead: "
                                                 "nothing shown vouches for a gain")
    if lo < 1.0:
        return Decision(verdict=MARGINAL, reason=f"predicted speedup {sp:.2f}x but its band reaches {lo:.2f}x, below 1, "
                                                 f"and {p_txt}")
    return Decision(verdict=GO, reason=f"predicted speedup {sp:.2f}x >= {GO_MIN_SPEEDUP:.2f}x and its band stays above "
                                       f"1 (low end {lo:.2f}x); {p_txt}")


def verdict_for(speedup: float, p_gt_1: float | None, contradictions: Sequence[str] = (), *, withheld: str = "",
                speedup_low: float | None = None) -> tuple[str, str]:
    """(verdict, reason) of :func:`decide`, as predict stores them."""
    d = decide(speedup, p_gt_1, contradictions=contradictions, withheld=withheld, speedup_low=speedup_low)
    return d.verdict, d.reason


def action_for(speedup: float) -> str:
    """The action of :func:`decide` with only the speedup thresholds (the optimizer has no sample count)."""
    return decide(speedup, certain=True).action
