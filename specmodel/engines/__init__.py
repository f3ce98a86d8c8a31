"""The engine registry: every serving engine specmodel reads, one package per engine, named in ONE
tuple (:data:`ENGINE_PACKAGES`).

Each engine package (``specmodel/engines/<engine>/``) exports ``SPEC`` (its
:class:`~specmodel.engines.base.EngineSpec`: methods, metrics kind, flag and schedule writers, hook)
and ``FORMATS`` (its :class:`~specmodel.engines.base.LogFormat` / :class:`~specmodel.engines.base.MetricsFormat`
plug-ins). Adding an engine = its folder and one line in :data:`ENGINE_PACKAGES`.
``accept`` / ``validate`` / ``predict --accept-log`` / ``watch`` / ``plan --engine`` and their help
strings read the registry; nothing else names an engine (docs/engines.md).
"""

from __future__ import annotations

import importlib

from specmodel.engines import accept_json
from specmodel.engines.base import EngineSpec, LogFormat, MetricsFormat
from specmodel.errors import SpecmodelError

#: one package per serving engine; the order is the order engines are listed in (help, plan's flags)
ENGINE_PACKAGES: tuple[str, ...] = (
    "specmodel.engines.vllm",
    "specmodel.engines.sglang",
)

#: formats that belong to no engine: specmodel's own saved ``accept`` document
COMMON_FORMATS: tuple[LogFormat | MetricsFormat, ...] = (accept_json.FORMAT,)


def _ordered(formats: list[LogFormat | MetricsFormat]) -> tuple[LogFormat | MetricsFormat, ...]:
    """Text logs first, by name (the help and a message naming two of them read the same whatever the
    packages' order), then JSON formats with specmodel's own document last (a JSON document several
    JSON formats sniff goes to the last: the most specific), then the metrics pages in package order."""
    def key(e: LogFormat | MetricsFormat) -> tuple[int, str]:
        if isinstance(e, MetricsFormat):
            return 3, ""
        return (0, e.name) if e.text else (2 if e in COMMON_FORMATS else 1, "")

    return tuple(sorted(formats, key=key))


def _load(packages: tuple[str, ...]) -> tuple[tuple[EngineSpec, ...], tuple[LogFormat | MetricsFormat, ...]]:
    mods = [importlib.import_module(p) for p in packages]
    return tuple(m.SPEC for m in mods), _ordered([*(f for m in mods for f in m.FORMATS), *COMMON_FORMATS])


#: one record per serving engine, and every log and metrics format, built from :data:`ENGINE_PACKAGES`
ENGINE_SPECS, ENGINES = _load(ENGINE_PACKAGES)


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
