"""``specmodel plan --engine NAME [--export FILE]``: the serve plan as the schedule an engine runs.

Kept beside ``commands/plan.py`` (which owns the table and the decision rule) so the plan
command only adds the flags and one call. The plan is evaluated at every batch 1..B (B the
largest measured decode batch: interpolated costs count as measured) and at each measured
context; :mod:`specmodel.model.schedule` encodes its decisions and the engine's record in the
registry (:func:`specmodel.engines.engine_spec`) writes them in the engine's own flags.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from specmodel.engines import engine_names, engine_spec, engines_help
from specmodel.errors import SpecmodelError
from specmodel.io import atomic_write_json, loads_json, read_json
from specmodel.limits import MAX_BATCH, MAX_TP, bounded_int
from specmodel.model import schedule as sch
from specmodel.model.costs import measured_contexts
from specmodel.scenario.parse import parse_token_list
from specmodel.scenario.resolve import Scenario, serve_plan_for
from specmodel.schema.formats import SCHEDULE

#: vLLM's schedule is clipped at its --max-num-seqs; ours runs to this batch by default (k past
#: the measured batches is 0, and vLLM carries the last k on, so a larger engine limit is safe).
DEFAULT_MAX_NUM_SEQS = 1024


def schedule_options(f: Callable[..., Any]) -> Callable[..., Any]:
    opts = [
        click.option("--engine", type=click.Choice(engine_names()), default=None,
                     help=f"Write the plan as this engine's native schedule ({engines_help()}), one per context."),
        click.option("--export", "export_path", type=click.Path(dir_okay=False), default=None,
                     help="With --engine: write the schedule document (specmodel.schedule JSON) here."),
        click.option("--speculative-config", "vllm_base", default=None,
                     help="With --engine vllm: your speculative config JSON (method, model, ...); the schedule "
                          "fills num_speculative_tokens and the per-batch list. Default: method from the profile, "
                          "model from --drafter."),
        click.option("--drafter", default=None,
                     help="With --engine: the drafter model (path or hub id). A local directory is checked first "
                          "(check-drafter against --target): a FAIL refuses the schedule (BLOCKED)."),
        click.option("--target", "drafter_target", type=click.Path(), default=None,
                     help="With --drafter DIR: the target model's directory the drafter is checked against."),
        click.option("--max-num-seqs", type=bounded_int(1, MAX_BATCH), default=None,
                     help=f"With --engine: the engine's --max-num-seqs (the last batch the schedule covers; "
                          f"default {DEFAULT_MAX_NUM_SEQS} or the largest measured batch)."),
        click.option("--sglang-config-path", default="adaptive.json", show_default=True,
                     help="With --engine sglang: the path the flags name for the adaptive config file."),
        click.option("--dspark-tables", "dspark_dir", type=click.Path(file_okay=False), default=None,
                     help="With --engine sglang: also write SGLang's DSpark step-cost table (additive form, "
                          "--speculative-dspark-sps-table-path) per context band into this directory."),
        click.option("--serve-model", default=None,
                     help="With --engine: the model the engine serves; refused unless the profile was measured on it."),
        click.option("--serve-tp", type=bounded_int(1, MAX_TP), default=None,
                     help="With --engine: the engine's TP; refused unless the profile was measured at it."),
    ]
    return functools.reduce(lambda acc, o: o(acc), reversed(opts), f)


def _user_base(vllm_base: str | None) -> dict[str, Any] | None:
    if vllm_base is None:
        return None
    base = loads_json(vllm_base.encode(), "--speculative-config")
    if not isinstance(base, dict):
        raise SpecmodelError("--speculative-config: expected a JSON object")
    return base


def check_drafter_first(drafter: str | None, target: str | None) -> list[str]:
    """The drafter check before any schedule names the drafter (the one decision rule: a FAIL is
    BLOCKED, and a blocked drafter gets no schedule). Returns notes; refuses on FAIL."""
    from specmodel.model.decision import decide

    if drafter is None:
        if target is not None:
            raise SpecmodelError("--target: needs --drafter DIR (the drafter to check against it)")
        return []
    if not Path(drafter).is_dir():
        return [f"drafter {drafter} not checked: not a local directory (run specmodel check-drafter on its files)"]
    if target is None:
        raise SpecmodelError(f"--drafter {drafter}: a local drafter is checked before it is scheduled; pass --target "
                             "DIR (the target model's directory)")
    if not Path(target).is_dir():
        raise SpecmodelError(f"--target: {target}: not a directory")
    from specmodel.drafter.checks import check_drafter

    rep = check_drafter(drafter_dir=Path(drafter), target_dir=Path(target))
    fails = [f"FAIL {f.name}" for f in rep.findings if f.status == "FAIL"]
    d = decide(0.0, blocked_by=fails)
    if fails:
        raise SpecmodelError(f"--drafter {drafter}: {d.verdict}: {d.reason}; no schedule is written for a drafter "
                             "the check fails (see specmodel check-drafter)")
    return [f"drafter {drafter} checked against {target}: {rep.status}"]


def engine_schedule(sc: Scenario, *, engine: str, contexts: str | None, vllm_base: str | None, drafter: str | None,
                    max_num_seqs: int | None, sglang_config_path: str, serve_model: str | None,
                    serve_tp: int | None, drafter_target: str | None = None) -> dict[str, Any]:
    """The ``specmodel.schedule`` document for ``engine`` (see the module docstring)."""
    checked = check_drafter_first(drafter, drafter_target)
    prof = sc.profile
    tp_known = prof.source.tp_known
    model_name = prof.model.get("name") or prof.model.get("path")
    sch.check_target(profile_name=prof.name, profile_model=str(model_name) if model_name else None,
                     profile_tp=prof.tp, profile_tp_known=tp_known, serve_model=serve_model, serve_tp=serve_tp)
    top = max(r.batch for r in prof.rows("decode"))
    ctxs = parse_token_list(contexts, "--contexts") if contexts else list(measured_contexts(prof, "decode"))
    # vLLM drafts chains; SGLang's adaptive steps are topk 1 only too; SGLang's static flags may run trees
    spec = engine_spec(engine)
    # schedules switch k per batch over chains (vLLM drafts chains; SGLang's adaptive steps are
    # topk 1 only); an engine whose static flags may run trees gets a second, unrestricted plan
    chains = serve_plan_for(sc, list(range(1, top + 1)), ctxs, topks=(1,))
    last = max(max_num_seqs or DEFAULT_MAX_NUM_SEQS, top)
    base = spec.base_config(sc.spec.algorithm, _user_base(vllm_base), drafter)
    scheds = sch.context_schedules(chains.cells, max_batch=last, k0_runs_drafter=spec.k0_runs_drafter(base))
    static = None
    if spec.static_trees:
        full = serve_plan_for(sc, list(range(1, top + 1)), ctxs)
        static = sch.context_schedules(full.cells, max_batch=last, chains_only=False)
    notes = checked + [n for s in scheds for n in s.notes]
    notes += spec.schedule_notes(scheds, base)
    about = {"profile": prof.name, "profile_path": prof.path, "model": model_name, "tp": prof.tp if tp_known else None,
             "accept_source": sc.accept.dist.source, "accept_mean_tokens": sc.accept.dist.mean_tokens,
             "measured_batches": [1, top], "scenario_notes": list(sc.notes), "notes": notes}
    doc = sch.schedule_document(scheds, engine=spec, algorithm=chains.algorithm, base=base,
                                options={"sglang_config_path": sglang_config_path}, header=SCHEDULE.header(),
                                about=about, static=static)
    check_document(doc, "schedule")  # what we write must be what we accept back
    return doc


def format_schedule(doc: dict[str, Any]) -> str:
    out = ["", f"{doc['engine']} schedule (k = draft tokens per request per step; 0 = off; "
               f"encoding read from {doc['encoding_read_from']}):"]
    for b in doc["bands"]:
        until = f"..{b['until_tokens'] - 1}" if b["until_tokens"] is not None else " and above"
        off = b["switch_off_above"]
        off_txt = ("speculation off at every batch" if off == 0 else "never switches off" if off is None
                   else f"switch speculation off above batch {off}")
        out.append(f"  context {b['context_tokens']}{until} tokens ({off_txt}):")
        for r in b["ranges"]:
            sp = (f" predicted {r['speedup_min']:.2f}-{r['speedup_max']:.2f}x" if r["speedup_min"] is not None else "")
            out.append(f"    batch {r['start']:>4}-{r['end']:<5} k={r['k']}  ({r['basis']}){sp}")
        out.extend(engine_spec(doc["engine"]).format_band(b))
    out.extend(f"note: {n}" for n in doc["notes"])
    return "\n".join(out)


def check_document(doc: Any, where: str) -> None:
    """:func:`specmodel.model.schedule.check_schedule_document` with the registry's engines."""
    sch.check_schedule_document(doc, where, engine_spec, engine_names())


