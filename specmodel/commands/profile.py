"""``specmodel profile``: measure decode / verify / draft / draft-extend forwards (and how much of
each is all-reduce) on a real tensor-parallel stack over torch.distributed.

Everything the user typed is validated here, before any rank starts (one line, exit 2). torch
is imported only when a run starts, never by ``specmodel predict``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from specmodel.commands.profile_plan import build_plan
from specmodel.errors import Interrupted, SpecmodelError
from specmodel.limits import (
    MAX_BATCH,
    MAX_CYCLES,
    MAX_DRAFT_TOKENS,
    MAX_HIDDEN,
    MAX_LAYERS,
    MAX_PROFILE_CONTEXT_TOKENS,
    MAX_REPEATS,
    MAX_STEPS,
    MAX_TOPK,
    MAX_TP,
    MAX_WARMUP,
)
from specmodel.profile import configs as cfgs
from specmodel.profile.plan import (
    CPU_DEFAULTS,
    GPU_DEFAULTS,
    SWEEP_KINDS,
    VERIFY_TOKENS,
    RunPlan,
    default_help,
    is_torchrun,
)
from specmodel.schema.formats import PROFILE_RUN

if TYPE_CHECKING:
    from specmodel.profile.result import RunResult

_MODELS = "the model's"


class _Progress:
    """A rich progress bar on a terminal; plain ``[i/n] label`` lines otherwise; nothing with --quiet.

    Every line says the units done out of the total and an estimate of the time left (the
    elapsed time since the first unit scaled by the plan's unit weights still to run, so a
    target forward counts more than a drafter one); :meth:`took` says where the time went."""

    def __init__(self, quiet: bool, plan: RunPlan, title: str) -> None:
        self.quiet = quiet
        self.bar: Any = None
        self.task: Any = None
        self.t0 = time.monotonic()
        self.units = plan.units()
        self.weights = plan.unit_weights()
        self.n_points = len(plan.points)
        self.started: dict[int, float] = {}  # unit -> when it started (monotonic)
        if quiet:
            return
        total = len(self.units)
        if sys.stderr.isatty():
            from rich.console import Console
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), TextColumn("{task.fields[left]}"), console=Console(stderr=True),
                                transient=True)
            self.bar.start()
            self.task = self.bar.add_task(title + ": starting ranks", total=total, left="")
        else:
            click.echo(f"{title}: starting ranks", err=True)

    def left_s(self, unit: int, now: float) -> float | None:
        """Seconds left once ``unit`` starts: the rate of the units done so far (from the first
        one seen to start, so the ranks' start-up is not counted as work; a unit shorter than a
        poll may go unseen) over the weight still to run."""
        if not self.started:
            return None
        u0 = min(self.started)
        first = self.started[u0]
        done = sum(self.weights[u0:unit])
        if done <= 0 or now <= first:
            return None
        return (now - first) / done * sum(self.weights[unit:])

    def __call__(self, done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if 0 <= done < len(self.units):
            self.started.setdefault(done, now)
        if self.quiet:
            return
        left = self.left_s(done, now)
        eta = f", ~{left:.0f} s left" if left is not None else ""
        if self.bar is not None:
            self.bar.update(self.task, completed=done, description=label, left=eta.lstrip(", "))
        else:
            click.echo(f"[{done + 1}/{total}] {label}  ({now - self.t0:.0f} s{eta})", err=True)

    def took(self, ranks_done: float, end: float) -> str:
        """``95 s: start-up 8 s, 26 cells 50 s, timing passes 25 s, cycle overhead 2 s, 6 all-reduce
        sizes 5 s, writing 2 s``: the wall time by stage, each from its first unit's start to the next
        stage's (the last one until the ranks handed back their results)."""
        first_seen: dict[str, float] = {}  # (a unit shorter than a poll may go unseen: the stage's first seen)
        for i, u in enumerate(self.units):
            stage = ("cells" if i < self.n_points else "timing passes" if u == "interleaved timing passes"
                     else "cycle overhead" if u == "cycle overhead"
                     else "all-reduce sizes" if u.startswith("all-reduce") else "spec loop")
            if i in self.started and stage not in first_seen:
                first_seen[stage] = self.started[i]
        marks = sorted((t, stage) for stage, t in first_seen.items())
        counts = {"cells": self.n_points, "all-reduce sizes": sum(u.startswith("all-reduce") for u in self.units)}
        parts = [("start-up", (marks[0][0] if marks else ranks_done) - self.t0)]
        for j, (t, stage) in enumerate(marks):
            t_next = marks[j + 1][0] if j + 1 < len(marks) else ranks_done
            parts.append((f"{counts[stage]} {stage}" if stage in counts else stage, t_next - t))
        parts.append(("writing", end - ranks_done))
        return f"{end - self.t0:.0f} s: " + ", ".join(f"{n} {max(s, 0.0):.0f} s" for n, s in parts)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None


