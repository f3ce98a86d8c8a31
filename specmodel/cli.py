"""The ``specmodel`` command: a thin click group over the library.

Commands are imported lazily so ``specmodel predict`` never pays for torch or matplotlib
(it is run interactively; see benchmarks/bench_predict_cold_start.py).
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

import click

from specmodel import __version__
from specmodel.errors import EXIT_FINDINGS, EXIT_USAGE, FindingsFailed, SpecmodelError

#: command name -> "module:attribute" of its click.Command (one module per command).
COMMANDS: dict[str, tuple[str, str]] = {
    "predict": ("specmodel.commands.predict:predict_cmd", "Predict tok/s, speedup and break-even accept length."),
    "profile": ("specmodel.commands.profile:profile_cmd", "Measure decode/verify/draft costs on a TP stack."),
    "report": ("specmodel.commands.report:report_cmd", "Write the PDF go/no-go report."),
    "ingest": ("specmodel.commands.ingest:ingest_cmd", "Build a profile from Kineto/torch.profiler traces."),
    "accept": ("specmodel.commands.accept:accept_cmd", "Accept-length distribution from SGLang/vLLM logs."),
    "nccl-tests": ("specmodel.commands.nccl_tests:nccl_tests_cmd", "Fit the all-reduce model from all_reduce_perf output."),
    "plan": ("specmodel.commands.plan:plan_cmd", "Serve plan: best speculative config per batch and context."),
    "validate": ("specmodel.commands.validate:validate_cmd", "Predicted vs observed tok/s over a server log."),
    "sglang": ("specmodel.commands.sglang:sglang_cmd", "Run an SGLang server with the forward-pass hook."),
    "check-drafter": ("specmodel.commands.check_drafter:check_drafter_cmd", "Pre-flight check of an EAGLE-3 drafter."),
}


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
        cmd = getattr(mod, attr)
        assert isinstance(cmd, click.Command)
        return cmd

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


def main(argv: list[str] | None = None) -> Any:
    """Entry point: user errors become one line on stderr and exit 2, never a traceback."""
    try:
        return cli.main(args=argv, prog_name="specmodel", standalone_mode=False)
    except SpecmodelError as exc:
        click.echo(f"specmodel: error: {exc}", err=True)
        sys.exit(EXIT_USAGE)
    except FindingsFailed as exc:
        if str(exc):
            click.echo(f"specmodel: {exc}", err=True)
        sys.exit(EXIT_FINDINGS)
    except click.exceptions.Abort:
        click.echo("specmodel: aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE if exc.exit_code != 0 else 0)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)


if __name__ == "__main__":
    main()
