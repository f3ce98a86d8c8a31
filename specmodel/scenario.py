"""One operating point to predict, and the prediction itself: the domain layer under both the
``predict``/``report``/``plan`` commands (flags → :class:`Scenario`) and the Python API
(:mod:`specmodel.api`, arguments → :class:`Scenario`). Both end in :func:`run_prediction`, so a
notebook and the command line cannot disagree.

No click and no pandas here: this is on ``predict``'s cold path.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specmodel.errors import SpecmodelError, require_finite
from specmodel.io import loads_json, read_bytes
from specmodel.limits import (
    MAX_CONTEXT_TOKENS,
    MAX_STEPS,
)
from specmodel.model import accept as acc
from specmodel.model.calibrate import Observation, parse_observation
from specmodel.model.costs import default_context, forward_cost, measured_contexts
from specmodel.model.predict import Prediction, predict
from specmodel.model.predict import calibrate as calibrate_profile
from specmodel.schema.profile import (
    OWN_BOX_KINDS,
    CostRow,
    Profile,
    SpecConfig,
    load_profile,
    read_source_kind,
    resolve_profile_path,
)

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


def run_prediction(sc: Scenario) -> Prediction:
    """The one prediction behind ``specmodel predict``, ``report`` and :func:`specmodel.predict`."""
    return predict(sc.profile, sc.dist, batch=sc.batch, spec=sc.spec, generation_tokens=sc.generation_tokens,
                   observation=sc.observation, context_tokens=sc.context_tokens)


def resolve_spec(base: SpecConfig, steps: int | None, topk: int | None, ndt: int | None) -> SpecConfig:
    """``base`` with the overrides given; ``num_draft_tokens`` follows steps/topk unless given
    (steps + 1 for a chain, else the base's, capped at the tree's size)."""
    for name, v in (("--steps", steps), ("--topk", topk), ("--num-draft-tokens", ndt)):
        if v is not None and v < 1:
            raise SpecmodelError(f"{name}: must be >= 1, got {v}")
    s = steps if steps is not None else base.steps
    k = topk if topk is not None else base.topk
    if ndt is None:
        ndt = s + 1 if k == 1 else min(base.num_draft_tokens, s * k + 1)
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
        raise SpecmodelError(f"accept: expected a mean accept length, a histogram {{value: count}} or an AcceptDist, "
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


def parse_tokens(text: str | int, flag: str, maximum: int = MAX_CONTEXT_TOKENS) -> int:
    """A token count: ``32768``, ``32K`` or ``1M`` (K = 1024, as context lengths are quoted), at most ``maximum``."""
    t = str(text).strip().lower().replace("_", "")
    mult = 1
    if t and t[-1] in _TOKEN_SUFFIX:
        mult, t = _TOKEN_SUFFIX[t[-1]], t[:-1]
    try:
        v = int(t) * mult
    except ValueError:
        raise SpecmodelError(f"{flag}: expected a token count like 32768 or 32K, got {text!r}") from None
    if v < 0:
        raise SpecmodelError(f"{flag}: must be >= 0 tokens, got {text!r}")
    if v > maximum:
        raise SpecmodelError(f"{flag}: must be <= {maximum}, got {str(text)[:40]!r}")
    return v


def parse_token_list(text: str, flag: str, maximum: int = MAX_CONTEXT_TOKENS) -> list[int]:
    """``1,4,16`` / ``0,4K,32K`` → sorted unique token counts."""
    vals = sorted({parse_tokens(x, flag, maximum) for x in text.split(",") if x.strip()})
    if not vals:
        raise SpecmodelError(f"{flag}: expected a comma-separated list, got {text!r}")
    return vals


def scenario(profile: Profile, accept: Any, *, batch: int = 1, context: int | str | None = None,
             steps: int | None = None, topk: int | None = None, num_draft_tokens: int | None = None,
             convention: str = "tokens", shape: str = "geometric",
             calibrate: Observation | str | tuple[float, ...] | None = None,
             generation_tokens: int = 256, notes: tuple[str, ...] = ()) -> Scenario:
    """A :class:`Scenario` from plain arguments (what :func:`specmodel.predict` takes)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise SpecmodelError(f"batch: must be an integer >= 1, got {batch!r}")
    if isinstance(generation_tokens, bool) or not isinstance(generation_tokens, int) or generation_tokens < 1:
        raise SpecmodelError(f"generation_tokens: must be an integer >= 1, got {generation_tokens!r}")
    spec = resolve_spec(profile.spec, steps, topk, num_draft_tokens)
    if profile.spec != spec:
        profile = replace(profile, spec=spec)
    dist = accept_dist(accept, max_tokens=spec.max_accept_tokens, convention=convention, shape=shape)
    ctx = parse_tokens(context, "context") if context is not None else None
    return Scenario(profile=profile, dist=dist, spec=spec, batch=batch, generation_tokens=generation_tokens,
                    observation=observation(calibrate), notes=notes, context_tokens=ctx)


