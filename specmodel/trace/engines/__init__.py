"""The engine registry: every log and metrics format specmodel reads, in ONE tuple.

Adding an engine = one module beside these (``sniff`` / ``parse`` / ``summarize`` for a log,
``sniff`` / ``parse`` for a metrics page; see :mod:`specmodel.trace.engines.base`), one line in
:data:`ENGINES`, and its fixtures under ``tests/data/``. ``specmodel accept`` / ``validate`` /
``predict --accept-log`` / ``watch`` and their help strings read the registry; nothing else
names an engine (docs/engines.md).
"""

from __future__ import annotations

from specmodel.errors import SpecmodelError
from specmodel.trace.engines import (
    accept_json,
    bench_speculative,
    sglang_log,
    sglang_metrics,
    vllm_log,
    vllm_metrics,
)
from specmodel.trace.engines.base import LogFormat, MetricsFormat

#: order matters only among JSON formats (a saved specmodel document before bench rows)
ENGINES: tuple[LogFormat | MetricsFormat, ...] = (
    sglang_log.FORMAT,
    vllm_log.FORMAT,
    bench_speculative.FORMAT,
    accept_json.FORMAT,
    vllm_metrics.FORMAT,
    sglang_metrics.FORMAT,
)


def log_formats() -> tuple[LogFormat, ...]:
    return tuple(e for e in ENGINES if isinstance(e, LogFormat))


def metrics_formats() -> tuple[MetricsFormat, ...]:
    return tuple(e for e in ENGINES if isinstance(e, MetricsFormat))


def metrics_format_of(text: str) -> MetricsFormat | None:
    """The registered metrics format that recognises ``text`` (a /metrics page), or None."""
    for e in metrics_formats():
        if e.sniff(text):
            return e
    return None


def log_format(name: str) -> LogFormat:
    for e in log_formats():
        if e.name == name:
            return e
    raise SpecmodelError(f"unknown log format {name!r} (known: {', '.join(e.name for e in log_formats())})")


def _join(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def log_help(*, saved: bool = True, text_only: bool = False) -> str:
    """'SGLang server log, vLLM server log, … or a saved JSON': the inputs the log commands take."""
    return _join([e.help_name for e in log_formats()
                  if (saved or e.name != accept_json.NAME) and (e.text or not text_only)])


def metrics_help() -> str:
    return _join([e.help_name for e in metrics_formats()]) if metrics_formats() else "(none registered)"
