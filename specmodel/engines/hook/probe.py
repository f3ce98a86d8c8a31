"""Reading back the engine hooks' calibration probes (format ``specmodel.probe``, written by
:mod:`specmodel.engines.hook.calibration` into either hook's rank files): each record validated,
and one server's probes pooled into its :class:`~specmodel.schema.profile.ServerCondition`.
Shared by both hooks' ``--summarize`` (:mod:`specmodel.engines.vllm.hooklog`,
:mod:`specmodel.engines.sglang.hooklog`). Runs anywhere: no engine, no torch."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_HOOK_STEP_S, MAX_PROBE_SAMPLES
from specmodel.stats import iqr, median

#: NVML throttle-reason bits that are no slowdown: the GPU idle (0x1), application clocks set (0x2)
BENIGN_THROTTLE = 0x1 | 0x2


def _opt_num(rec: dict[str, Any], key: str, where: str, hi: float) -> None:
    v = rec.get(key)
    if v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= hi:
        raise SpecmodelError(f"{where}: {key}: expected a number in 0..{hi:g} or null, got {v!r}")


def check_probe(rec: dict[str, Any], where: str) -> None:
    """Every field :func:`condition_of` reads, checked: one line naming the file, line and field."""
    for key in ("kernel", "device", "clock"):
        if not isinstance(rec.get(key), str) or not rec[key]:
            raise SpecmodelError(f"{where}: {key}: expected a non-empty string, got {rec.get(key)!r}")
    for key in ("n", "reps"):
        v = rec.get(key)
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= 1 << 16:
            raise SpecmodelError(f"{where}: {key}: expected an integer in 1..{1 << 16}, got {v!r}")
    xs = rec.get("samples_s")
    if not isinstance(xs, list) or not 1 <= len(xs) <= MAX_PROBE_SAMPLES:
        raise SpecmodelError(f"{where}: samples_s: expected a list of 1..{MAX_PROBE_SAMPLES} seconds, got {xs!r}")
    for x in xs:
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= MAX_HOOK_STEP_S:
            raise SpecmodelError(f"{where}: samples_s: expected seconds in (0, {MAX_HOOK_STEP_S:g}], got {x!r}")
    _opt_num(rec, "wait_share", where, 1.0)
    _opt_num(rec, "others_share", where, 1e3)
    _opt_num(rec, "load_1m", where, 1e6)
    _opt_num(rec, "cpu_freq_hz", where, 1e12)
    _opt_num(rec, "sm_clock_hz", where, 1e12)
    r = rec.get("throttle_reasons")
    if r is not None and (isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < 1 << 64):
        raise SpecmodelError(f"{where}: throttle_reasons: expected an NVML bit mask or null, got {r!r}")


def probe_name(rec: dict[str, Any]) -> str:
    """What a probe timed: two servers' probes compare only under one name."""
    return f"{rec['kernel']} {rec['n']}x{rec['n']} x{rec['reps']} on {rec['device']} ({rec['clock']})"


def condition_of(recs: Sequence[dict[str, Any]]) -> Any:
    """One server's :class:`~specmodel.schema.profile.ServerCondition` from its probe records (every
    rank pooled), None without any. Probes of another name than the most common one (a worker on
    another device kind) are left out: a condition is one yardstick."""
    from specmodel.schema.conditions import ServerCondition

    if not recs:
        return None
    name, _ = Counter(probe_name(r) for r in recs).most_common(1)[0]
    mine = [r for r in recs if probe_name(r) == name]
    xs = [float(x) for r in mine for x in r["samples_s"]]

    def med(key: str) -> float | None:
        vals = [float(r[key]) for r in mine if r.get(key) is not None]
        return median(vals) if vals else None

    others = [float(r["others_share"]) for r in mine if r.get("others_share") is not None]
    return ServerCondition(probe=name, probe_s=median(xs), probe_iqr_s=iqr(xs), samples=len(xs), probes=len(mine),
                           wait_share=med("wait_share"),
                           others_share=median(others) if others else None, others_iqr=iqr(others),
                           intervals=len(others), load_1m=med("load_1m"), cpu_freq_hz=med("cpu_freq_hz"), sm_clock_hz=med("sm_clock_hz"),
                           throttled_probes=sum(1 for r in mine if (r.get("throttle_reasons") or 0) & ~BENIGN_THROTTLE))


def conditions_of(baseline: Sequence[dict[str, Any]], spec: Sequence[dict[str, Any]]) -> Any:
    """The profile's :class:`~specmodel.schema.profile.Conditions` (None when no server probed)."""
    from specmodel.schema.conditions import Conditions

    if not baseline and not spec:
        return None
    return Conditions(baseline=condition_of(baseline), spec=condition_of(spec))


def conditions_note(conditions: Any) -> str:
    """One line for the profile's notes: each server's probe median and spread ("" without probes)."""
    from specmodel.units import ghz, ms

    if conditions is None:
        return ""  # logs of a hook without the probe: the old behaviour, nothing to say

    def one(what: str, c: Any) -> str:
        if c is None:
            return f"{what}: no probe"
        extra = [f"waited for a CPU {c.wait_share:.0%}" if c.wait_share is not None else "",
                 f"other work asked for {c.others_share:.2f} threads per core (IQR {c.others_iqr:.2f}, "
                 f"{c.intervals} window(s) of steps)"
                 if c.others_share is not None else "",
                 f"load {c.load_1m:.2f}" if c.load_1m is not None else "",
                 f"CPU {ghz(c.cpu_freq_hz)}" if c.cpu_freq_hz is not None else "",
                 f"SM {ghz(c.sm_clock_hz)}" if c.sm_clock_hz is not None else "",
                 f"throttled in {c.throttled_probes} probe(s)" if c.throttled_probes else ""]
        tail = ", ".join(x for x in extra if x)
        return (f"{what} {ms(c.probe_s, 3)} (IQR {ms(c.probe_iqr_s, 3)}, {c.samples} samples in {c.probes} probe(s)"
                + (f"; {tail}" if tail else "") + ")")

    probe = (conditions.baseline or conditions.spec).probe
    return (f"box condition (probe {probe}, median per sample): {one('baseline server', conditions.baseline)}; "
            f"{one('speculative server', conditions.spec)}")
