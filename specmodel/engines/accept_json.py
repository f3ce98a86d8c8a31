"""A saved ``specmodel accept -o`` distribution (schema ``specmodel.accept``), read back through
``--accept-log`` exactly like a server log. Asked for more steps than it was measured with, the
extra positions are extrapolated with the last observed conditional acceptance rate
(:func:`specmodel.model.accept.resize`), and a note says so."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specmodel.engines.base import AcceptSummary, LogFile, LogFormat, SummaryInputs
from specmodel.engines.parse import SAVED_DOCUMENT, json_kind
from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.io import loads_json
from specmodel.limits import MAX_STEPS
from specmodel.model import accept as acc
from specmodel.schema.formats import ACCEPT

NAME = "specmodel.accept"


def check_saved(doc: dict[str, Any], where: str) -> None:
    """Validate a decoded ``specmodel.accept`` document (header through its Format, then the body)."""
    ACCEPT.check(doc, where)
    probs = doc.get("probs")
    if not isinstance(probs, list) or not probs or not all(
            isinstance(p, (int, float)) and not isinstance(p, bool) for p in probs):
        raise SpecmodelError(f"{where}: probs: expected a non-empty list of numbers")
    if len(probs) > MAX_STEPS + 1:
        raise SpecmodelError(f"{where}: probs: {len(probs)} entries, at most steps + 1 = {MAX_STEPS + 1}")
    samples = doc.get("samples", 0)
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise SpecmodelError(f"{where}: samples: expected an integer >= 0")
    rates = doc.get("per_position")
    if rates is not None and (not isinstance(rates, list) or not all(
            isinstance(r, (int, float)) and not isinstance(r, bool) for r in rates)):
        raise SpecmodelError(f"{where}: per_position: expected a list of numbers or null")
    try:
        acc.AcceptDist(probs=tuple(float(p) for p in probs), source=where, samples=samples)
        if rates:
            acc.from_per_position(rates)
    except SpecmodelError as exc:
        raise SpecmodelError(f"{where}: {exc}") from None
    _bands(doc, where)


def _bands(doc: dict[str, Any], where: str) -> acc.AcceptByContext | None:
    """The saved per-context bands (optional key ``by_context``), validated; None when absent."""
    raw = doc.get("by_context")
    if raw is None:
        return None
    if not isinstance(raw, list) or len(raw) < 2:
        raise SpecmodelError(f"{where}: by_context: expected a list of at least two bands or null")
    bands = []
    for i, b in enumerate(raw):
        w = f"{where}: by_context[{i}]"
        if not isinstance(b, dict):
            raise SpecmodelError(f"{w}: expected an object")
        try:
            lo, hi = b["lo_tokens"], b["hi_tokens"]
            probs = tuple(float(p) for p in b["probs"])
            n, cmin, cmax, samples = int(b["windows"]), float(b["context_min"]), float(b["context_max"]), b["samples"]
        except (KeyError, TypeError, ValueError) as exc:
            raise SpecmodelError(f"{w}: missing or bad field ({exc})") from None
        if (not isinstance(lo, int) or isinstance(lo, bool) or lo < 0 or (hi is not None and (
                not isinstance(hi, int) or isinstance(hi, bool) or hi <= lo)) or n < 1 or not
                isinstance(samples, int) or samples < 0 or not 0 <= cmin <= cmax):
            raise SpecmodelError(f"{w}: lo_tokens/hi_tokens/windows/samples/context range out of bounds")
        if len(probs) != len(doc["probs"]):
            raise SpecmodelError(f"{w}: probs: {len(probs)} entries, the distribution has {len(doc['probs'])}")
        try:
            d = acc.AcceptDist(probs=probs, source=str(doc.get("source") or where) + " [context band]", samples=samples)
        except SpecmodelError as exc:
            raise SpecmodelError(f"{w}: {exc}") from None
        bands.append(acc.ContextBand(lo_tokens=lo, hi_tokens=hi, dist=d, windows=n, context_min=cmin, context_max=cmax))
    if bands[0].lo_tokens != 0 or bands[-1].hi_tokens is not None or any(
            a.hi_tokens != b.lo_tokens for a, b in zip(bands, bands[1:], strict=False)):
        raise SpecmodelError(f"{where}: by_context: bands must tile 0.. (each band's hi_tokens = the next one's lo_tokens, "
                             "the last open)")
    overall = acc.AcceptDist(probs=tuple(float(p) for p in doc["probs"]), source=str(doc.get("source") or where),
                             samples=int(doc.get("samples", 0)))
    return acc.AcceptByContext(bands=tuple(bands), overall=overall)


def sniff(path: str, lines: Sequence[str], first: str) -> bool:
    return json_kind(path, lines, first) == SAVED_DOCUMENT


def parse(path: str, lines: list[str], unterminated: bool) -> LogFile:
    doc = loads_json("\n".join(lines), path)
    ACCEPT.check(doc, path)  # another specmodel document: one line saying which
    check_saved(doc, path)
    return LogFile(path=path, engine=NAME, fmt=f"v{doc['schema_version']}", lines_read=len(lines), lines_matched=1,
                   saved=doc)


def summarize(files: Sequence[LogFile], inp: SummaryInputs) -> AcceptSummary:
    if len(files) > 1:
        raise SpecmodelError("give one specmodel accept JSON at a time")
    dist, rates, note = _from_saved(files[0], inp.max_tokens)
    doc = files[0].saved or {}
    # bands were measured at the saved steps: kept only when the distribution is used as saved
    bands = _bands(doc, files[0].path) if len(doc.get("probs") or ()) == inp.max_tokens else None
    notes: tuple[str, ...] = (note,) if note else ()
    if doc.get("by_context") and bands is None:
        notes += ("the saved per-context bands were measured at other steps: not used",)
    return AcceptSummary(dist=dist, rates=rates, files=tuple(files), windows_used=0, notes=notes,
                         by_context=bands)


def _from_saved(lf: LogFile, max_tokens: int) -> tuple[acc.AcceptDist, tuple[float, ...] | None, str | None]:
    """A saved distribution on 1..max_tokens, plus a note when it had to be extended.

    Fewer steps: truncation (mass above the new maximum must be zero, else the draft depth
    is wrong). More steps: :func:`specmodel.model.accept.resize` — the documented rule
    (docs/logs.md): deeper drafts are accepted with the last observed conditional rate.
    """
    doc = lf.saved
    assert doc is not None
    probs = [float(p) for p in doc["probs"]]
    rates = tuple(float(r) for r in doc["per_position"]) if doc.get("per_position") else None
    note = None
    if len(probs) > max_tokens:
        if any(p > 1e-12 for p in probs[max_tokens:]):
            raise FieldError(
                None, f"{verbatim(lf.path)}: distribution reaches {len(probs)} tokens/step (steps = {len(probs) - 1}) but "
                      f"{{steps}} is {max_tokens - 1}; pass the {{steps}} the server ran with")
        probs = probs[:max_tokens]
    s = sum(probs)
    dist = acc.AcceptDist(probs=tuple(p / s for p in probs), source=str(doc.get("source") or lf.path),
                          samples=int(doc.get("samples", 0)))
    if len(probs) < max_tokens:
        have = len(probs) - 1
        ext = acc.resize(dist, max_tokens, rates=rates[:have] if rates else None)
        dist = acc.AcceptDist(probs=ext.probs, source=dist.source, samples=dist.samples)
        rates = dist.per_position_rates()
        note = (f"{lf.path} was measured with steps = {have}; extended to steps = {max_tokens - 1} with the last "
                f"observed conditional acceptance rate (docs/logs.md), an extrapolation")
    elif rates is not None:
        rates = rates[: max_tokens - 1]
    return dist, rates, note


def steps_of(files: Sequence[LogFile], num_spec_tokens: int | None) -> int | None:
    return len(files[0].saved["probs"]) - 1 if files[0].saved else 1


FORMAT = LogFormat(name=NAME, description="specmodel accept JSON", help_name="a saved `specmodel accept -o` JSON",
                   text=False, sniff=sniff, parse=parse, summarize=summarize, steps_of=steps_of)
