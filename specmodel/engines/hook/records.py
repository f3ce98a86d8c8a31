"""Reading the per-rank JSONL the engine hooks write (SGLang: ``specmodel.sglang_forward``; vLLM:
``specmodel.vllm_step``): one JSON object per line, a format header on every line, a truncated
last line (the process died mid-write) ignored with a warning, anything else malformed refused
with one line naming the file and line. Shared by :mod:`specmodel.engines.sglang.hooklog` and
:mod:`specmodel.engines.vllm.hooklog`."""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.schema.formats import Format

log = logging.getLogger("specmodel.hooklog")

#: the server's last ``/metrics`` page, kept by ``specmodel vllm`` beside the rank logs of ``--out``
METRICS_FILE = "metrics.prom"


def read_records(path: str | os.PathLike[str], fmt: Format, what: str) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
    """(``[(where, record), ...]``, truncated) of one rank file; records carry ``fmt``'s header, or
    the calibration probe's (:data:`~specmodel.schema.formats.PROBE`: both hooks write it in between)."""
    from specmodel.io import read_bytes
    from specmodel.schema.formats import PROBE

    p = Path(path)
    raw = read_bytes(p, what)
    lines = raw.split(b"\n")
    out: list[tuple[str, dict[str, Any]]] = []
    truncated = False
    for i, bline in enumerate(lines, start=1):
        if not bline.strip():
            continue
        where = f"{p}: line {i}"
        last_unterminated = i == len(lines) and not raw.endswith(b"\n")
        try:
            rec = json.loads(bline.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):  # (ValueError: JSON, or 4,300+ digit ints)
            if last_unterminated:
                log.warning("%s: truncated last line ignored (the process stopped mid-write)", where)
                truncated = True
                continue
            raise SpecmodelError(f"{where}: not valid JSON") from None
        (PROBE if PROBE.matches(rec) else fmt).check(rec, where)  # a JSON object of this format, a version this specmodel reads
        out.append((where, rec))
    return out, truncated


class Runs:
    """A rank file's records by process run: each meta line opens a run (a file a restarted process
    appended to holds several); records before any meta line (v1 files) go to a run without one."""

    def __init__(self) -> None:
        self.metas: list[dict[str, Any]] = []
        self.runs: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []

    def meta(self, rec: dict[str, Any]) -> None:
        self.metas.append(rec)
        self.runs.append((rec, []))

    def current(self) -> int:
        """The index of the run a record read now belongs to."""
        if not self.runs:
            self.runs.append(({}, []))
        return len(self.runs) - 1

    def add(self, rec: dict[str, Any]) -> None:
        self.runs[self.current()][1].append(rec)

    def frozen(self) -> tuple[tuple[dict[str, Any], tuple[dict[str, Any], ...]], ...]:
        return tuple((m, tuple(recs)) for m, recs in self.runs)


def log_files(dirs: Iterable[str | os.PathLike[str]], command: str) -> list[Path]:
    """``rank*.jsonl`` under each directory; one line naming the directory when there are none."""
    files: list[Path] = []
    for d in dirs:
        dp = Path(d)
        if not dp.is_dir():
            raise FieldError(None, f"{verbatim(dp)}: not a directory (expected the {{out}} directory of `{command}`)")
        found = sorted(dp.glob("rank*.jsonl"))
        if not found:
            raise SpecmodelError(f"{dp}: no rank*.jsonl files (was the server run under `{command}`?)")
        files.extend(found)
    return files


def one_value(what: str, seen: dict[Any, str], hint: str) -> None:
    """Refuse two different values of ``what`` in logs meant for one profile (``seen``: value -> the
    first file that had it): one line naming both files and both values, and ``hint``."""
    if len(seen) > 1:
        (a, fa), (b, fb) = list(seen.items())[:2]  # in the order the files were read
        raise SpecmodelError(f"{fa}: {what} {a} but {fb}: {what} {b}; {hint}")


def check_one_server_kind(*, tp: int | None, tp_sizes: dict[int, str], models: dict[Any, str],
                          versions: dict[Any, str], version_key: str, engine: str) -> None:
    """Logs summarized into one profile come from one TP degree, one model and one engine version,
    and a ``--tp`` given agrees with them (both hooks' ``--summarize``)."""
    one_value("tp_size", {str(k): v for k, v in tp_sizes.items()},
              "logs of different TP degrees make no one profile: summarize each TP alone")
    one_value("model_path", models, "logs of different models make no one profile")
    one_value(version_key, versions, f"logs of different {engine} versions make no one profile")
    if tp is not None and tp_sizes and tp not in tp_sizes:
        first = next(iter(tp_sizes))
        raise FieldError(None, f"{{tp}} {tp}: contradicts {verbatim(tp_sizes[first])}: tp_size {first} (leave {{tp}} out: the "
                               "logs say)")


