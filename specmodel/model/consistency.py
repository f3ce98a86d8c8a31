"""Do the costs a prediction rests on agree with each other? The one place that asks.

A verdict built from inputs that contradict each other is as wrong as a traceback: a baseline
recorded on a loaded box makes every drafter look like a 14x win. Each check compares two figures
that physics orders and names both, with where each came from:

* ``verify_below_decode`` (refuse): a verify forward over B·(k+1) tokens cheaper than the decode
  step over B tokens at the same batch and context. A verify is a target forward over more
  tokens, so T_verify(B·(k+1), L) >= T_decode(B, L) up to noise; the monotone cost surface enforces
  exactly this inside one kind (:func:`specmodel.model.costs._monotone`), this check enforces it
  across the two kinds, whose rows may come from two recordings.
* ``break_even_below_one`` (refuse): break-even accept length < 1 token/step, i.e. one speculative
  cycle cheaper than one baseline step beyond the two medians' noise (E[A] >= 1 always, so no
  drafter could lose): a cycle holds a verify forward, so this is the same contradiction seen from
  the equations' side (``be = T_cycle / T_base``, :func:`specmodel.model.cycle.break_even_accept`),
  and it also catches plain numbers that imply it. Within the noise (or from extrapolated costs):
  qualify.
* ``decode_disagrees``: the baseline server's decode forward and the speculative server's own
  decode-shaped forwards (same batch, same context band; a host proposer's steps without a
  proposal) differ beyond their spreads and :data:`~specmodel.limits.SAME_STEP_REL_TOL`. The
  direction decides. A *baseline dearer* than the speculative server's same forward (refuse) is a
  baseline recorded under load: no mechanism makes speculation's 1-token forward cheaper, and the
  ratio of the two conditions would be the speedup (a false GO). A *speculative server dearer*
  (qualify) is either a busier box during its recording or a cost that server really pays on
  every forward -- measured on an idle 2-core box, vLLM 0.32's ngram server ran its 1-token
  forward +24 % over the baseline server's, on CI +78 % (10 steps) -- and its own rows price the
  speculative steps, so the prediction leans low, not high: the verdict stands, qualified.
* ``beyond_range`` (refuse): a cost read more than
  :data:`~specmodel.limits.MAX_EXTRAPOLATION_FACTOR` times beyond the largest measured tokens per
  forward or batch (:func:`check_range` says why one doubling). Within that range, extrapolated
  costs that cross (a verify below the decode step, a cycle below a baseline step) are refused as
  well: the extrapolation failed there, and the remedy is a row where the prediction is asked for.
  Measured costs that cross within their noise only qualify; predict then caps the speedup at the
  tokens a step emits (a step holding a verify forward is never cheaper than a baseline step).
* ``running_max`` (qualify): a measured row the monotone cost surface lifted beyond its noise
  (:class:`specmodel.model.costs.Override`): the prediction used a dearer cost; the
  measured value is shown and the two rows are named for re-measurement.
* ``box_condition``: the box's condition while each server was recorded, measured by the hooks'
  calibration probe (one fixed kernel, timed in every worker; :func:`specmodel.model.boxcheck.check_condition`). A baseline
  recorded on a slower box beyond the two probe medians' noise (refuse) carries the slowdown into
  the speedup, for every drafter (forward drafters have no same-shape row to compare); a slower
  box under the speculative server (qualify) makes the speedup too low. Where both conditions
  agree, ``decode_disagrees`` leans on them instead of :data:`~specmodel.limits.SAME_STEP_REL_TOL`
  (:func:`specmodel.model.boxcheck.check_same_step`). Profiles without probes: the steps both servers ran
  witness the box (:func:`specmodel.model.boxcheck.check_shared_steps`).

"refuse": no verdict (``INCONSISTENT``; predict / the API exit 2 with the first line, the report
shows it on page 1, plan never recommends the cell). "qualify": the verdict stands, qualified, and
P(speedup > 1) is not printed. Rationale per check: docs/verdicts.md. The record and the noise rule the checks share:
:mod:`specmodel.model.inconsistency`; the box checks: :mod:`specmodel.model.boxcheck`.
"""

from __future__ import annotations

from collections.abc import Mapping

