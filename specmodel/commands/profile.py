"""``specmodel profile``: measure decode / verify / draft / draft-extend forwards (and how much of
each is all-reduce) on a real tensor-parallel stack over torch.distributed.

Everything the user typed is validated here, before any rank starts (one line, exit 2). torch
is imported only when a run starts, never by ``specmodel predict``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any

import click

from specmodel.errors import SpecmodelError, require_finite
from specmodel.io import check_output_dir, confined_name
from specmodel.limits import (
    MAX_BATCH,
    MAX_CYCLES,
    MAX_DRAFT_TOKENS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_REPEATS,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
    MAX_WARMUP,
)
from specmodel.profile import configs as cfgs
from specmodel.profile.plan import (
    CPU_AR_SIZES,
    CPU_BATCHES,
    CPU_CONTEXTS,
    GPU_AR_SIZES,
    GPU_BATCHES,
    GPU_CONTEXTS,
    MAX_CONTEXT_TOKENS,  # the profiler's own bound (1M), tighter than specmodel.limits'
    SWEEP_KINDS,
    VERIFY_TOKENS,
    RunPlan,
    SpecLoopPlan,
    check_kinds,
    sweep_points,
)
from specmodel.schema.formats import PROFILE_RUN
from specmodel.schema.profile import SpecConfig

_SIZE_RE = re.compile(r"^(\d+)([kKmMgG]?)(i?[bB])?$")


def _ints(text: str | None, flag: str, default: tuple[int, ...], minimum: int = 1) -> tuple[int, ...]:
    if text is None:
        return default
    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        try:
            v = int(part) if len(part) <= 12 else MAX_BATCH + 1
        except ValueError:
            raise SpecmodelError(f"{flag}: expected comma-separated integers, got {text[:80]!r}") from None
        if v < minimum:
            raise SpecmodelError(f"{flag}: values must be >= {minimum}, got {v}")
        if v > MAX_BATCH:
            raise SpecmodelError(f"{flag}: values must be <= {MAX_BATCH}, got {part[:24]}")
        out.append(v)
    if not out:
        raise SpecmodelError(f"{flag}: expected at least one value")
    return tuple(sorted(set(out)))


def _sizes(text: str | None, default: tuple[int, ...]) -> tuple[int, ...]:
    """``4,1K,64K,4M`` (powers of 1024) or ``none``."""
    if text is None:
        return default
    if text.strip().lower() in ("none", "off", "0", ""):
        return ()
    out = []
    for part in text.replace(" ", "").split(","):
        m = _SIZE_RE.match(part)
        if not m:
            raise SpecmodelError(f"--allreduce-sizes: expected sizes like 4,1K,64K,4M, got {part!r}")
        mult = {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[m.group(2).lower()]
        v = int(m.group(1)[:13]) * mult
        if v > 1 << 34:  # 16 GiB: more than any GPU's all-reduce buffer
            raise SpecmodelError(f"--allreduce-sizes: sizes must be <= 16G, got {part[:24]!r}")
        if v < 1:
            raise SpecmodelError(f"--allreduce-sizes: sizes must be >= 1 byte, got {part!r}")
        out.append(v)
    return tuple(sorted(set(out)))


_CTX_RE = re.compile(r"^(\d+)([kKmM]?)$")
MAX_CONTEXTS = 16


def _contexts(text: str) -> tuple[int, ...]:
    """``0,4K,32K,128K`` (K = 1024, M = 1024²) → sorted distinct KV lengths in tokens."""
    from specmodel.profile.plan import MAX_CONTEXT_TOKENS

    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        m = _CTX_RE.match(part)
        if not m:
            raise SpecmodelError(f"--contexts: expected KV lengths in tokens like 0,4K,32K,128K, got {part!r}")
        v = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2).lower()]
        if v > MAX_CONTEXT_TOKENS:
            raise SpecmodelError(f"--contexts: {part} = {v} tokens is above the limit of {MAX_CONTEXT_TOKENS} (1M)")
        out.append(v)
    if not out:
        raise SpecmodelError("--contexts: expected at least one value")
    vals = tuple(sorted(set(out)))
    if len(vals) > MAX_CONTEXTS:
        raise SpecmodelError(f"--contexts: at most {MAX_CONTEXTS} values, got {len(vals)}")
    return vals


def _percent(text: str | None, flag: str, default: float) -> float:
    """``2`` or ``2%`` → 0.02."""
    if text is None:
        return default
    try:
        v = float(str(text).strip().rstrip("%"))
    except ValueError:
        raise SpecmodelError(f"{flag}: expected a percentage such as 2 or 2%, got {text!r}") from None
    if not (0.0 < v <= 100.0):
        raise SpecmodelError(f"{flag}: must be in (0, 100] %, got {text!r}")
    return v / 100.0


def _gib(n: float) -> str:
    return f"{n / 1024**3:.1f} GiB"


def default_name(tp: int, backend: str) -> str:
    host = re.sub(r"[^A-Za-z0-9._-]+", "-", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-tp{tp}-{backend}"


def _is_torchrun() -> bool:
    from specmodel.profile.launcher import CHILD_ENV

    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and CHILD_ENV not in os.environ


def build_plan(o: dict[str, Any]) -> tuple[RunPlan, Path, Any]:
    """Flags → a validated :class:`RunPlan`, the output directory and (for --spec-loop --profile)
    the profile to compare with. Every problem is a :class:`SpecmodelError`; everything the user
    typed is checked before torch is imported (a typo costs a fraction of a second)."""
    from specmodel.model.accept import from_mean
    from specmodel.profile.output import check_destination
    from specmodel.schema.profile import load_profile, resolve_profile_path

    # ---- flags that need nothing but themselves
    for flag, v, lo in (("--tp", o["tp"], 1), ("--warmup", o["warmup"], 0), ("--repeats", o["repeats"], 1),
                        ("--context-len", o["context_len"], 0), ("--cycles", o["cycles"], 1),
                        ("--min-passes", o["min_passes"], 1), ("--burst", o["burst"], 1),
                        ("--batch", o["batch"], 1), ("--layers", o["layers"], 1), ("--hidden", o["hidden"], 8)):
        if v is not None and v < lo:
            raise SpecmodelError(f"{flag}: must be >= {lo}, got {v}")
    # (upper bounds: click.IntRange(max=...) on each option, so --help states them)
    require_finite("--timeout", o["timeout"], minimum=0.0, strict_min=True)
    if o["name"] is not None:
        confined_name(o["name"], "--name")
    check_output_dir(o["out_dir"], "--out-dir")  # unwritable: refused now, not after the run
    if o["profile_path"] and not o["spec_loop"]:
        raise SpecmodelError("--profile: only with --spec-loop (to compare a measured loop with that profile)")
    if o["accept_len"] is not None and not o["spec_loop"]:
        raise SpecmodelError("--accept-len: only with --spec-loop (profiles do not depend on acceptance)")
    if o["contexts"] is not None and o["context_len"] is not None:
        raise SpecmodelError("--contexts: give either --contexts (a sweep) or --context-len (one context), not both")
    contexts_given = _contexts(o["contexts"]) if o["contexts"] is not None else None
    if o["profile_path"] and contexts_given is not None:
        raise SpecmodelError("--contexts: not with --profile (the loop runs at that profile's context)")
    ci_target = _percent(o["ci_target"], "--ci-target", 0.02)
    if o["time_budget"] is not None:
        require_finite("--time-budget", o["time_budget"], minimum=0.0, strict_min=True)
        if o["time_budget"] > 86400:
            raise SpecmodelError(f"--time-budget: at most 86400 s (a day), got {o['time_budget']:g}")
    batches = _ints(o["batches"], "--batches", ())
    verify_tokens = _ints(o["verify_tokens"], "--verify-tokens", ())
    sizes_given = _sizes(o["allreduce_sizes"], ()) if o["allreduce_sizes"] is not None else None
    kinds = tuple(k.strip() for k in (o["phases"] or ",".join(SWEEP_KINDS)).split(",") if k.strip())
    check_kinds(kinds)

    # ---- the model: a given profile's shapes, or a config.json / preset
    torchrun = _is_torchrun()
    world_env = int(os.environ["WORLD_SIZE"]) if torchrun else None
    given = None
    if o["profile_path"]:
        given = load_profile(resolve_profile_path(o["profile_path"]))
        if "target" not in given.model or "drafter" not in given.model:
            raise SpecmodelError(f"--profile: {given.path}: not written by `specmodel profile` (no model shapes to "
                                 "rebuild the same stack from)")
    else:
        shape, source = cfgs.load_shape(o["model_config"], o["preset"])
        drafter = cfgs.drafter_for(shape, o["draft_config"])

    # ---- the speculative shape and acceptance
    steps, topk, ndt = o["steps"], o["topk"], o["num_draft_tokens"]
    if given is not None:
        steps = steps or given.spec.steps
        topk = topk or given.spec.topk
        ndt = ndt or given.spec.num_draft_tokens
    steps, topk = steps or 3, topk or 1
    ndt = ndt or (steps + 1 if topk == 1 else min(steps * topk + 1, 8))
    SpecConfig(steps=steps, topk=topk, num_draft_tokens=ndt)  # validates the combination
    accept = None
    if o["spec_loop"]:
        acc = o["accept_len"] if o["accept_len"] is not None else min(3.0, steps + 1.0)
        accept = (acc, from_mean(acc, steps + 1, source=f"mean {acc:g}"))

    # ---- where it goes (an explicit --name is checked now, a default one once the backend is known)
    if o["name"] is not None and given is None:
        check_destination(Path(o["out_dir"]) / o["name"])

    # ---- ranks, backend, device (imports torch)
    from specmodel.profile.device import local_world_from_env, select

    tp = o["tp"] or world_env or (given.tp if given else None)
    if tp is None:
        from specmodel.profile.device import cuda_device_count

        tp = cuda_device_count() or 8
    if world_env is not None and tp != world_env:
        raise SpecmodelError(f"--tp {tp}: torchrun started WORLD_SIZE={world_env} ranks")
    if given is not None and tp != given.tp:
        raise SpecmodelError(f"--tp {tp}: profile {given.name} was measured at TP {given.tp}")
    placement = select(tp, o["backend"], local_world=local_world_from_env() if torchrun else None)
    cpu = placement.device == "cpu"
    dtype = o["dtype"] if o["dtype"] != "auto" else ("float32" if cpu else "bfloat16")

    if given is not None:
        contexts: tuple[int, ...] = (int(given.model.get("context_len", 256)),)
    elif contexts_given is not None:
        contexts = contexts_given
    elif o["context_len"] is not None:
        contexts = (o["context_len"],)
    else:
        contexts = CPU_CONTEXTS if cpu else GPU_CONTEXTS
    points = () if given is not None else sweep_points(
        kinds=kinds, batches=batches or (CPU_BATCHES if cpu else GPU_BATCHES),
        verify_tokens=verify_tokens or tuple(sorted({*VERIFY_TOKENS, ndt})), topk=topk, num_draft_tokens=ndt,
        contexts=contexts)
    loop = (o["batch"] or 1, contexts[0], max(ndt, topk, 1)) if accept is not None else None

    if given is not None:
        target = cfgs.ModelShape.from_dict(given.model["target"])
        drafter = cfgs.DrafterShape.from_dict(given.model["drafter"])
        scaling = dict(given.model.get("scaling") or {})
        source = str(given.model.get("config_source", given.name))
        dtype = str(given.model.get("dtype", dtype)) if o["dtype"] == "auto" else dtype
        context = int(given.model.get("context_len", 256))
    else:
        if o["full_size"]:
            target, drafter, scaling = cfgs.scale(shape, drafter, tp, layers=None, hidden=None, max_experts=None,
                                                  max_topk=None, max_vocab=None, reason="full size")
        elif cpu:
            target, drafter, scaling = cfgs.scale(
                shape, drafter, tp, layers=o["layers"] or cfgs.CPU_LAYERS, hidden=o["hidden"] or cfgs.CPU_HIDDEN,
                reason="CPU default: scaled down so the default sweep runs in minutes on a few cores "
                       "(--layers/--hidden/--full-size to change)")
        else:
            target, drafter, scaling = _fit_gpu(o, shape, drafter, tp, dtype, source, points, loop)
        context = contexts[0]
    cfgs.check_tp(target, drafter, tp, source)

    spec_loop = None
    if accept is not None:
        acc, dist = accept
        spec_loop = SpecLoopPlan(batch=o["batch"] or 1, cycles=o["cycles"] or (120 if cpu else 200),
                                 warmup=3 if cpu else 10, accept_probs=tuple(dist.probs), accept_len=acc,
                                 seed=o["seed"])
    sizes = () if given is not None else (sizes_given if sizes_given is not None else
                                          (CPU_AR_SIZES if cpu else GPU_AR_SIZES))

    name = o["name"] or (given.name + "-specloop" if given else default_name(tp, placement.backend))
    dest = Path(o["out_dir"]) / name
    if given is None:
        check_destination(dest)
    plan = RunPlan(
        name=name, tp=tp, backend=placement.backend, device=placement.device, dtype=dtype, target=target,
        drafter=drafter, scaling=scaling, model_source=source, steps=steps, topk=topk, num_draft_tokens=ndt,
        points=points, warmup=o["warmup"] if o["warmup"] is not None else (1 if cpu else 5),
        repeats=o["repeats"] or (4 if cpu else 10), allreduce_sizes=sizes,
        min_passes=o["min_passes"] if o["min_passes"] is not None else 6, ci_target_rel=ci_target,
        time_budget_s=float(o["time_budget"]) if o["time_budget"] is not None else (40.0 if cpu else 120.0),
        graphs=not cpu and not o["eager"], burst=o["burst"] or 1,
        allreduce_warmup=2 if cpu else 5, allreduce_repeats=8 if cpu else 20,
        allreduce_calls=4 if cpu else 20, context_len=context, contexts=contexts,
        seed=o["seed"], timeout_s=float(o["timeout"]), spec_loop=spec_loop,
    )
    return plan, dest, given


def _worst(points: tuple[Any, ...]) -> str:
    w = max(points, key=lambda p: p.kv_tokens) if points else None
    return f" (batch {w.batch} x context {w.context} tokens)" if w else ""


def _fit_gpu(o: dict[str, Any], shape: Any, drafter: Any, tp: int, dtype: str, source: str,
             points: tuple[Any, ...], loop: tuple[int, int, int] | None) -> tuple[Any, Any, dict[str, Any]]:
    """GPU sizing: the real hidden size, as many layers as fit next to the KV pool the sweep's
    largest (batch, context) needs; a sweep whose KV cache cannot fit is refused with the figure.
    Sized from this process's GPU; under torchrun rank 0's plan is the one every rank runs."""
    from specmodel.profile.device import free_memory_bytes_local
    from specmodel.profile.plan import kv_need

    elem = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    free = free_memory_bytes_local()
    t_slots, _ = kv_need(points, "target", loop)
    d_slots, _ = kv_need(points, "drafter", loop)
    layers = o["layers"]
    if layers is None:
        probe, _d, _s = cfgs.scale(shape, drafter, tp, layers=None, hidden=o["hidden"], max_experts=None,
                                   max_topk=None, max_vocab=None, reason="")
        layers = cfgs.layers_that_fit_with_kv(probe, tp, elem, free, t_slots)
        if layers < 1:
            per_layer, outside = cfgs.per_rank_weight_bytes(probe, tp, elem)
            kv1 = t_slots * cfgs.kv_bytes_per_token(probe, tp, elem)
            raise SpecmodelError(f"--contexts: not even one layer fits: the KV cache needs {_gib(kv1)} per layer per "
                                 f"GPU ({t_slots} token slots){_worst(points)}, weights {_gib(per_layer + outside)}, "
                                 f"{_gib(0.6 * free)} usable of {_gib(free)} free at --tp {tp}; pass smaller "
                                 "--contexts, --batches or --hidden")
    target, d, scaling = cfgs.scale(shape, drafter, tp, layers=layers, hidden=o["hidden"], max_experts=None,
                                    max_topk=None, max_vocab=None,
                                    reason="GPU: as many layers as fit in 60% of free GPU memory with the KV cache")
    per_layer, outside = cfgs.per_rank_weight_bytes(target, tp, elem)
    weights = per_layer * target.num_layers + outside
    kv = (t_slots * cfgs.kv_bytes_per_token(target, tp, elem) * target.num_layers
          + d_slots * cfgs.kv_bytes_per_token(d, tp, elem))
    if weights > 0.9 * free:
        raise SpecmodelError(f"--layers {target.num_layers}: the weights need {_gib(weights)} per GPU at --tp {tp}, "
                             f"{_gib(free)} free; pass fewer --layers or a smaller --hidden")
    if weights + kv > 0.9 * free:  # the rest: activations, NCCL buffers, CUDA graphs
        raise SpecmodelError(f"--contexts: the KV cache needs {_gib(kv)} per GPU{_worst(points)} over {target.num_layers} "
                             f"layers, {_gib(0.9 * free - weights)} free after {_gib(weights)} of weights; pass "
                             "smaller --contexts, --batches or --layers")
    return target, d, scaling


class _Progress:
    """A rich progress bar on a terminal; plain ``[i/n] label`` lines otherwise; nothing with --quiet."""

    def __init__(self, quiet: bool, total: int, title: str) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.task: Any = None
        self.t0 = time.monotonic()
        if quiet:
            return
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task(title + ": starting ranks", total=total)
        else:
            click.echo(f"{title}: starting ranks", err=True)

    def __call__(self, done: int, total: int, label: str) -> None:
        if self.quiet:
            return
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=label)
        else:
            click.echo(f"[{done + 1}/{total}] {label}  ({time.monotonic() - self.t0:.0f} s)", err=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _run_local(plan: RunPlan, quiet: bool) -> Any:
    from specmodel.profile import launcher

    title = f"specmodel profile {plan.name} (TP{plan.tp} {plan.backend})"
    prog = _Progress(quiet, len(plan.units()), title)
    try:
        return launcher.run(plan, timeout_s=plan.timeout_s, on_progress=prog)
    except launcher.RankFailed as exc:
        prog.close()
        logs = f" (every rank's output: {exc.log_dir})" if exc.log_dir else ""
        click.echo(f"specmodel: error: {exc}{logs}", err=True)
        raise click.exceptions.Exit(1) from None
    except KeyboardInterrupt:
        prog.close()
        click.echo(f"specmodel: interrupted: stopped all {plan.tp} ranks; nothing written", err=True)
        raise
    finally:
        prog.close()


def _finish(plan: RunPlan, dest: Path, given: Any, result: dict[str, Any], trace_dir: Path | None,
            wall_s: float, as_json: bool) -> None:
    from specmodel.profile.output import build_profile, compare_loop, format_comparison, format_summary, write_output

    loop: dict[str, Any] | None = result.get("spec_loop")
    if given is not None:  # compare with an existing profile; write nothing
        assert loop is not None
        against = compare_loop(given, loop)
        click.echo(json.dumps({**PROFILE_RUN.header(), "comparison": against}, indent=2) if as_json
                   else format_comparison(against))
        return
    overhead = loop["spec"]["overhead_s"] if loop else None
    extra: dict[str, Any] = {}
    comp: dict[str, Any] | None = None
    if loop:
        comp = compare_loop(build_profile(result, overhead_s=overhead), loop)
        comp["profile"] = str(dest)
        extra["specloop.json"] = comp
    profile = write_output(result, dest, trace_dir, overhead_s=overhead, extra=extra)
    if as_json:
        out = {**PROFILE_RUN.header(), "profile": str(dest), "wall_s": wall_s, "tp": profile.tp, "backend": profile.backend,
               "rows": result["rows"], "allreduce_points": result.get("allreduce_points"),
               "allreduce_fit": profile.allreduce_fit.to_dict() if profile.allreduce_fit else None,
               "scaling": plan.scaling}
        for r in out["rows"]:
            r.pop("per_rank", None)
        if comp is not None:
            out["comparison"] = comp
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(format_summary(profile, result, dest, wall_s))
    if comp is not None:
        click.echo(format_comparison(comp))


@click.command("profile")
@click.option("--tp", type=click.IntRange(max=MAX_TP), default=None, help="Ranks (tensor-parallel degree). Default: the GPUs present, else 8.")
@click.option("--backend", type=click.Choice(["auto", "gloo", "nccl"]), default="auto", show_default=True,
              help="nccl when --tp CUDA GPUs are present, else gloo on the CPU.")
@click.option("--name", default=None, help="Profile name: writes OUT_DIR/NAME/ (default <host>-tp<N>-<backend>).")
@click.option("--out-dir", default="profiles", show_default=True, type=click.Path(file_okay=False))
@click.option("--model-config", type=click.Path(), default=None,
              help="Hugging Face config.json (or its directory): DeepSeek-V3 / Kimi-K2(.5) / Llama / Qwen families.")
@click.option("--preset", default=None, help=f"Named model ({', '.join(sorted(cfgs.PRESETS))}); default {cfgs.DEFAULT_PRESET}.")
@click.option("--draft-config", type=click.Path(), default=None, help="The EAGLE-3 drafter's config.json (default: derived).")
@click.option("--layers", type=click.IntRange(max=MAX_LAYERS), default=None, help="Target layers to build (CPU default 4; GPU: as many as fit).")
@click.option("--hidden", type=click.IntRange(max=MAX_HIDDEN), default=None, help="Hidden size to build (CPU default 512; GPU: the model's).")
@click.option("--full-size", is_flag=True, help="Build the model at its real size (no scaling).")
@click.option("--batches", default=None, help="Batch sizes to sweep (default 1,2,4,8 on CPU; 1..64 on GPU).")
@click.option("--verify-tokens", default=None, help="Tokens per request for verify forwards at the smallest batch (default 2,4,8 + --num-draft-tokens; other batches: --num-draft-tokens).")
@click.option("--phases", default=None, help="Forward kinds to measure (default decode,verify,draft,draft_extend).")
@click.option("--steps", type=click.IntRange(max=MAX_STEPS), default=None, help="Draft depth (--speculative-num-steps); default 3.")
@click.option("--topk", type=click.IntRange(max=MAX_TOPK), default=None, help="Draft branching (--speculative-eagle-topk); default 1.")
@click.option("--num-draft-tokens", type=click.IntRange(max=MAX_DRAFT_TOKENS), default=None, help="Tokens verified per request; default steps+1.")
@click.option("--context-len", type=click.IntRange(max=MAX_CONTEXT_TOKENS), default=None, help="One KV-cache length per request, tokens (same as --contexts N).")
@click.option("--contexts", default=None,
              help="KV lengths per request to sweep, e.g. 0,4K,32K,128K (K = 1024); every phase at each "
                   "(default 256,4K on CPU; 1K,8K,32K on GPU).")
@click.option("--eager", is_flag=True, help="GPU: time eager forwards (default: CUDA-graph replays, as SGLang runs).")
@click.option("--ci-target", default=None,
              help="Time each point until its 95% interval is within this % of its median (default 2).")
@click.option("--time-budget", type=float, default=None,
              help="Seconds for the interleaved timing passes (default 40 CPU, 120 GPU); stops before the target if spent.")
@click.option("--min-passes", type=click.IntRange(max=MAX_REPEATS), default=None, help="Timing passes before the interval is judged (default 6).")
@click.option("--burst", type=click.IntRange(max=MAX_REPEATS), default=None,
              help="Forwards run back to back per timed sample, as a serving loop runs them (default 1).")
@click.option("--warmup", type=click.IntRange(max=MAX_WARMUP), default=None, help="Unmeasured forwards per point (default 2 CPU, 5 GPU).")
@click.option("--repeats", type=click.IntRange(max=MAX_REPEATS), default=None, help="Profiled forwards per point, for the all-reduce share and the trace (default 4 CPU, 10 GPU).")
@click.option("--allreduce-sizes", default=None, help="Pure all-reduce sweep sizes, e.g. 4,1K,64K,4M, or 'none'.")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
              show_default=True, help="auto: float32 on CPU, bfloat16 on GPU.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Stop when no rank makes progress for this many seconds (crash or hang); name the rank.")
@click.option("--spec-loop", is_flag=True, help="Also run a real speculative loop and compare its tok/s with the prediction.")
@click.option("--accept-len", type=float, default=None, help="Spec loop: mean tokens per verify step drawn (default 3.0).")
@click.option("--batch", type=click.IntRange(max=MAX_BATCH), default=None, help="Spec loop: concurrent requests (default 1).")
@click.option("--cycles", type=click.IntRange(max=MAX_CYCLES), default=None, help="Spec loop: measured cycles (default 120 CPU, 200 GPU), in 10 rounds alternating with the baseline.")
@click.option("--profile", "profile_path", type=click.Path(), default=None,
              help="Spec loop: compare with this existing profile instead of measuring a new one.")
@click.option("--quiet", is_flag=True, help="No progress output.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def profile_cmd(**o: Any) -> None:
    """Measure what a verify, a decode and a draft step cost on this box, and how much is all-reduce.

    Starts --tp ranks on this host (nccl on GPUs, else gloo on the CPU) running a tensor-parallel
    stack with the target's all-reduce structure, and writes OUT_DIR/NAME/profile.json (+ costs.csv,
    per-rank Chrome traces) for `specmodel predict --profile OUT_DIR/NAME`. Under torchrun
    (RANK/WORLD_SIZE set) each process runs one rank. See docs/profile.md.

    Example: specmodel profile --tp 8 --name cpu-demo
    """
    plan, dest, given = build_plan(o)
    if _is_torchrun():
        _torchrun(plan, dest, given, o["as_json"])
        return
    run = _run_local(plan, o["quiet"])
    try:
        _finish(plan, dest, given, run.result, run.trace_dir, run.wall_s, o["as_json"])
    finally:
        shutil.rmtree(run.run_dir, ignore_errors=True)


def _torchrun(plan: RunPlan, dest: Path, given: Any, as_json: bool) -> None:
    """Under torchrun: this process is one rank; rank 0 writes the output."""
    from specmodel.profile.worker import run_rank

    t0 = time.monotonic()

    def write(result: dict[str, Any], trace_dir: Path) -> None:
        _finish(plan, dest, given, result, trace_dir, time.monotonic() - t0, as_json)

    code = run_rank(plan, run_dir=None, board_path=None, write_result=write)
    if code != 0:
        click.echo(f"specmodel: error: rank {os.environ.get('RANK')} failed (exit {code})", err=True)
        raise click.exceptions.Exit(1)
