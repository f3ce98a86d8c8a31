"""The ``specmodel`` command: a thin click group over the library.

Commands are imported lazily so ``specmodel predict`` never pays for torch or matplotlib
(it is run interactively; see benchmarks/bench_predict_cold_start.py).
"""

from __future__ import annotations

import importlib
import re
import sys
from typing import Any

import click

from specmodel import __version__
from specmodel.commands.flags import flag_of
from specmodel.errors import (
    EXIT_FINDINGS,
    EXIT_USAGE,
    FieldError,
    FindingsFailed,
    Interrupted,
    SpecmodelError,
    fields_named,
)

#: command name -> "module:attribute" of its click.Command (one module per command).
COMMANDS: dict[str, tuple[str, str]] = {
    "predict": ("specmodel.commands.predict:predict_cmd", "Predict tok/s, speedup and break-even accept length."),
    "profile": ("specmodel.commands.profile:profile_cmd", "Measure decode/verify/draft costs on a TP stack."),
    "report": ("specmodel.commands.report:report_cmd", "Write the PDF go/no-go report."),
    "ingest": ("specmodel.commands.ingest:ingest_cmd", "Build a profile from Kineto/torch.profiler traces."),
    "accept": ("specmodel.commands.accept:accept_cmd", "Accept-length distribution from engine logs (formats: accept --help)."),
    "nccl-tests": ("specmodel.commands.nccl_tests:nccl_tests_cmd", "Fit the all-reduce model from all_reduce_perf output."),
    "plan": ("specmodel.commands.plan:plan_cmd", "Serve plan: best speculative config per batch and context."),
    "validate": ("specmodel.commands.validate:validate_cmd", "Predicted vs observed tok/s over a server log."),
    "watch": ("specmodel.commands.watch:watch_cmd", "Watch a running server: is speculation paying, now?"),
    "sglang": ("specmodel.commands.sglang:sglang_cmd", "Run an SGLang server with the forward-pass hook."),
    "vllm": ("specmodel.commands.vllm:vllm_cmd", "Run a vLLM server with the engine-step hook."),
    "check-drafter": ("specmodel.commands.check_drafter:check_drafter_cmd", "Pre-flight check of an EAGLE-3 drafter."),
}


#: set by the executable's entry point (specmodel/_entry.py), which starts with the collector off
GC_DEFERRED = False


