"""``specmodel profile``'s options -> a validated :class:`~specmodel.profile.plan.RunPlan`, the
output directory and (for ``--spec-loop --profile``) the profile to compare with: every value the
user typed is checked here before torch is imported (a typo costs a fraction of a second), the
GPU's memory sizes the stack.
"""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError, require_finite
from specmodel.io import check_output_dir, confined_name
from specmodel.limits import MAX_BATCH, MAX_CONTEXTS, MAX_PROFILE_CONTEXT_TOKENS
from specmodel.model.memory import kv_bytes_per_token, layers_that_fit_with_kv, per_rank_weight_bytes
from specmodel.profile import configs as cfgs
from specmodel.profile.plan import (
    CPU_DEFAULTS,
    OVERHEAD_CYCLES,
    SWEEP_KINDS,
    VERIFY_TOKENS,
    RunPlan,
    SpecLoopPlan,
    check_kinds,
    defaults_for,
    is_torchrun,
    kv_need,
    sweep_points,
)
from specmodel.schema.costrows import SpecConfig
from specmodel.schema.phases import default_num_draft_tokens
from specmodel.schema.shapes import DrafterShape, ModelShape
from specmodel.units import gib

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


def _contexts(text: str) -> tuple[int, ...]:
    """``0,4K,32K,128K`` (K = 1024, M = 1024²) → sorted distinct KV lengths in tokens."""
    out = []
    for part in text.replace(" ", "").split(","):
        if not part:
            continue
        m = _CTX_RE.match(part)
        if not m:
            raise SpecmodelError(f"--contexts: expected KV lengths in tokens like 0,4K,32K,128K, got {part!r}")
        v = int(m.group(1)) * {"": 1, "k": 1024, "m": 1024**2}[m.group(2).lower()]
        if v > MAX_PROFILE_CONTEXT_TOKENS:
            raise SpecmodelError(f"--contexts: {part} = {v} tokens is above the limit of {MAX_PROFILE_CONTEXT_TOKENS} (1M)")
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


