"""The box's condition under the two recordings a profile joins (the baseline server's and the
speculative server's): the ``box_condition`` and ``decode_disagrees`` checks of
:mod:`specmodel.model.consistency`, apart because they read the recordings' conditions and the steps
both servers ran, not the cycle's costs.

* :func:`check_condition`: the hooks' calibration probe (one fixed kernel timed in every worker) and,
  on a CPU engine, the demand of work outside the server's process tree, per server; a baseline
  recorded on a slower box refuses, a slower box under the speculative server qualifies.
* :func:`check_same_step`: the baseline's decode forward against the speculative server's
  decode-shaped forwards at the same batch and context.
* :func:`check_shared_steps`: recordings without a probe, witnessed by the steps both servers ran
  (:func:`shared_steps`: the same prompt's prefill, non-proposing decode steps); without a witness the
  verdict says the box's condition was not recorded.

Each names what it saw and the command that settles it (:func:`settle_command`). Rationale and
figures: docs/verdicts.md."""

from __future__ import annotations

import math
from dataclasses import dataclass

from specmodel.errors import field_name
from specmodel.limits import CONDITION_REL_TOL, COST_ORDER_REL_TOL, MIN_CONDITION_WINDOWS, SAME_STEP_REL_TOL
from specmodel.model.inconsistency import (
    Inconsistency,
    disagree,
    median_se_s,
    near_rows,
    tokens_text,
)
from specmodel.schema.conditions import ServerCondition
from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import Profile
from specmodel.stats import median_se
from specmodel.units import ms


def check_same_step(profile: Profile, *, batch: int, context_tokens: float) -> tuple[Inconsistency, ...]:
    """The baseline's decode rows against the speculative server's own decode-shaped rows
    (``profile.host_proposer.decode``: a host proposer's steps in which no request proposed) at
    the same batch and the context band a lookup at ``context_tokens`` reads.

    The *forwards* are compared (all-reduce + compute): the same target over the same tokens. The
    step's host work may differ by design (a speculative step prepares and rejects more), so it is
    not part of the comparison.

    Where both servers carry a comparable box condition (:func:`check_condition`) and it agrees,
    the box is measured, not guessed: a baseline forward dearer beyond :data:`COST_ORDER_REL_TOL`
    (two step medians' slack) is refused, not only beyond :data:`SAME_STEP_REL_TOL`; and a
    speculative forward dearer is not qualified here (on an equal box it is a cost that server
    pays, priced by its own rows; on a slower one ``box_condition`` qualifies)."""
    hp = profile.host_proposer
    if hp is None or not hp.decode or not profile.has("decode"):
        return ()
    measured = comparable_conditions(profile)
    same_box = measured is not None and not _box_differs(*measured)
    base = [r for r in near_rows(profile.rows("decode"), batch, context_tokens) if r.batch == batch]
    spec = [r for r in near_rows(hp.decode, batch, context_tokens) if r.batch == batch]
    out = []
    for a in base:
        for s in (s for s in spec if s.context_tokens == a.context_tokens):
            fa, fs = a.allreduce_s + a.compute_s, s.allreduce_s + s.compute_s
            if fa <= 0 or fs <= 0:  # no forward split recorded: the whole steps are what was measured
                fa, fs = a.total_s, s.total_s
            lo, hi = sorted((fa, fs))
            tol = COST_ORDER_REL_TOL if same_box and fa > fs else SAME_STEP_REL_TOL
            # the spread of a step bounds its forward's: the forward is the step less its host work
            if not disagree(lo, hi, median_se_s(a), median_se_s(s), tol) or (fs > fa and measured is not None):
                continue
            ctx = f", context {a.context_tokens:g}" if a.context_tokens else ""
            both = (f"the baseline server's decode forward {ms(fa)} (step {ms(a.total_s)}, IQR {ms(a.spread_s)}, "
                    f"{a.samples} steps) and the {hp.method} server's own decode-shaped forward {ms(fs)} (step "
                    f"{ms(s.total_s)}, IQR {ms(s.spread_s)}, {s.samples} steps) at batch {batch}{ctx} in profile "
                    f"{profile.name}")
            if fa > fs:  # a loaded baseline: the speedup would be the ratio of the two conditions
                out.append(Inconsistency(
                    check="decode_disagrees", severity="refuse",
                    message=(f"{both} disagree: the same forward measured twice, dearer in the baseline, so the two "
                             "servers did not run under the same conditions"
                             + (" (the calibration probe saw the box alike: something it does not time, such as "
                                "memory traffic or a profiler left on)" if same_box else "")),
                    to_measure=f"re-record both servers on the same idle box at batch {batch}{ctx}"))
            else:
                out.append(Inconsistency(
                    check="decode_disagrees", severity="qualify",
                    message=(f"speculative forwards dearer: {both} differ by {fs / fa - 1:.0%}; the "
                             f"{hp.method} server's own rows price its steps, so if its box was busier the "
                             "speedup is too low"),
                    to_measure=(f"re-record both servers on the same idle box at batch {batch}{ctx} to tell a "
                                "busier box from a cost the speculative server pays on every forward")))
    return tuple(out)


