"""The report's sentences: how an accept length, a speedup and the cycle's all-reduce share are
written (one wording for PDF and Markdown), what page 1 says about the measurement's noise, the
assumptions list and the provenance rows. Text from the :class:`~specmodel.model.prediction.Prediction`
and the profile; nothing here computes a figure.
"""

from __future__ import annotations

import math
import platform
from collections.abc import Sequence
from importlib import metadata

from specmodel import __version__
from specmodel.errors import field_name
from specmodel.model.accept import AcceptDist
from specmodel.model.predict import GO_MIN_P, GO_MIN_SPEEDUP
from specmodel.model.prediction import Prediction
from specmodel.schema.profile import Profile
from specmodel.units import ms


def tokens_per_step_text(tokens: float) -> str:
    """An accept length as the report prints it; a break-even no accept length reaches is "none"."""
    return f"{tokens:.2f} tokens/step" if math.isfinite(tokens) else "none (no accept length breaks even)"


def short_tokens(tokens: float) -> str:
    """An accept length in a table cell: two decimals, or "none" where no accept length reaches it."""
    return f"{tokens:.2f}" if math.isfinite(tokens) else "none"


def speedup_text(p: Prediction) -> str:
    """The speedup as the report prints it: the decode phase's, and a request's end to end when one
    was priced (the verdict then rests on that one)."""
    rq = p.request
    if rq is None:
        return f"{p.figures.speedup:.2f}x"
    return f"{rq.speedup:.2f}x per request, {p.figures.speedup:.2f}x decode"


def cycle_allreduce_text(p: Prediction) -> str:
    """The cycle with its all-reduce share as the report prints it (one wording for PDF and Markdown)."""
    if p.no_allreduce:
        return f"{ms(p.costs.cycle_s)}, all-reduce none (TP 1)"
    if not p.source.allreduce_known:
        return f"{ms(p.costs.cycle_s)}, all-reduce unknown (no split)"
    return f"{ms(p.costs.cycle_s)}, all-reduce {p.costs.cycle_allreduce_frac:.1%} ({p.allreduce_source})"


def measurement_text(profile: Profile) -> str:
    """Page 1: what the costs are and how noisy their measurement was."""
    cis = sorted(float(r.ci95_rel) for r in profile.costs if r.ci95_rel is not None)
    what = profile.label if profile.source_kind == "measured" else f"costs: {profile.label}"
    if not cis:
        return f"{what}; no 95 % intervals recorded for its {len(profile.costs)} cost rows"
    within = sum(1 for c in cis if c <= NOISE_OK_REL)
    return (f"{what}; 95 % intervals of its {len(cis)} cost rows: median +/-{cis[len(cis) // 2]:.1%}, worst "
            f"+/-{cis[-1]:.1%} ({within}/{len(cis)} within +/-{NOISE_OK_REL:.0%})")


#: A cost row whose 95 % interval is within this is called tight on page 1 (the profiler's default target).
NOISE_OK_REL = 0.02


def assumption_lines(p: Prediction, dist: AcceptDist, profile: Profile,
                 per_position: Sequence[float] | None) -> tuple[str, ...]:
    acc = f"accept length: {p.accept.source}"
    if per_position:
        acc += " rates " + ", ".join(f"{r:.2f}" for r in per_position)
    elif p.accept.samples == 0 and p.accept.source.startswith("mean"):
        acc += " (constant per-draft acceptance assumed around the mean)"
    out = [measurement_text(profile), acc]
    out.append(f"costs from the {p.source.profile_source_kind} profile '{p.source.profile_name}', interpolated at "
               f"batch {p.point.batch} ({p.costs.verify_tokens} verify tokens)")
    method = p.source.algorithm.lower()
    if p.host_proposer:  # no drafter forward by design: nothing was left unmeasured
        out.append(f"no drafter forward: {method} proposes on the host (its lookup is the per-cycle overhead)")
    else:
        out.append(f"draft = {p.draft_parts}" if p.costs.draft_s > 0
                   else "draft cost not measured: assumed free (upper bound)")
    over = f"per-cycle overhead {ms(p.costs.overhead_s)}"
    if p.host_proposer:
        over += f" ({method} lookup per step)"
    if p.accept.proposal_rate < 1.0:
        over += f"; {p.accept.proposal_rate:.0%} of request-steps proposed, the rest decoded"
    if p.costs.calibrated_overhead_s is not None:
        over += f" (calibration added {ms(p.costs.calibrated_overhead_s)})"
    out.append(over)
    if p.accept.proposal_rate < 1.0 or p.accept.proposal_rate_source:
        rate_from = p.accept.proposal_rate_source or field_name("proposal_rate")
        out.append(f"{p.accept.proposal_rate:.0%} of request-steps proposed ({rate_from}); the others decode one token "
                   f"at the baseline step plus the lookup: mean step {ms(p.costs.mean_step_s)}")
    if p.figures.p_speedup_gt_1 is None:
        out.append("P(speedup > 1) needs counts: the histogram was given as fractions (sample size unknown); "
                   f"the band ({p.band_label}) covers one generation's variability"
                   + _cost_part(p.costs.cycle_ci95_rel, only=True))
    else:
        out.append(f"band and P(speedup > 1) {p.band_label}: one generation's variability"
                   + (" plus the sampling error of the measured mean" if dist.samples > 0 else
                      " (accept length taken as exact)") + _cost_part(p.costs.cycle_ci95_rel))
    out.append(f"GO needs speedup >= {GO_MIN_SPEEDUP:.2f}x and P(speedup > 1) >= {GO_MIN_P:.2f}; "
               "NO-GO below 1.00x")
    if profile.source_kind == "reference":
        out.append("the reference profile is derived from a published write-up, not measured on your box")
    return tuple(out)


def provenance_rows(profile: Profile, p: Prediction, inputs: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...]:
    hw = profile.hardware
    hw_txt = ", ".join(f"{k} {hw[k]}" for k in ("gpu_name", "gpu_count", "interconnect", "device", "cpu") if k in hw)
    rows = [("profile", f"{profile.name} ({profile.source_kind}) {profile.path}"),
            ("profile source", profile.label),
            ("hardware", hw_txt or "not recorded"),
            ("model", str(profile.model.get("name", "not recorded"))),
            ("backend / TP", f"{profile.backend or 'not recorded'} / {f'TP {p.source.tp}' if p.source.tp_known else 'TP unknown'}")]
    versions = profile.source.versions()
    if versions:
        rows.append(("profile versions", ", ".join(f"{k} {v}" for k, v in sorted(versions.items()))))
    rows.append(("specmodel", f"{__version__}; python {platform.python_version()}; numpy {_version('numpy')}; "
                              f"matplotlib {_version('matplotlib')}"))
    rows.append(("accept source", p.accept.source))
    if len({o for _, o in p.source.cost_sources}) == 1:
        rows.append(("costs from", p.source.cost_sources[0][1]))
    else:
        rows.extend((f"{what} from", origin) for what, origin in p.source.cost_sources)
    rows.extend(inputs)
    return tuple(rows)


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "not installed"


def _cost_part(u: float, only: bool = False) -> str:
    """What the band says about the costs: it is widened by their measured 95 % interval."""
    if u > 0:
        return f", plus the measured costs' 95 % interval (cycle ±{u:.1%})"
    return " only (costs taken as exact: no interval measured)" if only else "; costs taken as exact (no interval measured)"
