"""What a watched server did over the sliding window: :class:`MetricsWindow` keeps the last
``window_s`` seconds of ``/metrics`` scrapes (a counter that went backwards, a restart, starts it
again) and :func:`observe_metrics` / :func:`observe_log` turn a window of scrapes or of log windows
into an :class:`Observed` (acceptance, batch, context, tok/s), or the reason there is none yet."""

from __future__ import annotations

import datetime as _dt
import statistics
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from specmodel.engines import engine_spec
from specmodel.engines.base import COUNTERS, DecodeWindow, EngineSpec, MetricsSample, window_skip_reason
from specmodel.engines.parse import check_means
from specmodel.limits import SILENT_WINDOW_SHARE
from specmodel.model import accept as acc


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
    #: the engine's own per-cycle costs over the window (:class:`specmodel.engines.base.LiveCosts`,
    #: SGLang's device timer), or None and ``live_why`` why not
    live: Any = None
    live_why: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, "method": self.method, "accept_mean_tokens": self.dist.mean_tokens, "accept_probs": list(self.dist.probs),
                "per_position": list(self.rates) if self.rates is not None else None, "steps": self.steps,
                "batch": self.batch, "context_tokens": self.context_tokens, "tokens_per_s": self.tokens_per_s,
                "span_s": self.span_s, "verify_steps": self.verify_steps, "proposal_rate": self.proposal_rate,
                "live_costs": self.live.to_dict() if self.live is not None else None, "live_costs_why": self.live_why}


def observe_metrics(win: MetricsWindow, steps: int, engine: EngineSpec | None = None) -> Observed | str:
    """Acceptance, batch, context over the window, or why there is none yet (a reason string).
    ``engine`` (default: the record of the scrapes' engine) says how its page is read: counters
    are differenced over the window, gauges averaged over it (never one with the other's meaning)."""
    if len(win.scrapes) < 2:
        return "waiting for a second scrape"
    eng = engine or engine_spec(win.scrapes[-1].sample.engine)
    obs = _from_counters(win, steps, eng) if eng.metrics_kind == COUNTERS else _from_gauges(win, steps, eng)
    return obs if isinstance(obs, str) else _with_live_costs(obs, win, eng)


def _with_live_costs(obs: Observed, win: MetricsWindow, eng: EngineSpec) -> Observed:
    """The engine's own costs per cycle between the window's first and last scrape, where its page
    has them (its metrics plug-in's ``live_costs``)."""
    from dataclasses import replace

    from specmodel.engines import metrics_formats

    fmt = next((f for f in metrics_formats() if f.name == eng.metrics_format), None)
    if fmt is None or fmt.live_costs is None:
        return obs
    got = fmt.live_costs(win.scrapes[0].sample.live, win.scrapes[-1].sample.live)
    return replace(obs, live=None, live_why=got) if isinstance(got, str) else replace(obs, live=got)


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