def comparable_conditions(profile: Profile) -> tuple[ServerCondition, ServerCondition] | None:
    """(baseline, speculative) server conditions when the profile carries both under one probe."""
    c = profile.conditions
    if c is None or c.baseline is None or c.spec is None or c.baseline.probe != c.spec.probe:
        return None
    return c.baseline, c.spec


def _yardstick(base: ServerCondition, spec: ServerCondition) -> tuple[float, float, float, float]:
    """(baseline s, speculative s, their standard errors): the probe stretched by each worker's wait
    for a CPU where both read it on a GPU box (:attr:`ServerCondition.effective_s`), else the probe
    alone; each standard error (from the samples' IQR) stretched alike. On a CPU engine the wait is
    not the box's alone: a clean interleaved pair read the ngram worker's wait 13 % against the
    baseline's 5 % with the probe medians 1 % apart."""
    # on a CPU engine the worker's wait for a CPU is the server's own processes' as much as the box's
    # (its API process competes for the same cores): the probe alone there, the others' share decides
    both = base.wait_share is not None and spec.wait_share is not None and not _on_host(base)

    def one(c: ServerCondition) -> tuple[float, float]:
        x = c.effective_s if both else c.probe_s
        return x, median_se(c.probe_iqr_s, c.samples) * x / c.probe_s

    (b, se_b), (s, se_s) = one(base), one(spec)
    return b, s, se_b, se_s


def _condition_differs(base: ServerCondition, spec: ServerCondition) -> bool:
    b, s, se_b, se_s = _yardstick(base, spec)
    lo, hi = sorted((b, s))
    return disagree(lo, hi, se_b, se_s, CONDITION_REL_TOL)


def _on_host(c: ServerCondition) -> bool:
    """The probe ran on the host's CPU (a CPU engine): the device the server's own processes share."""
    return " on cpu " in f" {c.probe} "


def recorded_apart(profile: Profile) -> bool:
    """Two servers' hook recordings summarized into one profile (``specmodel vllm|sglang
    --summarize``, a speculative server's verify rows beside a baseline's decode rows): the costs a
    speedup divides came from two recordings, so the box's condition during each is a question."""
    tool = profile.source.tool
    return (profile.source.kind == "ingested" and tool in ("specmodel vllm", "specmodel sglang")
            and profile.has("decode") and profile.has("verify"))


