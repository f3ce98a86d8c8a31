"""``specmodel watch``: a running server's acceptance, batch and context over a sliding window,
held against a profile's break-even surface, one reading per interval.

Sources: an engine's Prometheus ``/metrics`` page (the metrics plug-ins of the engine registry,
:mod:`specmodel.engines`) or a server log being written (the log plug-ins). Nothing here
re-derives the model: the reading is :func:`specmodel.model.predict.predict` at the observed
point, the advice is :func:`specmodel.model.optimize.optimize` / :func:`batch_limit` there.

Counters that go backwards (a server restart) restart the window; a server that stops answering
is reported and retried, never fatal once it has answered once. Bad input before the first
reading (unreachable URL, a page without spec-decode metrics, a profile of another model or TP)
is one :class:`SpecmodelError`.
"""

from __future__ import annotations

import datetime as _dt
import http.client
import math
import re
import statistics
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from specmodel.engines import engine_of_log, engine_spec, engines_help, metrics_format_of
from specmodel.engines.base import (
    COUNTERS,
    DecodeWindow,
    EngineConfig,
    EngineSpec,
    LogFile,
    MetricsSample,
    window_skip_reason,
)
from specmodel.engines.parse import check_means
from specmodel.engines.prom import MAX_PAGE_BYTES
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_LINE_BYTES, SILENT_WINDOW_SHARE, WATCH_HEAD_LINES, WATCH_TAIL_BYTES
from specmodel.model import accept as acc
from specmodel.model.decision import INCONSISTENT
from specmodel.schema.formats import WATCH
from specmodel.schema.phases import is_host_proposer
from specmodel.schema.profile import Profile, SpecConfig

#: a scrape waits at most this long for the server (bounded; the loop retries on the next interval)
FETCH_TIMEOUT_S = 5.0


class SourceGone(Exception):
    """The server did not answer this time (connection refused, timeout, HTTP error)."""


# ---------------------------------------------------------------------------------------------
# sources


@dataclass(kw_only=True)
class MetricsSource:
    """An engine's ``/metrics`` URL; the engine is recognised from the page (registry sniff)."""

    url: str
    timeout_s: float = FETCH_TIMEOUT_S
    opener: Callable[[str, float], str] | None = None  # tests inject a fake server

    def fetch(self) -> MetricsSample:
        try:
            text = (self.opener or _http_get)(self.url, self.timeout_s)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise SourceGone(f"{self.url}: {getattr(exc, 'reason', exc)}") from None
        except http.client.HTTPException as exc:
            # a server dying mid-answer (a body cut short, a garbled status line): like no answer,
            # retried next interval; the exception's text may carry the raw line, so one line, bounded
            raise SourceGone(f"{self.url}: broken HTTP answer ({type(exc).__name__}: {_one_line(str(exc))})") from None
        fmt = metrics_format_of(text)
        if fmt is None:
            raise SpecmodelError(f"{self.url}: not a {engines_help()} Prometheus metrics page "
                                 "(no metrics of a registered engine); give the server's /metrics URL")
        return fmt.parse(text, self.url)


def _one_line(text: str, limit: int = 120) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _http_get(url: str, timeout_s: float) -> str:
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=timeout_s) as r:  # noqa: S310 - the user's own server
        body = r.read(MAX_PAGE_BYTES + 1)
        declared = (r.headers.get("Content-Length") or "").strip()
    # a bounded read returns what arrived before the connection closed, short of Content-Length
    # without a word: half a page would parse as a page with counters missing
    if declared.isdigit() and len(body) < int(declared) and len(body) <= MAX_PAGE_BYTES:
        raise http.client.IncompleteRead(body, int(declared) - len(body))
    if len(body) > MAX_PAGE_BYTES:
        raise SpecmodelError(f"{url}: metrics page larger than {MAX_PAGE_BYTES} bytes")
    return body.decode("utf-8", errors="replace")


