"""Help text that lists the registered engine formats (specmodel.engines), built when
``--help`` is shown: importing the registry at start-up would cost ``predict`` its cold start
(benchmarks/bench_predict_cold_start.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click


def log_inputs() -> str:
    from specmodel.engines import log_help

    return log_help()


def metrics_inputs() -> str:
    from specmodel.engines import metrics_help

    return metrics_help()


class RegistryHelpOption(click.Option):
    """A click option whose help is ``template.format(logs=…, metrics=…)`` from the registry."""

    def __init__(self, *args: Any, help_template: str, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._template = help_template
        self.help = help_template.replace("{logs}", "server logs").replace("{metrics}", "metrics pages")

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        self.help = self._template.format(logs=log_inputs(), metrics=metrics_inputs())
        return super().get_help_record(ctx)


def registry_option(*decls: str, help_template: str, **kw: Any) -> Callable[[Any], Any]:
    return click.option(*decls, cls=RegistryHelpOption, help_template=help_template, **kw)