def settle_command(profile: Profile, which: str) -> str:
    """The command that settles the box's condition: re-record ``which`` server ("baseline" or
    "speculative") under the hook and summarize again, or ("both") record the two in turns."""
    tool = profile.source.tool if profile.source.tool in ("specmodel vllm", "specmodel sglang") else "specmodel vllm"
    server = ("python -m sglang.launch_server" if tool.endswith("sglang")
              else "python -m vllm.entrypoints.openai.api_server")
    # the flags as the running front end names them (the CLI's; a Python caller's field names)
    out, summ, output = (field_name(f).split("/")[-1] for f in ("out", "summarize", "output"))
    summarize = f"{tool} {summ} BASE_DIR {summ} SPEC_DIR {output} profiles/{profile.name}"
    if which == "both":
        return (f"record both servers in turns on the same box (baseline, speculative, speculative, baseline): "
                f"`{tool} {out} BASE_DIR -- {server} <the baseline's arguments>` and `{tool} {out} SPEC_DIR -- "
                f"{server} <the speculative server's arguments>`, then `{summarize}`")
    mine, other = ("BASE_DIR", "SPEC_DIR") if which == "baseline" else ("SPEC_DIR", "BASE_DIR")
    return (f"re-record the {which} server with the box as during the other's recording: `{tool} {out} {mine} -- "
            f"{server} <the {which} server's arguments>` (an empty {mine}; {other}: the other server's logs), "
            f"then `{summarize}`")


@dataclass(frozen=True, kw_only=True)
class Witness:
    """One step both servers ran: the baseline server's forward against the speculative server's."""

    what: str
    base_s: float
    spec_s: float
    base_se_s: float
    spec_se_s: float
    base_row: CostRow
    spec_row: CostRow

    @property
    def log_ratio(self) -> float:
        return math.log(self.base_s / self.spec_s)

    @property
    def log_se(self) -> float:
        return math.hypot(self.base_se_s / self.base_s, self.spec_se_s / self.spec_s)

    def text(self) -> str:
        def one(x: float, r: CostRow) -> str:
            return f"{ms(x)} (IQR {ms(r.spread_s)}, {r.samples} steps)"

        return f"{self.what}: {one(self.base_s, self.base_row)} against {one(self.spec_s, self.spec_row)}"


def _forward_s(r: CostRow) -> float:
    fwd = r.allreduce_s + r.compute_s
    return fwd if fwd > 0 else r.total_s


def shared_steps(profile: Profile) -> tuple[Witness, ...]:
    """The steps both servers ran, at the same shape: the baseline's prefill rows against the
    speculative server's own prefill of the same prompt (``requests.spec_prefill``), and the
    baseline's decode rows against the speculative server's steps in which nothing proposed
    (``host_proposer.decode``), each pair at one batch, tokens and context. Their forwards are
    compared (the same target over the same tokens); the step's host work differs by design."""
    pairs: list[tuple[str, tuple[CostRow, ...], tuple[CostRow, ...]]] = []
    if profile.requests is not None and profile.requests.spec_prefill:
        pairs.append(("prefill", profile.rows("extend"), profile.requests.spec_prefill))
    if profile.host_proposer is not None and profile.host_proposer.decode:
        pairs.append(("decode", profile.rows("decode"), profile.host_proposer.decode))
    out = []
    for what, base, spec in pairs:
        for a in base:
            for b in spec:
                if (a.batch, a.tokens, a.context_tokens) != (b.batch, b.tokens, b.context_tokens):
                    continue
                fa, fb = _forward_s(a), _forward_s(b)
                if fa <= 0 or fb <= 0:
                    continue
                ctx = f", context {a.context_tokens:g}" if a.context_tokens else ""
                out.append(Witness(what=f"{what} forward at batch {a.batch}, {tokens_text(a.tokens)}{ctx}",
                                   base_s=fa, spec_s=fb, base_se_s=median_se_s(a) * fa / a.total_s,
                                   spec_se_s=median_se_s(b) * fb / b.total_s, base_row=a, spec_row=b))
    return tuple(out)


