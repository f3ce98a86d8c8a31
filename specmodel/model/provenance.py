"""Where each printed cost came from: a flag, a sweep, a fit (the origins recorded on the profile by
whoever replaced a cost), the profile itself, a fallback curve or a calibration -- the lines
``cost_sources`` prints (CLI, JSON, PDF) and the consistency checks quote."""

from __future__ import annotations

from specmodel.errors import field_name
from specmodel.model.calibrate import Calibration
from specmodel.model.cycle import CycleCosts
from specmodel.schema.phases import is_host_proposer
from specmodel.schema.profile import Profile
from specmodel.units import ms

#: How each profile kind is named when a cost comes from it.
_KIND_WORDS = {"measured": "measured", "reference": "reference, derived from a published write-up, not measured",
               "ingested": "ingested from traces", "sweep": "your sweep", "numbers": "your flags",
               "derived": "derived from a profile and a measured all-reduce fit"}


def pass_or_calibrate(field: str) -> str:
    """The advice beside a cost nobody measured: give it (``field``), or calibrate on an observed point."""
    return f"pass {field_name(field)} or {field_name('calibrate')}"


def cost_origins(profile: Profile) -> dict[str, str]:
    """Per-cost origins recorded on the profile by whoever replaced a cost (flags, a sweep, a fit).

    Keys: ``decode``, ``verify``, ``draft``, ``overhead``, ``allreduce``. A cost without an entry
    came from the profile itself.
    """
    return profile.source.origins


def profile_origin(profile: Profile) -> str:
    """``profile NAME (measured|reference …|ingested …)``: where an unreplaced cost came from."""
    kind = profile.source_kind
    if profile.source.from_hook:
        return f"profile {profile.name} (hook)"
    return f"profile {profile.name} ({_KIND_WORDS.get(kind, kind)})"


def cost_provenance(profile: Profile, cc: CycleCosts, cal: Calibration | None) -> tuple[tuple[str, str], ...]:
    """Where each printed cost came from: your flag, your sweep, profile X, a fallback, a calibration."""
    given = cost_origins(profile)
    own = profile_origin(profile)
    base = given.get("decode", own)
    if "verify" in given:
        verify = given["verify"]
    elif cc.verify.from_kind:
        verify = (f"fallback: the {cc.verify.from_kind} curve of {given.get(cc.verify.from_kind, own)} "
                  f"at {cc.verify.tokens:g} tokens")
    else:
        verify = own
    if "draft" in given:
        draft = given["draft"]
    elif is_host_proposer(cc.spec.algorithm):
        draft = f"none: {cc.spec.algorithm.lower()} proposes on the host (no drafter forward)"
    elif profile.has("draft"):
        draft = own
    elif cal is not None:
        draft = "not measured: covered by the calibration (folded into overhead)"
    else:
        draft = f"none: assumed free ({pass_or_calibrate('draft_ms')})"
    own_overhead_s = profile.overhead_s - (cal.added_overhead_s if cal is not None else 0.0)
    overhead = given.get("overhead", own if own_overhead_s > 0
                         else f"in the rows: {own}'s step times include each step's host work"
                         if profile.source.host_work_in_rows
                         else f"none: 0 assumed ({pass_or_calibrate('overhead_ms')})")
    if is_host_proposer(cc.spec.algorithm) and "overhead" not in given:
        overhead = ("assumed 0 (no run of this proposer profiled)" if any(a.kind == "proposal" for a in cc.assumptions)
                    else f"{own}: measured {cc.spec.algorithm.lower()} proposal time per step")
    if cal is not None:
        o = cal.observation
        overhead += (f" + calibration {ms(cal.added_overhead_s)} from your observed point "
                     f"(batch {o.batch}, accept {o.accept_tokens:g}, {o.tokens_per_s:g} tok/s)")
    allreduce = given.get("allreduce", "none: TP 1 (no collective in any forward)"
                          if profile.tp == 1 and profile.source.tp_known else own)
    return (("baseline", base), ("verify", verify), ("draft", draft), ("overhead", overhead),
            ("all-reduce", allreduce))
