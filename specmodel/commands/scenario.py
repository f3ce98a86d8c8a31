"""Flags shared by ``predict``, ``report`` and ``validate``: which profile, which accept-length
source, which operating point. Turns them into (Profile, AcceptDist, SpecConfig, batch, …)."""

from __future__ import annotations

import csv
import functools
import math
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from specmodel.errors import SpecmodelError, require_finite
from specmodel.io import loads_json, read_bytes, read_json
from specmodel.limits import (
    MAX_BATCH,
    MAX_CONTEXT_TOKENS,
    MAX_DRAFT_TOKENS,
    MAX_GEN_TOKENS,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
    bounded_int,
)
from specmodel.model import accept as acc
from specmodel.model.calibrate import parse_observation
from specmodel.model.costs import forward_cost
from specmodel.scenario import Scenario, accept_dist, parse_tokens, reference_profile_path, resolve_spec
from specmodel.schema.profile import CostRow, Profile, SpecConfig, load_profile, resolve_profile_path

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
            try:
                doc = read_json(pj, max_bytes=64 << 20)
                kind = (doc.get("source") or {}).get("kind") if isinstance(doc, dict) else None
            except (SpecmodelError, OSError, AttributeError):
                continue  # not a profile we could use: the default skips it, --profile would name it
            if kind in ("measured", "ingested", "derived"):
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


def scenario_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Attach the shared flags (profile, accept-length source, operating point) to a command."""
    opts = [
        click.option("--profile", "profile_path", type=click.Path(), default=None,
                     help="profile.json or its directory (default: the one measured profile under ./profiles, else the shipped "
                          "reference; several measured ones: choose)."),
        click.option("--accept-len", type=float, default=None,
                     help="Mean accept length per verify step (see --accept-convention)."),
        click.option("--accept-convention", type=click.Choice(["tokens", "drafts"]), default="tokens", show_default=True,
                     help="tokens: tokens per step incl. the bonus token (SGLang 'accept len', vLLM 'Mean acceptance length'); "
                          "drafts: accepted drafts only (0.58 = 1.58 tokens/step)."),
        click.option("--accept-shape", type=click.Choice(["geometric", "point"]), default="geometric", show_default=True,
                     help="Shape assumed around a bare --accept-len (geometric = constant per-draft acceptance)."),
        click.option("--accept-hist", default=None,
                     help="Histogram of per-step counts: '1:10,2:30,3:40,4:20' or a JSON/CSV file (in --accept-convention)."),
        click.option("--per-position", default=None,
                     help="vLLM per-position acceptance rates 'r1,r2,...' (E = 1 + sum r_i)."),
        click.option("--alpha", type=float, default=None,
                     help="Chain acceptance rate per draft (Leviathan et al. 2023); k = --steps drafts."),
        click.option("--accept-log", "accept_logs", multiple=True, type=click.Path(),
                     help="SGLang/vLLM server log or bench_speculative JSONL to take the accept length from (repeatable)."),
        click.option("--batch", type=bounded_int(1, MAX_BATCH), default=1, show_default=True, help="Concurrent requests (batch size)."),
        click.option("--context", "context", default=None,
                     help="KV tokens per request (context length L), e.g. 32768 or 32K (K = 1024), at most "
                          f"{MAX_CONTEXT_TOKENS}; default: the profile's smallest measured context."),
        click.option("--steps", type=bounded_int(1, MAX_STEPS), default=None, help="Draft depth (--speculative-num-steps); default: the profile's."),
        click.option("--topk", type=bounded_int(1, MAX_TOPK), default=None, help="Draft branching (--speculative-eagle-topk); default: the profile's."),
        click.option("--num-draft-tokens", type=bounded_int(2, MAX_DRAFT_TOKENS), default=None,
                     help="Tokens verified per request (--speculative-num-draft-tokens); default: steps+1 with topk 1, else the profile's."),
        click.option("--baseline-tps", type=float, default=None, help="Baseline (non-speculative) tok/s at --batch: the TOTAL over all --batch requests."),
        click.option("--verify-ms", type=float, default=None, help="One verify forward, ms."),
        click.option("--draft-ms", type=float, default=None, help="One draft step (one drafter forward), ms; run --steps times per cycle."),
        click.option("--overhead-ms", type=float, default=None, help="Per-cycle overhead outside any forward, ms."),
        click.option("--allreduce-frac", type=float, default=None, help="Share of --verify-ms / baseline step spent in all-reduce (0..1)."),
        click.option("--tp", type=bounded_int(1, MAX_TP), default=None, help="TP degree, for profiles built from plain numbers."),
        click.option("--baseline-sweep", type=click.Path(), default=None,
                     help="CSV of a baseline sweep used as T_fwd(n, L): header 'batch,[context,]tokens_per_s' "
                          "(tokens_per_s = total over all requests) or '...,tokens_per_s_per_request'."),
        click.option("--calibrate", default=None,
                     help="One observed speculative point BATCH,CONTEXT,ACCEPT_LEN,TOKENS_PER_S (or BATCH,ACCEPT_LEN,"
                          "TOKENS_PER_S at --context); accept in tokens incl. bonus, tok/s the TOTAL over BATCH requests. "
                          "The unseen per-cycle cost found there is carried, constant, to every other batch and context."),
        click.option("--allreduce-fit", type=click.Path(), default=None,
                     help="specmodel.allreduce_fit JSON from `specmodel nccl-tests -o`: re-cost every all-reduce of the "
                          "profile with it (per call at the row's message size; waiting/skew kept as measured)."),
        click.option("--gen-tokens", type=bounded_int(1, MAX_GEN_TOKENS), default=256, show_default=True,
                     help="Generation length per request for the tok/s band and P(speedup > 1)."),
    ]
    for o in reversed(opts):
        func = o(func)
    return func


SCENARIO_KEYS = ("profile_path", "accept_len", "accept_convention", "accept_shape", "accept_hist", "per_position",
                 "alpha", "accept_logs", "batch", "context", "steps", "topk", "num_draft_tokens", "baseline_tps", "verify_ms",
                 "draft_ms", "overhead_ms", "allreduce_frac", "tp", "baseline_sweep", "calibrate", "gen_tokens",
                 "allreduce_fit")


def pop_scenario(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: kwargs.pop(k) for k in SCENARIO_KEYS if k in kwargs}


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


def with_scenario(func: Callable[..., Any] | None = None, *,
                  require_costs: bool = True) -> Callable[..., Any]:
    """Decorator: add the flags and pass a resolved Scenario as ``scenario``.

    ``require_costs=False`` (``@with_scenario(require_costs=False)``) lets a sweep or plain numbers
    go without a draft cost; the output then says "draft assumed free" in its provenance.
    """

    def deco(f: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(f)
        def wrapper(**kwargs: Any) -> Any:
            sc = resolve_scenario(require_costs=require_costs, **pop_scenario(kwargs))
            return f(scenario=sc, **kwargs)

        return scenario_options(wrapper)

    return deco(func) if func is not None else deco