def default_name(tp: int, backend: str) -> str:
    host = re.sub(r"[^A-Za-z0-9._-]+", "-", socket.gethostname().split(".")[0]) or "host"
    return f"{host}-tp{tp}-{backend}"


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
    ci_target = _percent(o["ci_target"], "--ci-target", CPU_DEFAULTS.ci_target_rel)
    if o.get("loop_budget") is not None:
        require_finite("--loop-budget", o["loop_budget"], minimum=0.0)
        if o["loop_budget"] > 86400:
            raise SpecmodelError(f"--loop-budget: at most 86400 s (a day), got {o['loop_budget']:g}")
        if not o["spec_loop"]:
            raise SpecmodelError("--loop-budget: only with --spec-loop")
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
    torchrun = is_torchrun()
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
    steps, topk = steps or CPU_DEFAULTS.steps, topk or CPU_DEFAULTS.topk  # (the same on a GPU)
    ndt = ndt or default_num_draft_tokens(steps, topk)
    SpecConfig(steps=steps, topk=topk, num_draft_tokens=ndt)  # validates the combination
    accept = None
    if o["spec_loop"]:
        acc = o["accept_len"] if o["accept_len"] is not None else min(CPU_DEFAULTS.loop_accept_len, steps + 1.0)
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
    d = defaults_for(cpu)
    dtype = o["dtype"] if o["dtype"] != "auto" else d.dtype

    if given is not None:
        contexts: tuple[int, ...] = (int(given.model.get("context_len", 256)),)
    elif contexts_given is not None:
        contexts = contexts_given
    elif o["context_len"] is not None:
        contexts = (o["context_len"],)
    else:
        contexts = d.contexts
    points = () if given is not None else sweep_points(
        kinds=kinds, batches=batches or d.batches,
        verify_tokens=verify_tokens or tuple(sorted({*VERIFY_TOKENS, ndt})), topk=topk, num_draft_tokens=ndt,
        contexts=contexts)
    loop = (o["batch"] or d.loop_batch, contexts[0], max(ndt, topk, 1)) if accept is not None else None

    if given is not None:
        target = ModelShape.from_dict(given.model["target"])
        drafter = DrafterShape.from_dict(given.model["drafter"])
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
                shape, drafter, tp, layers=o["layers"] or d.layers, hidden=o["hidden"] or d.hidden,
                reason="CPU default: scaled down so the default sweep runs in minutes on a few cores "
                       "(--layers/--hidden/--full-size to change)")
        else:
            target, drafter, scaling = _fit_gpu(o, shape, drafter, tp, dtype, source, points, loop)
        context = contexts[0]
    cfgs.check_tp(target, drafter, tp, source)

    spec_loop = None
    if accept is not None:
        acc, dist = accept
        spec_loop = SpecLoopPlan(batch=o["batch"] or d.loop_batch, cycles=o["cycles"] or d.cycles,
                                 warmup=d.loop_warmup, accept_probs=tuple(dist.probs), accept_len=acc,
                                 seed=o["seed"], ci_target_rel=ci_target, cycles_per_round=d.loop_cycles_per_round,
                                 budget_s=float(o["loop_budget"]) if o.get("loop_budget") is not None
                                 else d.loop_budget_s)
    sizes = () if given is not None else (sizes_given if sizes_given is not None else d.allreduce_sizes)

    name = o["name"] or (given.name + "-specloop" if given else default_name(tp, placement.backend))
    dest = Path(o["out_dir"]) / name
    if given is None:
        check_destination(dest)
    plan = RunPlan(
        name=name, tp=tp, backend=placement.backend, device=placement.device, dtype=dtype, target=target,
        drafter=drafter, scaling=scaling, model_source=source, steps=steps, topk=topk, num_draft_tokens=ndt,
        points=points, warmup=o["warmup"] if o["warmup"] is not None else d.warmup,
        repeats=o["repeats"] or d.repeats, allreduce_sizes=sizes,
        min_passes=o["min_passes"] if o["min_passes"] is not None else d.min_passes, ci_target_rel=ci_target,
        time_budget_s=float(o["time_budget"]) if o["time_budget"] is not None else d.time_budget_s,
        graphs=not cpu and not o["eager"], burst=o["burst"] or d.burst,
        allreduce_warmup=d.allreduce_warmup, allreduce_repeats=d.allreduce_repeats,
        allreduce_calls=d.allreduce_calls, context_len=context, contexts=contexts,
        seed=o["seed"], timeout_s=float(o["timeout"]), spec_loop=spec_loop,
        overhead_cycles=o["overhead_cycles"] if o.get("overhead_cycles") is not None else OVERHEAD_CYCLES,
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
    elem = {"float32": 4, "bfloat16": 2, "float16": 2}[dtype]
    free = free_memory_bytes_local()
    t_slots, _ = kv_need(points, "target", loop)
    d_slots, _ = kv_need(points, "drafter", loop)
    layers = o["layers"]
    if layers is None:
        probe, _d, _s = cfgs.scale(shape, drafter, tp, layers=None, hidden=o["hidden"], max_experts=None,
                                   max_topk=None, max_vocab=None, reason="")
        layers = layers_that_fit_with_kv(probe, tp, elem, free, t_slots)
        if layers < 1:
            per_layer, outside = per_rank_weight_bytes(probe, tp, elem)
            kv1 = t_slots * kv_bytes_per_token(probe, tp, elem)
            raise SpecmodelError(f"--contexts: not even one layer fits: the KV cache needs {gib(kv1)} per layer per "
                                 f"GPU ({t_slots} token slots){_worst(points)}, weights {gib(per_layer + outside)}, "
                                 f"{gib(0.6 * free)} usable of {gib(free)} free at --tp {tp}; pass smaller "
                                 "--contexts, --batches or --hidden")
    target, d, scaling = cfgs.scale(shape, drafter, tp, layers=layers, hidden=o["hidden"], max_experts=None,
                                    max_topk=None, max_vocab=None,
                                    reason="GPU: as many layers as fit in 60% of free GPU memory with the KV cache")
    per_layer, outside = per_rank_weight_bytes(target, tp, elem)
    weights = per_layer * target.num_layers + outside
    kv = (t_slots * kv_bytes_per_token(target, tp, elem) * target.num_layers
          + d_slots * kv_bytes_per_token(d, tp, elem))
    if weights > 0.9 * free:
        raise SpecmodelError(f"--layers {target.num_layers}: the weights need {gib(weights)} per GPU at --tp {tp}, "
                             f"{gib(free)} free; pass fewer --layers or a smaller --hidden")
    if weights + kv > 0.9 * free:  # the rest: activations, NCCL buffers, CUDA graphs
        raise SpecmodelError(f"--contexts: the KV cache needs {gib(kv)} per GPU{_worst(points)} over {target.num_layers} "
                             f"layers, {gib(0.9 * free - weights)} free after {gib(weights)} of weights; pass "
                             "smaller --contexts, --batches or --layers")
    return target, d, scaling
