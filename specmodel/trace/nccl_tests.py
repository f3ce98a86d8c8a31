"""nccl-tests ``all_reduce_perf`` output → all-reduce latency points (SI units).

Format (NVIDIA/nccl-tests ``src/common.cu`` / ``src/util.cu``): a ``#`` preamble
(``# nThread 1 nGpus 8 minBytes 8 maxBytes ... iters: 20 ...``, one ``#  Rank N ...`` line per
GPU), a two-line column header, one row per message size, and a footer
(``# Out of bounds values : 0 OK``, ``# Avg bus bandwidth : 10.5``). Rows are
``size count type redop [root]`` then, out-of-place and in-place,
``time algbw busbw #wrong`` (µs, GB/s, GB/s, wrong elements or N/A), each followed by
``i_min i_max i_p99 i_cv%`` with per-iteration timing (``-I 1``). Before nccl-tests 2.13 the
root column is absent for all-reduce and the check column is ``error`` (the max. numeric delta,
not a count). Columns are mapped from the header line by name, not by position; ``-N`` cycles
repeat sizes and are folded into a median.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.io import read_json, read_text_lines
from specmodel.limits import MAX_BETA_OVER_MEASURED, MAX_LINK_BYTES_PER_S
from specmodel.schema.costrows import AllReduceFit, AllReducePoint
from specmodel.schema.fields import at_record
from specmodel.schema.formats import ALLREDUCE_FIT
from specmodel.units import from_gb_per_s, from_us, gb_per_s

_TAG = re.compile(r"^\[\d+,\d+\]<std(?:out|err)>:")  # mpirun --tag-output
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\S+)\s+(\S+)\s")
_PROGRAM = re.compile(r"Collective test starting: (\S+)")
_RANK = re.compile(r"^#\s+Rank\s+(\d+)\s")
_CONFIG = re.compile(r"^#\s*nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+)")
_ITERS = re.compile(r"(?<!warmup )(?<!agg )iters: (\d+)")
_OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)")
_AVG_BW = re.compile(r"Avg bus bandwidth\s*:\s*([-+\d.eE]+|nan)")
_VERSION = re.compile(r"nccl-tests version (\S+)")
_TIME_NAMES = ("time", "cputime")


@dataclass(frozen=True, kw_only=True)
class NcclRow:
    """One size row. Times in seconds, bandwidths in bytes/s (converted from µs, GB/s)."""

    line: int
    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    wrong: float | None  # #wrong (count) or, old format, the max. delta; None = N/A
    in_place_time_s: float | None = None
    in_place_wrong: float | None = None
    iter_min_s: float | None = None
    iter_max_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class NcclRun:
    """A parsed nccl-tests output file."""

    path: str
    program: str  # "" when the output predates the "Collective test starting" line
    version: str
    n_ranks: int | None
    check_column: str  # "#wrong" | "error" | ""
    per_iteration: bool
    rows: tuple[NcclRow, ...]
    config: dict[str, int] = field(default_factory=dict)
    out_of_bounds: int | None = None
    avg_busbw_bytes_per_s: float | None = None
    #: the footer (``# Avg bus bandwidth``) was there: the run finished (a killed one has none)
    complete: bool = True

    @property
    def is_allreduce(self) -> bool:
        if self.program:
            return self.program.startswith("all_reduce")
        return all(r.redop != "none" and r.root in (None, -1) for r in self.rows)


def _read_text(path: str) -> list[str]:
    return read_text_lines(path, "nccl-tests text output")


def _header_columns(line: str) -> list[str] | None:
    """Column names from ``#  size  count  type  redop  root  time  algbw ...``, else None."""
    toks = line.lstrip("#").split()
    if len(toks) >= 6 and toks[:4] == ["size", "count", "type", "redop"]:
        return toks
    return None


def _small_int(tok: str, where: str, name: str) -> int:
    if len(tok) > 20:
        raise SpecmodelError(f"{where}: {name}: {len(tok)}-digit number is not plausible")
    return int(tok)


def _value(tok: str, where: str, name: str) -> float | None:
    if tok.upper() == "N/A":
        return None
    try:
        v = float(tok)
    except ValueError:
        raise SpecmodelError(f"{where}: column {name}: not a number: {tok!r}") from None
    if math.isnan(v):
        return None
    return v


