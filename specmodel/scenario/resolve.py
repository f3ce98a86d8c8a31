""":class:`~specmodel.scenario.args.ScenarioArgs` → one :class:`Scenario` (the profile, the
acceptance and the operating point, each resolved once), and the prediction and serve plan built
from it: the one path under ``specmodel predict`` / ``report`` / ``plan`` and :func:`specmodel.predict`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from specmodel.errors import FieldError, SpecmodelError, field_name
from specmodel.limits import SEARCH_MAX_STEPS
from specmodel.model.calibrate import Observation
from specmodel.model.costs import default_context, measured_contexts
from specmodel.model.cyclecost import calibrate as calibrate_profile
from specmodel.model.inputs import Acceptance, OperatingPoint
from specmodel.model.predict import predict
from specmodel.model.prediction import Prediction
from specmodel.scenario.accept import resolve_accept
from specmodel.scenario.args import ScenarioArgs
from specmodel.scenario.numbers import apply_allreduce_fit, apply_numbers, missing_plain_pieces, with_origins
from specmodel.scenario.profiles import find_default_profile, find_profile
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import canonical_method, default_num_draft_tokens
from specmodel.schema.profile import Profile, load_profile

if TYPE_CHECKING:
    from specmodel.engines.base import LogFile
    from specmodel.model.serveplan import ServePlan


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything the model needs for one prediction, resolved from flags or API arguments: the
    profile (plain numbers, a fit and the configuration applied), the acceptance and the point
    (its ``spec`` always set), and the notes on what resolving them assumed."""

    profile: Profile
    accept: Acceptance
    point: OperatingPoint
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.point.spec is None:
            raise FieldError("spec", "a scenario's operating point names its speculative configuration")

    @property
    def spec(self) -> SpecConfig:
        """The speculative configuration priced (the point's)."""
        assert self.point.spec is not None  # (checked in __post_init__)
        return self.point.spec

    @property
    def proposal_rate(self) -> float | None:
        """The proposal rate given for the point, else the one the accept log measured (None: neither)."""
        return self.point.proposal_rate if self.point.proposal_rate is not None else self.accept.proposal_rate


def run_prediction(sc: Scenario) -> Prediction:
    """The one prediction behind ``specmodel predict``, ``report`` and :func:`specmodel.predict`."""
    return predict(sc.profile, sc.accept, sc.point)


def resolve_spec(base: SpecConfig, steps: int | None, topk: int | None, ndt: int | None) -> SpecConfig:
    """``base`` with the overrides given; ``num_draft_tokens`` follows steps/topk unless given
    (steps + 1 for a chain, else the base's, capped at the tree's size)."""
    for name, v in (("steps", steps), ("topk", topk), ("num_draft_tokens", ndt)):
        if v is not None and v < 1:
            raise FieldError(name, f"must be >= 1, got {v}")
    s = steps if steps is not None else base.steps
    k = topk if topk is not None else base.topk
    if ndt is None:
        ndt = default_num_draft_tokens(s, k, tree_cap=base.num_draft_tokens)
        if steps is None and topk is None:
            ndt = base.num_draft_tokens
    return SpecConfig(algorithm=base.algorithm, steps=s, topk=k, num_draft_tokens=ndt)


def _profile_of(args: ScenarioArgs, require_costs: bool, notes: list[str]) -> Profile | None:
    """The profile the inputs name (None: plain numbers alone build one later), with its note."""
    if isinstance(args.profile, Profile):
        notes.append(f"profile {args.profile.name}: {args.profile.label}")
        return args.profile
    if args.profile is not None:
        profile = load_profile(find_profile(args.profile))
        notes.append(f"profile {profile.name}: {profile.label}")
        return profile
    if args.baseline_sweep:
        from specmodel.trace.sweep import sweep_profile

        profile = sweep_profile(args.baseline_sweep, args.tp or 1)  # the file's own errors first
        if require_costs:
            missing_plain_pieces(args, sweep=True)
        profile = with_origins(profile, {"decode": f"your sweep {args.baseline_sweep}",
                                         "allreduce": "unknown: a throughput sweep has no all-reduce split"},
                               tp_known=args.tp is not None)
        notes.append(f"profile from {profile.label}")
        return profile
    if args.plain_numbers:
        if require_costs:
            missing_plain_pieces(args, sweep=False)
        notes.append("profile from plain numbers on the command line")
        return None
    path, note = find_default_profile()
    notes.append(note)
    return load_profile(path)


