"""``specmodel sglang``: run an SGLang server with the forward-pass hook, or turn its logs into a profile.

    specmodel sglang --out runs/spec -- python -m sglang.launch_server --model-path ... --tp 8
    specmodel sglang --summarize runs/base --summarize runs/spec -o profiles/my-box
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType

import click

from specmodel.engines.hook.run import child_env, count_records, start, write_hook_profile
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_PROCESS_RANK, MAX_TP

__all__ = ["child_env", "sglang_cmd"]


def launch(command: tuple[str, ...], out_dir: Path) -> int:
    """Run ``command`` with the hook; return its exit status (128 + signal when killed)."""
    proc = start(command, out_dir)

    def forward(signum: int, frame: FrameType | None) -> None:
        proc.send_signal(signum)

    prev = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                rc = proc.wait()
                break
            except KeyboardInterrupt:
                # the terminal sent SIGINT to the whole group; let the server shut down cleanly
                continue
    finally:
        signal.signal(signal.SIGTERM, prev)
    return 128 - rc if rc < 0 else rc


@click.command("sglang", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("sglang-forward"), show_default=True,
              help="Directory for the per-process rank files (must not hold an earlier run's files).")
@click.option("--summarize", "summarize_dirs", multiple=True, type=click.Path(path_type=Path),
              help="Instead of launching: aggregate the logs in DIR (repeatable) into a profile.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="With --summarize: profile directory or .json to write (e.g. profiles/my-box).")
@click.option("--name", default=None, help="With --summarize: profile name (default: the output directory's name).")
@click.option("--tp", type=click.IntRange(min=1, max=MAX_TP), default=None,
              help="With --summarize: TP degree, when the logs do not say.")
@click.option("--dp-rank", type=click.IntRange(min=0, max=MAX_PROCESS_RANK), default=None,
              help="With --summarize: the data-parallel replica to read (logs of several replicas are refused "
                   "without it: each replica is its own engine).")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sglang_cmd(ctx: click.Context, out_dir: Path, summarize_dirs: tuple[Path, ...], output: Path | None,
               name: str | None, tp: int | None, dp_rank: int | None, command: tuple[str, ...]) -> None:
    """Run an SGLang server with every TP worker's forwards annotated and timed.

    \b
    specmodel sglang [--out DIR] -- python -m sglang.launch_server <args...>
    specmodel sglang --summarize DIR [--summarize DIR2] -o profiles/NAME

    Each forward (verify, draft, draft-extend, decode, extend) gets an NVTX range and a
    torch.profiler span `specmodel.<phase>[bs=B,toks=T]`, and one JSON line with its GPU
    time (CUDA events) in DIR/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl (one file per process). The server's exit status is passed through.
    """
    if summarize_dirs:
        if command:
            raise SpecmodelError("--summarize: give either a server command or --summarize, not both")
        if output is None:
            raise SpecmodelError("--summarize: -o/--output is required (e.g. -o profiles/my-box)")
        _summarize(summarize_dirs, output, name, tp, dp_rank)
        return
    if output is not None or name is not None or tp is not None or dp_rank is not None:
        raise SpecmodelError("-o/--name/--tp/--dp-rank only apply with --summarize")
    if not command:
        raise SpecmodelError("give the server command after `--`, e.g. "
                             "specmodel sglang -- python -m sglang.launch_server --model-path ...")
    rc = launch(command, out_dir)
    files, lines = count_records(out_dir, "forward")
    if lines:
        nxt = f"next: specmodel sglang --summarize {out_dir} -o profiles/<name>"
    else:
        # nothing to summarize: point at why, not at a step that would fail
        nxt = ("nothing to summarize: no forward was recorded (did the hook load? is the server command "
               "`python -m sglang.launch_server …`, and did it serve a request before exiting?)")
    click.echo(f"specmodel sglang: server exited with status {rc}; {lines} forwards in {files} rank file(s) "
               f"under {out_dir}; {nxt}", err=True)
    ctx.exit(rc)


def _summarize(dirs: tuple[Path, ...], output: Path, name: str | None, tp: int | None, dp_rank: int | None) -> None:
    from functools import partial

    from specmodel.engines.sglang.hooklog import summarize

    write_hook_profile(partial(summarize, dp_rank=dp_rank), dirs, output, name, tp, engine="SGLang")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(sglang_cmd())
