"""``specmodel watch``: a running server's acceptance, batch and context over a sliding window,
held against a profile's break-even surface, one reading per interval.

Sources: an engine's Prometheus ``/metrics`` page (the metrics plug-ins of the engine registry,
:mod:`specmodel.engines`) or a server log being written (the log plug-ins), read by
:mod:`specmodel.live.sources`; the window and what the server did over it (:class:`Observed`) are
:mod:`specmodel.live.window`. This module holds the window against the profile: nothing here
re-derives the model: the reading is :func:`specmodel.model.predict.predict` at the observed
point, the advice is :func:`specmodel.model.optimize.optimize` / :func:`batch_limit` there.

Counters that go backwards (a server restart) restart the window; a server that stops answering
is reported and retried, never fatal once it has answered once. Bad input before the first
reading (unreachable URL, a page without spec-decode metrics, a profile of another model or TP)
is one :class:`SpecmodelError`.
"""

from __future__ import annotations

import datetime as _dt
import math
from dataclasses import dataclass, replace
from typing import Any

from specmodel.engines import engine_spec
from specmodel.engines.base import EngineConfig
from specmodel.errors import SpecmodelError, spell, verbatim
from specmodel.live.window import Observed
from specmodel.model import accept as acc
from specmodel.model.decision import INCONSISTENT
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.formats import WATCH
from specmodel.schema.phases import is_host_proposer
from specmodel.schema.profile import Profile


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One interval's verdict: predicted speedup (with its band) at the observed point, the margin
    to break-even, and the advice."""

    observed: Observed
    spec: SpecConfig
    speedup: float
    speedup_low: float
    speedup_high: float
    break_even_tokens: float
    margin_tokens: float
    predicted_tokens_per_s: float
    baseline_tokens_per_s: float
    advice: str
    switch_off_above_batch: int | None
    best_steps: int | None
    extrapolated: tuple[str, ...]
    notes: tuple[str, ...] = ()
    verdict: str = ""
    verdict_reason: str = ""
    #: the engine's own costs priced in (SGLang's device timer): per kind the live and the profile's
    #: cost, their gap and the profile's interval; None where the page has none
    live_costs: dict[str, Any] | None = None
    #: the kinds whose live cost left the profile's interval (e.g. "verify +20.0%")
    live_outside: tuple[str, ...] = ()

    def line(self, stamp: str) -> str:
        o = self.observed
        ctx = f"{o.context_tokens:.0f}" if o.context_tokens is not None else "?"
        ext = f"  (extrapolated: {', '.join(self.extrapolated)})" if self.extrapolated else ""
        prop = f", {o.proposal_rate:.0%} of steps proposed" if o.proposal_rate is not None and o.proposal_rate < 0.995 else ""
        return (f"{stamp}  accept {o.dist.mean_tokens:.2f} tok/step (k {self.spec.steps}{prop}), batch {o.batch:.1f}, "
                f"context {ctx}: speedup {self.speedup:.2f}x [{self.speedup_low:.2f}-{self.speedup_high:.2f}], "
                + (f"margin {self.margin_tokens:+.2f} tok/step over break-even {self.break_even_tokens:.2f}; "
                   if math.isfinite(self.break_even_tokens) else "nothing proposed: no accept length breaks even; ")
                + f"{self.verdict}; advice: {self.advice}{ext}"
                + (f"  (live costs left the profile's interval: {', '.join(self.live_outside)})"
                   if self.live_outside else ""))

    def to_dict(self) -> dict[str, Any]:
        return WATCH.stamp(_finite({
            "observed": self.observed.to_dict(), "spec": self.spec.to_dict(), "speedup": self.speedup,
            "speedup_low": self.speedup_low, "speedup_high": self.speedup_high,
            # (infinite when nothing is proposed: no accept length breaks even)
            "break_even_accept_tokens": self.break_even_tokens if math.isfinite(self.break_even_tokens) else None,
            "margin_tokens": self.margin_tokens if math.isfinite(self.margin_tokens) else None,
            "predicted_tokens_per_s": self.predicted_tokens_per_s, "baseline_tokens_per_s": self.baseline_tokens_per_s,
            "advice": self.advice, "switch_off_above_batch": self.switch_off_above_batch,
            "best_steps": self.best_steps, "extrapolated": list(self.extrapolated), "notes": list(self.notes),
            "verdict": self.verdict, "verdict_reason": self.verdict_reason, "live_costs": self.live_costs,
            "live_outside": list(self.live_outside)}))


def _finite(x: Any) -> Any:
    """A non-finite float (a window of zero span, a page's odd value) as None: JSON has no inf/NaN."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def spec_for(profile: Profile, obs: Observed, steps: int | None) -> SpecConfig:
    """The server's configuration: its method where the source says it (else the profile's); a
    counters engine's page says k (``steps``), an engine that drafts chains runs topk 1; else
    --steps / the profile's."""
    eng = engine_spec(obs.engine)
    alg = obs.method or profile.spec.algorithm
    k = obs.steps or steps or profile.spec.steps
    if eng.chains_only:
        return SpecConfig(algorithm=alg, steps=k, topk=1, num_draft_tokens=k + 1)
    if k != profile.spec.steps:
        return SpecConfig(algorithm=alg, steps=k, topk=profile.spec.topk,
                          num_draft_tokens=k + 1 if profile.spec.topk == 1 else profile.spec.num_draft_tokens)
    return replace(profile.spec, algorithm=alg) if alg != profile.spec.algorithm else profile.spec


def check_method_matches_profile(method: str | None, profile: Profile, where: str) -> None:
    """A server whose method proposes another way than the profile's (a host lookup vs a drafter
    forward) has another cycle: refuse (one line). The same kind under another name is priced with
    the profile's costs."""
    if method is None or is_host_proposer(method) == is_host_proposer(profile.spec.algorithm):
        return
    kind = {True: "a host lookup, no drafter forward", False: "a drafter forward"}
    raise SpecmodelError(f"{where}: the server runs {method} ({kind[is_host_proposer(method)]}) but profile "
                         f"{profile.name} was measured with {profile.spec.algorithm} "
                         f"({kind[is_host_proposer(profile.spec.algorithm)]}); watch it against a profile of the "
                         "server's method")


def assess(profile: Profile, obs: Observed, spec: SpecConfig) -> Reading:
    """Predict at the observed (acceptance, batch, context) and advise (model/ functions only)."""
    from specmodel.model.costs import measured_contexts
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.optimize import accept_model, batch_limit, optimize
    from specmodel.model.predict import predict

    b = max(1, int(round(obs.batch)))
    profile, live, live_notes = live_pricing(profile, obs, spec, b)
    dist = obs.dist
    if dist.max_tokens < spec.max_accept_tokens:
        dist = acc.resize(dist, spec.max_accept_tokens, rates=obs.rates)
        dist = replace(dist, source=obs.dist.source, samples=obs.dist.samples)
    # the server's own share of proposing steps, for the server's own method: a host proposer's
    # steps without a match cost a lookup and emit one token (a drafter forward always proposes)
    rate = obs.proposal_rate if obs.proposal_rate is not None and is_host_proposer(spec.algorithm) else None
    p = predict(profile, dist, OperatingPoint(batch=b, spec=spec, context_tokens=obs.context_tokens,
                                              proposal_rate=rate))
    base = p.figures.baseline_tokens_per_s
    topks = (1,) if engine_spec(obs.engine).chains_only else (1, 2, 4, 8)
    model = accept_model(dist, rates=obs.rates, measured_topk=spec.topk, max_steps=max(8, spec.steps))
    opt = optimize(profile, model, batch=b, default=spec, top=1, topks=topks, context_tokens=obs.context_tokens,
                   proposal_rate=p.accept.proposal_rate)
    batches = sorted({r.batch for r in profile.rows("decode")} | {b})
    limit = batch_limit([optimize(profile, model, batch=x, default=spec, top=1, topks=topks,
                                  context_tokens=obs.context_tokens, proposal_rate=p.accept.proposal_rate)
                         for x in batches])
    notes: list[str] = list(live_notes)
    if obs.method is None:
        notes.append(spell(f"the source does not name the server's method: priced as the profile's "
                           f"({verbatim(spec.algorithm)}); pass {{method}}"))
    if obs.context_tokens is None:
        ctxs = measured_contexts(profile, "decode")
        notes.append(f"the source gives no context: costs at the profile's context {min(ctxs) if ctxs else 0}")
    # a cost the verdict rests on that nobody measured is said beside it, as predict's label says it
    notes.extend(dict.fromkeys(a.label for a in p.outcome.assumed))
    run = opt.to_run
    # the one decision rule (model/decision.py) on the current configuration; a different k is
    # advised only when it is GO itself and beats the current one beyond the noise band
    # (the prediction's own decision: inputs that contradict each other give none, a withheld P decides nothing)
    d = p.decision
    better = d.verdict != INCONSISTENT and run is not None and run.steps != spec.steps and run.tokens_per_s > p.figures.tokens_per_s_high
    if better and run is not None:
        advice = f"use k = {run.steps} (predicted {run.speedup:.2f}x)"
    elif d.verdict == INCONSISTENT:  # no figure to advise from here, not even a batch limit
        advice = d.advice()
    elif not d.pays:
        advice = (f"switch off above batch {limit} ({d.verdict} at batch {b})" if limit is not None and limit < b
                  else d.advice())
    else:
        advice = d.advice()
        if limit is not None and limit < max(batches):
            advice += f" (switch off above batch {limit})"
    return Reading(observed=obs, spec=spec, speedup=p.figures.speedup, speedup_low=p.figures.speedup_low,
                   speedup_high=p.figures.speedup_high, break_even_tokens=p.figures.break_even_accept_tokens,
                   margin_tokens=p.figures.margin_tokens, predicted_tokens_per_s=p.figures.tokens_per_s, baseline_tokens_per_s=base,
                   advice=advice, switch_off_above_batch=limit, best_steps=run.steps if run is not None else None,
                   extrapolated=tuple(dict.fromkeys(e.label for e in p.outcome.extrapolated)), notes=tuple(notes),
                   verdict=d.verdict, verdict_reason=d.reason, live_costs=live,
                   live_outside=tuple(f"{k} {v['rel']:+.1%}" for k, v in (live or {}).get("kinds", {}).items()
                                      if v["outside"]))


def live_pricing(profile: Profile, obs: Observed, spec: SpecConfig, batch: int) -> tuple[Profile, dict[str, Any] | None,
                                                                                       list[str]]:
    """The profile repriced with the server's own live costs over the window (``obs.live``, e.g.
    SGLang's device timer): each kind's rows scaled so the cost at the observed point is the live
    one (:func:`specmodel.model.whatif.costs_scaled`), the host work per cycle taken as the overhead
    where the profile's rows do not carry it. Returns (profile, what was compared, notes); the
    profile unchanged, None and the reason where the page has no live costs."""
    from specmodel.limits import LIVE_COST_DRIFT_REL
    from specmodel.model.cyclecost import cycle_costs, row_ci95_rel
    from specmodel.model.whatif import costs_scaled
    from specmodel.schema.phases import forward_tokens
    from specmodel.units import ms

    live = obs.live
    if live is None:
        return profile, None, ([f"live costs: none ({obs.live_why})"] if obs.live_why else [])
    cc = cycle_costs(profile, batch=batch, spec=spec, context_tokens=obs.context_tokens)
    pairs = {"verify": (live.verify_s, cc.verify.total_s, ("verify",), forward_tokens("verify", batch, spec)),
             "draft": (live.draft_s, cc.draft_total_s, ("draft", "draft_extend"), forward_tokens("draft", batch, spec)),
             "decode": (live.decode_s, cc.base.total_s, ("decode",), forward_tokens("decode", batch, spec))}
    kinds: dict[str, dict[str, Any]] = {}
    factors: dict[str, float] = {}
    for name, (now, then, rows, tokens) in pairs.items():
        if now is None or not then > 0 or not any(profile.rows(k) for k in rows):
            continue
        rel = now / then - 1.0
        band = max(LIVE_COST_DRIFT_REL, row_ci95_rel(profile, rows[0], tokens, obs.context_tokens))
        kinds[name] = {"live_s": now, "profile_s": then, "rel": rel, "interval_rel": band, "outside": abs(rel) > band}
        factors.update({k: now / then for k in rows})
    host = live.host_s if live.host_s is not None and not profile.source.host_work_in_rows else None
    clock = live.clock
    doc = {"clock": clock, "cycles": live.cycles, "host_s": live.host_s, "host_used": host is not None,
           "profile_clock": profile.source.details.get("clock") or profile.source_kind, "kinds": kinds,
           "unknown": dict(live.unknown)}
    said = ", ".join(f"{k} {ms(v['live_s'])} vs the profile's {ms(v['profile_s'])} ({v['rel']:+.1%}, "
                     f"interval ±{v['interval_rel']:.1%})" for k, v in kinds.items())
    notes = [f"live costs ({clock}, {live.cycles:.0f} cycles in the window; profile: {doc['profile_clock']}): "
             f"{said or 'none comparable'}" + (f"; host work {ms(live.host_s)} per cycle" if host is not None else "")
             + "; the reading prices the live costs"]
    notes += [f"live {k} cost unknown: {why}" for k, why in live.unknown.items() if k in ("verify", "draft", "host")]
    if not factors and host is None:
        return profile, doc, notes
    return costs_scaled(profile, factors, overhead_s=host, what=f"live costs ({clock})"), doc, notes


def check_source_matches_profile(cfg: EngineConfig, profile: Profile) -> None:
    """A profile of another model or TP says nothing about this server: refuse (one line, exit 2)."""
    from specmodel.live.validation import check_log_model_matches_profile

    if cfg.tp is not None and cfg.tp != profile.tp:
        raise SpecmodelError(f"{cfg.where}: the server runs TP {cfg.tp} but profile {profile.name} is TP {profile.tp}; "
                             "watch it against a profile of the same box and TP degree")
    check_log_model_matches_profile(cfg, profile, use="watch it against a profile of the same model")


def now_stamp() -> str:
    return _dt.datetime.now().strftime("%H:%M:%S")


def finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None