@dataclass(kw_only=True)
class LogSource:
    """A server log being written, followed incrementally: each :meth:`read` reads only the bytes
    appended since the last one. Memory is bounded whatever the log's length: the first
    ``WATCH_HEAD_LINES`` lines (the start-up configuration lives there) and the most recent
    ``WATCH_TAIL_BYTES`` of lines are kept, and the engine's log plug-in parses those two (a window
    needs only its own lines). A partial last line waits for its newline; a file that shrank was
    rotated or truncated: it is read again from its start."""

    path: str
    head: list[str] = field(default_factory=list)
    tail: deque[str] = field(default_factory=deque)
    tail_bytes: int = 0
    offset: int = 0
    carry: bytes = b""
    engine: EngineSpec | None = None
    restarted: int = 0

    def _take(self, line: str) -> None:
        from specmodel.engines.parse import strip_ansi

        line = strip_ansi(line)
        if len(self.head) < WATCH_HEAD_LINES and not self.tail:
            self.head.append(line)
            return
        self.tail.append(line)
        self.tail_bytes += len(line) + 1
        while self.tail_bytes > WATCH_TAIL_BYTES and len(self.tail) > 1:
            self.tail_bytes -= len(self.tail.popleft()) + 1

    def _pull(self) -> None:
        try:
            with open(self.path, "rb") as f:
                size = f.seek(0, 2)
                if size < self.offset:  # rotated or truncated: start again
                    self.head, self.tail, self.tail_bytes, self.offset, self.carry = [], deque(), 0, 0, b""
                    self.restarted += 1
                f.seek(self.offset)
                while True:
                    chunk = f.read(1 << 20)
                    if not chunk:
                        break
                    self.offset += len(chunk)
                    data = self.carry + chunk
                    *done, self.carry = data.split(b"\n")
                    if len(self.carry) > MAX_LINE_BYTES:
                        raise SpecmodelError(f"{self.path}: a line longer than {MAX_LINE_BYTES} bytes: not a server log")
                    for raw in done:
                        self._take(raw.decode("utf-8", errors="replace").rstrip("\r"))
        except OSError as exc:
            raise SpecmodelError(f"{self.path}: cannot read: {exc.strerror or exc}") from None

    def read(self) -> tuple[list[DecodeWindow], EngineConfig | None, EngineSpec]:
        """The windows in the kept lines, the logged configuration, and the engine that wrote the log."""
        from specmodel.engines.logs import parse_lines

        self._pull()
        lines = self.head + list(self.tail)
        if self.carry:
            lines.append(self.carry.decode("utf-8", errors="replace"))
        lf: LogFile = parse_lines(self.path, lines, unterminated=bool(self.carry))
        eng = engine_of_log(lf.engine)
        if eng is None:
            raise SpecmodelError(f"{self.path}: {lf.description}: watch reads a server log being written "
                                 f"({engines_help()}) or a /metrics URL")
        self.engine = eng
        return list(lf.windows), lf.config, eng


# ---------------------------------------------------------------------------------------------
# the sliding window


@dataclass(frozen=True, kw_only=True)
class Scrape:
    t_s: float  # monotonic seconds
    sample: MetricsSample


def _counters(s: MetricsSample) -> tuple[float | None, ...]:
    return (s.drafts, s.draft_tokens, s.accepted_tokens, s.gen_tokens, s.engine_steps) + tuple(s.accepted_per_pos or ())


@dataclass(kw_only=True)
class MetricsWindow:
    """Scrapes of the last ``window_s`` seconds. A counter below its previous value means the
    server restarted (counters start again at 0): the window restarts from that scrape."""

    window_s: float
    scrapes: deque[Scrape] = field(default_factory=deque)
    resets: int = 0

    def push(self, sc: Scrape) -> bool:
        """Add a scrape; True when it revealed a counter reset."""
        reset = False
        if self.scrapes:
            prev = _counters(self.scrapes[-1].sample)
            cur = _counters(sc.sample)
            if len(prev) != len(cur) or any(a is not None and b is not None and b < a for a, b in zip(prev, cur,
                                                                                                        strict=False)):
                reset = True
                self.resets += 1
                self.scrapes.clear()
        self.scrapes.append(sc)
        # keep one scrape at or before the window's start, so deltas span the whole window
        while len(self.scrapes) > 2 and self.scrapes[1].t_s <= sc.t_s - self.window_s:
            self.scrapes.popleft()
        return reset