def serve_plan_for(sc: Scenario, batches: list[int] | None, contexts: list[int] | None,
                   topks: tuple[int, ...] | None = None) -> ServePlan:
    """The scenario's serve plan (``specmodel plan``): per (batch, context) the best measured
    speculative configuration or "off"; the grid defaults to the measured batches and contexts
    plus the asked-for ones. (The optimizer is imported here: it is not on ``predict``'s cold path.)"""
    from specmodel.model.optimize import accept_model
    from specmodel.model.serveplan import serve_plan

    profile = sc.profile
    if sc.observation is not None:
        profile = calibrate_profile(profile, sc.observation, sc.spec, sc.context_tokens)[0]
    ctx = sc.context_tokens if sc.context_tokens is not None else default_context(profile)
    if batches is None:
        batches = sorted({r.batch for r in profile.rows("decode")} | {sc.batch})
    if contexts is None:
        contexts = sorted(set(measured_contexts(profile, "decode")) | {ctx})
    if min(batches) < 1:
        raise SpecmodelError(f"--batches: every batch must be >= 1, got {min(batches)}")
    model = accept_model(sc.dist, rates=sc.per_position, measured_topk=sc.spec.topk, max_steps=max(8, sc.spec.steps))
    if topks is None:
        return serve_plan(profile, model, batches=batches, contexts=contexts, default=sc.spec)
    return serve_plan(profile, model, batches=batches, contexts=contexts, default=sc.spec, topks=topks)


# ---------------------------------------------------------------------------------------------
# from command-line flags (predict, report, plan, validate): errors name the flag


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
        raise SpecmodelError(f"--profile: {len(candidates)} measured profiles under {PROFILES_DIR}/ ({names}); "
                             "pass --profile to choose one")
    if candidates:
        path = candidates[0]
        return path, (f"using your {kinds[path]} profile {path.parent} (the only measured, ingested or derived "
                      f"profile under {PROFILES_DIR}/; pass --profile to choose)")
    return reference_profile_path(), (
        "using the shipped reference profile (derived from a published write-up, not measured by this tool); "
        "run `specmodel profile --tp N` to measure your own"
    )


def _parse_float_list(text: str, flag: str) -> list[float]:
    try:
        vals = [float(x) for x in text.replace(" ", "").strip("[]").split(",") if x]
    except ValueError:
        raise SpecmodelError(f"{flag}: expected comma-separated numbers, got {text!r}") from None
    if not vals:
        raise SpecmodelError(f"{flag}: expected at least one number")
    for v in vals:
        if not math.isfinite(v):
            raise SpecmodelError(f"{flag}: numbers must be finite, got {text!r}")
    return vals


#: ``1:10,2:30`` (also JSON-ish ``{"1": 10}`` is a file): digits, ':', ',', '.', exponents, spaces only
_HIST_SPEC = re.compile(r"^[\s\d:.,eE+\-]*:[\s\d:.,eE+\-]*$")