def resolve_scenario(args: ScenarioArgs, *, require_accept: bool = True, require_costs: bool = True) -> Scenario:
    """:class:`ScenarioArgs` → :class:`Scenario` (``args`` is not changed: what the server's log
    says about steps goes into a copy). All validation errors are :class:`SpecmodelError`."""
    notes: list[str] = []
    profile = _profile_of(args, require_costs, notes)
    if profile is not None and args.tp is not None and args.tp != profile.tp:
        raise FieldError("tp", f"profile {profile.name} was measured at TP {profile.tp}; "
                               "predicting another TP degree is a what-if (see `specmodel report`)")
    foreign = ""
    logs: tuple[LogFile, ...] = ()
    if args.accept_logs:
        from specmodel.engines.logs import parse_log

        logs = tuple(parse_log(p) for p in args.accept_logs)  # read once: configuration, then acceptance
        args, foreign = _steps_from_logs(args, logs, profile, notes)
    base_spec = profile.spec if profile is not None else SpecConfig()
    spec = resolve_spec(base_spec, args.steps, args.topk, args.num_draft_tokens)
    if args.method is not None:
        spec = replace(spec, algorithm=args.method.upper())
        profiled = canonical_method(base_spec.algorithm)
        if profile is not None and profiled != args.method:
            notes.append(f"{field_name('method')} {args.method}: priced from profile {profile.name}, which measured "
                         f"{profiled or base_spec.algorithm}; its costs stand in where {args.method} was not "
                         "measured, each named as assumed")
    context = args.context if isinstance(args.context, int) else None
    if args.plain_numbers:
        profile = apply_numbers(profile, batch=args.batch, spec=spec, tp=args.tp, baseline_tps=args.baseline_tps,
                                verify_ms=args.verify_ms, draft_ms=args.draft_ms, overhead_ms=args.overhead_ms,
                                allreduce_frac=args.allreduce_frac, context_tokens=context or 0)
    assert profile is not None
    if args.allreduce_fit:
        profile, note = apply_allreduce_fit(profile, args.allreduce_fit)
        notes.append(note)
    if profile.spec != spec:
        # the profile keeps the method it measured: the model reads it to tell measured from borrowed costs
        profile = replace(profile, spec=replace(spec, algorithm=profile.spec.algorithm))

    accept = resolve_accept(args, spec=spec, logs=logs, context_tokens=context, require=require_accept)
    notes.extend(accept.notes)
    if args.proposal_rate is None and accept.proposal_rate is None:
        from specmodel.model.hostdraft import measured_proposal_rate, proposal_rate_note

        measured = measured_proposal_rate(profile, spec.algorithm)
        if measured is not None:
            notes.append(f"proposal rate {measured:.0%} of request-steps: "
                         f"{proposal_rate_note(None, spec.algorithm, profile)}")
    point = OperatingPoint(batch=args.batch, spec=spec, context_tokens=context,
                           generation_tokens=args.generation_tokens,
                           observation=args.calibrate if isinstance(args.calibrate, Observation) else None,
                           proposal_rate=args.proposal_rate, request_tokens=args.request_tokens,
                           prompt_tokens=args.prompt_tokens, foreign_costs=foreign)
    return Scenario(profile=profile, accept=accept, point=point, notes=tuple(notes))


def _steps_from_logs(args: ScenarioArgs, logs: tuple[LogFile, ...], profile: Profile | None,
                     notes: list[str]) -> tuple[ScenarioArgs, str]:
    """``args`` with steps/topk/num_draft_tokens from the server's logged configuration (a value
    that contradicts the log is an error showing both); says where they came from. Second: why the
    profile's costs are another box's than the logged server's ("" = nothing says so): another TP
    degree or another device than the profile measured."""
    from specmodel.engines.logs import check_flag_against_log, logged_config
    from specmodel.live.validation import profile_device

    cfg = logged_config(logs)
    if cfg is None:
        return args, ""
    got: dict[str, int | None] = {}
    for key in ("steps", "topk", "num_draft_tokens"):
        try:  # its message names what it is given: a {field} reference, spelled by whoever prints it
            got[key] = check_flag_against_log("{" + key + "}", getattr(args, key), getattr(cfg, key), cfg)
        except SpecmodelError as exc:
            raise FieldError(None, str(exc)) from None
    _check_method_against_log(args, profile, cfg)
    notes.append(f"server configuration from the log: {cfg.describe()}")
    if profile is not None:
        from specmodel.live.validation import check_log_model_matches_profile

        check_log_model_matches_profile(cfg, profile, use="its acceptance says nothing about this profile's model "
                                        f"(give that model's log, or {field_name('accept_len')} to use the figure "
                                        "anyway)")
    foreign = ""
    if profile is not None and cfg.tp is not None and cfg.tp != profile.tp:
        notes.append(f"the log's server ran TP {cfg.tp} but profile {profile.name} is TP {profile.tp}: "
                     "its acceptance is used with this profile's costs")
        foreign = f"profile {profile.name} is TP {profile.tp}, the logged server ran TP {cfg.tp}"
    pdev = profile_device(profile) if profile is not None else None
    if profile is not None and cfg.device is not None and pdev is not None and cfg.device != pdev:
        names = {"cuda": "GPU", "cpu": "CPU"}
        foreign = "; ".join(x for x in (foreign, f"profile {profile.name} was measured on "
                                        f"{names.get(pdev, pdev)}, the logged server ran on "
                                        f"{names.get(cfg.device, cfg.device)}") if x)
    return replace(args, steps=got["steps"], topk=got["topk"], num_draft_tokens=got["num_draft_tokens"]), foreign


