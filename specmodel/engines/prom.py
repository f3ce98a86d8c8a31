"""The Prometheus text exposition format (version 0.0.4), as ``prometheus_client`` writes it:
``# HELP`` / ``# TYPE`` comments and samples ``name{label="value",…} value [timestamp]``.
Shared by the metrics plug-ins; bounded (a page is at most ``limits.MAX_METRICS_PAGE_BYTES``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_METRICS_PAGE_BYTES as MAX_PAGE_BYTES

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^\n]*\})?\s+(\S+)(?:\s+-?\d+)?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def _labels(text: str, where: str) -> tuple[tuple[str, str], ...]:
    body = text[1:-1]
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if m is None or m.end() == pos:
            raise SpecmodelError(f"{where}: malformed labels {text[:80]!r}")
        v = m.group(2).replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")
        out.append((m.group(1), v))
        pos = m.end()
    return tuple(out)


def parse_page(text: str, where: str) -> dict[str, list[Sample]]:
    """name → samples. A line that is not a comment and not a sample is an error naming it; a
    sample whose value is not finite is left out (histogram ``+Inf`` is a label, not a value)."""
    if len(text) > MAX_PAGE_BYTES:
        raise SpecmodelError(f"{where}: metrics page larger than {MAX_PAGE_BYTES} bytes")
    out: dict[str, list[Sample]] = {}
    for i, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _SAMPLE.match(s)
        if m is None:
            raise SpecmodelError(f"{where}: line {i}: not a Prometheus sample: {s[:80]!r}")
        try:
            v = float(m.group(3))
        except ValueError:
            raise SpecmodelError(f"{where}: line {i}: value {m.group(3)[:40]!r} is not a number") from None
        if not math.isfinite(v):
            # NaN (no observation yet) or +/-Inf: no count, gauge or total a reading can use
            continue
        labels = _labels(m.group(2), f"{where}: line {i}") if m.group(2) else ()
        out.setdefault(m.group(1), []).append(Sample(name=m.group(1), labels=labels, value=v))
    return out


def total(page: dict[str, list[Sample]], name: str) -> float | None:
    """The sum over every label set of ``name`` (engines / ranks of one server), or None if absent."""
    ss = page.get(name)
    return math.fsum(s.value for s in ss) if ss else None


def model_name(page: dict[str, list[Sample]]) -> str | None:
    """The served model: the page's ``model_name`` label (the first by name where it holds several)."""
    models = {m for ss in page.values() for s in ss if (m := s.label("model_name"))}
    return min(models) if models else None