def read_text(flag: str, path: Path, what: str) -> str:
    """A small text input file named by ``flag`` (bounded, not binary, not a directory)."""
    raw = read_bytes(path, what, max_bytes=64 << 20)
    if b"\x00" in raw[:65536]:
        raise SpecmodelError(f"{flag}: {path}: binary file, expected {what}")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecmodelError(f"{flag}: {path}: not UTF-8 text, expected {what}") from None


def parse_histogram(text: str) -> dict[int, float]:
    """``1:10,2:30,3:40`` or a file: JSON ``{"1": 10, ...}``, or CSV with value,count rows."""
    # a histogram spec is never tried as a path: a long valid one would be 'File name too long'
    p = Path(text)
    if not _HIST_SPEC.match(text):
        raw = read_text("--accept-hist", p, "a JSON/CSV histogram")
        where = str(p)
        try:
            obj = loads_json(raw, where) if raw.lstrip().startswith(("{", "[")) else None
        except SpecmodelError:
            obj = None
        if isinstance(obj, dict):
            items = list(obj.items())
        elif obj is not None:
            raise SpecmodelError(f"{where}: a JSON histogram must be an object {{value: count}}")
        else:
            items = []
            for i, row in enumerate(csv.reader(raw.splitlines())):
                if not row or row[0].strip().startswith("#"):
                    continue
                if len(row) < 2:
                    raise SpecmodelError(f"{where}: line {i + 1}: expected value,count")
                if i == 0 and not row[0].strip().lstrip("-").isdigit():
                    continue  # header
                items.append((row[0].strip(), row[1].strip()))
    else:
        where = "--accept-hist"
        items = []
        for part in text.split(","):
            if not part.strip():
                continue
            if ":" not in part:
                raise SpecmodelError(f"--accept-hist: expected VALUE:COUNT pairs like 1:10,2:30 or a file, got {part!r}")
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
            raise SpecmodelError(f"{where}: bad histogram entry {str(k)[:40]!r}: {str(v)[:40]!r} (value must be an "
                                 "integer, count a number)") from None
        if not math.isfinite(val) or val < 0:
            raise SpecmodelError(f"{where}: histogram count for {key} must be a finite number >= 0, got {str(v)[:40]}")
        if not 0 <= key <= MAX_STEPS + 1:
            raise SpecmodelError(f"{where}: histogram value {key} outside 0..{MAX_STEPS + 1} (steps are at most {MAX_STEPS})")
        out[key] = out.get(key, 0.0) + val
    if not out:
        raise SpecmodelError(f"{where}: empty histogram")
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


def _with_origins(profile: Profile, origins: dict[str, str], **extra: Any) -> Profile:
    """``profile`` with ``source.cost_origin`` extended by ``origins`` (read by the prediction's provenance)."""
    src = dict(profile.source)
    merged = dict(src.get("cost_origin") or {})
    merged.update(origins)
    src["cost_origin"] = merged
    src.update(extra)
    return replace(profile, source=src)


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
            raise SpecmodelError("--baseline-tps: required when no --profile is given with plain numbers")
        if verify_ms is None:
            raise SpecmodelError("--verify-ms: required when no --profile is given with plain numbers")
    rows = list(profile.costs) if profile is not None else []
    like = profile
    origins: dict[str, str] = {}

    def put(kind: str, tokens: int, total_s: float, frac: float | None) -> None:
        nonlocal rows
        try:
            new = _number_row(kind, batch, tokens, total_s, frac, like, context_tokens)
        except SpecmodelError as exc:  # (a forward-pass time out of range: name the flag that set it)
            flag = {"decode": "--baseline-tps", "verify": "--verify-ms", "draft": "--draft-ms"}[kind]
            raise SpecmodelError(f"{flag}: {exc}") from None
        rows = [r for r in rows if r.kind != kind] + [new]

    # draft rows keep their own split (the drafter's all-reduce share differs from the target's)
    if baseline_tps is not None:
        put("decode", batch, batch / baseline_tps, allreduce_frac)
        origins["decode"] = f"your flag --baseline-tps {baseline_tps:g} (at batch {batch})"
    if verify_ms is not None:
        put("verify", batch * spec.num_draft_tokens, verify_ms / 1e3, allreduce_frac)
        origins["verify"] = f"your flag --verify-ms {verify_ms:g}"
    if draft_ms is not None:
        put("draft", batch * spec.topk, draft_ms / 1e3, None)
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
        base = Profile(name="command-line", source={"kind": "numbers", "description": "plain numbers from the command line"},
                       tp=tp or 1, costs=tuple(rows), spec=spec,
                       overhead_s=(overhead_ms or 0.0) / 1e3, path="(command line)")
        return _with_origins(base, origins, tp_known=tp is not None)
    new = profile.with_costs(rows)
    if overhead_ms is not None:
        new = replace(new, overhead_s=overhead_ms / 1e3)
    if any(v is not None for v in (baseline_tps, verify_ms, draft_ms, overhead_ms)):
        src = dict(new.source)
        src["description"] = f"{profile.label}; with command-line overrides"
        new = replace(new, source=src)
    return _with_origins(new, origins)