def pooled(witnesses: tuple[Witness, ...]) -> tuple[float, float]:
    """(log of the baseline's forwards over the speculative server's, its standard error), pooled over
    the witnesses by inverse variance (equal weights where a witness carries no spread)."""
    ses = [w.log_se for w in witnesses]
    if any(se <= 0 for se in ses):
        n = len(witnesses)
        return sum(w.log_ratio for w in witnesses) / n, math.sqrt(sum(se * se for se in ses)) / n
    wts = [1.0 / (se * se) for se in ses]
    return sum(wt * w.log_ratio for wt, w in zip(wts, witnesses, strict=True)) / sum(wts), 1.0 / math.sqrt(sum(wts))


def missing_condition(profile: Profile) -> str:
    """Whose box condition the profile lacks, as said."""
    c = profile.conditions
    if c is None or (c.baseline is None and c.spec is None):
        return "either server"
    if c.baseline is None:
        return "the baseline server"
    if c.spec is None:
        return "the speculative server"
    return "both servers under one probe (their probes timed different kernels or devices)"


def check_shared_steps(profile: Profile, missing: str) -> tuple[Inconsistency, ...]:
    """The box's condition where the probe did not record it for one server or both (``missing``:
    which, as said): the steps both servers ran are a second witness (:func:`shared_steps`).

    A speculative server never runs the same forward cheaper than the baseline server (its steps
    carry the same target over the same tokens and more host work; measured on vLLM 0.32's CPU
    engine its 1-token forward ran +24 % over the baseline's), so a baseline dearer is the box's
    condition, to the witnesses' noise. The pooled log ratio (inverse-variance weights, each from
    its rows' IQR and steps: :func:`specmodel.stats.median_se`):

    * beyond two standard errors and :data:`COST_ORDER_REL_TOL` (two step medians' slack): refuse,
      a loaded baseline as the probe would have refused it;
    * beyond one standard error and :data:`CONDITION_REL_TOL` (a baseline dearer by more than its
      noise, one-sided ~84 %, and than two recordings on one box differ -- a clean interleaved pair's
      decode forwards read +4 % at 1 % standard error): qualify, the speedup may carry the
      baseline's slowdown;
    * no witness at all: qualify, and say the box's condition was not recorded.
    """
    if not recorded_apart(profile):
        return ()
    ws = shared_steps(profile)
    if not ws:
        return (Inconsistency(
            check="box_condition", severity="qualify",
            guard="box condition not recorded" + ("" if missing == "either server" else f" ({missing})"),
            message=(f"the box's condition was not recorded for {missing} in profile {profile.name} (no calibration "
                     "probe in its logs) and no step both servers ran witnesses it (no prefill of the same prompt, no "
                     "non-proposing decode step): a box slower during one recording would move the speedup by as "
                     "much, unseen"),
            to_measure=settle_command(profile, "both")),)
    lr, se = pooled(ws)
    seen = "; ".join(w.text() for w in ws)
    figures = (f"the box's condition was not recorded for {missing} in profile {profile.name} (no calibration probe "
               f"in its logs); the steps both servers ran (baseline against speculative) -- {seen} -- put the "
               f"baseline's forwards at {math.exp(lr) - 1:+.0%} of the speculative server's (pooled over "
               f"{len(ws)} witness(es), standard error {se:.0%}, {lr / se:.1f} standard errors"
               if se > 0 else "")
    if not figures:
        figures = (f"the box's condition was not recorded for {missing} in profile {profile.name}; the steps both "
                   f"servers ran -- {seen} -- put the baseline's forwards at {math.exp(lr) - 1:+.0%} (no spread "
                   "recorded")
    if lr - 2.0 * se > math.log1p(COST_ORDER_REL_TOL):
        return (Inconsistency(
            check="box_condition", severity="refuse",
            guard="the steps both servers ran put the baseline on a slower box",
            message=(f"{figures}, beyond the noise and {COST_ORDER_REL_TOL:.0%}): the speculative server never runs the "
                     "same forward cheaper, so the baseline was recorded on a slower box, and the speedup carries it"),
            to_measure=settle_command(profile, "baseline")),)
    if se > 0 and lr > se + math.log1p(CONDITION_REL_TOL):
        return (Inconsistency(
            check="box_condition", severity="qualify",
            guard=f"no box condition; shared steps: baseline {math.exp(lr) - 1:+.0%}, {lr / se:.1f} SE",
            message=(f"{figures}): the speculative server never runs the same forward cheaper, so the baseline may "
                     f"have been recorded on a box up to {math.exp(lr + 2 * se) - 1:.0%} slower (two standard errors), "
                     "and the speedup would carry it"),
            to_measure=settle_command(profile, "baseline")),)
    return ()


