"""``plan --engine vllm``: how far vLLM 0.34's adaptive-verification start-up table would be from
the profile's verify cost at each served context (the computation: :mod:`specmodel.model.adaptive`),
so a user knows whether the engine's own policy can be trusted on this box."""

from __future__ import annotations

from typing import Any

from specmodel.limits import ADAPTIVE_TABLE_TRUST_REL
from specmodel.model.adaptive import VLLM_PROFILE_CONTEXT_TOKENS, startup_table_error
from specmodel.scenario.resolve import Scenario
from specmodel.units import ms


def format_startup_error(sc: Scenario, doc: dict[str, Any]) -> str:
    """Text lines: e(L) per band of the schedule ``doc`` at the scenario's batch."""
    prof, spec, batch = sc.profile, sc.spec, sc.point.batch
    head = (f"vLLM adaptive verification (0.34+, enable_adaptive_verification): its start-up table times "
            f"{batch * (spec.num_draft_tokens or 1)} one-token requests at context {VLLM_PROFILE_CONTEXT_TOKENS} "
            "(VLLM_ADAPTIVE_VERIFICATION_PROFILE_CONTEXT_LEN) and prices every verify of that many tokens with it; "
            f"against this profile's verify forward at batch {batch}:")
    if prof.source.details.get("clock") == "engine_log":
        return (head + "\n  not computed: this profile's rows are whole engine steps (vLLM's step log: sampling and "
                "the proposal inside them), not the forwards the table prices; profile with the hook on")
    contexts = tuple(float(b["context_tokens"]) for b in doc.get("bands", ())) or (0.0,)
    try:
        errs = startup_table_error(prof, batch=batch, spec=spec, contexts=contexts)
    except Exception as exc:  # noqa: BLE001 - a missing curve is said, never a crash of the plan
        return head + f"\n  not computed: {exc}"
    lines = [head]
    for e in errs:
        trust = "within" if abs(e.error_rel) <= ADAPTIVE_TABLE_TRUST_REL else "outside"
        extra = (" (extrapolated beyond the measured rows)" if e.extrapolated else "") + \
                (" (no verify rows: the decode curve stands in)" if e.verify_from_decode else "")
        lines.append(f"  context {e.context_tokens:.0f}: table {ms(e.table_s, 2)} vs verify {ms(e.verify_s, 2)} "
                     f"({e.error_rel:+.0%}, {trust} ±{ADAPTIVE_TABLE_TRUST_REL:.0%}){extra}")
    bad = [e for e in errs if abs(e.error_rel) > ADAPTIVE_TABLE_TRUST_REL]
    lines.append("  the engine's policy starts from costs off by more than that at "
                 + ", ".join(f"{e.context_tokens:.0f}" for e in bad) + ": prefer this plan's schedule there"
                 if bad else "  the engine's start-up table agrees with the profile at every served context")
    return "\n".join(lines)
