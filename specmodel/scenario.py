"""One operating point to predict, and the prediction itself: the domain layer under both the
``predict``/``report``/``plan`` commands (flags → :class:`Scenario`) and the Python API
(:mod:`specmodel.api`, arguments → :class:`Scenario`). Both end in :func:`run_prediction`, so a
notebook and the command line cannot disagree.

No click and no pandas here: this is on ``predict``'s cold path. Errors name the
:class:`ScenarioArgs` field (:class:`~specmodel.errors.FieldError`), never a flag: the CLI spells
fields as flags through one table (:mod:`specmodel.commands.flags`).
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmodel.errors import FieldError, SpecmodelError, require_finite
from specmodel.io import loads_json, read_bytes
from specmodel.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_GEN_TOKENS,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
    SEARCH_MAX_STEPS,
)
from specmodel.model import accept as acc
from specmodel.model.calibrate import Observation, parse_observation
from specmodel.model.costs import default_context, forward_cost, measured_contexts
from specmodel.model.predict import Prediction, predict
from specmodel.model.predict import calibrate as calibrate_profile
from specmodel.schema.phases import SPEC_METHODS, canonical_method, default_num_draft_tokens, forward_tokens
from specmodel.schema.profile import (
    OWN_BOX_KINDS,
    CostRow,
    Profile,
    Source,
    SpecConfig,
    load_profile,
    read_source_kind,
    resolve_profile_path,
)
from specmodel.units import alpha_beta, from_ms, ms

if TYPE_CHECKING:
    from specmodel.model.serveplan import ServePlan

REFERENCE_PROFILE = "kimi-k2.5-int4-tp8-pcie"


def reference_profile_path() -> Path:
    """The shipped reference profile (package data; ``profiles/`` links to it in the repo): Kimi-K2.5
    INT4 on 8x RTX PRO 6000 over PCIe, derived from a published write-up, not measured by this tool."""
    return Path(__file__).resolve().parent / "reference" / REFERENCE_PROFILE / "profile.json"


@dataclass(frozen=True, kw_only=True)
class Scenario:
    """Everything the model needs for one prediction, resolved from flags or API arguments."""

    profile: Profile
    dist: acc.AcceptDist
    spec: SpecConfig
    batch: int
    generation_tokens: int
    observation: Observation | None
    notes: tuple[str, ...]
    per_position: tuple[float, ...] | None = None  # kept for the optimizer's extrapolation
    context_tokens: int | None = None  # --context; None = the profile's smallest measured context
    warnings: tuple[str, ...] = ()  # about the inputs themselves; printed with the prediction's own
    #: acceptance per context band when the accept log measured it (plan and report pick a band per context)
    by_context: acc.AcceptByContext | None = None
    proposal_rate: float | None = None  # --proposal-rate (host proposers); None = every step proposes
    #: where a proposal rate not given as --proposal-rate came from (the accept log), "" otherwise
    proposal_rate_source: str = ""
    #: the accept log's drift of tokens per request-step between windows (relative); 0: not measured
    window_drift_rel: float = 0.0
    #: --request-tokens / --prompt-tokens: price a request end to end (None: the decode phase only)
    request_tokens: int | None = None
    prompt_tokens: int | None = None
    #: why the profile's costs are another box's than the server the inputs name ("" = nothing says so)
    foreign_costs: str = ""


def run_prediction(sc: Scenario) -> Prediction:
    """The one prediction behind ``specmodel predict``, ``report`` and :func:`specmodel.predict`
    (the scenario's warnings about its inputs first, then the model's)."""
    pred = predict(sc.profile, sc.dist, batch=sc.batch, spec=sc.spec, generation_tokens=sc.generation_tokens,
                   observation=sc.observation, context_tokens=sc.context_tokens, proposal_rate=sc.proposal_rate,
                   window_drift_rel=sc.window_drift_rel, request_tokens=sc.request_tokens,
                   prompt_tokens=sc.prompt_tokens, foreign_costs=sc.foreign_costs)
    if sc.proposal_rate_source:
        pred = replace(pred, proposal_rate_source=sc.proposal_rate_source)
    return replace(pred, warnings=sc.warnings + pred.warnings) if sc.warnings else pred


#: every bounded operating-point input: field -> (minimum, maximum), inclusive. The click options
#: are generated from it (commands/scenario.py), so the CLI and the API refuse the same values.
BOUNDS: dict[str, tuple[float, float]] = {
    "batch": (1, MAX_BATCH),
    "context": (0, MAX_CONTEXT_TOKENS),
    "steps": (1, MAX_STEPS),
    "topk": (1, MAX_TOPK),
    "num_draft_tokens": (2, MAX_DRAFT_TOKENS),
    "tp": (1, MAX_TP),
    "generation_tokens": (1, MAX_GEN_TOKENS),
    # (the upper bound of a mean accept length is steps + 1: checked where steps is known)
    "accept_len": (0.0, MAX_STEPS + 1),
    "alpha": (0.0, 1.0),
    # bounded both ways: 1e308 ms or 1e-300 ms is a typo, and plots of it are NaN axes
    "baseline_tps": (1e-3, 1e9),
    "verify_ms": (1e-3, 1e6),
    "draft_ms": (1e-3, 1e6),
    "overhead_ms": (0.0, 1e6),
    "allreduce_frac": (0.0, 1.0),
    # (0: the lookup ran on every step and never matched, a measured slowdown)
    "proposal_rate": (0.0, 1.0),
    "request_tokens": (1, MAX_GEN_TOKENS),
    "prompt_tokens": (1, MAX_CONTEXT_TOKENS),
}
INT_FIELDS = ("batch", "context", "steps", "topk", "num_draft_tokens", "tp", "generation_tokens", "request_tokens",
              "prompt_tokens")
#: the accept-length sources: exactly one per prediction
ACCEPT_SOURCES = ("accept_len", "accept_hist", "accept_dist", "per_position", "alpha", "accept_logs")
CONVENTIONS = ("tokens", "drafts")
SHAPES = ("geometric", "point")


@dataclass(frozen=True, kw_only=True)
class ScenarioArgs:
    """Every input of one operating point, as a user gives it (flags or API arguments), each
    checked against its bound (:data:`BOUNDS`) here. :func:`resolve_scenario` turns it into a
    :class:`Scenario`; ``specmodel predict`` fills it from click, :func:`specmodel.predict` from
    its arguments. Unset = None (the profile's value, or the documented default).

    ``context`` may be given as ``"32K"`` and ``per_position`` as ``"0.8,0.6"``: both are stored
    parsed. ``accept_hist`` is a ``{value: count}`` mapping or the ``--accept-hist`` text/file.
    """

    profile: Profile | str | Path | None = None  # None: the one measured profile in ./profiles, else the reference
    accept_len: float | None = None
    accept_hist: Mapping[int, float] | str | None = None
    accept_dist: acc.AcceptDist | None = None
    per_position: tuple[float, ...] | str | None = None
    alpha: float | None = None
    accept_logs: tuple[str, ...] = ()
    convention: str = "tokens"
    shape: str = "geometric"
    batch: int = 1
    context: int | str | None = None
    steps: int | None = None
    topk: int | None = None
    num_draft_tokens: int | None = None
    baseline_tps: float | None = None
    verify_ms: float | None = None
    draft_ms: float | None = None
    overhead_ms: float | None = None
    allreduce_frac: float | None = None
    tp: int | None = None
    baseline_sweep: str | None = None
    calibrate: Observation | str | tuple[float, ...] | None = None
    generation_tokens: int = 256
    allreduce_fit: str | None = None
    #: host proposers (ngram, suffix): share of request-steps in which the lookup proposed
    proposal_rate: float | None = None
    #: the drafter kind to price (``--method``), when it is not the one the profile measured
    method: str | None = None
    #: output tokens per request: price each request end to end (prefill + time outside the engine)
    request_tokens: int | None = None
    #: prompt tokens per request for that price (default: the profiled prompt length)
    prompt_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.prompt_tokens is not None and self.request_tokens is None:
            raise FieldError("prompt_tokens", "prices a request end to end: give its output length "
                                              "({request_tokens}) too")
        if self.method is not None:
            m = canonical_method(self.method)
            if m is None:
                raise FieldError("method", f"unknown {str(self.method)[:40]!r} (expected one of "
                                           f"{', '.join(SPEC_METHODS)})")
            object.__setattr__(self, "method", m)
        if isinstance(self.context, str):
            object.__setattr__(self, "context", parse_tokens(self.context, "context"))
        if isinstance(self.per_position, str):
            object.__setattr__(self, "per_position", tuple(_parse_float_list(self.per_position, "per_position")))
        if self.calibrate is not None and not isinstance(self.calibrate, Observation):
            object.__setattr__(self, "calibrate", observation(self.calibrate))
        object.__setattr__(self, "accept_logs", tuple(str(p) for p in self.accept_logs))
        for name, (lo, hi) in BOUNDS.items():
            v = getattr(self, name)
            if v is None:
                continue
            if name in INT_FIELDS:
                if isinstance(v, bool) or not isinstance(v, int):
                    raise FieldError(name, f"must be an integer, got {v!r}")
                if not lo <= v <= hi:
                    raise FieldError(name, f"must be in {int(lo)}..{int(hi)}, got {v}")
            else:
                require_finite(name, v, minimum=lo, maximum=hi)
        if self.convention not in CONVENTIONS:
            raise FieldError("convention", f"unknown {self.convention!r} (expected tokens or drafts)")
        if self.shape not in SHAPES:
            raise FieldError("shape", f"unknown {self.shape!r} (expected geometric or point)")
        given = self.accept_sources()
        if len(given) > 1:
            raise FieldError(None, "give one accept-length source, got " + ", ".join("{" + g + "}" for g in given))
        if self.profile is not None and self.baseline_sweep:
            # either one is the cost table; silently preferring one would misread the other
            raise FieldError("baseline_sweep", "give either {profile} or {baseline_sweep}, not both")

    def accept_sources(self) -> tuple[str, ...]:
        """The accept-length sources given (at most one after validation)."""
        return tuple(n for n in ACCEPT_SOURCES if getattr(self, n) not in (None, (), []))

    @property
    def plain_numbers(self) -> bool:
        """Costs given as numbers (``--baseline-tps``, ``--verify-ms``, ``--draft-ms``, ``--overhead-ms``)."""
        return any(getattr(self, k) is not None for k in ("baseline_tps", "verify_ms", "draft_ms", "overhead_ms"))

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))


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


def accept_dist(accept: float | Mapping[int, float] | acc.AcceptDist, *, max_tokens: int,
                convention: str = "tokens", shape: str = "geometric") -> acc.AcceptDist:
    """An accept length given as a mean (``--accept-len``), a histogram ``{value: count}``
    (``--accept-hist``) or a distribution already built, on 1..``max_tokens`` tokens/step.

    ``convention``: ``tokens`` = tokens per verify step including the bonus token (SGLang
    ``accept len``, vLLM ``Mean acceptance length``); ``drafts`` = accepted drafts only (one less).
    ``shape`` is assumed around a bare mean (see :func:`specmodel.model.accept.from_mean`).
    """
    if isinstance(accept, acc.AcceptDist):
        return accept
    if isinstance(accept, Mapping):
        return acc.from_histogram(accept, convention=convention, max_tokens=max_tokens)
    if isinstance(accept, bool) or not isinstance(accept, (int, float)):
        raise FieldError("accept", f"expected a mean accept length, a histogram {{value: count}} or an AcceptDist, "
                                   f"got {type(accept).__name__}")
    return acc.from_mean(accept, max_tokens, convention=convention, shape=shape,
                         source=f"mean {accept:g} ({convention})")


def observation(point: Observation | str | tuple[float, ...] | None) -> Observation | None:
    """A calibration point as ``--calibrate`` takes it: ``"1,2.0,60"`` / ``(1, 2.0, 60)`` =
    (batch, accept tokens/step, total tok/s), or with a context: (batch, context, accept, tok/s)."""
    if point is None or isinstance(point, Observation):
        return point
    text = point if isinstance(point, str) else ",".join(str(v) for v in point)
    return parse_observation(text)


_TOKEN_SUFFIX = {"k": 1024, "m": 1024 * 1024}


def parse_tokens(text: str | int, field: str, maximum: int = MAX_CONTEXT_TOKENS) -> int:
    """A token count: ``32768``, ``32K`` or ``1M`` (K = 1024, as context lengths are quoted), at most
    ``maximum``; errors name ``field``."""
    t = str(text).strip().lower().replace("_", "")
    mult = 1
    if t and t[-1] in _TOKEN_SUFFIX:
        mult, t = _TOKEN_SUFFIX[t[-1]], t[:-1]
    try:
        v = int(t) * mult
    except ValueError:
        raise FieldError(field, f"expected a token count like 32768 or 32K, got {text!r}") from None
    if v < 0:
        raise FieldError(field, f"must be >= 0 tokens, got {text!r}")
    if v > maximum:
        raise FieldError(field, f"must be <= {maximum}, got {str(text)[:40]!r}")
    return v


def parse_token_list(text: str, field: str, maximum: int = MAX_CONTEXT_TOKENS) -> list[int]:
    """``1,4,16`` / ``0,4K,32K`` → sorted unique token counts."""
    vals = sorted({parse_tokens(x, field, maximum) for x in text.split(",") if x.strip()})
    if not vals:
        raise FieldError(field, f"expected a comma-separated list, got {text!r}")
    return vals


def scenario(profile: Profile, accept: Any, *, batch: int = 1, context: int | str | None = None,
             steps: int | None = None, topk: int | None = None, num_draft_tokens: int | None = None,
             convention: str = "tokens", shape: str = "geometric",
             calibrate: Observation | str | tuple[float, ...] | None = None,
             generation_tokens: int = 256, notes: tuple[str, ...] = (),
             proposal_rate: float | None = None, method: str | None = None,
             request_tokens: int | None = None, prompt_tokens: int | None = None) -> Scenario:
    """A :class:`Scenario` from plain arguments (what :func:`specmodel.predict` takes): the same
    :class:`ScenarioArgs` and :func:`resolve_scenario` as the command line."""
    if isinstance(accept, acc.AcceptDist):
        source: dict[str, Any] = {"accept_dist": accept}
    elif isinstance(accept, Mapping):
        source = {"accept_hist": accept}
    elif isinstance(accept, bool) or not isinstance(accept, (int, float)):
        raise FieldError("accept", f"expected a mean accept length, a histogram {{value: count}} or an AcceptDist, "
                                   f"got {type(accept).__name__}")
    else:
        source = {"accept_len": accept}
    args = ScenarioArgs(profile=profile, batch=batch, context=context, steps=steps, topk=topk,
                        num_draft_tokens=num_draft_tokens, convention=convention, shape=shape, calibrate=calibrate,
                        generation_tokens=generation_tokens, proposal_rate=proposal_rate, method=method,
                        request_tokens=request_tokens, prompt_tokens=prompt_tokens, **source)
    sc = resolve_scenario(args)
    return replace(sc, notes=tuple(notes) + sc.notes) if notes else sc


def serve_plan_for(sc: Scenario, batches: list[int] | None, contexts: list[int] | None,
                   topks: tuple[int, ...] | None = None) -> ServePlan:
    """The scenario's serve plan (``specmodel plan``): per (batch, context) the best measured
    speculative configuration or "off"; the grid defaults to the measured batches and contexts
    plus the asked-for ones. (The optimizer is imported here: it is not on ``predict``'s cold path.)"""
    from specmodel.model.optimize import accept_model
    from specmodel.model.serveplan import band_models, serve_plan

    profile = sc.profile
    if sc.observation is not None:
        profile = calibrate_profile(profile, sc.observation, sc.spec, sc.context_tokens)[0]
    ctx = sc.context_tokens if sc.context_tokens is not None else default_context(profile)
    if batches is None:
        batches = sorted({r.batch for r in profile.rows("decode")} | {sc.batch})
    if contexts is None:
        contexts = sorted(set(measured_contexts(profile, "decode")) | {ctx})
    if min(batches) < 1:
        raise FieldError("batches", f"every batch must be >= 1, got {min(batches)}")
    model = accept_model(sc.dist, rates=sc.per_position, measured_topk=sc.spec.topk, max_steps=max(SEARCH_MAX_STEPS, sc.spec.steps))
    # acceptance measured per context band: each context of the grid gets its band's distribution
    at = None if sc.by_context is None else band_models(sc.by_context, per_position=sc.per_position is not None,
                                                         measured_topk=sc.spec.topk,
                                                         max_steps=max(SEARCH_MAX_STEPS, sc.spec.steps))
    from specmodel.model.hostdraft import proposal_rate_of

    r = proposal_rate_of(sc.proposal_rate, sc.spec.algorithm, profile)
    if topks is None and profile.source.engine:
        from specmodel.engines import engine_names, engine_spec

        # a profile of an engine that drafts chains only (vLLM) is planned as that engine runs: no trees
        if profile.source.engine in engine_names() and engine_spec(profile.source.engine).chains_only:
            topks = (1,)
    if topks is None:
        return serve_plan(profile, model, batches=batches, contexts=contexts, default=sc.spec, accept_at=at,
                          proposal_rate=r)
    return serve_plan(profile, model, batches=batches, contexts=contexts, default=sc.spec, accept_at=at, topks=topks,
                      proposal_rate=r)


# ---------------------------------------------------------------------------------------------
# ScenarioArgs -> Scenario (predict, report, plan, validate and the API): errors name the field


PROFILES_DIR = Path("profiles")


def find_default_profile() -> tuple[Path, str]:
    """The one measured/ingested profile under ./profiles, else the shipped reference.

    Deterministic: with more than one candidate the user must choose (an ``ingest`` or
    ``profile`` run in the same folder must not silently change what a bare command uses).
    Returns (path, note) where the note tells the user which one and why.
    """
    candidates: list[Path] = []
    kinds: dict[Path, str] = {}
    if PROFILES_DIR.is_dir():
        for pj in sorted(PROFILES_DIR.glob("*/profile.json")):
            kind = read_source_kind(pj)
            if kind in OWN_BOX_KINDS:
                candidates.append(pj)
                kinds[pj] = str(kind)
    if len(candidates) > 1:
        names = ", ".join(str(c.parent) for c in candidates)
        raise FieldError("profile", f"{len(candidates)} measured profiles under {PROFILES_DIR}/ ({names}); "
                                    "pass {profile} to choose one")
    if candidates:
        path = candidates[0]
        return path, (f"using your {kinds[path]} profile {path.parent} (the only measured, ingested or derived "
                      f"profile under {PROFILES_DIR}/; pass --profile to choose)")
    return reference_profile_path(), (
        "using the shipped reference profile (derived from a published write-up, not measured by this tool); "
        "run `specmodel profile --tp N` to measure your own"
    )


def _parse_float_list(text: str, field: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise FieldError(field, f"expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise FieldError(field, "expected at least one number")
    for v in vals:
        if not math.isfinite(v):
            raise FieldError(field, f"numbers must be finite, got {text!r}")
    return vals


#: ``1:10,2:30`` (also JSON-ish ``{"1": 10}`` is a file): digits, ':', ',', '.', exponents, spaces only
_HIST_SPEC = re.compile(r"^[\s\d:.,eE+\-]*:[\s\d:.,eE+\-]*$")


def read_text(field: str, path: Path, what: str) -> str:
    """A small text input file given as ``field`` (bounded, not binary, not a directory)."""
    raw = read_bytes(path, what, max_bytes=64 << 20)
    if b"\x00" in raw[:65536]:
        raise FieldError(field, f"{path}: binary file, expected {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise FieldError(field, f"{path}: not UTF-8 text, expected {what}") from None


def _hist_error(where: str, detail: str) -> SpecmodelError:
    """A histogram error names its file, or the field for an inline ``1:10,2:30`` spec."""
    return SpecmodelError(f"{where}: {detail}") if where else FieldError("accept_hist", detail)


def parse_histogram(text: str) -> dict[int, float]:
    """``1:10,2:30,3:40`` or a file: JSON ``{"1": 10, ...}``, or CSV with value,count rows."""
    # a histogram spec is never tried as a path: a long valid one would be 'File name too long'
    p = Path(text)
    if not _HIST_SPEC.match(text):
        raw = read_text("accept_hist", p, "a JSON/CSV histogram")
        where = str(p)
        try:
            obj = loads_json(raw, where) if raw.lstrip().startswith(("{", "[")) else None
        except SpecmodelError:
            obj = None
        if isinstance(obj, dict):
            items = list(obj.items())
        elif obj is not None:
            raise _hist_error(where, "a JSON histogram must be an object {value: count}")
        else:
            items = []
            for i, row in enumerate(csv.reader(raw.splitlines())):
                if not row or row[0].strip().startswith("#"):
                    continue
                if len(row) < 2:
                    raise _hist_error(where, f"line {i + 1}: expected value,count")
                if i == 0 and not row[0].strip().lstrip("-").isdigit():
                    continue  # header
                items.append((row[0].strip(), row[1].strip()))
    else:
        where = ""
        items = []
        for part in text.split(","):
            if not part.strip():
                continue
            if ":" not in part:
                raise FieldError("accept_hist", f"expected VALUE:COUNT pairs like 1:10,2:30 or a file, got {part!r}")
            k, v = part.split(":", 1)
            items.append((k.strip(), v.strip()))
    out: dict[int, float] = {}
    for k, v in items:
        try:
            ks = str(k).strip()
            if len(ks) > 6:  # a tokens/step value beyond MAX_STEPS + 1 either way
                raise ValueError(ks)
            key = int(ks)
            val = float(v) if not isinstance(v, (int, float)) or isinstance(v, bool) else float(v)
            if isinstance(v, bool):
                raise ValueError(v)
        except (ValueError, TypeError, OverflowError):
            raise _hist_error(where, f"bad histogram entry {str(k)[:40]!r}: {str(v)[:40]!r} (value must be an "
                                 "integer, count a number)") from None
        if not math.isfinite(val) or val < 0:
            raise _hist_error(where, f"histogram count for {key} must be a finite number >= 0, got {str(v)[:40]}")
        if not 0 <= key <= MAX_STEPS + 1:
            raise _hist_error(where, f"histogram value {key} outside 0..{MAX_STEPS + 1} (steps are at most {MAX_STEPS})")
        out[key] = out.get(key, 0.0) + val
    if not out:
        raise _hist_error(where, "empty histogram")
    if not math.isfinite(sum(out.values())):  # each count finite, their sum past the largest float
        raise _hist_error(where, "the counts add up past the largest float: not step counts")
    return out


def _number_row(kind: str, batch: int, tokens: int, total_s: float, ar_frac: float | None,
                like: Profile | None, context_tokens: int = 0) -> CostRow:
    """One cost row from a plain number; split by --allreduce-frac, else the profile's split there."""
    if ar_frac is None and like is not None and (like.has(kind) or kind == "verify"):
        fc = forward_cost(like, kind, tokens)
        ar_frac = fc.allreduce_s / fc.total_s if fc.total_s > 0 else 0.0
        comp_frac = fc.compute_s / fc.total_s if fc.total_s > 0 else 0.0
    else:
        comp_frac = 0.0
    ar = total_s * (ar_frac or 0.0)
    comp = total_s * comp_frac
    return CostRow(kind=kind, batch=batch, tokens=tokens, total_s=total_s, allreduce_s=ar, compute_s=comp,
                   other_s=max(total_s - ar - comp, 0.0), context_tokens=context_tokens)


def _with_origins(profile: Profile, origins: dict[str, str], *, tp_known: bool | None = None) -> Profile:
    """``profile`` with ``source.cost_origin`` extended by ``origins`` (read by the prediction's provenance)."""
    return replace(profile, source=profile.source.with_origins(origins, tp_known=tp_known))


def apply_numbers(profile: Profile | None, *, batch: int, spec: SpecConfig, tp: int | None,
                  baseline_tps: float | None, verify_ms: float | None, draft_ms: float | None,
                  overhead_ms: float | None, allreduce_frac: float | None, context_tokens: int = 0) -> Profile:
    """Plain numbers from the command line. Each replaces that kind's curve with one point.

    ``--baseline-tps`` is the total throughput over the ``--batch`` requests (decode step = batch / tps);
    every number is taken to be measured at ``context_tokens`` (``--context``, default 0);
    ``--verify-ms`` one verify forward; ``--draft-ms`` one drafter forward (run ``--steps``
    times per cycle); ``--overhead-ms`` the per-cycle overhead. Every replaced cost is
    recorded in ``source.cost_origin`` so the output says it came from the user's flag.
    """
    if profile is None:
        if baseline_tps is None:
            raise FieldError("baseline_tps", "required when no {profile} is given with plain numbers")
        if verify_ms is None:
            raise FieldError("verify_ms", "required when no {profile} is given with plain numbers")
    rows = list(profile.costs) if profile is not None else []
    like = profile
    origins: dict[str, str] = {}

    def put(kind: str, tokens: int, total_s: float, frac: float | None) -> None:
        nonlocal rows
        try:
            new = _number_row(kind, batch, tokens, total_s, frac, like, context_tokens)
        except SpecmodelError as exc:  # (a forward-pass time out of range: name the field that set it)
            raise FieldError({"decode": "baseline_tps", "verify": "verify_ms", "draft": "draft_ms"}[kind], str(exc)) from None
        rows = [r for r in rows if r.kind != kind] + [new]

    # draft rows keep their own split (the drafter's all-reduce share differs from the target's)
    if baseline_tps is not None:
        put("decode", batch, batch / baseline_tps, allreduce_frac)
        origins["decode"] = f"your flag --baseline-tps {baseline_tps:g} (at batch {batch})"
    if verify_ms is not None:
        put("verify", forward_tokens("verify", batch, spec), from_ms(verify_ms), allreduce_frac)
        origins["verify"] = f"your flag --verify-ms {verify_ms:g}"
    if draft_ms is not None:
        put("draft", forward_tokens("draft", batch, spec), from_ms(draft_ms), None)
        rows = [r for r in rows if r.kind != "draft_extend"]
        origins["draft"] = f"your flag --draft-ms {draft_ms:g} (x {spec.steps} steps)"
    if overhead_ms is not None:
        origins["overhead"] = f"your flag --overhead-ms {overhead_ms:g}"
    if allreduce_frac is not None:
        origins["allreduce"] = f"your flag --allreduce-frac {allreduce_frac:g} (of baseline and verify)"
    elif profile is None:
        origins["allreduce"] = "unknown: not split (pass --allreduce-frac)"
    elif baseline_tps is not None or verify_ms is not None:
        origins["allreduce"] = f"your costs split like {profile.name}'s rows (pass --allreduce-frac to set it)"
    if profile is None:
        base = Profile(name="command-line", source=Source.numbers(tp_known=tp is not None),
                       tp=tp or 1, costs=tuple(rows), spec=spec,
                       overhead_s=from_ms(overhead_ms or 0.0), path="(command line)")
        return _with_origins(base, origins, tp_known=tp is not None)
    new = profile.with_costs(rows)
    if overhead_ms is not None:
        new = replace(new, overhead_s=from_ms(overhead_ms))
    if any(v is not None for v in (baseline_tps, verify_ms, draft_ms, overhead_ms)):
        new = replace(new, source=new.source.with_description(f"{profile.label}; with command-line overrides"))
    return _with_origins(new, origins)


def apply_allreduce_fit(profile: Profile, fit_path: str, notes: list[str]) -> Profile:
    """The profile with every all-reduce re-costed by a measured nccl-tests fit (``--allreduce-fit``)."""
    from specmodel.model.allreduce import recost_rows
    from specmodel.trace.nccl_tests import load_fit_document

    fit, points = load_fit_document(fit_path)
    try:
        rows, changed = recost_rows(profile.costs, profile.tp, fit)
    except SpecmodelError as exc:
        raise FieldError("allreduce_fit", f"{fit_path}: {exc}") from None
    if changed == 0:
        raise FieldError("allreduce_fit", f"{fit_path}: profile {profile.name} has no cost rows with all-reduce call "
                                          "counts and message sizes to re-cost")
    keep = tuple(p for p in profile.allreduce_points if p.tp != fit.tp)
    new = replace(profile.with_costs(rows), allreduce_fit=fit, allreduce_points=keep + points)
    before = min(profile.rows("decode"), key=lambda r: r.tokens)
    after = min(new.rows("decode"), key=lambda r: r.tokens)
    notes.append(f"all-reduce re-costed with {fit_path}: {changed} of {len(rows)} rows, "
                 f"{alpha_beta(fit.alpha_s, fit.beta_bytes_per_s)} ({fit.algorithm}, TP {fit.tp}); "
                 f"decode at {before.tokens} tokens: all-reduce {ms(before.allreduce_s)} in the profile -> "
                 f"{ms(after.allreduce_s)} (waiting/skew kept: {ms(after.skew_s)})")
    return _with_origins(new, {"allreduce": f"nccl-tests fit {fit_path} at each row's message size "
                                            f"(+ waiting/skew as measured in {profile.name})"})


def _missing_plain_pieces(args: ScenarioArgs, sweep: bool) -> None:
    """Plain-number input never silently borrows another box's costs: name the input to give."""
    missing = []
    if not sweep and args.baseline_tps is None:
        missing.append("{baseline_tps} (baseline tok/s at {batch})")
    if not sweep and args.verify_ms is None:
        missing.append("{verify_ms} (one verify forward)")
    if args.draft_ms is None and args.calibrate is None:
        missing.append("{draft_ms} (one draft step; or {calibrate} with an observed point)")
    if missing:
        given = "{baseline_sweep}" if sweep else "plain numbers"
        raise FieldError(None, f"{given} without a profile: missing {', '.join(missing)}; pass them, or "
                               "{profile} P to take the missing costs from that profile explicitly")


PROFILE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")


def find_profile(arg: str | Path) -> Path:
    """``--profile``: a path (profile.json or its directory), or a NAME as the tool prints it,
    looked up as ``./profiles/NAME`` then among the shipped references."""
    p = Path(arg)
    if p.exists() or not PROFILE_NAME.match(str(arg)):
        return resolve_profile_path(p)
    for cand in (PROFILES_DIR / str(arg), reference_profile_path().parent.parent / str(arg)):
        if (cand / "profile.json").is_file():
            return cand / "profile.json"
    known = sorted({pj.parent.name for d in (PROFILES_DIR, reference_profile_path().parent.parent) if d.is_dir()
                    for pj in d.glob("*/profile.json")})
    raise FieldError("profile", f"{arg}: file not found, and no profile of that name under {PROFILES_DIR}/ or "
                                f"the shipped references (known: {', '.join(known) or 'none'})")


def resolve_scenario(args: ScenarioArgs, *, require_accept: bool = True, require_costs: bool = True) -> Scenario:
    """:class:`ScenarioArgs` → :class:`Scenario` (``args`` is not changed: what the server's log
    says about steps goes into a copy). All validation errors are :class:`SpecmodelError`."""
    notes: list[str] = []
    plain = args.plain_numbers
    profile: Profile | None
    if isinstance(args.profile, Profile):
        profile = args.profile
        notes.append(f"profile {profile.name}: {profile.label}")
    elif args.profile is not None:
        profile = load_profile(find_profile(args.profile))
        notes.append(f"profile {profile.name}: {profile.label}")
    elif args.baseline_sweep:
        from specmodel.trace.sweep import sweep_profile

        profile = sweep_profile(args.baseline_sweep, args.tp or 1)  # the file's own errors first
        if require_costs:
            _missing_plain_pieces(args, sweep=True)
        profile = _with_origins(profile, {"decode": f"your sweep {args.baseline_sweep}",
                                          "allreduce": "unknown: a throughput sweep has no all-reduce split"},
                                tp_known=args.tp is not None)
        notes.append(f"profile from {profile.label}")
    elif plain:
        if require_costs:
            _missing_plain_pieces(args, sweep=False)
        profile = None
        notes.append("profile from plain numbers on the command line")
    else:
        path, note = find_default_profile()
        profile = load_profile(path)
        notes.append(note)
    if profile is not None and args.tp is not None and args.tp != profile.tp:
        raise FieldError("tp", f"profile {profile.name} was measured at TP {profile.tp}; "
                               "predicting another TP degree is a what-if (see `specmodel report`)")
    foreign = ""
    if args.accept_logs:
        args, foreign = _steps_from_logs(args, profile, notes)
    base_spec = profile.spec if profile is not None else SpecConfig()
    spec = resolve_spec(base_spec, args.steps, args.topk, args.num_draft_tokens)
    if args.method is not None:
        spec = replace(spec, algorithm=args.method.upper())
        profiled = canonical_method(base_spec.algorithm)
        if profile is not None and profiled != args.method:
            notes.append(f"--method {args.method}: priced from profile {profile.name}, which measured "
                         f"{profiled or base_spec.algorithm}; its costs stand in where {args.method} was not "
                         "measured, each named as assumed")
    context = args.context if isinstance(args.context, int) else None
    if plain:
        profile = apply_numbers(profile, batch=args.batch, spec=spec, tp=args.tp, baseline_tps=args.baseline_tps,
                                verify_ms=args.verify_ms, draft_ms=args.draft_ms, overhead_ms=args.overhead_ms,
                                allreduce_frac=args.allreduce_frac, context_tokens=context or 0)
    assert profile is not None
    if args.allreduce_fit:
        profile = apply_allreduce_fit(profile, args.allreduce_fit, notes)
    if profile.spec != spec:
        # the profile keeps the method it measured: the model reads it to tell measured from borrowed costs
        profile = replace(profile, spec=replace(spec, algorithm=profile.spec.algorithm))

    warnings: list[str] = []
    found: list[acc.AcceptByContext] = []
    rates_out: list[float] = []
    drift_out: list[float] = []
    dist, per_pos = resolve_accept(args, spec=spec, require=require_accept, notes=notes, warnings=warnings,
                                   bands_out=found, rate_out=rates_out, drift_out=drift_out)
    rate, rate_source = args.proposal_rate, ""
    if rate is None and rates_out:
        # the server's own log measured its rate (drafts per request-step; 0: proposed nothing)
        rate = rates_out[0]
        rate_source = ("measured in the accept log: the server proposed nothing" if rate == 0.0 else
                       "measured in the accept log: the server's drafts per request-step")
        notes.append(f"proposal rate {rate:.0%}: {rate_source} (--proposal-rate overrides)")
    bands = found[0] if found else None
    if bands is not None and context is not None:
        # the log measured acceptance per context band: use the one that covers the context asked for
        dist, label = bands.at(context)
        per_pos = tuple(dist.per_position_rates()) if per_pos is not None else None
        notes.append(f"acceptance at context {context}: {label}")
    elif context is not None and dist.source != "none":
        notes.append(f"acceptance assumed constant over context: {dist.source} gives no per-context measurement")
    obs = args.calibrate if isinstance(args.calibrate, Observation) else None
    if rate is None:
        from specmodel.model.hostdraft import measured_proposal_rate, proposal_rate_note

        measured = measured_proposal_rate(profile, spec.algorithm)
        if measured is not None:
            notes.append(f"proposal rate {measured:.0%} of request-steps: "
                         f"{proposal_rate_note(None, spec.algorithm, profile)}")
    return Scenario(profile=profile, dist=dist, spec=spec, batch=args.batch, generation_tokens=args.generation_tokens,
                    observation=obs, notes=tuple(notes), per_position=per_pos, context_tokens=context,
                    warnings=tuple(warnings), by_context=bands, proposal_rate=rate,
                    proposal_rate_source=rate_source, window_drift_rel=drift_out[0] if drift_out else 0.0,
                    request_tokens=args.request_tokens, prompt_tokens=args.prompt_tokens, foreign_costs=foreign)


def _steps_from_logs(args: ScenarioArgs, profile: Profile | None, notes: list[str]) -> tuple[ScenarioArgs, str]:
    """``args`` with steps/topk/num_draft_tokens from the server's logged configuration (a value
    that contradicts the log is an error showing both); says where they came from. Second: why the
    profile's costs are another box's than the logged server's ("" = nothing says so): another TP
    degree or another device than the profile measured."""
    from specmodel.engines.logs import check_flag_against_log, config_of_logs
    from specmodel.validation import profile_device

    cfg = config_of_logs(list(args.accept_logs))
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
        from specmodel.validation import check_log_model_matches_profile

        check_log_model_matches_profile(cfg, profile, use="its acceptance says nothing about this profile's model "
                                        "(give that model's log, or --accept-len to use the figure anyway)")
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


def resolve_accept(args: ScenarioArgs, *, spec: SpecConfig, require: bool = True,
                   notes: list[str] | None = None, warnings: list[str] | None = None,
                   bands_out: list[acc.AcceptByContext] | None = None,
                   rate_out: list[float] | None = None,
                   drift_out: list[float] | None = None) -> tuple[acc.AcceptDist, tuple[float, ...] | None]:
    """Exactly one accept-length source → AcceptDist on 1..steps+1 (assumptions appended to ``notes``;
    an accept log's acceptance per context band, when it measured one, appended to ``bands_out``)."""
    given = args.accept_sources()
    k = spec.max_accept_tokens
    if not given:
        if require:
            raise FieldError(None, "an accept-length source is required: {accept_len}, {accept_hist}, "
                                   "{per_position}, {alpha} or {accept_logs}")
        return acc.from_mean(1.0, k, source="none"), None
    src = given[0]
    if args.accept_dist is not None:
        return args.accept_dist, None
    if args.accept_len is not None:
        return accept_dist(args.accept_len, max_tokens=k, convention=args.convention, shape=args.shape), None
    if args.accept_hist is not None:
        hist = parse_histogram(args.accept_hist) if isinstance(args.accept_hist, str) else args.accept_hist
        if warnings is not None and (w := fractions_warning(hist)) is not None:
            warnings.append(w)
        return accept_dist(hist, max_tokens=k, convention=args.convention), None
    if isinstance(args.per_position, tuple):
        rates = list(args.per_position)
        if len(rates) > spec.steps:
            raise FieldError("per_position", f"{len(rates)} rates but steps is {spec.steps}; pass {{steps}} {len(rates)}")
        if len(rates) < spec.steps:
            if args.steps is None:
                # a draft position with no rate would be paid for and never accepted: ask
                raise FieldError("per_position",
                                 f"{len(rates)} rates but steps is {spec.steps} (the profile's); pass {{steps}} "
                                 f"{len(rates)} to match, or {{steps}} {spec.steps} explicitly to extend with the last "
                                 "conditional rate")
            dist = acc.resize(acc.from_per_position(rates), k)
            if notes is not None:
                notes.append(f"--per-position: {len(rates)} rates extended to --steps {spec.steps} with the last "
                             "conditional acceptance rate (an assumption)")
            return dist, tuple(dist.per_position_rates())
        return acc.from_per_position(rates, max_tokens=k), tuple(rates)
    if args.alpha is not None:
        return acc.from_chain(args.alpha, spec.steps, source=f"chain alpha {args.alpha:g}"), None
    assert src == "accept_logs"
    # logs: parsed by the trace package (SGLang / vLLM / bench_speculative formats)
    from specmodel.engines.logs import summarize

    s = summarize(list(args.accept_logs), k)
    if notes is not None:
        notes.extend(s.notes)
    if bands_out is not None and s.by_context is not None:
        bands_out.append(s.by_context)
    if rate_out is not None and s.proposal_rate is not None:
        rate_out.append(s.proposal_rate)
    if drift_out is not None and len(s.window_steps) >= 3:
        from specmodel.model.hostdraft import mixed_std

        r = 1.0 if s.proposal_rate is None else s.proposal_rate
        drift = acc.window_drift_rel(s.window_steps, mixed_std(s.dist.mean_tokens, s.dist.std_tokens, r))
        drift_out.append(drift)
        if notes is not None:
            notes.append(f"tokens per request-step moved {drift:.1%} (relative, beyond sampling) between the log's "
                         f"{len(s.window_steps)} windows: the prediction's band and P(speedup > 1) carry it")
    return s.dist, s.rates
