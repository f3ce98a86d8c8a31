"""Accept length and observed throughput from inference-server logs: the engine-neutral front.

Which files are read, and how, is the engine registry's business (:mod:`specmodel.engines`:
one module per engine format, listed in one tuple; docs/engines.md). This module dispatches a
file to the plug-in that sniffs it, checks the flags every engine shares (``--steps``,
``--num-spec-tokens``, ``--decode-log-interval``) against what the logs themselves say, and
writes the saved ``specmodel accept`` document. Acceptance mixtures are built in
:mod:`specmodel.model.accept`. How each distribution is built is documented in docs/logs.md.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from specmodel.engines import engine_of_log, log_format, log_formats
from specmodel.engines.accept_json import check_saved as _check_saved
from specmodel.engines.base import (
    CONFIG_FIELDS,
    AcceptSummary,
    DecodeWindow,
    EngineConfig,
    LogFile,
    SummaryInputs,
    window_skip_reason,
)
from specmodel.engines.parse import read_log_lines
from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.io import atomic_write_json
from specmodel.limits import MAX_STEPS
from specmodel.model import accept as acc
from specmodel.schema.formats import ACCEPT

__all__ = ["ACCEPT_SCHEMA", "ACCEPT_SCHEMA_VERSION", "AcceptSummary", "DecodeWindow",
           "EngineConfig", "LogFile", "SeriesPoint", "accept_dist_from_logs", "accept_document",
           "check_flag_against_log", "iter_windows", "logged_config",
           "parse_log", "summarize", "summarize_files", "throughput_series",
           "window_skip_reason", "write_accept_json"]

ACCEPT_SCHEMA = ACCEPT.name
ACCEPT_SCHEMA_VERSION = ACCEPT.version


# ---------------------------------------------------------------------------------------------
# parsing


def parse_log(path: str | Path) -> LogFile:
    """Parse one file with the registered format that recognises it; every problem is one
    :class:`SpecmodelError` naming the file (and line)."""
    spath = str(path)
    lines, unterminated = read_log_lines(spath)
    return parse_lines(spath, lines, unterminated)


def parse_lines(spath: str, lines: list[str], unterminated: bool) -> LogFile:
    """:func:`parse_log` on lines already read (``watch`` follows a log and keeps a bounded part of it)."""
    first = next((ln.strip() for ln in lines if ln.strip()), "")
    if not first:
        raise SpecmodelError(f"{spath}: empty file (no log lines)")
    hits = [f for f in log_formats() if f.sniff(spath, lines, first)]
    text = [f for f in hits if f.text]
    if len(text) > 1:
        names = " and ".join(f.description.split(" ")[0] for f in text)
        raise SpecmodelError(f"{spath}: has both {names} lines; give one server's log per file")
    if not hits:
        wanted = ", ".join(f.description for f in log_formats())
        raise SpecmodelError(
            f"{spath}: no SGLang 'Decode batch' lines, vLLM 'SpecDecoding metrics' lines or bench_speculative JSONL "
            f"rows found in {len(lines)} lines (is this the server's log, with speculative decoding enabled? "
            f"formats read: {wanted})")
    # a JSON document sniffed by several JSON formats goes to the last registered (the most specific)
    fmt = text[0] if text else hits[-1]
    return replace(fmt.parse(spath, lines, unterminated), format_description=fmt.description)


def logged_config(files: Sequence[LogFile]) -> EngineConfig | None:
    """The one configuration the given logs were produced with (None when none logged one).

    Two files whose logged steps, topk, model or TP differ are an error: one distribution
    cannot mix draft depths.
    """
    cfg: EngineConfig | None = None
    for f in files:
        c = f.config
        if c is None:
            continue
        if cfg is None:
            cfg = c
            continue
        for key in ("steps", "topk", "num_draft_tokens", "model", "tp"):
            a, b = getattr(cfg, key), getattr(c, key)
            if a is not None and b is not None and a != b:
                raise SpecmodelError(f"{c.where}: {key} {b} but {cfg.where} logged {key} {a}; "
                                     "give logs of one server configuration at a time")
        cfg = cfg.merged(c)
    return cfg


def check_flag_against_log(flag: str, value: int | None, logged: int | None, cfg: EngineConfig | None) -> int | None:
    """A flag that contradicts the server's logged value is an error showing both; else the known one."""
    if value is not None and logged is not None and value != logged and cfg is not None:
        raise SpecmodelError(f"{flag} {value} contradicts the log: the server ran with {logged} ({cfg.where}); "
                             f"drop {flag} or give the log of the server you mean")
    return value if value is not None else logged