def _run_local(plan: RunPlan, quiet: bool) -> tuple[Any, _Progress]:
    from specmodel.profile import launcher

    title = f"specmodel profile {plan.name} (TP{plan.tp} {plan.backend})"
    prog = _Progress(quiet, plan, title)
    try:
        return launcher.run(plan, timeout_s=plan.timeout_s, on_progress=prog), prog
    except launcher.RankFailed as exc:
        prog.close()
        logs = f" (every rank's output: {exc.log_dir})" if exc.log_dir else ""
        click.echo(f"specmodel: error: {exc}{logs}", err=True)
        raise click.exceptions.Exit(1) from None
    except KeyboardInterrupt:
        prog.close()
        raise Interrupted(f"stopped all {plan.tp} ranks; nothing written") from None
    finally:
        prog.close()


def _finish(plan: RunPlan, dest: Path, given: Any, result: RunResult, trace_dir: Path | None,
            wall_s: float, as_json: bool, took: Any = None) -> None:
    """Write (or compare) and print; ``took()``: the final line's time by stage (local runs)."""
    from specmodel.profile.output import build_profile, compare_loop, format_comparison, format_summary, write_output

    loop = result.spec_loop
    if given is not None:  # compare with an existing profile; write nothing
        assert loop is not None
        against = compare_loop(given, loop)
        click.echo(json.dumps({**PROFILE_RUN.header(), "comparison": against}, indent=2) if as_json
                   else format_comparison(against))
        if took is not None and not as_json:
            click.echo(f"took         {took()}")
        return
    overhead = loop.spec.overhead_s if loop else None
    extra: dict[str, Any] = {}
    comp: dict[str, Any] | None = None
    if loop:
        comp = compare_loop(build_profile(result, overhead_s=overhead), loop)
        comp["profile"] = str(dest)
        extra["specloop.json"] = comp
    profile = write_output(result, dest, trace_dir, overhead_s=overhead, extra=extra)
    if as_json:
        out = {**PROFILE_RUN.header(), "profile": str(dest), "wall_s": wall_s, "tp": profile.tp, "backend": profile.backend,
               "rows": [r.to_dict(per_rank=False) for r in result.rows],
               "allreduce_points": [dataclasses.asdict(a) for a in result.allreduce_points],
               "allreduce_fit": profile.allreduce_fit.to_dict() if profile.allreduce_fit else None,
               "scaling": plan.scaling}
        if comp is not None:
            out["comparison"] = comp
        click.echo(json.dumps(out, indent=2))
        return
    click.echo(format_summary(profile, result, dest, wall_s))
    if comp is not None:
        click.echo(format_comparison(comp))
    if took is not None:
        click.echo(f"took         {took()}")


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
@click.option("--layers", type=click.IntRange(max=MAX_LAYERS), default=None, help=f"Target layers to build ({default_help('layers', none='as many as fit')}).")
@click.option("--hidden", type=click.IntRange(max=MAX_HIDDEN), default=None, help=f"Hidden size to build ({default_help('hidden', none=_MODELS)}).")
@click.option("--full-size", is_flag=True, help="Build the model at its real size (no scaling).")
@click.option("--batches", default=None, help=f"Batch sizes to sweep ({default_help('batches')}).")
@click.option("--verify-tokens", default=None,
              help="Tokens per request for verify forwards at the smallest batch (default "
                   f"{','.join(map(str, VERIFY_TOKENS))} + --num-draft-tokens; other batches: --num-draft-tokens).")
@click.option("--phases", default=None, help=f"Forward kinds to measure (default {','.join(SWEEP_KINDS)}).")
@click.option("--steps", type=click.IntRange(max=MAX_STEPS), default=None, help=f"Draft depth (--speculative-num-steps); {default_help('steps')}.")
@click.option("--topk", type=click.IntRange(max=MAX_TOPK), default=None, help=f"Draft branching (--speculative-eagle-topk); {default_help('topk')}.")
@click.option("--num-draft-tokens", type=click.IntRange(max=MAX_DRAFT_TOKENS), default=None, help="Tokens verified per request; default steps+1.")
@click.option("--context-len", type=click.IntRange(max=MAX_PROFILE_CONTEXT_TOKENS), default=None, help="One KV-cache length per request, tokens (same as --contexts N).")
@click.option("--contexts", default=None,
              help="KV lengths per request to sweep, e.g. 0,4K,32K,128K (K = 1024); every phase at each "
                   f"({default_help('contexts')}).")
@click.option("--eager", is_flag=True, help="GPU: time eager forwards (default: CUDA-graph replays, as SGLang runs).")
@click.option("--ci-target", default=None,
              help="Time each point until its 95% interval is within this % of its median "
                   f"({default_help('ci_target_rel', fmt=lambda v: f'{v * 100:g}')}).")
@click.option("--time-budget", type=float, default=None,
              help=f"Seconds for the interleaved timing passes ({default_help('time_budget_s')}); stops before the "
                   "target if spent.")