def _check_others(profile: Profile, base: ServerCondition, spec: ServerCondition) -> tuple[Inconsistency, ...]:
    """On a CPU engine: other work's demand for the box's CPUs while each server was recorded, in
    runnable threads per core (:mod:`specmodel.engines.hook.calibration`, ``others_share``), compared
    beyond the two medians' noise (two standard errors of their difference, each from its windows'
    IQR) plus :data:`CONDITION_REL_TOL` (threads per core)."""
    assert base.others_share is not None and spec.others_share is not None
    b, s = base.others_share, spec.others_share
    differ, noise = _others_differ(base, spec)
    if not differ:
        return ()

    def fig(c: ServerCondition) -> str:
        return f"{c.others_share:.2f} (IQR {c.others_iqr:.2f}, {c.intervals} windows of steps)"

    figures = (f"other work asked for {fig(base)} runnable threads per core of the box while the baseline server was "
               f"recorded against {fig(spec)} while the speculative server was, in profile {profile.name} (the "
               f"server's own processes left out; the two differ by {abs(b - s):.2f}, their noise {noise:.2f} plus "
               f"{CONDITION_REL_TOL:.2f}, {abs(b - s) / max(noise / 2, 1e-9):.1f} standard errors)")
    if min(base.intervals, spec.intervals) < MIN_CONDITION_WINDOWS:
        # one window of steps on a side has no spread: its noise is unknown, not zero, so the gap
        # cannot be told from noise by any number of standard errors -- say it, refuse nothing
        return (Inconsistency(
            check="box_condition", severity="qualify",
            guard=(f"other work asked for {b:.2f} threads per core beside the baseline, {s:.2f} beside the other, "
                   f"from {min(base.intervals, spec.intervals)} window(s) of steps (noise unknown)"),
            message=(f"the box's load differed between the two recordings: {figures.split(' (the two differ')[0]}; "
                     f"with fewer than {MIN_CONDITION_WINDOWS} windows of steps on a side its noise is unknown, so "
                     "the speedup is qualified, not refused"),
            to_measure=settle_command(profile, "both")),)
    if b > s:
        return (Inconsistency(
            check="box_condition", severity="refuse",
            guard=f"other work asked for {b:.2f} threads per core beside the baseline, {s:.2f} beside the other",
            message=f"the box was busier while the baseline server was recorded: {figures}; every baseline cost, and "
                    "so the speedup, carries that load",
            to_measure=settle_command(profile, "baseline")),)
    return (Inconsistency(
        check="box_condition", severity="qualify",
        guard=f"other work asked for {s:.2f} threads per core beside the speculative server, {b:.2f} beside the "
              "baseline",
        message=f"the box was busier while the speculative server was recorded: {figures}; its costs are priced too "
                "dear, so the speedup is too low",
        to_measure=settle_command(profile, "speculative")),)


def _others_differ(base: ServerCondition, spec: ServerCondition) -> tuple[bool, float]:
    """(the others' shares differ beyond their noise, that noise: two SEs of the difference)."""
    assert base.others_share is not None and spec.others_share is not None
    noise = 2.0 * math.hypot(median_se(base.others_iqr, base.intervals), median_se(spec.others_iqr, spec.intervals))
    return abs(base.others_share - spec.others_share) > noise + CONDITION_REL_TOL, noise


