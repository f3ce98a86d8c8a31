"""``specmodel sglang``: run an SGLang server with the forward-pass hook, or turn its logs into a profile.

    specmodel sglang --out runs/spec -- python -m sglang.launch_server --model-path ... --tp 8
    specmodel sglang --summarize runs/base --summarize runs/spec -o profiles/my-box

The run and the summary are SGLang's (:mod:`specmodel.engines.sglang.run`); this is the command line.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from specmodel.commands.hook_options import check_call, hook_options, run_check
from specmodel.engines.hook.run import count_records
from specmodel.engines.sglang import run
from specmodel.errors import SpecmodelError


@click.command("sglang", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@hook_options("sglang-forward")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sglang_cmd(ctx: click.Context, out_dir: Path, summarize_dirs: tuple[Path, ...], output: Path | None,
               name: str | None, tp: int | None, dp_rank: int | None, check: bool, engine_python: Path | None,
               command: tuple[str, ...]) -> None:
    """Run an SGLang server with every TP worker's forwards annotated and timed.

    \b
    specmodel sglang [--out DIR] -- python -m sglang.launch_server <args...>
    specmodel sglang --summarize DIR [--summarize DIR2] -o profiles/NAME
    specmodel sglang --check [--engine-python PATH]

    Each forward (verify, draft, draft-extend, decode, extend) gets an NVTX range and a
    torch.profiler span `specmodel.<phase>[bs=B,toks=T]`, and one JSON line with its GPU
    time (CUDA events) in DIR/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl (one file per process). The server's exit status is passed through.
    """
    if check:
        from specmodel.engines.sglang.seams import TABLE

        ctx.exit(run_check(TABLE, engine_python=engine_python, env_var="SPECMODEL_SGLANG_PYTHON",
                           others={"--summarize": summarize_dirs, "-o": output, "--name": name, "--tp": tp,
                                   "--dp-rank": dp_rank, "a server command": command}))
    if engine_python is not None:
        raise SpecmodelError("--engine-python applies with --check")
    if check_call(summarize_dirs=summarize_dirs, command=command, output=output,
                  summarize_only={"--name": name, "--tp": tp, "--dp-rank": dp_rank},
                  example="specmodel sglang -- python -m sglang.launch_server --model-path ..."):
        assert output is not None
        run.summarize_to(summarize_dirs, output, name, tp, dp_rank)
        return
    rc = run.launch(command, out_dir)
    click.echo(_after_run(out_dir, rc), err=True)
    ctx.exit(rc)



def _after_run(out_dir: Path, rc: int) -> str:
    """The line said once the server exited: what the hook wrote, and what to run next."""
    files, lines = count_records(out_dir, "forward")
    if lines:
        nxt = f"next: specmodel sglang --summarize {out_dir} -o profiles/<name>"
    else:
        # nothing to summarize: point at why, not at a step that would fail
        nxt = ("nothing to summarize: no forward was recorded (did the hook load? is the server command "
               "`python -m sglang.launch_server …`, and did it serve a request before exiting?)")
    return f"specmodel sglang: server exited with status {rc}; {lines} forwards in {files} rank file(s) under {out_dir}; {nxt}"


if __name__ == "__main__":  # pragma: no cover
    sys.exit(sglang_cmd())
