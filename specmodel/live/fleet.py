"""``specmodel watch --prometheus URL --selector '{job="vllm"}'``: every server a Prometheus server
scrapes, held against the profile a targets file maps it to, one reading per server per interval.

Nothing per server is computed here that :mod:`specmodel.live.watch` does not already do: each interval
asks Prometheus (HTTP API, one instant query of a range selector) for the raw samples of the
engines' own series over the window, rebuilds each scrape of each server as the engine's metrics
plug-in reads it (``MetricsFormat.from_page``), and runs the single-server window
(:class:`~specmodel.live.window.MetricsWindow`: a counter that went backwards restarts the window, and
that is said, never averaged over), :func:`~specmodel.live.window.observe_metrics` and
:func:`~specmodel.live.watch.assess`.

A server's bad input (no profile for its labels, a profile of another TP or model, no
spec-decode series) is one line for that server; the others are still read. An unreachable
Prometheus or a selector that matches nothing on the first interval is one :class:`SpecmodelError`.
"""

from __future__ import annotations

import json
import math
import re
import statistics
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from specmodel.engines import engine_spec, metrics_formats
from specmodel.engines.base import EngineConfig, MetricsFormat
from specmodel.engines.prom import Sample
from specmodel.errors import FieldError, SpecmodelError, verbatim
from specmodel.limits import MAX_PROMETHEUS_ANSWER_BYTES, MAX_STEPS, MAX_TP
from specmodel.live.sources import SourceGone
from specmodel.live.watch import Reading, assess, check_method_matches_profile, check_source_matches_profile, spec_for
from specmodel.live.window import MetricsWindow, Observed, Scrape, observe_metrics
from specmodel.schema.formats import WATCH
from specmodel.schema.profile import Profile
from specmodel.units import to_ms

#: a server whose newest sample is older than this many of its own scrape gaps is not being scraped now
STALE_GAPS = 3.0
#: the labels that name a server (Prometheus' target labels); the rest of a server's common labels describe it
KEY_LABELS = ("job", "instance")
UP = "up"


# ---------------------------------------------------------------------------------------------
# the targets file: label sets → profiles


