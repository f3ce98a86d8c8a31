"""What ``specmodel vllm`` and ``specmodel sglang`` share as commands: the options of a hooked
server run and of its ``--summarize``, and the one check that a call is either of the two."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_PROCESS_RANK, MAX_TP

#: a click decorator (an option, or several)
Decorator = Callable[[Any], Any]


def hook_options(default_out: str, *after_out: Decorator) -> Decorator:
    """``--out`` (default ``default_out``), the engine's own ``after_out`` options, ``--summarize``,
    ``-o``, ``--name``, ``--tp``, ``--dp-rank`` (in this order in ``--help``)."""
    options = (
        click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path(default_out), show_default=True,
                     help="Directory for the per-process rank files (must not hold an earlier run's files)."),
        *after_out,
        click.option("--summarize", "summarize_dirs", multiple=True, type=click.Path(path_type=Path),
                     help="Instead of launching: aggregate the logs in DIR (repeatable) into a profile."),
        click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
                     help="With --summarize: profile directory or .json to write (e.g. profiles/my-box)."),
        click.option("--name", default=None, help="With --summarize: profile name (default: the output directory's name)."),
        click.option("--tp", type=click.IntRange(min=1, max=MAX_TP), default=None,
                     help="With --summarize: TP degree, when the logs do not say."),
        click.option("--dp-rank", type=click.IntRange(min=0, max=MAX_PROCESS_RANK), default=None,
                     help="With --summarize: the data-parallel replica to read (logs of several replicas are refused "
                          "without it: each replica is its own engine)."),
        click.option("--check", is_flag=True, default=False,
                     help="Instead of launching: read the installed engine's source (no server, no GPU) and say which "
                          "of the seams the hook wraps and the readers match it has, and whether its version is one "
                          "the seam table was checked against. Exit 1 when a required seam is missing."),
        click.option("--engine-python", type=click.Path(dir_okay=False, path_type=Path), default=None,
                     help="With --check: the interpreter whose engine to read (default: $SPECMODEL_<ENGINE>_PYTHON, "
                          "else this interpreter, else python3 on PATH)."),
    )

    def apply(f: Any) -> Any:
        for opt in reversed(options):
            f = opt(f)
        return f

    return apply


def check_call(*, summarize_dirs: tuple[Path, ...], command: tuple[str, ...], output: Path | None,
               summarize_only: dict[str, Any], example: str) -> bool:
    """True for a ``--summarize`` call, False for a server run; refuses a mix of the two.
    ``summarize_only``: the flags that only apply with ``--summarize`` and their values (None: not given);
    ``example``: the server command the error for a missing one shows."""
    if summarize_dirs:
        if command:
            raise SpecmodelError("--summarize: give either a server command or --summarize, not both")
        if output is None:
            raise SpecmodelError("--summarize: -o/--output is required (e.g. -o profiles/my-box)")
        return True
    if output is not None or any(v is not None for v in summarize_only.values()):
        raise SpecmodelError(f"{'/'.join(['-o', *summarize_only])} only apply with --summarize")
    if not command:
        raise SpecmodelError(f"give the server command after `--`, e.g. {example}")
    return False


def run_check(table: Any, *, engine_python: Path | None, env_var: str, others: dict[str, Any]) -> int:
    """``--check``: the installed engine read against ``table`` (:mod:`specmodel.engines.seams`);
    its lines on stdout; 0, or 1 when a required seam is missing. ``others``: the options that
    do not apply with it (refused when given)."""
    import os
    import shutil
    import sys

    from specmodel.engines.seams import check_installed, locate

    given = [k for k, v in others.items() if v not in (None, (), False)]
    if given:
        raise SpecmodelError(f"--check reads the installed engine; {', '.join(given)} do not apply with it")
    if engine_python is not None:
        cands = [str(engine_python)]
    elif os.environ.get(env_var):
        cands = [os.environ[env_var]]
    else:  # this interpreter when the engine lives beside specmodel, else the python on PATH
        cands = list(dict.fromkeys(p for p in (sys.executable, shutil.which("python3"), shutil.which("python")) if p))
    errors = []
    for py in cands:
        try:
            locate(table, py)
        except SpecmodelError as exc:
            errors.append(str(exc))
            continue
        report = check_installed(table, py)
        click.echo(f"specmodel {table.engine} --check: engine python {py}")
        for line in report.lines():
            click.echo(line)
        return 1 if report.missing_required else 0
    raise SpecmodelError("; ".join(errors))