def _by_others(base: ServerCondition, spec: ServerCondition) -> bool:
    """The others' share decides: a CPU probe (the server's own host) and both shares read."""
    return _on_host(base) and base.others_share is not None and spec.others_share is not None


def _box_differs(base: ServerCondition, spec: ServerCondition) -> bool:
    """The two servers' boxes in another condition, by whichever yardstick decides (:func:`check_condition`)."""
    return _others_differ(base, spec)[0] if _by_others(base, spec) else _condition_differs(base, spec)


def check_condition(profile: Profile) -> tuple[Inconsistency, ...]:
    """The box's condition while the baseline server was recorded against the speculative server's.

    Where both servers' calibration probes ran on a CPU engine and measured the box's other work
    (``others_share``), that decides (:func:`_check_others`): on a CPU the probe's device is the
    server's own host, so the probe's time carries the server's own load -- an ngram server's probe
    read 44 % slower than its baseline's on a clean interleaved pair -- while the share of the CPU
    used outside the server's process tree is the box's load alone.

    Else the probe, the same kernel in every worker (:mod:`specmodel.engines.hook.calibration`): the
    two medians differ when the gap exceeds two standard errors of their difference (each from
    its samples' IQR, :func:`specmodel.stats.median_se`) plus :data:`CONDITION_REL_TOL` of the larger
    (what separate worker processes on one idle box measured apart). A baseline recorded on a slower
    box carries that slowdown into every baseline cost, and the speedup by the same ratio (a false
    GO): refuse. A speculative server recorded on a slower box prices speculation too dear, so the
    speedup is too low: qualify (the verdict leans safe).

    No probe on one side or both (logs of a hook without it): no check here; the steps both servers
    ran witness the box instead (:func:`check_shared_steps`, run by :func:`check_cycle`), and without
    them the verdict says the box's condition was not recorded."""
    pair = comparable_conditions(profile)
    if pair is None:
        return ()
    base, spec = pair
    if _by_others(base, spec):
        return _check_others(profile, base, spec)
    if not _condition_differs(*pair):
        return ()
    b_s, s_s, se_b, se_s = _yardstick(base, spec)
    z = abs(b_s - s_s) / max(math.hypot(se_b, se_s), 1e-12)

    def fig(c: ServerCondition, x: float) -> str:
        wait = f", {ms(x, 3)} with its {c.wait_share:.0%} wait for a CPU" if x != c.probe_s else ""
        load = f", load {c.load_1m:.2f}" if c.load_1m is not None else ""
        return f"{ms(c.probe_s, 3)} (IQR {ms(c.probe_iqr_s, 3)}, {c.samples} samples{wait}{load})"

    figures = (f"calibration probe {fig(base, b_s)} on the baseline server against {fig(spec, s_s)} on the speculative "
               f"server in profile {profile.name} ({base.probe}; {z:.1f} standard errors apart)")
    if b_s > s_s:
        return (Inconsistency(
            check="box_condition", severity="refuse",
            guard=f"the calibration probe ran {b_s / s_s - 1:.0%} slower under the baseline server",
            message=(f"the box ran {b_s / s_s - 1:.0%} slower while the baseline server was recorded: "
                     f"{figures}; every baseline cost, and so the speedup, carries that slowdown"),
            to_measure=f"{settle_command(profile, 'baseline')} (its probe near {ms(s_s, 3)})"),)
    return (Inconsistency(
        check="box_condition", severity="qualify",
        guard=f"the calibration probe ran {s_s / b_s - 1:.0%} slower under the speculative server",
        message=(f"the box ran {s_s / b_s - 1:.0%} slower while the speculative server was recorded: "
                 f"{figures}; its costs are priced too dear, so the speedup is too low"),
        to_measure=f"{settle_command(profile, 'speculative')} (its probe near {ms(b_s, 3)})"),)