def check_place(meta: dict[str, Any], where: str, keys: Iterable[str]) -> None:
    """The meta line's ranks (>= 0) and sizes / bounds (>= 1), each an integer or absent (v1)."""
    from specmodel.limits import MAX_PROCESS_RANK

    for k in keys:
        v = meta.get(k)
        if v is None:
            continue
        lo = 0 if k.endswith("_rank") else 1
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= MAX_PROCESS_RANK:
            raise SpecmodelError(f"{where}: {k}: expected an integer in {lo}..{MAX_PROCESS_RANK} or null, got {v!r}")


def dp_replica(meta: dict[str, Any]) -> int:
    """The DP replica a process belongs to (0 for a v1 meta line, which does not say)."""
    dp = meta.get("dp_rank")
    return dp if isinstance(dp, int) else 0


def pick_replica(metas: Iterable[tuple[dict[str, Any], str]], dp_rank: int | None, where: str) -> int | None:
    """Which data-parallel replica ``--summarize`` reads: None when the logs hold one (read them all).

    A profile prices one engine: TP ranks in lockstep, one batch. DP replicas are engines of their
    own, each with its own batch, so a recording of several is summarized one replica at a time
    (``--dp-rank``). Pipeline parallelism is refused: a step is split over stages (each process
    times its stage's layers), and the cycle model prices one TP group's whole step."""
    seen: set[int] = set()
    for m, path in metas:
        pp_size, pp = m.get("pp_size"), m.get("pp_rank")
        if (isinstance(pp_size, int) and pp_size > 1) or (isinstance(pp, int) and pp > 0):
            raise SpecmodelError(f"{path}: recorded with pipeline parallelism (pp_size {pp_size}, pp_rank {pp}): "
                                 "each process times its own stage, and the model prices one TP group's whole "
                                 "step; record the server with pipeline-parallel size 1")
        seen.add(dp_replica(m))
    replicas = ", ".join(map(str, sorted(seen)))
    if dp_rank is not None:
        if dp_rank not in seen:
            raise FieldError(None, f"{{dp_rank}} {dp_rank}: {verbatim(where)} holds DP replica(s) {replicas}")
        return dp_rank
    if len(seen) > 1:
        raise FieldError(None, f"{verbatim(where)}: the logs hold {len(seen)} data-parallel replicas ({replicas}), each an "
                               "engine with its own batch; summarize one at a time with {dp_rank} N")
    return None


class Drops:
    """Records a hook dropped, tallied over the runs a summary reads: each run's count is its last
    line's (every line carries the running total), the kinds of the rows that run fed, and the queue
    bound its meta line names (``unit``: "step" for vLLM, "forward" for SGLang)."""

    def __init__(self, unit: str) -> None:
        self.unit = unit
        self.dropped = 0
        self.kinds: set[str] = set()
        self.bounds: set[int] = set()

    def add_run(self, meta: dict[str, Any], records: Iterable[dict[str, Any]], kind_key: str) -> None:
        recs = list(records)
        n = max((int(r.get(f"dropped_{self.unit}s") or 0) for r in recs), default=0)
        if n:
            self.dropped += n
            self.kinds.update(str(r[kind_key]) for r in recs)
            if isinstance(meta.get(f"max_pending_{self.unit}s"), int):
                self.bounds.add(meta[f"max_pending_{self.unit}s"])

    def note(self) -> str | None:
        return drops_note(self.dropped, max(self.bounds) if self.bounds else None, self.unit, self.kinds)


def drops_note(dropped: int, bound: int | None, unit: str, kinds: Iterable[str]) -> str | None:
    """The summary's line on records a hook dropped (None: none were)."""
    if dropped <= 0:
        return None
    ahead = f"more than {bound} {unit}s" if bound else "further than the hook's queue holds"
    touched = ", ".join(sorted(set(kinds))) or "none"
    return (f"{dropped} {unit}s dropped: the GPU ran {ahead} ahead of the hook's reader (the hook never waits on "
            f"the GPU). Rows of the runs that dropped them ({touched}) may read low: a {unit} is dropped while "
            "the GPU lags furthest behind the host, so the slowest stretches are the ones under-sampled.")