@dataclass(frozen=True, kw_only=True)
class Observed:
    """What the server did over the window."""

    engine: str
    dist: acc.AcceptDist
    rates: tuple[float, ...] | None
    steps: int | None  # the server's draft depth where the source says it (vLLM: positions)
    batch: float
    context_tokens: float | None
    tokens_per_s: float | None
    span_s: float
    verify_steps: float | None  # drafts counted in the window (vLLM counters), else None
    #: share of request-steps that carried a draft (vLLM counters: drafts / (generated − accepted));
    #: below 1 for host proposers (ngram finds no match), ~1 for a drafter forward
    proposal_rate: float | None = None
    #: the speculative method the server runs where the source says it (a log's configuration,
    #: ``--method``); None: unknown (the profile's is then assumed, and said)
    method: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "method": self.method, "accept_mean_tokens": self.dist.mean_tokens, "accept_probs": list(self.dist.probs),
                "per_position": list(self.rates) if self.rates is not None else None, "steps": self.steps,
                "batch": self.batch, "context_tokens": self.context_tokens, "tokens_per_s": self.tokens_per_s,
                "span_s": self.span_s, "verify_steps": self.verify_steps, "proposal_rate": self.proposal_rate}


def observe_metrics(win: MetricsWindow, steps: int, engine: EngineSpec | None = None) -> Observed | str:
    """Acceptance, batch, context over the window, or why there is none yet (a reason string).
    ``engine`` (default: the record of the scrapes' engine) says how its page is read: counters
    are differenced over the window, gauges averaged over it (never one with the other's meaning)."""
    if len(win.scrapes) < 2:
        return "waiting for a second scrape"
    eng = engine or engine_spec(win.scrapes[-1].sample.engine)
    return _from_counters(win, steps, eng) if eng.metrics_kind == COUNTERS else _from_gauges(win, steps, eng)


def _from_counters(win: MetricsWindow, steps: int, eng: EngineSpec) -> Observed | str:
    first, last = win.scrapes[0], win.scrapes[-1]
    a, b = first.sample, last.sample
    span = last.t_s - first.t_s
    runs = [s.sample.running for s in win.scrapes if s.sample.running]
    batch = statistics.fmean(runs) if runs else 0.0
    ctxs = [s.sample.context_tokens for s in win.scrapes if s.sample.context_tokens is not None]
    ctx = statistics.fmean(ctxs) if ctxs else None
    if a.drafts is None or b.drafts is None or a.accepted_tokens is None or b.accepted_tokens is None:
        return (f"no speculative decoding: the page has no {', '.join(eng.metric_names[:2])} now (the server "
                "restarted without speculation?)")
    d_drafts = b.drafts - a.drafts
    d_gen = b.gen_tokens - a.gen_tokens if a.gen_tokens is not None and b.gen_tokens is not None else None
    if d_drafts <= 0:
        if d_gen and span >= SILENT_WINDOW_SHARE * win.window_s:
            # tokens generated over a full window and nothing proposed (a host proposer on sampled output):
            # every step ran the lookup for nothing, an observation at proposal rate 0, not an idle server
            dist = acc.from_mean(1.0, steps + 1, source=f"{eng.label} /metrics counters: no draft in the window")
            steps_run = (b.engine_steps - a.engine_steps if a.engine_steps is not None and b.engine_steps is not None
                         else 0.0)
            return Observed(engine=eng.name, dist=dist, rates=None, steps=steps,
                            batch=d_gen / steps_run if steps_run > 0 else batch, context_tokens=ctx,
                            tokens_per_s=d_gen / span if span > 0 else None, span_s=span, verify_steps=0.0,
                            proposal_rate=0.0)
        if d_gen:
            # (a prefill's first tokens come without drafts: a short window says nothing yet)
            return (f"busy, no drafts yet: {d_gen:.0f} tokens generated over {span:.1f} s but no draft counted "
                    "(widening the window)")
        return "idle: no drafts in the window"
    d_acc = b.accepted_tokens - a.accepted_tokens
    rates = None
    k = len(b.accepted_per_pos or ()) or steps
    src = f"{eng.label} /metrics counters over the window"
    if a.accepted_per_pos and b.accepted_per_pos and len(a.accepted_per_pos) == len(b.accepted_per_pos):
        # rate_i = d accepted_per_pos{i} / d drafts (vLLM's SpecDecodingProm docstring)
        raw = [min(max((y - x) / d_drafts, 0.0), 1.0) for x, y in zip(a.accepted_per_pos, b.accepted_per_pos,
                                                                      strict=True)]
        rates = acc.pooled_per_position([raw], [1.0])
        dist = acc.from_per_position(rates, source=src)
    else:
        mean = 1.0 + d_acc / d_drafts
        dist = acc.from_mean(min(mean, k + 1.0), k + 1, source=src)
    dist = acc.AcceptDist(probs=dist.probs, source=dist.source, samples=int(round(d_drafts)))
    tps = d_gen / span if d_gen is not None and span > 0 else None
    # generated = drafts × E[A] + request-steps without a draft × 1, so request-steps = generated − accepted
    rate = min(d_drafts / (d_gen - d_acc), 1.0) if d_gen is not None and d_gen > d_acc else None
    if d_gen is not None and a.engine_steps is not None and b.engine_steps is not None \
            and b.engine_steps > a.engine_steps:
        # requests per engine step over the whole window: tokens per step / tokens per request-step
        # (r·E[A] + 1 − r); a running-requests gauge sampled at scrape time misses bursts
        per_req_step = dist.mean_tokens if rate is None else rate * dist.mean_tokens + 1.0 - rate
        batch = d_gen / (b.engine_steps - a.engine_steps) / per_req_step
    return Observed(engine=eng.name, dist=dist, rates=rates, steps=k, batch=batch, context_tokens=ctx,
                    tokens_per_s=tps, span_s=span, verify_steps=d_drafts, proposal_rate=rate)