def resume_gc() -> None:
    """The collector back on after the start-up imports (:mod:`specmodel._entry`), what they
    built frozen out of its reach; nothing when the entry point did not turn it off."""
    global GC_DEFERRED
    if GC_DEFERRED:
        import gc

        GC_DEFERRED = False
        gc.freeze()
        gc.enable()


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        entry = COMMANDS.get(cmd_name)
        if entry is None:
            return None
        mod_name, attr = entry[0].split(":")
        try:
            mod = importlib.import_module(mod_name)
        except ModuleNotFoundError as exc:
            # an optional dependency (torch for `profile`) is missing: say which, never a traceback
            name = exc.name or ""
            if name.startswith("specmodel"):
                raise
            raise click.UsageError(f"'{cmd_name}' needs the Python package '{name}' (pip install 'specmodel[profile]')") from None
        resume_gc()
        cmd = getattr(mod, attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def resolve_command(self, ctx: click.Context, args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        # click suggests from the commands it has loaded, and this group loads none until asked: suggest
        # from the table (a typo such as `predcit` gets "did you mean predict")
        name = click.utils.make_str(args[0]) if args else ""
        if args and name not in COMMANDS and not name.startswith("-") and not ctx.resilient_parsing:
            import difflib  # (only for a typo: ~1.5 ms of every start otherwise)

            close = difflib.get_close_matches(name, list(COMMANDS), n=3, cutoff=0.6)
            hint = f"; did you mean {' or '.join(close)}?" if close else f" (commands: {', '.join(sorted(COMMANDS))})"
            raise click.UsageError(f"no such command {name[:40]!r}{hint}", ctx=ctx)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        # help from the table: listing commands must not import them
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specmodel")
def cli() -> None:
    """specmodel: will a speculative-decoding drafter pay off on this box, and why.

    Typical flow: ``specmodel profile --tp 8`` -> ``specmodel predict --accept-len 3.2``
    -> ``specmodel report``.
    """


_LONG_WORD = re.compile(r"\S{200,}")
#: click >= 8.2 raises this for a bare group (older versions print the help themselves)
_NO_ARGS_IS_HELP: Any = getattr(click.exceptions, "NoArgsIsHelpError", ())


def _one_line(msg: str) -> str:
    """A message on one line whatever it quotes (a file name with a newline, a multi-line click error)."""
    line = " ".join(msg.replace("\r", "\n").split("\n")).strip() or "bad input"
    # a value echoed back (a 5,000-digit number, a 40 KB path) is shortened: the line stays readable
    return _LONG_WORD.sub(lambda m: f"{m.group()[:40]}...({len(m.group())} characters)...{m.group()[-20:]}", line)


def _usage_error(exc: click.ClickException) -> str:
    """click's usage errors as one line naming the command and the flag (no 'Usage:'/'Try' lines)."""
    msg = exc.format_message()
    ctx = getattr(exc, "ctx", None)
    if ctx is not None and ctx.info_name and ctx.parent is not None:
        return f"{ctx.info_name}: {msg}"
    return msg


def _run(argv: list[str] | None) -> Any:
    """``cli.main(standalone_mode=False)`` without its Ctrl-C handling: click prints a blank line
    and raises Abort on KeyboardInterrupt, and the promise is ONE line (``specmodel: interrupted``)."""
    args = sys.argv[1:] if argv is None else list(argv)
    completion = getattr(cli, "_main_shell_completion", None)  # what cli.main does first (shell tab completion)
    if completion is not None:
        completion({}, "specmodel")
    # notes, hints and cost origins name input fields; the user typed flags: the same table as errors
    with fields_named(flag_of), cli.make_context("specmodel", args) as ctx:
        return cli.invoke(ctx)


#: Commands whose every output is written (atomically) and closed when they return: as the
#: process's entry point they end it without the interpreter's teardown (:func:`_end_now`).
_NO_TEARDOWN = frozenset({"ingest", "predict", "accept", "plan", "nccl-tests", "check-drafter"})


def _end_now(rv: Any) -> None:
    """End the process at once, as ``sys.exit(rv)`` would, skipping the teardown (~20 ms of freeing
    every module and object: a tenth of ingesting a small trace) when it has nothing else to do:
    no atexit callback (coverage, logging, multiprocessing register one) and no other thread.
    Returns, doing nothing, when that cannot be told or does not hold."""
    import atexit
    import os

    count = getattr(atexit, "_ncallbacks", None)  # (CPython's)
    threading = sys.modules.get("threading")
    if not (rv is None or type(rv) is int) or count is None or count() or \
            (threading is not None and threading.active_count() > 1):
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return  # (a closed or broken pipe: the normal exit reports it as it does)
    os._exit(rv or 0)


def main(argv: list[str] | None = None) -> Any:
    """Entry point: user errors become one line on stderr and exit 2, never a traceback."""
    try:
        rv = _run(argv)
        if argv is None and sys.argv[1:2] and sys.argv[1] in _NO_TEARDOWN:  # (the process's own entry)
            _end_now(rv)
        return rv
    except SpecmodelError as exc:
        # the library names fields; the user typed flags: one table spells one as the other
        msg = exc.render(flag_of) if isinstance(exc, FieldError) else str(exc)
        click.echo(f"specmodel: error: {_one_line(msg)}", err=True)
        sys.exit(EXIT_USAGE)
    except FindingsFailed as exc:
        if str(exc):
            click.echo(f"specmodel: {_one_line(str(exc))}", err=True)
        sys.exit(EXIT_FINDINGS)
    except click.exceptions.Abort:
        click.echo("specmodel: aborted", err=True)
        sys.exit(130)
    except _NO_ARGS_IS_HELP as exc:
        # bare `specmodel` / a group with no command: the normal help, as click prints it
        ctx = getattr(exc, "ctx", None)
        click.echo(ctx.get_help() if ctx is not None else exc.format_message(), err=True)
        sys.exit(EXIT_USAGE)
    except click.ClickException as exc:
        if exc.exit_code == 0:
            sys.exit(0)
        click.echo(f"specmodel: error: {_one_line(_usage_error(exc))}", err=True)
        sys.exit(EXIT_USAGE)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except KeyboardInterrupt as exc:
        # one line: what was stopped, if the command said (Interrupted), else just that
        detail = f": {_one_line(str(exc))}" if isinstance(exc, Interrupted) and str(exc) else ""
        click.echo(f"specmodel: interrupted{detail}", err=True)
        sys.exit(130)
    except OSError as exc:
        # the last net for the environment refusing a path the user gave (permissions, a full disk,
        # a name too long): the readers and writers name the file themselves; this keeps the promise
        # where one was missed
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"specmodel: error: {_one_line(where + (exc.strerror or str(exc)))}", err=True)
        sys.exit(EXIT_USAGE)


if __name__ == "__main__":
    main()