def export(doc: dict[str, Any], path: str) -> None:
    """Write atomically; never into the installed package, never over a file that is not a schedule."""
    p = Path(path)
    if p.resolve().is_relative_to(Path(sch.__file__).resolve().parents[1]):
        raise SpecmodelError(f"--export {path}: inside the specmodel package (shipped files are never written)")
    if p.exists():
        try:
            old = read_json(p)
        except SpecmodelError:
            old = None
        if not SCHEDULE.matches(old):
            raise SpecmodelError(f"--export {path}: exists and is not a {SCHEDULE.name} document; not overwritten")
    atomic_write_json(p, doc)


def dspark_tables(sc: Scenario, doc: dict[str, Any], directory: str) -> list[str]:
    """Write one SGLang DSpark step-cost table per band of ``doc`` (:mod:`specmodel.engines.sglang.dspark`)
    into ``directory``; record them in ``doc`` and return the lines to print."""
    from specmodel.engines.sglang.dspark import SOURCE, step_table
    from specmodel.units import ms

    if doc["engine"] != "sglang":
        raise SpecmodelError("--dspark-tables: needs --engine sglang (a table SGLang's DSpark planner reads)")
    d = Path(directory)
    if d.resolve().is_relative_to(Path(sch.__file__).resolve().parents[1]):
        raise SpecmodelError(f"--dspark-tables {directory}: inside the specmodel package (shipped files are never written)")
    batches = sorted({r.batch for r in sc.profile.rows("verify")})
    out, written = [], []
    for band in doc["bands"]:
        t = step_table(sc.profile, sc.spec, band["context_tokens"], batches)
        path = d / f"dspark-sps-ctx{t.context_tokens}.json"
        d.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, t.body)
        written.append({"context_tokens": t.context_tokens, "path": str(path), "batches": list(t.batches),
                        "cycle_s": list(t.cycles_s), "notes": list(t.notes)})
        out.append(f"DSpark step-cost table, context {t.context_tokens}: {path} (SGLang >= 0.5.23: "
                   f"--speculative-dspark-sps-table-path {path}); step at batch "
                   + ", ".join(f"{b}: {ms(c)}" for b, c in zip(t.batches, t.cycles_s, strict=True))
                   + f" (specmodel's cycle, {sc.spec.num_draft_tokens} tokens verified per request)")
        out.extend(f"  extrapolated: {n}" for n in t.notes)
    doc["dspark_tables"] = {"format_read_from": SOURCE, "tables": written}
    return out


#: the keyword arguments of :func:`engine_schedule` that come straight from :func:`schedule_options`
SCHEDULE_KWARGS = ("vllm_base", "drafter", "max_num_seqs", "sglang_config_path", "serve_model", "serve_tp",
                   "drafter_target")