from specmodel.limits import COST_ORDER_REL_TOL, MAX_EXTRAPOLATION_FACTOR
from specmodel.model.boxcheck import (
    check_condition,
    check_same_step,
    check_shared_steps,
    comparable_conditions,
    missing_condition,
)
from specmodel.model.cycle import CycleCosts
from specmodel.model.inconsistency import (
    Inconsistency,
    disagree,
    noise_s,
    rows_text,
    tokens_text,
)
from specmodel.schema.profile import Profile
from specmodel.units import ms


def check_cycle(profile: Profile, cc: CycleCosts, *, base_s: float, mean_step_s: float, break_even_tokens: float,
                provenance: Mapping[str, str]) -> tuple[Inconsistency, ...]:
    """Every contradiction among the costs of one operating point (see the module docstring).

    ``base_s``: the baseline step used; ``mean_step_s``: the speculative step the speedup divides by
    (= the cycle when every step proposes); ``provenance``: cost -> where it came from, as printed
    (:func:`specmodel.model.provenance.cost_provenance`)."""
    out: list[Inconsistency] = [*check_condition(profile)]  # first: the cause, when it is the box
    b, L = cc.batch, cc.context_tokens
    base_from = provenance.get("baseline", "the profile")
    verify_from = provenance.get("verify", "the profile")
    ctx = f", context {L:g}" if L else ""
    # beyond the measured range the curves are lines through the last rows: two of them crossing
    # is the extrapolation failing, not two recordings contradicting each other -- qualified, and
    # the remedy is a row where the prediction is asked for
    beyond = [e.label for fc in (cc.verify, cc.base) for e in fc.extrapolations]
    out.extend(check_range(cc))
    # the two medians' noise: what a cost below the baseline step must exceed to contradict it
    se_base, se_verify = noise_s(profile, "decode", cc.base.tokens, L), noise_s(profile, "verify", cc.verify.tokens, L)
    if not cc.verify.from_kind:  # a fallback verify is the decode curve itself: nothing to compare
        v_fwd = cc.verify.total_s
        base_from = f"{base_from}; {rows_text(profile, 'decode', cc.base.tokens, L)}"
        verify_from = f"{verify_from}; {rows_text(profile, 'verify', cc.verify.tokens, L)}"
        below = disagree(v_fwd, base_s, se_base, se_verify, COST_ORDER_REL_TOL)
        if below and beyond:
            out.append(Inconsistency(
                check="verify_below_decode", severity="refuse",
                message=(f"extrapolated costs cross: verify {ms(v_fwd)} over {tokens_text(cc.verify.tokens)} "
                         f"({verify_from}) below the decode step {ms(base_s)} over {tokens_text(cc.base.tokens)} "
                         f"({base_from}) at batch {b}{ctx}, beyond the measured range ({'; '.join(beyond)}): "
                         "a forward over more tokens cannot cost less, so the extrapolation has failed there"),
                beyond_range=True,
                to_measure=f"profile both servers at batch {b}{ctx} (the extrapolation, not the recordings, fails)"))
        elif below:
            out.append(Inconsistency(
                check="verify_below_decode", severity="refuse",
                message=(f"verify {ms(v_fwd)} over {tokens_text(cc.verify.tokens)} ({verify_from}) is cheaper than the "
                         f"decode step {ms(base_s)} over {tokens_text(cc.base.tokens)} ({base_from}) at batch {b}{ctx}: "
                         "a forward over more tokens cannot cost less; one recording was not made like the other "
                         "(a loaded box, a profiler left on)"),
                to_measure=(f"re-record the baseline (speculation off) and the speculative server on the same idle box, "
                            f"at batch {b}{ctx}, and summarize both again")))
    below_one = break_even_tokens < 1.0 - 1e-9
    if below_one and beyond:
        out.append(Inconsistency(
            check="break_even_below_one", severity="refuse",
            message=(f"break-even {break_even_tokens:.2f} tokens/step < 1 from extrapolated costs (a speculative "
                     f"step of {ms(mean_step_s)}, the baseline step {ms(base_s)}; {'; '.join(beyond)}): beyond the "
                     "measured range the cycle is priced below one baseline step, a speedup above the tokens a "
                     "step emits, which no cycle holding a verify forward can give"),
            beyond_range=True,
            to_measure=f"profile both servers at batch {b}{ctx}"))
    elif below_one and not disagree(mean_step_s, base_s, se_base, se_verify, COST_ORDER_REL_TOL):
        # one speculative step as dear as a baseline step up to the two medians' noise: no contradiction
        # to refuse on (a 6.84 ms step against a 6.93 ms one, IQRs ~1.8 ms over 13 steps each), but a
        # break-even below 1 is no figure to act on either
        out.append(Inconsistency(
            check="break_even_below_one", severity="qualify",
            message=(f"break-even {break_even_tokens:.2f} tokens/step < 1 within the costs' noise: a speculative step "
                     f"of {ms(mean_step_s)} ({verify_from}) against the baseline step {ms(base_s)} ({base_from})"),
            to_measure=f"re-measure the baseline decode step and the verify step at batch {b}{ctx} with more steps"))
    elif below_one:
        out.append(Inconsistency(
            check="break_even_below_one", severity="refuse",
            message=(f"break-even {break_even_tokens:.2f} tokens/step < 1: a speculative step of {ms(mean_step_s)} "
                     f"(verify from {verify_from}) costs less than the baseline decode step of {ms(base_s)} "
                     f"({base_from}), so no drafter could lose; the inputs contradict each other"),
            to_measure=f"re-measure the baseline decode step and the verify step at batch {b}{ctx} on the same box"))
    for o in cc.overrides:
        out.append(Inconsistency(check="running_max", severity="qualify", message=o.label, to_measure=o.to_measure))
    out.extend(check_same_step(profile, batch=b, context_tokens=L))
    # without a probe the box is witnessed by the shared steps: after the costs' own contradictions, which
    # name the rows to re-measure (a refusal here is the same loaded baseline seen through fewer rows)
    out.extend(check_shared_steps(profile, missing_condition(profile)) if comparable_conditions(profile) is None else ())
    return tuple(dict.fromkeys(out))


