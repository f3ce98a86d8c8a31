"""``specmodel sglang``: run an SGLang server with the forward-pass hook, or turn its logs into a profile.

    specmodel sglang --out runs/spec -- python -m sglang.launch_server --model-path ... --tp 8
    specmodel sglang --summarize runs/base --summarize runs/spec -o profiles/my-box
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_TP

if TYPE_CHECKING:
    from specmodel.schema.profile import Profile


def shim_dir() -> Path:
    from specmodel.profile.sglang_shim import SHIM_DIR

    return SHIM_DIR


def child_env(out_dir: Path, base: dict[str, str] | None = None, *, env_var: str = "SPECMODEL_SGLANG_DIR") -> dict[str, str]:
    """Environment for the server: the shim first on PYTHONPATH, the output directory named
    (``env_var``: which engine's hook the shim installs)."""
    env = dict(os.environ if base is None else base)
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(shim_dir()) + (os.pathsep + pp if pp else "")
    env[env_var] = str(out_dir.resolve())
    return env


def start(command: tuple[str, ...], out_dir: Path, *, tool: str = "sglang", env_var: str = "SPECMODEL_SGLANG_DIR",
          extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Check ``--out`` and the command, then start the server with the hook (shared by `specmodel vllm`)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecmodelError(f"--out {out_dir}: exists and is not a directory")
    old = sorted(out_dir.glob("rank*.jsonl")) if out_dir.is_dir() else []
    if old:
        raise SpecmodelError(f"--out {out_dir}: already holds {old[0].name} from an earlier run; "
                             "choose an empty directory (runs must not mix)")
    exe = command[0]
    if shutil.which(exe) is None and not Path(exe).is_file():
        raise SpecmodelError(f"server command: '{exe}' not found")
    out_dir.mkdir(parents=True, exist_ok=True)
    click.echo(f"specmodel {tool}: hook on; per-rank logs go to {out_dir}/rank<k>.jsonl", err=True)
    try:
        return subprocess.Popen(list(command), env={**child_env(out_dir, env_var=env_var), **(extra_env or {})})
    except OSError as exc:
        raise SpecmodelError(f"server command: cannot run '{exe}': {exc.strerror}") from None


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


def count_records(out_dir: Path, record_type: str) -> tuple[int, int]:
    """(rank files, records of ``record_type``) a hook wrote under ``out_dir`` (unreadable files count 0)."""
    files = sorted(out_dir.glob("rank*.jsonl"))
    marker = f'"type": "{record_type}"'.encode()
    n = 0
    for f in files:
        try:
            n += sum(1 for line in f.read_bytes().split(b"\n") if marker in line)
        except OSError:
            pass
    return len(files), n


@click.command("sglang", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("sglang-forward"), show_default=True,
              help="Directory for rank<k>.jsonl (must not hold an earlier run's files).")
@click.option("--summarize", "summarize_dirs", multiple=True, type=click.Path(path_type=Path),
              help="Instead of launching: aggregate the logs in DIR (repeatable) into a profile.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="With --summarize: profile directory or .json to write (e.g. profiles/my-box).")
@click.option("--name", default=None, help="With --summarize: profile name (default: the output directory's name).")
@click.option("--tp", type=click.IntRange(min=1, max=MAX_TP), default=None,
              help="With --summarize: TP degree, when the logs do not say.")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def sglang_cmd(ctx: click.Context, out_dir: Path, summarize_dirs: tuple[Path, ...], output: Path | None,
               name: str | None, tp: int | None, command: tuple[str, ...]) -> None:
    """Run an SGLang server with every TP worker's forwards annotated and timed.

    \b
    specmodel sglang [--out DIR] -- python -m sglang.launch_server <args...>
    specmodel sglang --summarize DIR [--summarize DIR2] -o profiles/NAME

    Each forward (verify, draft, draft-extend, decode, extend) gets an NVTX range and a
    torch.profiler span `specmodel.<phase>[bs=B,toks=T]`, and one JSON line with its GPU
    time (CUDA events) in DIR/rank<k>.jsonl. The server's exit status is passed through.
    """
    if summarize_dirs:
        if command:
            raise SpecmodelError("--summarize: give either a server command or --summarize, not both")
        if output is None:
            raise SpecmodelError("--summarize: -o/--output is required (e.g. -o profiles/my-box)")
        _summarize(summarize_dirs, output, name, tp)
        return
    if output is not None or name is not None or tp is not None:
        raise SpecmodelError("-o/--name/--tp only apply with --summarize")
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


def _summarize(dirs: tuple[Path, ...], output: Path, name: str | None, tp: int | None) -> None:
    from specmodel.trace.sglang_forward import summarize

    write_hook_profile(summarize, dirs, output, name, tp, engine="SGLang")


def write_hook_profile(summarize: Callable[..., Profile], dirs: tuple[Path, ...], output: Path, name: str | None,
                       tp: int | None, *, engine: str) -> None:
    """``--summarize`` of an engine hook (SGLang, vLLM): the hook's JSONL -> a profile at ``output``."""
    from specmodel.schema.profile import save_profile

    prof_name = name or (output.parent.name if output.suffix == ".json" else output.name) or engine.lower()
    profile = summarize(dirs, name=prof_name, tp=tp)
    path = save_profile(profile, output)
    kinds = sorted({r.kind for r in profile.costs})
    click.echo(f"wrote {path}: {len(profile.costs)} cost rows ({', '.join(kinds)}), tp {profile.tp}, "
               f"{engine} {profile.source.engine_version}")
    for note in profile.notes:
        click.echo(f"note: {note}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(sglang_cmd())