def _check_method_against_log(args: ScenarioArgs, profile: Profile | None, cfg: Any) -> None:
    """The drafter kind of the log, the profile and ``--method`` must be one: an ngram profile
    would price a draft_model log's drafter as free, a draft_model profile an ngram log's lookup
    as a drafter forward."""
    logged = canonical_method(cfg.algorithm)
    if logged is None:
        return
    if args.method is not None:
        if args.method != logged:
            raise FieldError("method", f"{args.method} contradicts the log: the server ran {logged} ({cfg.where}); "
                                       "drop {method} or give the log of the server you mean")
        return
    profiled = canonical_method(profile.spec.algorithm) if profile is not None else None
    if profile is not None and profiled is not None and profiled != logged and profile.source_kind != "numbers":
        raise FieldError("method", f"the log's server ran {logged} ({cfg.where}) but profile {profile.name} measured "
                                   f"{profiled}: its costs would price {logged} as {profiled}; pass {{method}} "
                                   f"{logged} to re-price from this profile (the costs it lacks named as assumed), "
                                   f"or give a profile of a {logged} server")


def serve_plan_for(sc: Scenario, batches: list[int] | None, contexts: list[int] | None,
                   topks: tuple[int, ...] | None = None) -> ServePlan:
    """The scenario's serve plan (``specmodel plan``): per (batch, context) the best measured
    speculative configuration or "off"; the grid defaults to the measured batches and contexts
    plus the asked-for ones. (The optimizer is imported here: it is not on ``predict``'s cold path.)"""
    from specmodel.model.optimize import accept_model
    from specmodel.model.serveplan import band_models, serve_plan

    profile, pt, spec, accept = sc.profile, sc.point, sc.spec, sc.accept
    if pt.observation is not None:
        profile = calibrate_profile(profile, pt.observation, spec, pt.context_tokens)[0]
    ctx = int(pt.context_tokens) if pt.context_tokens is not None else default_context(profile)
    if batches is None:
        batches = sorted({r.batch for r in profile.rows("decode")} | {pt.batch})
    if contexts is None:
        contexts = sorted(set(measured_contexts(profile, "decode")) | {ctx})
    if min(batches) < 1:
        raise FieldError("batches", f"every batch must be >= 1, got {min(batches)}")
    max_steps = max(SEARCH_MAX_STEPS, spec.steps)
    model = accept_model(accept.dist, rates=accept.per_position, measured_topk=spec.topk, max_steps=max_steps)
    # acceptance measured per context band: each context of the grid gets its band's distribution
    at = None if accept.by_context is None else band_models(accept.by_context,
                                                            per_position=accept.per_position is not None,
                                                            measured_topk=spec.topk, max_steps=max_steps)
    from specmodel.model.hostdraft import proposal_rate_of

    r = proposal_rate_of(sc.proposal_rate, spec.algorithm, profile)
    if topks is None and profile.source.engine:
        from specmodel.engines import engine_names, engine_spec

        # a profile of an engine that drafts chains only (vLLM) is planned as that engine runs: no trees
        if profile.source.engine in engine_names() and engine_spec(profile.source.engine).chains_only:
            topks = (1,)
    if topks is None:
        return serve_plan(profile, model, batches=batches, contexts=contexts, default=spec, accept_at=at,
                          proposal_rate=r)
    return serve_plan(profile, model, batches=batches, contexts=contexts, default=spec, accept_at=at, topks=topks,
                      proposal_rate=r)