def check_range(cc: CycleCosts) -> tuple[Inconsistency, ...]:
    """A cost read further beyond the measured tokens (or batch) than
    :data:`~specmodel.limits.MAX_EXTRAPOLATION_FACTOR` times the largest measured: refuse.

    Why a bound at all, and why there: beyond its last row a forward's cost is a line through the
    top half of the measured range (:func:`specmodel.model.costs.interpolate`). A forward changes
    regime as its tokens grow -- latency-bound (kernel launches, small all-reduces), then
    weight-bandwidth-bound, then compute-bound, and the all-reduce from latency- to
    bandwidth-bound -- and each change bends the curve within a few doublings; a line through
    rows of one regime cannot see the next bend. One doubling past the last row is the furthest a
    line through two measured rows at most a doubling apart vouches for; a profile of batches 1-4
    asked about batch 1024 priced its verify below its decode step (a 17x "speedup" at
    E[A] = 2.5). Context is not bounded here: attention's KV reads grow linearly in L whatever the
    regime, which is what the context axis extrapolates (and a crossing it causes is refused by
    the checks above)."""
    out: list[Inconsistency] = []
    seen: set[tuple[str, float]] = set()
    # a fallback curve (verify read off decode) is an assumption already named and qualifying
    for fc in (f for f in cc.forwards if not f.from_kind):
        for e in fc.extrapolations:
            if e.axis == "context" or e.requested <= MAX_EXTRAPOLATION_FACTOR * e.measured_max:
                continue
            name = "batch" if e.axis == "batch" else f"{e.kind} tokens per forward"
            if (name, e.requested) in seen:
                continue
            seen.add((name, e.requested))
            ctx = f", context {cc.context_tokens:g}" if cc.context_tokens else ""
            out.append(Inconsistency(
                check="beyond_range", severity="refuse",
                message=(f"{name} {e.requested:g} is {e.requested / e.measured_max:.3g}x the largest measured "
                         f"({e.measured_max:g}); a prediction goes at most {MAX_EXTRAPOLATION_FACTOR:g}x beyond the "
                         "measured range (a forward changes regime -- latency-, bandwidth-, compute-bound -- within "
                         "a few doublings, and a line through the measured rows cannot see where)"),
                to_measure=f"profile at batch {cc.batch}{ctx} (the rows there, not an extrapolation)",
                beyond_range=True))
    return tuple(out)
