"""``specmodel plan … --prometheus-rules FILE``: the profile's break-even surface as Prometheus
recording and alerting rules, so a fleet's Prometheus holds each server against it without us.

Recording rules (``W`` the rate window), in the engine's own metric names (vLLM's counters,
:mod:`specmodel.engines.vllm.metrics`), summed over the engine's ``engine`` label:

* ``specmodel:accept_tokens:rateW`` = 1 + rate(accepted) / rate(drafts) — vLLM's own definition;
* ``specmodel:proposal_ratio:rateW`` = rate(drafts) / (rate(generated) − rate(accepted)), at most 1;
* ``specmodel:batch_requests:rateW`` = rate(generated) / rate(engine steps) / (1 + r·rate(accepted)/rate(drafts))
  — requests per engine step, as ``watch`` reads it (tokens per request-step r·E[A] + 1 − r);
* ``specmodel:break_even_accept_tokens`` — one rule per batch band of the profile (bands meet at the
  geometric mean of neighbouring measured batches), valued :func:`~specmodel.model.predict.predict`'s
  break-even at that batch and the profile's smallest measured context, labelled ``batch_band``;
* ``specmodel:predicted_speedup_ratio`` = accept / break-even: with the cycle's cost independent of
  acceptance (every step proposes), speedup = E[A] · T_decode / T_cycle and break-even = T_cycle / T_decode;
* ``specmodel:accept_margin_tokens`` = accept − break-even.

Alerts: ``SpeculationBelowBreakEven`` (margin < 0 for 10 m at the running batch) and
``SpeculationCannotPay`` (speculation on at a batch whose break-even is above k + 1: no drafter pays there).
Written as JSON, which is YAML: ``promtool check rules`` reads it.
"""

from __future__ import annotations

import math
import re
from typing import Any

from specmodel.engines.vllm import metrics as vm
from specmodel.errors import SpecmodelError
from specmodel.model import accept as acc
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.profile import Profile

WINDOW = "5m"
FOR = "10m"
#: Prometheus' duration syntax (units largest first, each at most once), e.g. 5m, 1h30m, 10s
_DURATION = re.compile(r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$")


def check_duration(value: str, flag: str) -> str:
    """A Prometheus duration (``5m``, ``1h30m``, ``10s``), else one line naming the flag."""
    if not value or not _DURATION.match(value) or not re.search(r"[1-9]", value):
        raise SpecmodelError(f"{flag} {value!r}: expected a Prometheus duration such as 5m, 1h30m or 10s")
    return value


def batch_bands(batches: list[int]) -> list[tuple[int, float, float]]:
    """(batch, low, high): each measured batch owns the running batches in [low, high)."""
    bs = sorted(set(batches))
    cuts = [math.sqrt(a * b) for a, b in zip(bs, bs[1:], strict=False)]
    lows = [0.0, *cuts]
    highs = [*cuts, math.inf]
    return list(zip(bs, lows, highs, strict=True))


def rules(profile: Profile, spec: SpecConfig, *, window: str = WINDOW, hold: str = FOR) -> dict[str, Any]:
    """The rules document; ``window`` is the rate window (in the recorded names), ``hold`` the alerts' ``for``.
    The recording group runs at Prometheus' global evaluation interval."""
    from specmodel.model.costs import measured_contexts
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict

    ctxs = measured_contexts(profile, "decode")
    ctx = min(ctxs) if ctxs else 0
    w = window
    acc_r = f"sum without(engine) (rate({vm.ACCEPTED}[{w}]))"
    drafts_r = f"sum without(engine) (rate({vm.DRAFTS}[{w}]))"
    gen_r = f"sum without(engine) (rate({vm.GEN_TOKENS}[{w}]))"
    steps_r = f"sum without(engine) (rate({vm.STEPS}[{w}]))"
    accept = f"specmodel:accept_tokens:rate{w}"
    ratio = f"specmodel:proposal_ratio:rate{w}"
    batch = f"specmodel:batch_requests:rate{w}"
    recording: list[dict[str, Any]] = [
        {"record": accept, "expr": f"1 + {acc_r} / ({drafts_r} > 0)"},
        {"record": ratio, "expr": f"clamp_max({drafts_r} / (({gen_r} - {acc_r}) > 0), 1)"},
        {"record": batch, "expr": f"{gen_r} / ({steps_r} > 0) / (1 + {ratio} * {acc_r} / ({drafts_r} > 0))"},
    ]
    dist = acc.from_mean(spec.max_accept_tokens, spec.max_accept_tokens, source="break-even only")
    cannot = []
    for b, lo, hi in batch_bands([r.batch for r in profile.rows("decode")]):
        be = predict(profile, dist, OperatingPoint(batch=b, spec=spec, context_tokens=ctx)).figures.break_even_accept_tokens
        if not math.isfinite(be):
            continue
        cond = f"({batch} >= {lo:.6g})" + (f" and ({batch} < {hi:.6g})" if math.isfinite(hi) else "")
        recording.append({"record": "specmodel:break_even_accept_tokens", "expr": f"({batch} * 0 + {be:.6g}) and {cond}",
                          "labels": {"batch_band": str(b), "context_tokens": str(ctx)}})
        if be > spec.max_accept_tokens:
            cannot.append(b)
    band = "ignoring(batch_band, context_tokens)"
    recording += [
        {"record": "specmodel:predicted_speedup_ratio", "expr": f"{accept} / {band} group_right specmodel:break_even_accept_tokens"},
        {"record": "specmodel:accept_margin_tokens", "expr": f"{accept} - {band} group_right specmodel:break_even_accept_tokens"},
    ]
    alerting: list[dict[str, Any]] = [{
        "alert": "SpeculationBelowBreakEven",
        "expr": "specmodel:accept_margin_tokens < 0",
        "for": hold,
        "labels": {"severity": "warning"},
        "annotations": {
            "summary": "{{ $labels.instance }}: speculation does not pay at the running batch",
            "description": "Accept length below break-even by {{ $value | printf \"%.2f\" }} tokens per verify step "
                           "at batch band {{ $labels.batch_band }} (profile " + profile.name + "): switch it off "
                           "or fix the drafter."}}]
    if cannot:
        alerting.append({
            "alert": "SpeculationCannotPay",
            "expr": f"specmodel:break_even_accept_tokens > {spec.max_accept_tokens} and {band} ({drafts_r} > 0)",
            "for": hold,
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "{{ $labels.instance }}: speculation on where no drafter can pay",
                "description": f"At batch band {{{{ $labels.batch_band }}}} break-even is above k + 1 = "
                               f"{spec.max_accept_tokens} (profile {profile.name}): predicted speedup < 1 at any "
                               "acceptance; switch speculation off above this batch."}})
    return {"groups": [
        {"name": "specmodel-recording", "rules": recording},
        {"name": "specmodel-alerts", "rules": alerting},
    ]}
