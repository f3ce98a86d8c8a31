"""The one accept-length source of an operating point, resolved once into an
:class:`~specmodel.model.inputs.Acceptance`: a mean, a histogram, per-position or chain rates, a
distribution already built, or server logs (parsed once by the caller: the same files also said
the server's configuration). A log's acceptance per context band, its proposal rate and its drift
between windows travel in the same record."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from specmodel.errors import FieldError, field_name
from specmodel.model import accept as acc
from specmodel.model.inputs import Acceptance
from specmodel.scenario.args import ScenarioArgs
from specmodel.scenario.parse import parse_histogram
from specmodel.schema.costrows import SpecConfig

if TYPE_CHECKING:
    from specmodel.engines.base import LogFile

#: fractions summing within this share of 1 (or of 100 %) are rounding, not a wrong histogram
FRACTION_SUM_TOLERANCE = 0.02


def fractions_warning(hist: Mapping[int, float]) -> str | None:
    """A histogram given as fractions that do not sum to 1 (nor to 100 %) is renormalised: say so,
    with the sum (a bucket left out, or a typo, would otherwise shift the mean without a word)."""
    vals = [float(v) for v in hist.values()]
    total = math.fsum(vals)
    if acc.histogram_has_counts(vals) or total <= 0:
        return None
    if abs(total - 1.0) <= FRACTION_SUM_TOLERANCE or abs(total / 100.0 - 1.0) <= FRACTION_SUM_TOLERANCE:
        return None
    return (f"accept histogram: the fractions sum to {total:.4g}, not 1: renormalised (each divided by {total:.4g}); "
            "check for a missing or mistyped bucket, or give counts")


def resolve_accept(args: ScenarioArgs, *, spec: SpecConfig, logs: Sequence[LogFile] = (),
                   context_tokens: int | None = None, require: bool = True) -> Acceptance:
    """Exactly one accept-length source → its :class:`Acceptance` on 1..steps+1 (``logs``: the
    ``accept_logs`` already parsed). At ``context_tokens``, a log's band that covers it is the
    distribution; what was assumed is in the record's notes."""
    found = _source(args, spec, logs, require)
    notes = list(found.notes)
    rate_source = ""
    if found.proposal_rate is not None:
        # the server's own log measured its rate (drafts per request-step; 0: proposed nothing)
        rate_source = ("measured in the accept log: the server proposed nothing" if found.proposal_rate == 0.0 else
                       "measured in the accept log: the server's drafts per request-step")
        if args.proposal_rate is None:
            notes.append(f"proposal rate {found.proposal_rate:.0%}: {rate_source} ({field_name('proposal_rate')} "
                         "overrides)")
    dist, per_pos = found.dist, found.per_position
    if found.by_context is not None and context_tokens is not None:
        # the log measured acceptance per context band: use the one that covers the context asked for
        dist, label = found.by_context.at(context_tokens)
        per_pos = tuple(dist.per_position_rates()) if per_pos is not None else None
        notes.append(f"acceptance at context {context_tokens}: {label}")
    elif context_tokens is not None and dist.source != "none":
        notes.append(f"acceptance assumed constant over context: {dist.source} gives no per-context measurement")
    return replace(found, dist=dist, per_position=per_pos, proposal_rate_source=rate_source, notes=tuple(notes))


def _source(args: ScenarioArgs, spec: SpecConfig, logs: Sequence[LogFile], require: bool) -> Acceptance:
    """The given source's distribution and what it measured beside it, at the source's own contexts."""
    given = args.accept_sources()
    k = spec.max_accept_tokens
    if not given:
        if require:
            raise FieldError(None, "an accept-length source is required: {accept_len}, {accept_hist}, "
                                   "{per_position}, {alpha} or {accept_logs}")
        return Acceptance(dist=acc.from_mean(1.0, k, source="none"))
    if args.accept_dist is not None:
        return Acceptance(dist=args.accept_dist)
    if args.accept_len is not None:
        return Acceptance(dist=acc.from_mean(args.accept_len, k, convention=args.convention, shape=args.shape,
                                             source=f"mean {args.accept_len:g} ({args.convention})"))
    if args.accept_hist is not None:
        hist = parse_histogram(args.accept_hist) if isinstance(args.accept_hist, str) else args.accept_hist
        w = fractions_warning(hist)
        return Acceptance(dist=acc.from_histogram(hist, convention=args.convention, max_tokens=k),
                          warnings=(w,) if w is not None else ())
    if isinstance(args.per_position, tuple):
        return _per_position(args, args.per_position, spec)
    if args.alpha is not None:
        return Acceptance(dist=acc.from_chain(args.alpha, spec.steps, source=f"chain alpha {args.alpha:g}"))
    assert given[0] == "accept_logs"
    return _from_logs(logs, k)


def _per_position(args: ScenarioArgs, rates: tuple[float, ...], spec: SpecConfig) -> Acceptance:
    k = spec.max_accept_tokens
    if len(rates) > spec.steps:
        raise FieldError("per_position", f"{len(rates)} rates but steps is {spec.steps}; pass {{steps}} {len(rates)}")
    if len(rates) < spec.steps:
        if args.steps is None:
            # a draft position with no rate would be paid for and never accepted: ask
            raise FieldError("per_position",
                             f"{len(rates)} rates but steps is {spec.steps} (the profile's); pass {{steps}} "
                             f"{len(rates)} to match, or {{steps}} {spec.steps} explicitly to extend with the last "
                             "conditional rate")
        dist = acc.resize(acc.from_per_position(list(rates)), k)
        return Acceptance(dist=dist, per_position=tuple(dist.per_position_rates()),
                          notes=(f"{field_name('per_position')}: {len(rates)} rates extended to "
                                 f"{field_name('steps')} {spec.steps} with the last "
                                 "conditional acceptance rate (an assumption)",))
    return Acceptance(dist=acc.from_per_position(list(rates), max_tokens=k), per_position=rates)


def _from_logs(logs: Sequence[LogFile], max_tokens: int) -> Acceptance:
    """Server logs (SGLang / vLLM / bench_speculative formats, summarised by the trace package)."""
    from specmodel.engines.logs import summarize_files

    s = summarize_files(logs, max_tokens)
    notes = list(s.notes)
    drift = 0.0
    if len(s.window_steps) >= 3:
        from specmodel.model.hostdraft import mixed_std

        r = 1.0 if s.proposal_rate is None else s.proposal_rate
        drift = acc.window_drift_rel(s.window_steps, mixed_std(s.dist.mean_tokens, s.dist.std_tokens, r))
        notes.append(f"tokens per request-step moved {drift:.1%} (relative, beyond sampling) between the log's "
                     f"{len(s.window_steps)} windows: the prediction's band and P(speedup > 1) carry it")
    return Acceptance(dist=s.dist, per_position=s.rates, by_context=s.by_context, proposal_rate=s.proposal_rate,
                      window_drift_rel=drift, notes=tuple(notes))