def _from_gauges(win: MetricsWindow, steps: int, eng: EngineSpec) -> Observed | str:
    # acceptance is a gauge (the last decode-log window's accept len): weight by running, with
    # the idle rule of `accept` (window_skip_reason): no running request or no tokens generated
    span = win.scrapes[-1].t_s - win.scrapes[0].t_s
    runs = [s.sample.running for s in win.scrapes if s.sample.running]
    batch = statistics.fmean(runs) if runs else 0.0
    ctxs = [s.sample.context_tokens for s in win.scrapes if s.sample.context_tokens is not None]
    ctx = statistics.fmean(ctxs) if ctxs else None
    pts = [(s.sample.accept_len_gauge, s.sample.running or 0.0) for s in win.scrapes
           if s.sample.accept_len_gauge is not None and (s.sample.running or 0) > 0
           and (s.sample.gen_tokens_per_s_gauge is None or s.sample.gen_tokens_per_s_gauge > 0)]
    if not pts:
        return "idle: no running request with an accept length in the window"
    check_means([(float(m), eng.metric_names[0]) for m, _ in pts if m is not None], steps + 1)
    dist = acc.mixture_of_means([(float(m), float(w)) for m, w in pts if m is not None], steps + 1,
                                source=f"{eng.label} /metrics gauges over the window")
    tp = [s.sample.gen_tokens_per_s_gauge for s in win.scrapes if s.sample.gen_tokens_per_s_gauge]
    return Observed(engine=eng.name, dist=dist, rates=None, steps=None, batch=batch, context_tokens=ctx,
                    tokens_per_s=statistics.fmean(t for t in tp if t is not None) if tp else None, span_s=span,
                    verify_steps=None)


_TS = (("%Y-%m-%d %H:%M:%S", 19), ("%m-%d %H:%M:%S", 14))


def _ts(s: str) -> float | None:
    for fmt, n in _TS:
        try:
            return _dt.datetime.strptime(s[:n], fmt).timestamp()
        except ValueError:
            continue
    return None


def _now_like(stamp: str, now: float | None) -> float | None:
    """``now`` (epoch seconds, default the clock) on the clock of ``stamp``'s format (a stamp
    without a year parses into 1900: the present is read back through the same format)."""
    t = _dt.datetime.now() if now is None else _dt.datetime.fromtimestamp(now)
    for fmt, n in _TS:
        try:
            _dt.datetime.strptime(stamp[:n], fmt)
        except ValueError:
            continue
        return _ts(t.strftime(fmt))
    return None