@click.option("--min-passes", type=click.IntRange(max=MAX_REPEATS), default=None, help=f"Timing passes before the interval is judged ({default_help('min_passes')}).")
@click.option("--burst", type=click.IntRange(max=MAX_REPEATS), default=None,
              help=f"Forwards run back to back per timed sample, as a serving loop runs them ({default_help('burst')}).")
@click.option("--warmup", type=click.IntRange(max=MAX_WARMUP), default=None, help=f"Unmeasured forwards per point ({default_help('warmup')}).")
@click.option("--repeats", type=click.IntRange(max=MAX_REPEATS), default=None, help=f"Profiled forwards per point, for the all-reduce share and the trace ({default_help('repeats')}).")
@click.option("--allreduce-sizes", default=None, help="Pure all-reduce sweep sizes, e.g. 4,1K,64K,4M, or 'none'.")
@click.option("--dtype", type=click.Choice(["auto", "float32", "bfloat16", "float16"]), default="auto",
              show_default=True, help=f"auto: {CPU_DEFAULTS.dtype} on CPU, {GPU_DEFAULTS.dtype} on GPU.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--timeout", type=float, default=300.0, show_default=True,
              help="Stop when no rank makes progress for this many seconds (crash or hang); name the rank.")
@click.option("--spec-loop", is_flag=True, help="Also run a real speculative loop and compare its tok/s with the prediction.")
@click.option("--accept-len", type=float, default=None, help=f"Spec loop: mean tokens per verify step drawn ({default_help('loop_accept_len', fmt=lambda v: f'{v:.1f}')}, at most steps + 1).")
@click.option("--batch", type=click.IntRange(max=MAX_BATCH), default=None, help=f"Spec loop: concurrent requests ({default_help('loop_batch')}).")
@click.option("--cycles", type=click.IntRange(max=MAX_CYCLES), default=None, help=f"Spec loop: cycles measured before its interval is judged ({default_help('cycles')}), in chunks "
                   f"alternating with as many baseline steps (cycles per chunk: {default_help('loop_cycles_per_round')}).")
@click.option("--loop-budget", type=float, default=None,
              help=f"Spec loop: seconds it may add rounds after --cycles until its speedup's 95% interval is within "
                   f"--ci-target ({default_help('loop_budget_s')}; 0: exactly --cycles).")
@click.option("--overhead-cycles", type=click.IntRange(min=0, max=MAX_CYCLES), default=None,
              help="Real speculative cycles timed after the sweep for the host work between a cycle's forwards "
                   "(the profile's overhead_s; default 12; 0: none, overhead_s 0).")
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
    _check_extras_before_plan()
    plan, dest, given = build_plan(o)
    _note_missing_gpu_extra(plan)
    if is_torchrun():
        _torchrun(plan, dest, given, o["as_json"])
        return
    run, prog = _run_local(plan, o["quiet"])
    ranks_done = time.monotonic()
    try:
        _finish(plan, dest, given, run.result, run.trace_dir, run.wall_s, o["as_json"],
                took=lambda: prog.took(ranks_done, time.monotonic()))
    finally:
        shutil.rmtree(run.run_dir, ignore_errors=True)


#: what ``pip install`` names for the profiler's imports (pyproject.toml's [project.optional-dependencies])
PROFILE_EXTRA = "specmodel[profile]"
GPU_EXTRA = "specmodel[gpu]"


def _check_extras_before_plan() -> None:
    """torch (the ``profile`` extra) is what every rank imports first: without it the ranks would start,
    fail one by one and be reported as a crash. Asked of the import system (``find_spec``), not imported:
    the plan imports torch itself where it needs it, and this costs nothing on a box that has it."""
    if importlib.util.find_spec("torch") is None:
        raise SpecmodelError(f"profile needs torch, which is not installed in {sys.executable}: "
                             f"pip install '{PROFILE_EXTRA}' (a GPU box: its CUDA torch first, then the extra)")


def _note_missing_gpu_extra(plan: RunPlan) -> None:
    """A GPU run without NVML still measures; only the GPUs' links (PCIe generation and width, NVLink,
    peer-to-peer: profile/hardware.py) go into the profile as unknown. Said once, before the ranks start."""
    if plan.backend == "nccl" and importlib.util.find_spec("pynvml") is None and os.environ.get("RANK", "0") == "0":
        click.echo(f"note: pynvml is not installed: this GPU profile records the GPUs' links (PCIe, NVLink, "
                   f"peer-to-peer) as unknown; pip install '{GPU_EXTRA}' to record them", err=True)


def _torchrun(plan: RunPlan, dest: Path, given: Any, as_json: bool) -> None:
    """Under torchrun: this process is one rank; rank 0 writes the output."""
    from specmodel.profile.worker import run_rank

    t0 = time.monotonic()

    def write(result: RunResult, trace_dir: Path) -> None:
        _finish(plan, dest, given, result, trace_dir, time.monotonic() - t0, as_json)

    code = run_rank(plan, run_dir=None, board_path=None, write_result=write)
    if code != 0:
        click.echo(f"specmodel: error: rank {os.environ.get('RANK')} failed (exit {code})", err=True)
        raise click.exceptions.Exit(1)