def parse_nccl_tests(path: str | Path) -> NcclRun:
    """Parse one nccl-tests stdout capture; raise :class:`SpecmodelError` on anything malformed."""
    spath = str(path)
    lines = _read_text(spath)
    program = version = ""
    ranks: set[int] = set()
    config: dict[str, int] = {}
    columns: list[str] | None = None
    check = ""
    per_iter = False
    rows: list[NcclRow] = []
    oob: int | None = None
    avg_bw: float | None = None
    saw_footer = False
    for i, raw in enumerate(lines, start=1):
        line = _TAG.sub("", raw)
        where = f"{spath}:{i}"
        if line.lstrip().startswith("#"):
            cols = _header_columns(line)
            if cols is not None:
                columns = cols
                check = "#wrong" if "#wrong" in cols else ("error" if "error" in cols else "")
                per_iter = per_iter or "i_min" in cols
                continue
            if m := _PROGRAM.search(line):
                program = m.group(1)
            elif m := _VERSION.search(line):
                version = m.group(1)
            elif m := _RANK.search(line):
                ranks.add(_small_int(m.group(1), where, "Rank"))
            elif m := _CONFIG.search(line):
                config.update(nThread=_small_int(m.group(1), where, "nThread"),
                              nGpus=_small_int(m.group(2), where, "nGpus"),
                              minBytes=_small_int(m.group(3), where, "minBytes"),
                              maxBytes=_small_int(m.group(4), where, "maxBytes"))
                if im := _ITERS.search(line):
                    config["iters"] = _small_int(im.group(1), where, "iters")
            elif m := _OOB.search(line):
                oob = (oob or 0) + _small_int(m.group(1), where, "Out of bounds values")
            elif m := _AVG_BW.search(line):
                avg_bw = _value(m.group(1), where, "Avg bus bandwidth")
                saw_footer = True
            continue
        toks = line.split()
        if not _ROW.match(line):
            if columns is not None and toks and toks[0].isdigit():
                # a row cut short (a killed run, a truncated copy): dropping it would bias the fit
                raise SpecmodelError(f"{where}: data row has {len(toks)} fields, the header names {len(columns)} "
                                     "(truncated row?)")
            continue
        if columns is None:
            raise SpecmodelError(f"{where}: data row before the column header (size count type redop ...)")
        if len(toks[0]) > 20 or len(toks[1]) > 20:
            raise SpecmodelError(f"{where}: size/count {toks[0][:24]!r}/{toks[1][:24]!r}: not a plausible message size")
        try:
            t0 = next(j for j, c in enumerate(columns) if c in _TIME_NAMES)
            t1 = next(j for j, c in enumerate(columns) if c in _TIME_NAMES and j > t0)
        except StopIteration:
            raise SpecmodelError(f"{where}: column header has no out-of-place and in-place 'time' columns") from None
        width = t1 - t0
        if len(toks) < max(t1 + 3, len(columns)):
            raise SpecmodelError(f"{where}: row has {len(toks)} fields, the header names {len(columns)} (truncated?)")
        named = dict(zip(columns, toks, strict=False))
        oop = dict(zip(columns[t0:t1], toks[t0:t1], strict=True))
        ip = dict(zip(columns[t1:t1 + width], toks[t1:t1 + width], strict=False))
        t = _value(oop[columns[t0]], where, "time")
        if t is None or t < 0:
            raise SpecmodelError(f"{where}: out-of-place time must be a number >= 0, got {oop[columns[t0]]!r}")
        ck = check if check else None

        def get(d: dict[str, str], name: str, where: str = where) -> float | None:
            return _value(d[name], where, name) if name in d else None

        root_tok = named.get("root")
        try:
            root = int(root_tok) if root_tok is not None else None
        except ValueError:
            raise SpecmodelError(f"{where}: column root: not an integer: {root_tok!r}") from None
        ipt = get(ip, columns[t1])
        imin, imax = get(oop, "i_min"), get(oop, "i_max")
        rows.append(NcclRow(
            line=i, size_bytes=int(toks[0]), count=int(toks[1]), dtype=toks[2], redop=toks[3], root=root,
            time_s=from_us(t),
            algbw_bytes_per_s=from_gb_per_s(get(oop, "algbw") or 0.0), busbw_bytes_per_s=from_gb_per_s(get(oop, "busbw") or 0.0),
            wrong=get(oop, ck) if ck else None,
            in_place_time_s=from_us(ipt) if ipt is not None else None,
            in_place_wrong=get(ip, ck) if ck else None,
            iter_min_s=from_us(imin) if imin is not None else None,
            iter_max_s=from_us(imax) if imax is not None else None,
        ))
    if not rows:
        raise SpecmodelError(f"{spath}: no nccl-tests result rows found in {len(lines)} lines "
                             "(expected the stdout of all_reduce_perf: '# size count type redop ...' then one row per size)")
    n_ranks = len(ranks) if ranks else None
    if n_ranks is None and "nGpus" in config and "nThread" in config:
        n_ranks = config["nGpus"] * config["nThread"]  # single process; MPI runs list every rank
    return NcclRun(path=spath, program=program, version=version, n_ranks=n_ranks, check_column=check,
                   per_iteration=per_iter, rows=tuple(rows), config=config, out_of_bounds=oob,
                   avg_busbw_bytes_per_s=from_gb_per_s(avg_bw) if avg_bw is not None else None,
                   complete=saw_footer)