def apply_allreduce_fit(profile: Profile, fit_path: str, notes: list[str]) -> Profile:
    """The profile with every all-reduce re-costed by a measured nccl-tests fit (``--allreduce-fit``)."""
    from specmodel.model.allreduce import recost_rows
    from specmodel.trace.nccl_tests import load_fit_document

    fit, points = load_fit_document(fit_path)
    try:
        rows, changed = recost_rows(profile.costs, profile.tp, fit)
    except SpecmodelError as exc:
        raise SpecmodelError(f"--allreduce-fit {fit_path}: {exc}") from None
    if changed == 0:
        raise SpecmodelError(f"--allreduce-fit {fit_path}: profile {profile.name} has no cost rows with all-reduce call "
                             "counts and message sizes to re-cost")
    keep = tuple(p for p in profile.allreduce_points if p.tp != fit.tp)
    new = replace(profile.with_costs(rows), allreduce_fit=fit, allreduce_points=keep + points)
    before = min(profile.rows("decode"), key=lambda r: r.tokens)
    after = min(new.rows("decode"), key=lambda r: r.tokens)
    notes.append(f"all-reduce re-costed with {fit_path}: {changed} of {len(rows)} rows, alpha "
                 f"{fit.alpha_s * 1e6:.2f} us, beta {fit.beta_bytes_per_s / 1e9:.2f} GB/s ({fit.algorithm}, TP {fit.tp}); "
                 f"decode at {before.tokens} tokens: all-reduce {before.allreduce_s * 1e3:.2f} ms in the profile -> "
                 f"{after.allreduce_s * 1e3:.2f} ms (waiting/skew kept: {after.skew_s * 1e3:.2f} ms)")
    return _with_origins(new, {"allreduce": f"nccl-tests fit {fit_path} at each row's message size "
                                            f"(+ waiting/skew as measured in {profile.name})"})


def _missing_plain_pieces(kw: dict[str, Any], sweep: bool) -> None:
    """Plain-number input never silently borrows another box's costs: name the flag to pass."""
    missing = []
    if not sweep and kw.get("baseline_tps") is None:
        missing.append("--baseline-tps (baseline tok/s at --batch)")
    if not sweep and kw.get("verify_ms") is None:
        missing.append("--verify-ms (one verify forward)")
    if kw.get("draft_ms") is None and not kw.get("calibrate"):
        missing.append("--draft-ms (one draft step; or --calibrate with an observed point)")
    if missing:
        given = "--baseline-sweep" if sweep else "plain numbers"
        raise SpecmodelError(f"{given} without a profile: missing {', '.join(missing)}; pass them, or "
                             "--profile P to take the missing costs from that profile explicitly")


