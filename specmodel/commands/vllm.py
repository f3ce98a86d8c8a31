"""``specmodel vllm``: run a vLLM server with the step hook, or turn its logs into a profile.

    specmodel vllm --out runs/spec -- python -m vllm.entrypoints.openai.api_server --model M \\
        --tensor-parallel-size 2 --speculative-config '{"method":"ngram","num_speculative_tokens":3}'
    specmodel vllm --summarize runs/base --summarize runs/spec -o profiles/my-box

The mirror of ``specmodel sglang`` (same shim, same ``--out`` rule, same exit status), plus a
bounded health wait and the server's last ``/metrics`` page: the run and the summary are vLLM's
(:mod:`specmodel.engines.vllm.run`); this is the command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from specmodel.commands.hook_options import check_call, hook_options, run_check
from specmodel.engines.hook.run import count_records
from specmodel.engines.vllm import run
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_CAPTURE_STEPS


@click.command("vllm", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@hook_options("vllm-forward",
              click.option("--health-timeout", "health_timeout_s", type=click.FloatRange(min=1), default=900.0,
                           show_default=True,
                           help="Seconds the server may take to answer /health before it is stopped (exit 2)."))
@click.option("--capture-steps", type=click.IntRange(min=0, max=MAX_CAPTURE_STEPS), default=None,
              help="Record N cycle steps (decode/verify with their proposal) per worker with torch.profiler into "
                   "DIR/capture/ after a few warm-up steps: the all-reduce share where the hook's wrapper cannot see "
                   "it (CUDA-graph replays). 0: off. Default: on (8) where a worker runs CUDA graphs, off on the "
                   "CPU and in eager mode.")
@click.option("--min-samples", type=click.IntRange(min=1, max=1_000_000), default=None,
              help="With --summarize: leave out (kind, batch, tokens) cells seen fewer times per rank "
                   "(ramp steps) [default: 5].")
@click.option("--no-hook", "no_hook", is_flag=True, default=False,
              help="Run the server with no specmodel code inside it (no shim on its PYTHONPATH): the profile comes "
                   "from vLLM's own step log (--enable-logging-iteration-details, kept in DIR/server.log). It cannot "
                   "give the all-reduce split, the draft/verify split inside a step, or a row's context.")
@click.option("--engine-log", "engine_log", is_flag=True, default=None,
              help="With --summarize: build the profile from vLLM's own step log (DIR/server.log) even where the "
                   "hook's rank files are there (the hook's rows then only give the per-row agreement note).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def vllm_cmd(ctx: click.Context, out_dir: Path, health_timeout_s: float, summarize_dirs: tuple[Path, ...],
             output: Path | None, name: str | None, tp: int | None, capture_steps: int | None,
             min_samples: int | None, dp_rank: int | None, check: bool, engine_python: Path | None,
             no_hook: bool, engine_log: bool | None,
             command: tuple[str, ...]) -> None:
    """Run a vLLM server with every TP worker's engine steps split and timed.

    \b
    specmodel vllm [--out DIR] -- python -m vllm.entrypoints.openai.api_server <args...>
    specmodel vllm --summarize DIR [--summarize DIR2] -o profiles/NAME
    specmodel vllm --check [--engine-python PATH]

    Per engine step, one JSON line in DIR/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl (one file per
    process): kind (prefill / decode / verify), batch,
    tokens, context, the target forward and the all-reduces inside it, the draft proposal (with
    its all-reduces), and the rest of the step (sampling, rejection, bookkeeping, scheduling gap)
    measured as overhead. The server's last /metrics page (scraped every 5 s once healthy) is kept
    in DIR/metrics.prom: the time a request spends outside the engine's steps. With
    --capture-steps N each worker also writes a torch.profiler trace of N steps to
    DIR/capture/rank<k>-....pt.trace.json.gz; --summarize reads each phase's all-reduce share from it
    for the rows the wrapper did not see. The server's exit status is passed through.

    vLLM's own step clock is turned on too (--enable-logging-iteration-details unless given; with
    --no-hook at TP 1 also --distributed-executor-backend mp unless an executor is chosen: under the
    default uniprocess executor a CPU forward ends before vLLM's timer starts); the server's output
    is kept in DIR/server.log. --summarize puts the engine's rows beside the hook's (how far the two clocks
    agree, per row); with --no-hook (or --summarize --engine-log) the engine's rows are the profile.
    """
    if check:
        from specmodel.engines.vllm.seams import TABLE

        ctx.exit(run_check(TABLE, engine_python=engine_python, env_var="SPECMODEL_VLLM_PYTHON",
                           others={"--summarize": summarize_dirs, "-o": output, "--name": name, "--tp": tp,
                                   "--dp-rank": dp_rank, "a server command": command, "--capture-steps": capture_steps, "--min-samples": min_samples,
                                   "--no-hook": True if no_hook else None, "--engine-log": engine_log}))
    if engine_python is not None:
        raise SpecmodelError("--engine-python applies with --check")
    if no_hook and (summarize_dirs or capture_steps is not None):
        raise SpecmodelError("--no-hook applies to a server run without --capture-steps (the capture is the hook's)")
    if engine_log and not summarize_dirs:
        raise SpecmodelError("--engine-log applies to --summarize (a server run keeps the engine's log anyway)")
    if summarize_dirs and capture_steps is not None:
        raise SpecmodelError("--capture-steps applies to a server run, not --summarize (which reads DIR/capture/)")
    if check_call(summarize_dirs=summarize_dirs, command=command, output=output,
                  summarize_only={"--name": name, "--tp": tp, "--min-samples": min_samples, "--dp-rank": dp_rank},
                  example="specmodel vllm -- python -m vllm.entrypoints.openai.api_server --model ..."):
        assert output is not None
        run.summarize_to(summarize_dirs, output, name, tp, min_samples, dp_rank, engine_log=bool(engine_log))
        return
    rc = run.launch(command, out_dir, health_timeout_s, capture_steps, hook=not no_hook)
    click.echo(_after_run(out_dir, rc), err=True)
    ctx.exit(rc)



def _after_run(out_dir: Path, rc: int) -> str:
    """The line said once the server exited: what the hook wrote, and what to run next."""
    files, steps = count_records(out_dir, "step")
    log = out_dir / "server.log"
    try:
        logged = sum(1 for line in log.read_bytes().split(b"\n") if b"iteration elapsed time" in line) \
            if log.is_file() else 0
    except OSError:
        logged = 0
    if logged and not files:
        return (f"specmodel vllm: server exited with status {rc}; {logged} engine steps in {log} (no hook file: the profile comes from them); "
                f"next: specmodel vllm --summarize {out_dir} -o profiles/<name>")
    nxt = (f"next: specmodel vllm --summarize {out_dir} -o profiles/<name>" if steps else
           "nothing to summarize: no step was recorded (did the hook load? did the server serve a request?)")
    captures = len(list((out_dir / "capture").glob("rank*.pt.trace.json.gz")))
    cap = f", {captures} capture trace(s) in {out_dir / 'capture'}" if captures else ""
    return f"specmodel vllm: server exited with status {rc}; {steps} steps in {files} rank file(s) under {out_dir}{cap}; {nxt}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(vllm_cmd())