def check_corruption(run: NcclRun) -> None:
    """A non-zero ``#wrong`` (or failed out-of-bounds check) is a data-corruption error."""
    if run.check_column == "#wrong":
        for r in run.rows:
            for wrong, kind in ((r.wrong, "out-of-place"), (r.in_place_wrong, "in-place")):
                if wrong is not None and wrong > 0:
                    raise SpecmodelError(
                        f"{run.path}:{r.line}: data corruption: {wrong:g} wrong elements at size {r.size_bytes} B "
                        f"({kind}); the collective returned wrong results, fix the system before fitting timings")
    if run.out_of_bounds:
        raise SpecmodelError(f"{run.path}: data corruption: 'Out of bounds values : {run.out_of_bounds} FAILED' "
                             "(results outside tolerance); fix the system before fitting timings")


def allreduce_points(run: NcclRun, tp: int) -> tuple[AllReducePoint, ...]:
    """Out-of-place latency per message size (median over repeated ``-N`` cycles).

    Size-0 rows are left out (no data moves; they time the launch only). ``spread_s`` is the
    range over cycles, or i_max − i_min from per-iteration timing when there is one cycle.
    """
    by: dict[int, list[NcclRow]] = {}
    for r in run.rows:
        if r.size_bytes > 0 and r.time_s > 0:
            by.setdefault(r.size_bytes, []).append(r)
    pts = []
    for size in sorted(by):
        rs = by[size]
        ts = [r.time_s for r in rs]
        if len(rs) == 1 and rs[0].iter_min_s is not None and rs[0].iter_max_s is not None:
            spread = max(rs[0].iter_max_s - rs[0].iter_min_s, 0.0)
        else:
            spread = max(ts) - min(ts)
        pts.append(AllReducePoint(msg_bytes=size, tp=tp, latency_s=statistics.median(ts), spread_s=spread))
    return tuple(pts)


def fit_warnings(runs: Sequence[NcclRun], fit: AllReduceFit, points: Sequence[AllReducePoint]) -> tuple[str, ...]:
    """What makes a fit untrustworthy, one line each: a run cut before its footer (killed, timed
    out: its large sizes are missing), and a beta no link can have or no row measured (rows that are
    all latency-bound leave beta undetermined; the least-squares fit then returns anything)."""
    out = []
    for r in runs:
        if not r.complete:
            of = f" of maxBytes {r.config['maxBytes']} B" if "maxBytes" in r.config else ""
            out.append(f"{r.path}: no footer ('# Avg bus bandwidth'): the run stopped before it finished (killed, "
                       f"timed out?); its last row is {r.rows[-1].size_bytes} B{of}")
    beta = fit.beta_bytes_per_s
    best = max((row.busbw_bytes_per_s for r in runs for row in r.rows), default=0.0)
    largest = max((p.msg_bytes for p in points), default=0)
    if beta > MAX_LINK_BYTES_PER_S:
        out.append(f"fit: beta {gb_per_s(beta, 0)} per link is physically impossible (no GPU link moves more "
                   f"than ~900 GB/s); the rows (largest {largest} B) do not determine it: measure up to 64 MB "
                   "(all_reduce_perf -e 64M)")
    elif best > 0 and beta > MAX_BETA_OVER_MEASURED * best:
        out.append(f"fit: beta {gb_per_s(beta, 1)} per link is {beta / best:.0f}x the best bus bandwidth any row "
                   f"measured ({gb_per_s(best)}): the rows (largest {largest} B) are latency-bound and do not "
                   "determine beta; measure up to 64 MB (all_reduce_perf -e 64M)")
    return tuple(out)


FIT_SCHEMA = ALLREDUCE_FIT.name
FIT_SCHEMA_VERSION = ALLREDUCE_FIT.version


def fit_document(fit: AllReduceFit, points: Sequence[AllReducePoint], sources: Sequence[NcclRun]) -> dict[str, Any]:
    """The standalone schema-versioned JSON ``specmodel nccl-tests -o`` writes without ``--profile``."""
    return ALLREDUCE_FIT.stamp({
        "source": {"kind": "nccl-tests", "files": [r.path for r in sources],
                   "programs": sorted({r.program for r in sources if r.program}),
                   "versions": sorted({r.version for r in sources if r.version})},
        "allreduce_fit": fit.to_dict(),
        "allreduce_points": [p.to_dict() for p in points],
    })


def load_fit_document(path: str | Path) -> tuple[AllReduceFit, tuple[AllReducePoint, ...]]:
    """Read back :func:`fit_document`; every field validated, errors name the file."""
    where = str(path)
    d = read_json(path)
    ALLREDUCE_FIT.check(d, where)
    fit_raw = d.get("allreduce_fit")
    if not isinstance(fit_raw, dict):
        raise SpecmodelError(f"{where}: allreduce_fit: missing or not an object")
    pts_raw = d.get("allreduce_points")
    if not isinstance(pts_raw, list):
        raise SpecmodelError(f"{where}: allreduce_points: expected a list")
    try:
        fit = AllReduceFit.from_dict(fit_raw, f"{where}: allreduce_fit")
        pts = tuple(AllReducePoint.from_dict(x, f"{where}: allreduce_points[{i}]") for i, x in enumerate(pts_raw))
    except SpecmodelError as exc:
        raise at_record(exc, where) from None
    return fit, pts
