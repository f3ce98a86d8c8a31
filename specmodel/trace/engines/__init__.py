"""The engine registry: every log and metrics format specmodel reads, in ONE tuple, and one
record per serving engine (:class:`~specmodel.trace.engines.base.EngineSpec`), in another.

Adding a format = one module beside these (``sniff`` / ``parse`` / ``summarize`` for a log,
``sniff`` / ``parse`` for a metrics page; see :mod:`specmodel.trace.engines.base`), one line in
:data:`ENGINES`, and its fixtures under ``tests/data/``. Adding an engine = its record (methods,
metrics kind, flag and schedule writers, hook) in one module and one line in :data:`ENGINE_SPECS`.
``accept`` / ``validate`` / ``predict --accept-log`` / ``watch`` / ``plan --engine`` and their help
strings read the registry; nothing else names an engine (docs/engines.md lists what else a new
engine touches).
"""

from __future__ import annotations

from specmodel.errors import SpecmodelError
from specmodel.trace.engines import (
    accept_json,
    bench_speculative,
    sglang_engine,
    sglang_log,
    sglang_metrics,
    vllm_engine,
    vllm_log,
    vllm_metrics,
)
from specmodel.trace.engines.base import EngineSpec, LogFormat, MetricsFormat

#: order matters only among JSON formats (a saved specmodel document before bench rows)
ENGINES: tuple[LogFormat | MetricsFormat, ...] = (
    sglang_log.FORMAT,
    vllm_log.FORMAT,
    bench_speculative.FORMAT,
    accept_json.FORMAT,
    vllm_metrics.FORMAT,
    sglang_metrics.FORMAT,
)


#: one record per serving engine
ENGINE_SPECS: tuple[EngineSpec, ...] = (vllm_engine.SPEC, sglang_engine.SPEC)


def register(spec: EngineSpec, *formats: LogFormat | MetricsFormat) -> None:
    """Add an engine record and its plug-ins (what a new engine's module does with its one line in
    the tuples above; tests use it to run a made-up engine through watch and plan)."""
    global ENGINE_SPECS, ENGINES
    if any(e.name == spec.name for e in ENGINE_SPECS):
        raise SpecmodelError(f"engine {spec.name!r} is registered already")
    ENGINE_SPECS = (*ENGINE_SPECS, spec)
    ENGINES = (*ENGINES, *formats)


def engine_names() -> tuple[str, ...]:
    return tuple(e.name for e in ENGINE_SPECS)


def engine_spec(name: str) -> EngineSpec:
    """The record of engine ``name`` (a sample's / log's / schedule's ``engine``)."""
    for e in ENGINE_SPECS:
        if e.name == name:
            return e
    raise SpecmodelError(f"unknown engine {name!r} (known: {', '.join(engine_names())})")


def engine_of_log(fmt_name: str) -> EngineSpec | None:
    """The engine whose server writes log format ``fmt_name`` (None: not a server log, e.g. bench rows)."""
    return next((e for e in ENGINE_SPECS if e.log_format == fmt_name), None)


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


def engines_help() -> str:
    """'vLLM or SGLang': the engines a metrics page or a server log may come from."""
    return _join([e.label for e in ENGINE_SPECS])