def resolve_scenario(*, require_accept: bool = True, require_costs: bool = True, **kw: Any) -> Scenario:
    """Flags → :class:`Scenario`. All validation errors are :class:`SpecmodelError`."""
    notes: list[str] = []
    for name in ("accept_len", "alpha", "baseline_tps", "verify_ms", "draft_ms", "overhead_ms", "allreduce_frac"):
        v = kw.get(name)
        if v is not None:
            flag = "--" + name.replace("_", "-")
            # bounded both ways: 1e308 ms or 1e-300 ms is a typo, and plots of it are NaN axes
            if name == "baseline_tps":
                require_finite(flag, v, minimum=1e-3, maximum=1e9)
            elif name in ("verify_ms", "draft_ms"):
                require_finite(flag, v, minimum=1e-3, maximum=1e6)
            elif name == "overhead_ms":
                require_finite(flag, v, minimum=0.0, maximum=1e6)
            elif name == "allreduce_frac":
                require_finite(flag, v, minimum=0.0, maximum=1.0)
            elif name == "alpha":
                require_finite(flag, v, minimum=0.0, maximum=1.0)
            else:
                require_finite(flag, v, minimum=0.0)
    batch = int(kw["batch"]) if kw.get("batch") is not None else 1
    if batch < 1:
        raise SpecmodelError(f"--batch: must be >= 1, got {batch}")
    gen = int(kw["gen_tokens"]) if kw.get("gen_tokens") is not None else 256
    if gen < 1:
        raise SpecmodelError(f"--gen-tokens: must be >= 1, got {gen}")
    tp = kw.get("tp")
    if tp is not None and tp < 1:
        raise SpecmodelError(f"--tp: must be >= 1, got {tp}")

    plain = any(kw.get(k) is not None for k in ("baseline_tps", "verify_ms", "draft_ms", "overhead_ms"))
    if kw.get("profile_path") and kw.get("baseline_sweep"):
        # either one is the cost table; silently preferring one would misread the other
        raise SpecmodelError("--baseline-sweep: give either --profile or --baseline-sweep, not both")
    profile: Profile | None
    if kw.get("profile_path"):
        path = resolve_profile_path(kw["profile_path"])
        profile = load_profile(path)
        notes.append(f"profile {profile.name}: {profile.label}")
    elif kw.get("baseline_sweep"):
        from specmodel.trace.sweep import sweep_profile

        profile = sweep_profile(kw["baseline_sweep"], tp or 1)  # the file's own errors first
        if require_costs:
            _missing_plain_pieces(kw, sweep=True)
        profile = _with_origins(profile, {"decode": f"your sweep {kw['baseline_sweep']}",
                                          "allreduce": "unknown: a throughput sweep has no all-reduce split"},
                                tp_known=tp is not None)
        notes.append(f"profile from {profile.label}")
    elif plain:
        if require_costs:
            _missing_plain_pieces(kw, sweep=False)
        profile = None
        notes.append("profile from plain numbers on the command line")
    else:
        path, note = find_default_profile()
        profile = load_profile(path)
        notes.append(note)
    if profile is not None and tp is not None and tp != profile.tp:
        raise SpecmodelError(f"--tp: profile {profile.name} was measured at TP {profile.tp}; "
                             "predicting another TP degree is a what-if (see `specmodel report`)")
    if kw.get("accept_logs"):
        _steps_from_logs(kw, profile, notes)
    base_spec = profile.spec if profile is not None else SpecConfig()
    spec = resolve_spec(base_spec, kw.get("steps"), kw.get("topk"), kw.get("num_draft_tokens"))
    context = parse_tokens(kw["context"], "--context") if kw.get("context") is not None else None
    if plain:
        profile = apply_numbers(profile, batch=batch, spec=spec, tp=tp, baseline_tps=kw.get("baseline_tps"),
                                verify_ms=kw.get("verify_ms"), draft_ms=kw.get("draft_ms"),
                                overhead_ms=kw.get("overhead_ms"), allreduce_frac=kw.get("allreduce_frac"),
                                context_tokens=context or 0)
    assert profile is not None
    if kw.get("allreduce_fit"):
        profile = apply_allreduce_fit(profile, kw["allreduce_fit"], notes)
    if profile.spec != spec:
        profile = replace(profile, spec=spec)

    dist, per_pos = resolve_accept(spec=spec, require=require_accept, notes=notes, **kw)
    obs = parse_observation(kw["calibrate"]) if kw.get("calibrate") else None
    return Scenario(profile=profile, dist=dist, spec=spec, batch=batch, generation_tokens=gen, observation=obs,
                    notes=tuple(notes), per_position=per_pos, context_tokens=context)