def _uses(w: DecodeWindow, eng: EngineSpec) -> bool:
    """A window that measured verify steps: with counters, one that counted drafts (the running
    gauge is read at log time and may be 0 after a burst it counted); with gauges, `accept`'s rule."""
    if eng.metrics_kind == COUNTERS:
        return bool(w.drafts) and w.accept_len is not None
    return window_skip_reason(w) is None


def observe_log(windows: list[DecodeWindow], engine: str | EngineSpec, steps: int, window_s: float, *,
                now: float | None = None) -> Observed | str:
    """The log's windows of the last ``window_s`` seconds (by their timestamps; the last 5 windows
    when they carry none) → acceptance, batch, context, or why there is no reading. A log whose
    last entry is older than the window is not being written: that is said, with the commands
    for a finished log."""
    eng = engine_spec(engine) if isinstance(engine, str) else engine
    stamped = [w for w in windows if w.timestamp and _ts(w.timestamp) is not None]
    if stamped:
        last = stamped[-1].timestamp
        t_last, t_now = _ts(last), _now_like(last, now)
        if t_last is not None and t_now is not None and t_now - t_last > window_s:
            return (f"log not being written: its last entry ({last}) is {t_now - t_last:.0f} s old, older than the "
                    f"{window_s:g} s window; for a finished log use `specmodel accept LOG` (its acceptance) or "
                    "`specmodel validate` (the model against it)")
    use = [w for w in windows if _uses(w, eng)]
    if not use:
        return "idle: no window with running requests and tokens generated yet"
    t_last = _ts(use[-1].timestamp)
    if t_last is not None:
        recent = [w for w in use if (t := _ts(w.timestamp)) is not None and t >= t_last - window_s]
        first_t = _ts(recent[0].timestamp) or t_last
        span = t_last - first_t
    else:
        recent, span = use[-5:], float("nan")
    counters = eng.metrics_kind == COUNTERS
    if counters:
        wa = [acc.WindowAccept(context_tokens=w.context_tokens or 0.0, weight=w.drafts or 0.0,
                               mean_tokens=float(w.accept_len or 1.0), per_position=w.per_position)
              for w in recent if w.drafts]
        k = len(recent[-1].per_position or ()) or steps
    else:
        wa = [acc.WindowAccept(context_tokens=w.context_tokens or 0.0, weight=float(w.batch),
                               mean_tokens=float(w.accept_len or 1.0)) for w in recent]
        k = steps
    if not wa:
        return "idle: no drafts in the window"
    dist = acc.pooled_windows(wa, k + 1, f"{eng.label} log, last {len(wa)} windows")
    ctxs = [w.context_tokens for w in recent if w.context_tokens is not None]
    busy = [w.batch for w in recent if w.batch >= 1]
    return Observed(engine=eng.name, dist=dist, rates=tuple(dist.per_position_rates()) if counters else None,
                    steps=k if counters else None, batch=statistics.fmean(busy) if busy else 1.0,
                    context_tokens=statistics.fmean(ctxs) if ctxs else None,
                    tokens_per_s=statistics.median(w.tokens_per_s for w in recent), span_s=span,
                    verify_steps=sum(w.drafts or 0.0 for w in recent) if counters else None)


# ---------------------------------------------------------------------------------------------
# held against the profile