def _against_log(field: str, value: int | None, logged: int | None, cfg: EngineConfig | None) -> int | None:
    """:func:`check_flag_against_log` naming the input ``field`` (a :class:`FieldError`)."""
    try:
        return check_flag_against_log("{" + field + "}", value, logged, cfg)
    except SpecmodelError as exc:
        raise FieldError(None, str(exc)) from None


# ---------------------------------------------------------------------------------------------
# distributions


def summarize(paths: Sequence[str], max_tokens: int | None = None, *, num_spec_tokens: int | None = None,
              decode_log_interval: int | None = None) -> AcceptSummary:
    """Parse every file and build one accept-length distribution on 1..max_tokens
    (:func:`summarize_files` of the parsed files)."""
    if not paths:
        raise SpecmodelError("give at least one log file")
    _check_summary_args(max_tokens, num_spec_tokens, decode_log_interval)
    return summarize_files(tuple(parse_log(p) for p in paths), max_tokens, num_spec_tokens=num_spec_tokens,
                           decode_log_interval=decode_log_interval)


def _check_summary_args(max_tokens: int | None, num_spec_tokens: int | None, decode_log_interval: int | None) -> None:
    if decode_log_interval is not None and decode_log_interval < 1:
        raise FieldError("decode_log_interval", f"must be >= 1, got {decode_log_interval}")
    if num_spec_tokens is not None and not 1 <= num_spec_tokens <= MAX_STEPS:
        raise FieldError("num_spec_tokens", f"must be in 1..{MAX_STEPS}, got {num_spec_tokens}")
    if max_tokens is not None and not 2 <= max_tokens <= MAX_STEPS + 1:
        raise FieldError("steps", f"must be in 1..{MAX_STEPS}, got {max_tokens - 1}")


def summarize_files(files: Sequence[LogFile], max_tokens: int | None = None, *, num_spec_tokens: int | None = None,
                    decode_log_interval: int | None = None) -> AcceptSummary:
    """One accept-length distribution on 1..max_tokens from files already parsed (:func:`parse_log`).

    ``max_tokens`` = steps + 1; None infers it from what the files carry (the server's logged
    configuration, vLLM per-position rates, bench rows, a saved distribution); SGLang decode
    lines do not carry the step count, so there it is required.
    """
    files = tuple(files)
    if not files:
        raise SpecmodelError("give at least one log file")
    _check_summary_args(max_tokens, num_spec_tokens, decode_log_interval)
    cfg = logged_config(files)
    notes: list[str] = []
    if cfg is not None:
        steps = _against_log("steps", max_tokens - 1 if max_tokens is not None else None, cfg.steps, cfg)
        if max_tokens is None and steps is not None:
            max_tokens = steps + 1
            notes.append(f"steps {steps} from the server's logged configuration ({cfg.where})")
        # a chain-drafting engine's draft depth is its number of speculative tokens (vLLM)
        eng = engine_of_log(cfg.engine)
        num_spec_tokens = _against_log("num_spec_tokens", num_spec_tokens,
                                       cfg.steps if eng is not None and eng.chains_only else None, cfg)
        decode_log_interval = _against_log("decode_log_interval", decode_log_interval,
                                           cfg.decode_log_interval, cfg)
    engines = {f.engine for f in files}
    if len(engines) > 1:
        raise SpecmodelError(f"mixed inputs ({', '.join(sorted(engines))}): give files of one kind at a time")
    fmt = log_format(engines.pop())
    label = _label([f.path for f in files])
    notes.extend(w for f in files for w in f.warnings)

    if max_tokens is None:
        steps = fmt.steps_of(files, num_spec_tokens)
        if steps is None:
            raise FieldError(None, f"{verbatim(files[0].path)}: {fmt.steps_hint}")
        max_tokens = steps + 1
    if max_tokens < 2:
        raise FieldError("steps", f"must be >= 1, got {max_tokens - 1}")
    if max_tokens > MAX_STEPS + 1:
        raise SpecmodelError(f"{label}: steps {max_tokens - 1} is more than {MAX_STEPS} (the bound specmodel accepts)")
    inp = SummaryInputs(max_tokens=max_tokens, label=label, num_spec_tokens=num_spec_tokens,
                        decode_log_interval=decode_log_interval)
    s = fmt.summarize(files, inp)
    return AcceptSummary(dist=s.dist, rates=s.rates, files=s.files, windows_used=s.windows_used, windows=s.windows,
                         notes=tuple(notes) + s.notes, config=cfg, by_context=s.by_context,
                         proposal_rate=s.proposal_rate, window_steps=s.window_steps)