def _steps_from_logs(kw: dict[str, Any], profile: Profile | None, notes: list[str]) -> None:
    """--steps/--topk/--num-draft-tokens from the server's logged configuration (a flag that
    contradicts the log is an error showing both); says where they came from."""
    from specmodel.trace.logs import check_flag_against_log, config_of_logs

    cfg = config_of_logs(list(kw["accept_logs"]))
    if cfg is None:
        return
    for flag, key in (("--steps", "steps"), ("--topk", "topk"), ("--num-draft-tokens", "num_draft_tokens")):
        kw[key] = check_flag_against_log(flag, kw.get(key), getattr(cfg, key), cfg)
    notes.append(f"server configuration from the log: {cfg.describe()}")
    if profile is not None and cfg.tp is not None and cfg.tp != profile.tp:
        notes.append(f"the log's server ran TP {cfg.tp} but profile {profile.name} is TP {profile.tp}: "
                     "its acceptance is used with this profile's costs")


def resolve_accept(*, spec: SpecConfig, require: bool = True, notes: list[str] | None = None,
                   **kw: Any) -> tuple[acc.AcceptDist, tuple[float, ...] | None]:
    """Exactly one accept-length source → AcceptDist on 1..steps+1 (assumptions appended to ``notes``)."""
    conv = kw.get("accept_convention") or "tokens"
    given = [n for n in ("accept_len", "accept_hist", "per_position", "alpha", "accept_logs") if kw.get(n)
             not in (None, (), [])]
    if len(given) > 1:
        flags = ", ".join("--" + g.replace("_", "-").replace("accept-logs", "accept-log") for g in given)
        raise SpecmodelError(f"give one accept-length source, got {flags}")
    k = spec.max_accept_tokens
    if not given:
        if require:
            raise SpecmodelError("an accept-length source is required: --accept-len, --accept-hist, --per-position, "
                                 "--alpha or --accept-log")
        return acc.from_mean(1.0, k, source="none"), None
    src = given[0]
    if src == "accept_len":
        return accept_dist(kw["accept_len"], max_tokens=k, convention=conv,
                           shape=kw.get("accept_shape") or "geometric"), None
    if src == "accept_hist":
        return accept_dist(parse_histogram(kw["accept_hist"]), max_tokens=k, convention=conv), None
    if src == "per_position":
        rates = _parse_float_list(kw["per_position"], "--per-position")
        if len(rates) > spec.steps:
            raise SpecmodelError(f"--per-position: {len(rates)} rates but steps is {spec.steps}; pass --steps {len(rates)}")
        if len(rates) < spec.steps:
            if kw.get("steps") is None:
                # a draft position with no rate would be paid for and never accepted: ask
                raise SpecmodelError(
                    f"--per-position: {len(rates)} rates but steps is {spec.steps} (the profile's); pass --steps "
                    f"{len(rates)} to match, or --steps {spec.steps} explicitly to extend with the last conditional rate")
            dist = acc.resize(acc.from_per_position(rates), k)
            if notes is not None:
                notes.append(f"--per-position: {len(rates)} rates extended to --steps {spec.steps} with the last "
                             "conditional acceptance rate (an assumption)")
            return dist, tuple(dist.per_position_rates())
        return acc.from_per_position(rates, max_tokens=k), tuple(rates)
    if src == "alpha":
        return acc.from_chain(kw["alpha"], spec.steps, source=f"chain alpha {kw['alpha']:g}"), None
    # logs: parsed by the trace package (SGLang / vLLM / bench_speculative formats)
    from specmodel.trace.logs import summarize

    s = summarize(list(kw["accept_logs"]), k)
    if notes is not None:
        notes.extend(s.notes)
    return s.dist, s.rates