@dataclass(frozen=True, kw_only=True)
class Reading:
    """One interval's verdict: predicted speedup (with its band) at the observed point, the margin
    to break-even, and the advice."""

    observed: Observed
    spec: SpecConfig
    speedup: float
    speedup_low: float
    speedup_high: float
    break_even_tokens: float
    margin_tokens: float
    predicted_tokens_per_s: float
    baseline_tokens_per_s: float
    advice: str
    switch_off_above_batch: int | None
    best_steps: int | None
    extrapolated: tuple[str, ...]
    notes: tuple[str, ...] = ()
    verdict: str = ""
    verdict_reason: str = ""

    def line(self, stamp: str) -> str:
        o = self.observed
        ctx = f"{o.context_tokens:.0f}" if o.context_tokens is not None else "?"
        ext = f"  (extrapolated: {', '.join(self.extrapolated)})" if self.extrapolated else ""
        prop = f", {o.proposal_rate:.0%} of steps proposed" if o.proposal_rate is not None and o.proposal_rate < 0.995 else ""
        return (f"{stamp}  accept {o.dist.mean_tokens:.2f} tok/step (k {self.spec.steps}{prop}), batch {o.batch:.1f}, "
                f"context {ctx}: speedup {self.speedup:.2f}x [{self.speedup_low:.2f}-{self.speedup_high:.2f}], "
                + (f"margin {self.margin_tokens:+.2f} tok/step over break-even {self.break_even_tokens:.2f}; "
                   if math.isfinite(self.break_even_tokens) else "nothing proposed: no accept length breaks even; ")
                + f"{self.verdict}; advice: {self.advice}{ext}")

    def to_dict(self) -> dict[str, Any]:
        return WATCH.stamp(_finite({
            "observed": self.observed.to_dict(), "spec": self.spec.to_dict(), "speedup": self.speedup,
            "speedup_low": self.speedup_low, "speedup_high": self.speedup_high,
            # (infinite when nothing is proposed: no accept length breaks even)
            "break_even_accept_tokens": self.break_even_tokens if math.isfinite(self.break_even_tokens) else None,
            "margin_tokens": self.margin_tokens if math.isfinite(self.margin_tokens) else None,
            "predicted_tokens_per_s": self.predicted_tokens_per_s, "baseline_tokens_per_s": self.baseline_tokens_per_s,
            "advice": self.advice, "switch_off_above_batch": self.switch_off_above_batch,
            "best_steps": self.best_steps, "extrapolated": list(self.extrapolated), "notes": list(self.notes),
            "verdict": self.verdict, "verdict_reason": self.verdict_reason}))


def _finite(x: Any) -> Any:
    """A non-finite float (a window of zero span, a page's odd value) as None: JSON has no inf/NaN."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def spec_for(profile: Profile, obs: Observed, steps: int | None) -> SpecConfig:
    """The server's configuration: its method where the source says it (else the profile's); a
    counters engine's page says k (``steps``), an engine that drafts chains runs topk 1; else
    --steps / the profile's."""
    eng = engine_spec(obs.engine)
    alg = obs.method or profile.spec.algorithm
    k = obs.steps or steps or profile.spec.steps
    if eng.chains_only:
        return SpecConfig(algorithm=alg, steps=k, topk=1, num_draft_tokens=k + 1)
    if k != profile.spec.steps:
        return SpecConfig(algorithm=alg, steps=k, topk=profile.spec.topk,
                          num_draft_tokens=k + 1 if profile.spec.topk == 1 else profile.spec.num_draft_tokens)
    return replace(profile.spec, algorithm=alg) if alg != profile.spec.algorithm else profile.spec


def check_method_matches_profile(method: str | None, profile: Profile, where: str) -> None:
    """A server whose method proposes another way than the profile's (a host lookup vs a drafter
    forward) has another cycle: refuse (one line). The same kind under another name is priced with
    the profile's costs."""
    if method is None or is_host_proposer(method) == is_host_proposer(profile.spec.algorithm):
        return
    kind = {True: "a host lookup, no drafter forward", False: "a drafter forward"}
    raise SpecmodelError(f"{where}: the server runs {method} ({kind[is_host_proposer(method)]}) but profile "
                         f"{profile.name} was measured with {profile.spec.algorithm} "
                         f"({kind[is_host_proposer(profile.spec.algorithm)]}); watch it against a profile of the "
                         "server's method")