def accept_dist_from_logs(paths: list[str], max_tokens: int, *,
                          num_spec_tokens: int | None = None) -> tuple[acc.AcceptDist, tuple[float, ...] | None]:
    """The accept-length distribution on 1..max_tokens from server logs, plus vLLM per-position
    rates when the log has them (else None). Used by ``predict --accept-log``."""
    s = summarize(paths, max_tokens, num_spec_tokens=num_spec_tokens)
    return s.dist, s.rates


# ---------------------------------------------------------------------------------------------
# series, JSON document


@dataclass(frozen=True, kw_only=True)
class SeriesPoint:
    """Observed throughput at one batch size (#running-req), over all windows with that batch."""

    batch: int
    windows: int
    accept_len_mean: float | None
    tokens_per_s_median: float
    tokens_per_s_min: float
    tokens_per_s_max: float
    context_tokens_median: float | None = None  # KV tokens per request (None: the log does not say)
    context_tokens_min: float | None = None
    context_tokens_max: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "windows": self.windows, "accept_len_mean": self.accept_len_mean,
                "context_tokens_median": self.context_tokens_median, "context_tokens_min": self.context_tokens_min,
                "context_tokens_max": self.context_tokens_max,
                "tokens_per_s_median": self.tokens_per_s_median, "tokens_per_s_min": self.tokens_per_s_min,
                "tokens_per_s_max": self.tokens_per_s_max}


def throughput_series(windows: Iterable[DecodeWindow]) -> tuple[SeriesPoint, ...]:
    """Median / range of gen tok/s per #running-req (idle windows, batch 0 or 0 tok/s, left out)."""
    by: dict[int, list[DecodeWindow]] = {}
    for w in windows:
        if w.batch >= 1 and w.tokens_per_s > 0:
            by.setdefault(w.batch, []).append(w)
    out = []
    for b in sorted(by):
        ws = by[b]
        tps = [w.tokens_per_s for w in ws]
        accs = [w.accept_len for w in ws if w.accept_len is not None]
        ctxs = [w.context_tokens for w in ws if w.context_tokens is not None]
        out.append(SeriesPoint(batch=b, windows=len(ws), accept_len_mean=statistics.fmean(accs) if accs else None,
                               tokens_per_s_median=statistics.median(tps), tokens_per_s_min=min(tps),
                               tokens_per_s_max=max(tps),
                               context_tokens_median=statistics.median(ctxs) if ctxs else None,
                               context_tokens_min=min(ctxs) if ctxs else None,
                               context_tokens_max=max(ctxs) if ctxs else None))
    return tuple(out)


def accept_document(s: AcceptSummary) -> dict[str, Any]:
    """The schema-versioned JSON ``specmodel accept -o`` writes (and ``--accept-log`` reads back)."""
    d = s.dist
    return ACCEPT.stamp({
        "convention": "tokens",
        "steps": d.max_tokens - 1,
        "max_tokens": d.max_tokens,
        "probs": list(d.probs),
        "mean_tokens": d.mean_tokens,
        "mean_drafts": d.mean_tokens - 1.0,
        "std_tokens": d.std_tokens,
        "samples": d.samples,
        "per_position": list(s.rates) if s.rates is not None else None,
        "source": d.source,
        "notes": list(s.notes),
        "files": [{"path": f.path, "engine": f.engine, "format": f.fmt, "lines_read": f.lines_read,
                   "lines_matched": f.lines_matched, "skipped": dict(f.skipped)} for f in s.files],
        "series": [p.to_dict() for p in throughput_series(s.windows)],
        "by_context": None if s.by_context is None else [
            {"lo_tokens": b.lo_tokens, "hi_tokens": b.hi_tokens, "label": b.label, "windows": b.windows,
             "context_min": b.context_min, "context_max": b.context_max, "probs": list(b.dist.probs),
             "mean_tokens": b.dist.mean_tokens, "samples": b.dist.samples} for b in s.by_context.bands],
        "server": None if s.config is None else {
            k: getattr(s.config, k) for k in ("engine", "where", *CONFIG_FIELDS)},
    })


def write_accept_json(s: AcceptSummary, path: str | Path) -> Path:
    """Atomically write :func:`accept_document`; validated by reading it back first."""
    doc = accept_document(s)
    _check_saved(json.loads(json.dumps(doc)), str(path))
    return atomic_write_json(path, doc)


def iter_windows(files: Iterable[LogFile]) -> Iterator[DecodeWindow]:
    for f in files:
        yield from f.windows


def _label(paths: Sequence[str]) -> str:
    return paths[0] if len(paths) == 1 else f"{paths[0]} (+{len(paths) - 1} more)"
