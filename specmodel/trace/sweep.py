"""Baseline sweep CSV (``predict --baseline-sweep``): measured non-speculative throughput at
(batch, context) points, read strictly so it cannot be misread.

Format (header names the columns, any order, case-insensitive; ``#`` lines are comments)::

    batch,context,tokens_per_s
    1,0,82.0
    16,32768,610.5

* ``batch`` (alias ``concurrency``): concurrent requests, integer >= 1;
* ``context`` (optional, alias ``context_tokens``): KV tokens per request, integer >= 0;
  absent = one unnamed context, recorded as 0;
* exactly one of ``tokens_per_s`` (total over all requests) or ``tokens_per_s_per_request``.

Unknown columns, a missing value, a duplicate (batch, context) row are errors naming the line.
Each row becomes a decode cost row: T_base(B, L) = B / total tok/s (no all-reduce split).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

from specmodel.errors import SpecmodelError
from specmodel.io import read_text_lines
from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import Profile
from specmodel.schema.source import Source

BATCH_COLUMNS = ("batch", "concurrency")
CONTEXT_COLUMNS = ("context", "context_tokens")
TOTAL_COLUMN = "tokens_per_s"
PER_REQUEST_COLUMN = "tokens_per_s_per_request"
KNOWN_COLUMNS = BATCH_COLUMNS + CONTEXT_COLUMNS + (TOTAL_COLUMN, PER_REQUEST_COLUMN)


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """One measured baseline point; ``tokens_per_s`` is the total over ``batch`` requests."""

    batch: int
    context_tokens: int
    tokens_per_s: float
    line: int

    @property
    def tokens_per_s_per_request(self) -> float:
        return self.tokens_per_s / self.batch

    @property
    def step_s(self) -> float:
        """One decode step: B tokens per step, so T_base = B / total tok/s."""
        return self.batch / self.tokens_per_s


def _one_of(fields: list[str], names: tuple[str, ...], where: str, what: str) -> str | None:
    found = [f for f in fields if f in names]
    if len(found) > 1:
        raise SpecmodelError(f"{where}: header names {what} twice ({', '.join(found)}); give one")
    return found[0] if found else None


def read_sweep(path: str) -> tuple[SweepPoint, ...]:
    """Parse and validate a sweep CSV (see the module docstring)."""
    p = Path(path)
    lines = read_text_lines(p, "a CSV baseline sweep")
    numbered = [(i, ln) for i, ln in enumerate(lines, start=1) if ln.strip() and not ln.lstrip().startswith("#")]
    if not numbered:
        raise SpecmodelError(f"{p}: empty file, expected a header line such as 'batch,context,tokens_per_s'")
    rows = list(csv.reader([ln for _, ln in numbered]))
    header_line = numbered[0][0]
    fields = [f.strip().lower() for f in rows[0]]
    where = f"{p}: line {header_line}"
    unknown = [f for f in fields if f not in KNOWN_COLUMNS]
    if unknown:
        raise SpecmodelError(f"{where}: unknown column(s) {', '.join(repr(u) for u in unknown)}; known: "
                             f"{', '.join(KNOWN_COLUMNS)} ({TOTAL_COLUMN} is the total over all requests)")
    if len(set(fields)) != len(fields):
        raise SpecmodelError(f"{where}: a column is named twice in {rows[0]}")
    bcol = _one_of(fields, BATCH_COLUMNS, where, "the batch")
    ccol = _one_of(fields, CONTEXT_COLUMNS, where, "the context")
    tcol = _one_of(fields, (TOTAL_COLUMN, PER_REQUEST_COLUMN), where, "the throughput")
    if bcol is None:
        raise SpecmodelError(f"{where}: no batch column (name it 'batch' or 'concurrency')")
    if tcol is None:
        raise SpecmodelError(f"{where}: no throughput column: name exactly one of '{TOTAL_COLUMN}' (total over all "
                             f"requests) or '{PER_REQUEST_COLUMN}'")
    points: list[SweepPoint] = []
    seen: dict[tuple[int, int], int] = {}
    for (ln, _), raw in zip(numbered[1:], rows[1:], strict=True):
        w = f"{p}: line {ln}"
        if len(raw) != len(fields):
            raise SpecmodelError(f"{w}: {len(raw)} values for {len(fields)} columns ({', '.join(fields)})")
        vals = dict(zip(fields, (v.strip() for v in raw), strict=True))
        for f, v in vals.items():
            if v == "":
                raise SpecmodelError(f"{w}: missing value for '{f}'")
        b = _integer(vals[bcol], w, bcol, minimum=1)
        ctx = _integer(vals[ccol], w, ccol, minimum=0) if ccol else 0
        try:
            t = float(vals[tcol])
        except ValueError:
            raise SpecmodelError(f"{w}: {tcol}: expected a number, got {vals[tcol]!r}") from None
        if not math.isfinite(t) or t <= 0:
            raise SpecmodelError(f"{w}: {tcol}: must be a finite number > 0, got {vals[tcol]!r}")
        total = t * b if tcol == PER_REQUEST_COLUMN else t
        key = (b, ctx)
        if key in seen:
            raise SpecmodelError(f"{w}: duplicate row for batch {b}" + (f", context {ctx}" if ccol else "")
                                 + f" (first on line {seen[key]})")
        seen[key] = ln
        points.append(SweepPoint(batch=b, context_tokens=ctx, tokens_per_s=total, line=ln))
    if not points:
        raise SpecmodelError(f"{p}: no data rows after the header")
    return tuple(points)


def _integer(text: str, where: str, col: str, *, minimum: int) -> int:
    try:
        v = int(text)
    except ValueError:
        raise SpecmodelError(f"{where}: {col}: expected an integer, got {text!r}") from None
    if v < minimum:
        raise SpecmodelError(f"{where}: {col}: must be >= {minimum}, got {v}")
    return v


def sweep_profile(path: str, tp: int) -> Profile:
    """A baseline sweep as a profile with decode rows only, one per (batch, context)."""
    points = read_sweep(path)
    p = Path(path)
    costs = tuple(CostRow(kind="decode", batch=pt.batch, tokens=pt.batch, context_tokens=pt.context_tokens,
                          total_s=pt.step_s, allreduce_s=0.0, compute_s=0.0, other_s=pt.step_s)
                  for pt in sorted(points, key=lambda q: (q.context_tokens, q.batch)))
    ctxs = sorted({pt.context_tokens for pt in points})
    ctx_txt = f"contexts {', '.join(map(str, ctxs))}" if len(ctxs) > 1 else f"context {ctxs[0]}"
    return Profile(name=p.stem, source=Source.sweep(path=str(p), description=f"baseline sweep {p.name} "
                                                    f"({len(points)} points, {ctx_txt}; decode step only, no "
                                                    "all-reduce split)"),
                   tp=tp, costs=costs, path=str(p))