def assess(profile: Profile, obs: Observed, spec: SpecConfig) -> Reading:
    """Predict at the observed (acceptance, batch, context) and advise (model/ functions only)."""
    from specmodel.model.costs import measured_contexts
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.optimize import accept_model, batch_limit, optimize
    from specmodel.model.predict import predict

    b = max(1, int(round(obs.batch)))
    dist = obs.dist
    if dist.max_tokens < spec.max_accept_tokens:
        dist = acc.resize(dist, spec.max_accept_tokens, rates=obs.rates)
        dist = replace(dist, source=obs.dist.source, samples=obs.dist.samples)
    # the server's own share of proposing steps, for the server's own method: a host proposer's
    # steps without a match cost a lookup and emit one token (a drafter forward always proposes)
    rate = obs.proposal_rate if obs.proposal_rate is not None and is_host_proposer(spec.algorithm) else None
    p = predict(profile, dist, OperatingPoint(batch=b, spec=spec, context_tokens=obs.context_tokens,
                                              proposal_rate=rate))
    base = p.figures.baseline_tokens_per_s
    topks = (1,) if engine_spec(obs.engine).chains_only else (1, 2, 4, 8)
    model = accept_model(dist, rates=obs.rates, measured_topk=spec.topk, max_steps=max(8, spec.steps))
    opt = optimize(profile, model, batch=b, default=spec, top=1, topks=topks, context_tokens=obs.context_tokens,
                   proposal_rate=p.accept.proposal_rate)
    batches = sorted({r.batch for r in profile.rows("decode")} | {b})
    limit = batch_limit([optimize(profile, model, batch=x, default=spec, top=1, topks=topks,
                                  context_tokens=obs.context_tokens, proposal_rate=p.accept.proposal_rate)
                         for x in batches])
    notes: list[str] = []
    if obs.method is None:
        notes.append(f"the source does not name the server's method: priced as the profile's ({spec.algorithm}); "
                     "pass --method")
    if obs.context_tokens is None:
        ctxs = measured_contexts(profile, "decode")
        notes.append(f"the source gives no context: costs at the profile's context {min(ctxs) if ctxs else 0}")
    # a cost the verdict rests on that nobody measured is said beside it, as predict's label says it
    notes.extend(dict.fromkeys(a.label for a in p.outcome.assumed))
    run = opt.to_run
    # the one decision rule (model/decision.py) on the current configuration; a different k is
    # advised only when it is GO itself and beats the current one beyond the noise band
    # (the prediction's own decision: inputs that contradict each other give none, a withheld P decides nothing)
    d = p.decision
    better = d.verdict != INCONSISTENT and run is not None and run.steps != spec.steps and run.tokens_per_s > p.figures.tokens_per_s_high
    if better and run is not None:
        advice = f"use k = {run.steps} (predicted {run.speedup:.2f}x)"
    elif d.verdict == INCONSISTENT:  # no figure to advise from here, not even a batch limit
        advice = d.advice()
    elif not d.pays:
        advice = (f"switch off above batch {limit} ({d.verdict} at batch {b})" if limit is not None and limit < b
                  else d.advice())
    else:
        advice = d.advice()
        if limit is not None and limit < max(batches):
            advice += f" (switch off above batch {limit})"
    return Reading(observed=obs, spec=spec, speedup=p.figures.speedup, speedup_low=p.figures.speedup_low,
                   speedup_high=p.figures.speedup_high, break_even_tokens=p.figures.break_even_accept_tokens,
                   margin_tokens=p.figures.margin_tokens, predicted_tokens_per_s=p.figures.tokens_per_s, baseline_tokens_per_s=base,
                   advice=advice, switch_off_above_batch=limit, best_steps=run.steps if run is not None else None,
                   extrapolated=tuple(dict.fromkeys(e.label for e in p.outcome.extrapolated)), notes=tuple(notes),
                   verdict=d.verdict, verdict_reason=d.reason)


def check_source_matches_profile(cfg: EngineConfig, profile: Profile) -> None:
    """A profile of another model or TP says nothing about this server: refuse (one line, exit 2)."""
    from specmodel.validation import check_log_model_matches_profile

    if cfg.tp is not None and cfg.tp != profile.tp:
        raise SpecmodelError(f"{cfg.where}: the server runs TP {cfg.tp} but profile {profile.name} is TP {profile.tp}; "
                             "watch it against a profile of the same box and TP degree")
    check_log_model_matches_profile(cfg, profile, use="watch it against a profile of the same model")


def now_stamp() -> str:
    return _dt.datetime.now().strftime("%H:%M:%S")


def finite_or_none(x: float | None) -> float | None:
    return x if x is not None and math.isfinite(x) else None


_URL = re.compile(r"^https?://", re.IGNORECASE)


def is_url(s: str) -> bool:
    return bool(_URL.match(s))
