"""SGLang ``scripts/playground/bench_speculative.py`` JSONL rows.

``{"batch_size","steps","topk","num_draft_tokens","acc_length","step_time","speed","completion_tokens"}``
(``speed`` = acc_length / step_time, tok/s *per request*; the window's total is × batch_size).
Rows with ``steps = 0`` are the baseline. Distribution: the rows with the requested steps, equal
weight, geometric around each ``acc_length`` (:func:`specmodel.model.accept.mixture_of_means`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from specmodel.engines.base import AcceptSummary, DecodeWindow, LogFile, LogFormat, SummaryInputs
from specmodel.engines.parse import JSON_ROWS, OTHER_DOCUMENT, check_means, json_kind
from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.io import loads_json
from specmodel.limits import MAX_BATCH, MAX_DRAFT_TOKENS, MAX_STEPS, MAX_TOPK, ROUND_SLACK
from specmodel.model import accept as acc

NAME = "bench_speculative"
_KEYS = ("batch_size", "steps", "topk", "num_draft_tokens", "acc_length", "step_time", "speed")


def _opt_num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        return None
    return float(v)


def sniff(path: str, lines: Sequence[str], first: str) -> bool:
    # a JSON document carrying a "schema" is one of specmodel's own files, not a bench row
    return json_kind(path, lines, first) in (JSON_ROWS, OTHER_DOCUMENT)


def parse(path: str, lines: list[str], unterminated: bool) -> LogFile:
    windows: list[DecodeWindow] = []
    for i, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{i}"
        try:
            row = loads_json(line, where)
        except SpecmodelError:
            raise SpecmodelError(f"{where}: not a JSON object (bench_speculative JSONL has one per line)") from None
        if not isinstance(row, dict):
            raise SpecmodelError(f"{where}: expected a JSON object")
        missing = [k for k in _KEYS if k not in row]
        if missing:
            raise SpecmodelError(f"{where}: bench_speculative row lacks {', '.join(missing)}")
        vals: dict[str, float] = {}
        for k in _KEYS:
            v = row[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise SpecmodelError(f"{where}: {k}: expected a finite number >= 0, got {v!r}")
            vals[k] = float(v)
        for k in ("batch_size", "steps", "topk", "num_draft_tokens"):
            if not vals[k].is_integer():
                raise SpecmodelError(f"{where}: {k}: expected an integer, got {row[k]!r}")
        if vals["batch_size"] < 1:
            raise SpecmodelError(f"{where}: batch_size must be >= 1")
        for k, hi in (("batch_size", MAX_BATCH), ("steps", MAX_STEPS), ("topk", MAX_TOPK),
                      ("num_draft_tokens", MAX_DRAFT_TOKENS)):
            if vals[k] > hi:
                raise SpecmodelError(f"{where}: {k} must be <= {hi}, got {row[k]!r}")
        if vals["acc_length"] < 1.0 - ROUND_SLACK:
            raise SpecmodelError(f"{where}: acc_length {row['acc_length']} is not >= 1 token/step")
        b = int(vals["batch_size"])
        # speed = acc_length / step_time is per request; the window's total is × batch
        windows.append(DecodeWindow(file=path, line=i, engine=NAME, batch=b,
                                    accept_len=vals["acc_length"], tokens_per_s=vals["speed"] * b,
                                    steps=int(vals["steps"]), topk=int(vals["topk"]),
                                    num_draft_tokens=int(vals["num_draft_tokens"]),
                                    completion_tokens=_opt_num(row.get("completion_tokens"))))
    if not windows:
        raise SpecmodelError(f"{path}: no bench_speculative rows")
    return LogFile(path=path, engine=NAME, fmt="", lines_read=len(lines), lines_matched=len(windows),
                   windows=tuple(windows))


def summarize(files: Sequence[LogFile], inp: SummaryInputs) -> AcceptSummary:
    label, max_tokens = inp.label, inp.max_tokens
    rows = [w for f in files for w in f.windows if (w.steps or 0) > 0]
    if not rows:
        raise SpecmodelError(f"{label}: only baseline rows (steps 0), no speculative acc_length")
    want = max_tokens - 1
    match = [w for w in rows if w.steps == want]
    if not match:
        have = sorted({w.steps for w in rows if w.steps is not None})
        raise FieldError(None, f"{verbatim(label)}: no rows with steps = {want} (file has steps {', '.join(map(str, have))}); "
                               "pass {steps} to choose one")
    # samples: verify steps of one average request per row (completion_tokens / acc_length);
    # conservative, since the row averaged over all its requests
    samples = sum(max(int(round((w.completion_tokens or 1.0) / float(w.accept_len or 1.0))), 1) for w in match)
    check_means([(float(w.accept_len or 1.0), w.where) for w in match], max_tokens)
    dist = acc.mixture_of_means(((float(w.accept_len or 1.0), 1.0) for w in match), max_tokens,
                                source=f"bench_speculative {label}", samples=samples)
    return AcceptSummary(dist=dist, rates=None, files=tuple(files), windows_used=len(match), windows=tuple(match),
                         notes=(f"{len(match)} rows with steps = {want}, equal weight, geometric shape around each "
                                "acc_length",))


def steps_of(files: Sequence[LogFile], num_spec_tokens: int | None) -> int | None:
    steps = sorted({w.steps for f in files for w in f.windows if w.steps})
    if len(steps) == 1:
        return steps[0]
    if not steps:
        raise SpecmodelError(f"{files[0].path}: only baseline rows (steps 0), no speculative acc_length")
    raise FieldError(None, f"{verbatim(files[0].path)}: rows for steps {', '.join(map(str, steps))}; pass {{steps}} "
                           "to choose one")


FORMAT = LogFormat(name=NAME, description="SGLang bench_speculative JSONL", help_name="SGLang bench_speculative JSONL",
                   text=False, sniff=sniff, parse=parse, summarize=summarize, steps_of=steps_of,
                   steps_hint="pass {steps} to choose the rows")