@dataclass(frozen=True, kw_only=True)
class Target:
    """One entry: a server whose labels include every ``match`` pair is held against ``profile``."""

    match: tuple[tuple[str, str], ...]
    profile: str
    method: str | None = None
    steps: int | None = None
    tp: int | None = None

    def __post_init__(self) -> None:
        if self.steps is not None and not 1 <= self.steps <= MAX_STEPS:
            raise ValueError(f"steps {self.steps} outside 1..{MAX_STEPS}")
        if self.tp is not None and not 1 <= self.tp <= MAX_TP:
            raise ValueError(f"tp {self.tp} outside 1..{MAX_TP}")

    def matches(self, labels: dict[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.match)


def load_targets(path: str) -> tuple[Target, ...]:
    """``{"targets": [{"match": {"model": "...", "tp": "8"}, "profile": "profiles/box", "method": "ngram",
    "steps": 3, "tp": 8}, ...]}``: first match wins; a relative profile path is read from the file's
    directory. One line naming the file and the field on anything else."""
    from specmodel.io import read_json

    doc = read_json(Path(path))
    entries = doc.get("targets") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise SpecmodelError(f"{path}: targets: expected a non-empty list of {{match, profile}} entries")
    out = []
    for i, e in enumerate(entries):
        where = f"{path}: targets[{i}]"
        if not isinstance(e, dict):
            raise SpecmodelError(f"{where}: expected an object with match and profile")
        unknown = sorted(set(e) - {"match", "profile", "method", "steps", "tp"})
        if unknown:
            raise SpecmodelError(f"{where}.{unknown[0]}: unknown field (known: match, profile, method, steps, tp)")
        match = e.get("match", {})
        if not isinstance(match, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in match.items()):
            raise SpecmodelError(f"{where}.match: expected an object of label name to label value (strings)")
        prof = e.get("profile")
        if not isinstance(prof, str) or not prof:
            raise SpecmodelError(f"{where}.profile: expected the path of a profile directory")
        for key in ("steps", "tp"):
            if key in e and (not isinstance(e[key], int) or isinstance(e[key], bool)):
                raise SpecmodelError(f"{where}.{key}: expected an integer")
        if "method" in e and not isinstance(e["method"], str):
            raise SpecmodelError(f"{where}.method: expected a string")
        full = prof if Path(prof).is_absolute() else str(Path(path).parent / prof)
        try:
            out.append(Target(match=tuple(sorted(match.items())), profile=full, method=e.get("method"),
                              steps=e.get("steps"), tp=e.get("tp")))
        except ValueError as exc:
            raise SpecmodelError(f"{where}: {exc}") from None
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# the Prometheus HTTP API


_MATCHER = re.compile(r'\s*[a-zA-Z_][a-zA-Z0-9_]*\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?')


def selector_matchers(selector: str) -> str:
    """The label matchers of ``'{job="vllm"}'`` (braces optional), checked: a metric name or
    ``__name__`` is refused (the query chooses the engines' series itself)."""
    s = selector.strip()
    if s.startswith("{") and s.endswith("}"):
        s = s[1:-1]
    elif "{" in s or "}" in s:
        raise FieldError(None, f"{{selector}} {verbatim(repr(selector))}: label matchers only, e.g. "
                               "'{job=\"vllm\"}' (no metric name)")
    pos = 0
    while pos < len(s):
        m = _MATCHER.match(s, pos)
        if m is None or m.end() == pos:
            raise FieldError(None, f"{{selector}} {verbatim(repr(selector))}: not a list of label matchers like job=\"vllm\"")
        pos = m.end()
    if re.search(r"(^|[\s,])__name__\s*[=!]", s):
        raise FieldError(None, f"{{selector}} {verbatim(repr(selector))}: __name__ is chosen by watch (the engines' own series)")
    return s.strip().rstrip(",")


def fleet_series() -> tuple[str, ...]:
    """Every series a registered metrics plug-in reads, plus ``up`` (is the target answering)."""
    names = [UP]
    for f in metrics_formats():
        names += [n for n in f.series if n not in names]
    return tuple(names)


def fleet_query(selector: str, window_s: float) -> str:
    names = "|".join(re.escape(n) for n in fleet_series())
    matchers = selector_matchers(selector)
    sel = f'__name__=~"{names}"' + (f", {matchers}" if matchers else "")
    return f"{{{sel}}}[{int(math.ceil(to_ms(window_s)))}ms]"


@dataclass(kw_only=True)
class PromAPI:
    """A Prometheus server's HTTP API (``/api/v1/query``); tests inject ``opener``."""

    url: str
    timeout_s: float = 10.0
    opener: Callable[[str, float], tuple[int, bytes]] | None = None

    def query(self, promql: str, at: float) -> list[dict[str, Any]]:
        """The matrix of ``promql`` evaluated at ``at`` (epoch seconds)."""
        q = urllib.parse.urlencode({"query": promql, "time": f"{at:.3f}"})
        full = f"{self.url.rstrip('/')}/api/v1/query?{q}"
        try:
            status, body = (self.opener or _get)(full, self.timeout_s)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            raise SourceGone(f"Prometheus {self.url}: {getattr(exc, 'reason', exc)}") from None
        try:
            doc = json.loads(body)
        except ValueError:
            raise SpecmodelError(f"Prometheus {self.url}: HTTP {status}, not a Prometheus API answer "
                                 "(give the server's base URL, e.g. http://127.0.0.1:9090)") from None
        if not isinstance(doc, dict) or doc.get("status") != "success":
            err = doc.get("error") if isinstance(doc, dict) else None
            raise SpecmodelError(f"Prometheus {self.url}: query refused: {str(err or doc)[:200]}")
        data = doc.get("data") or {}
        if data.get("resultType") != "matrix" or not isinstance(data.get("result"), list):
            raise SpecmodelError(f"Prometheus {self.url}: expected a matrix answer, got {data.get('resultType')!r}")
        return data["result"]


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers={"Accept": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as r:  # noqa: S310 - the user's own Prometheus
            body = r.read(MAX_PROMETHEUS_ANSWER_BYTES + 1)
            status = r.status
    except urllib.error.HTTPError as exc:  # 400/422: a query error, with a JSON body saying why
        body, status = exc.read(MAX_PROMETHEUS_ANSWER_BYTES + 1), exc.code
    if len(body) > MAX_PROMETHEUS_ANSWER_BYTES:
        raise FieldError(None, f"{verbatim(url.split('?')[0])}: answer larger than {MAX_PROMETHEUS_ANSWER_BYTES} bytes: narrow "
                               "{selector}")
    return status, body


# ---------------------------------------------------------------------------------------------
# one server's series → its scrapes


@dataclass(kw_only=True)
class ServerSeries:
    """Every series of one server in the window."""

    key: str
    series: list[tuple[str, dict[str, str], list[tuple[float, float]]]] = field(default_factory=list)

    def labels(self) -> dict[str, str]:
        """The labels every one of its series carries (its target labels, and e.g. model_name)."""
        common: dict[str, str] | None = None
        for _, lab, _ in self.series:
            common = dict(lab) if common is None else {k: v for k, v in common.items() if lab.get(k) == v}
        return dict(sorted((common or {}).items()))


def group_servers(result: Iterable[dict[str, Any]]) -> dict[str, ServerSeries]:
    out: dict[str, ServerSeries] = {}
    for s in result:
        metric = dict(s.get("metric") or {})
        name = metric.pop("__name__", "")
        key = "/".join(metric.get(k, "") for k in KEY_LABELS)
        vals = []
        for t, v in s.get("values") or ():
            try:
                fv = float(v)
            except (TypeError, ValueError):
                continue
            if math.isfinite(fv):
                vals.append((float(t), fv))
        out.setdefault(key, ServerSeries(key=key)).series.append((name, metric, vals))
    return out


def _format_of(names: set[str]) -> MetricsFormat | None:
    best = max(metrics_formats(), key=lambda f: len(names & set(f.series)), default=None)
    return best if best is not None and best.from_page is not None and names & set(best.series) else None


def scrapes_of(srv: ServerSeries, fmt: MetricsFormat, where: str) -> list[Scrape]:
    """Each scrape of the server as its plug-in reads a page: Prometheus stamps every sample of one
    scrape with the scrape's time, so samples sharing a timestamp are one page."""
    assert fmt.from_page is not None
    pages: dict[float, dict[str, list[Sample]]] = {}
    for name, lab, vals in srv.series:
        if name == UP:
            continue
        labels = tuple(sorted(lab.items()))
        for t, v in vals:
            pages.setdefault(t, {}).setdefault(name, []).append(Sample(name=name, labels=labels, value=v))
    return [Scrape(t_s=t, sample=fmt.from_page(pages[t], where)) for t in sorted(pages)]


# ---------------------------------------------------------------------------------------------
# the fleet, one interval


@dataclass(frozen=True, kw_only=True)
class ServerResult:
    """One server this interval: a reading, or an event (``event``, ``detail``)."""

    name: str
    labels: dict[str, str]
    reading: Reading | None = None
    event: str | None = None
    detail: str = ""
    sample_t_s: float | None = None  # the newest scrape read (Prometheus' timestamp)

    def line(self, stamp: str) -> str:
        if self.reading is not None:
            return self.reading.line(f"{stamp}  {self.name}")
        return f"{stamp}  {self.name}  {self.event}: {self.detail}"

    def to_dict(self, now_s: float) -> dict[str, Any]:
        age = now_s - self.sample_t_s if self.sample_t_s is not None else None
        if self.reading is not None:
            d = self.reading.to_dict()
        else:
            d = WATCH.stamp({"event": self.event, "detail": self.detail})
        d.update({"server": self.name, "labels": self.labels, "age_s": age})
        return d


@dataclass(kw_only=True)
class Fleet:
    """The fleet watch's state across intervals: the profiles loaded, the servers seen, the resets said."""

    api: PromAPI
    selector: str
    targets: tuple[Target, ...]
    window_s: float
    load_profile: Callable[[str], Profile]
    method: str | None = None
    steps: int | None = None
    seen: set[str] = field(default_factory=set)
    resets_said: dict[str, float] = field(default_factory=dict)
    profiles: dict[str, Profile | str] = field(default_factory=dict)
    rounds: int = 0

    def _profile(self, path: str) -> Profile | str:
        if path not in self.profiles:
            try:
                self.profiles[path] = self.load_profile(path)
            except SpecmodelError as exc:
                self.profiles[path] = str(exc)
        return self.profiles[path]

    def read(self, at: float) -> list[ServerResult]:
        """Every server matching the selector at ``at`` (epoch seconds), by name."""
        result = self.api.query(fleet_query(self.selector, self.window_s), at)
        servers = group_servers(result)
        first = self.rounds == 0
        self.rounds += 1
        if not servers and first:
            raise FieldError(None, f"{{selector}} {verbatim(repr(self.selector))}: matches no series of "
                                   f"{', '.join(fleet_series())} in Prometheus {verbatim(self.api.url)} over the last {self.window_s:g} s")
        out = [self._server(srv, at) for srv in servers.values()]
        for gone in sorted(self.seen - set(servers)):
            out.append(ServerResult(name=_display(gone), labels={}, event="vanished",
                                    detail=f"no series in the last {self.window_s:g} s (target removed or "
                                           "not scraped)"))
        self.seen = set(servers)
        return sorted(out, key=lambda r: r.name)

    def _server(self, srv: ServerSeries, at: float) -> ServerResult:
        labels = srv.labels()
        name = _display(srv.key)
        where = f"{self.api.url} {name}"

        def event(kind: str, detail: str, t: float | None = None) -> ServerResult:
            return ServerResult(name=name, labels=labels, event=kind, detail=detail, sample_t_s=t)

        names = {n for n, _, _ in srv.series}
        ups = sorted(((t, v) for n, _, vals in srv.series if n == UP for t, v in vals))
        if ups and ups[-1][1] == 0:
            return event("server gone", f"Prometheus' last scrape failed (up == 0 at {_clock(ups[-1][0])})", ups[-1][0])
        fmt = _format_of(names)
        if fmt is None:
            return event("no reading", "no series of a registered engine (is this a vLLM or SGLang /metrics target?)")
        try:
            scrapes = scrapes_of(srv, fmt, where)
        except SpecmodelError as exc:
            return event("bad series", str(exc))
        if not scrapes:
            return event("no reading", "no samples in the window")
        last_t = scrapes[-1].t_s
        gaps = [b.t_s - a.t_s for a, b in zip(scrapes, scrapes[1:], strict=False)]
        if gaps and at - last_t > max(STALE_GAPS * statistics.median(gaps), 1.0):
            return event("vanished", f"newest sample {at - last_t:.0f} s old (scraped every "
                                     f"{statistics.median(gaps):.0f} s): not being scraped", last_t)
        target = next((t for t in self.targets if t.matches(labels)), None)
        if target is None:
            shown = ", ".join(f'{k}="{v}"' for k, v in labels.items() if k not in KEY_LABELS)
            return event("no profile", f"no entry of the targets file matches its labels {{{shown}}}", last_t)
        prof = self._profile(target.profile)
        if isinstance(prof, str):
            return event("bad profile", prof, last_t)
        eng = engine_spec(scrapes[-1].sample.engine)
        tp = target.tp if target.tp is not None else _int_label(labels.get("tp"))
        method = self.method or target.method or labels.get("method")
        steps = self.steps or target.steps
        try:
            check_source_matches_profile(EngineConfig(engine=eng.name, where=where, model=scrapes[-1].sample.model,
                                                      tp=tp), prof)
            check_method_matches_profile(method, prof, where)
        except SpecmodelError as exc:
            return event("wrong profile", str(exc), last_t)
        win = MetricsWindow(window_s=self.window_s)
        reset_t = None
        for sc in scrapes:
            if win.push(sc):
                reset_t = sc.t_s
        if reset_t is not None and self.resets_said.get(srv.key) != reset_t:
            self.resets_said[srv.key] = reset_t
            # said once; the reading that follows (next interval) spans only the scrapes since the restart
            return event("counter reset", f"counters went backwards at {_clock(reset_t)} (server restarted): "
                                          "its window starts again there", last_t)
        obs = observe_metrics(win, steps or prof.spec.steps, eng)
        if isinstance(obs, str):
            return event("no reading", obs, last_t)
        obs = replace(obs, method=method) if isinstance(obs, Observed) else obs
        try:
            r = assess(prof, obs, spec_for(prof, obs, steps))
        except SpecmodelError as exc:
            return event("no reading", str(exc), last_t)
        return ServerResult(name=name, labels=labels, reading=r, sample_t_s=last_t)


def _display(key: str) -> str:
    job, _, inst = key.partition("/")
    return inst or job or "(no instance label)"


def _int_label(v: str | None) -> int | None:
    return int(v) if v is not None and v.isdigit() else None


def _clock(t: float) -> str:
    import datetime as _dt

    return _dt.datetime.fromtimestamp(t).strftime("%H:%M:%S")
