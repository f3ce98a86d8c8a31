"""The fleet watch's verdicts as Prometheus gauges (``watch --prometheus … --serve HOST:PORT``).

Exposition through ``prometheus_client`` (HELP/TYPE lines, label escaping); the values are the
latest :class:`~specmodel.live.fleet.ServerResult` of each server, read at scrape time (a collector, so
``specmodel_reading_age_seconds`` is the age when Prometheus asks). Each series carries the
server's own labels (its target labels: ``job``, ``instance``, and e.g. ``model``, ``tp``): scrape
the exporter with ``honor_labels: true`` so they stay the server's, not the exporter's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from specmodel.errors import FieldError, verbatim
from specmodel.live.fleet import ServerResult
from specmodel.live.watch import Reading

PREFIX = "specmodel_"

#: name (units in it), help, the reading's figure; a figure that is None or not finite is left out
GAUGES: tuple[tuple[str, str, Callable[[Reading], float | None]], ...] = (
    ("predicted_speedup_ratio", "Predicted speedup of speculation at the observed acceptance, batch and context "
     "(decode tok/s with speculation over without).", lambda r: r.speedup),
    ("predicted_speedup_low_ratio", "Low end of the predicted speedup's band.", lambda r: r.speedup_low),
    ("predicted_speedup_high_ratio", "High end of the predicted speedup's band.", lambda r: r.speedup_high),
    ("break_even_accept_tokens", "Accept length (tokens per verify step incl. the bonus token) at which speculation "
     "breaks even at the observed batch and context.", lambda r: r.break_even_tokens),
    ("observed_accept_tokens", "Observed accept length over the window (tokens per verify step incl. the bonus "
     "token).", lambda r: r.observed.dist.mean_tokens),
    ("accept_margin_tokens", "Observed accept length minus the break-even accept length.", lambda r: r.margin_tokens),
    ("observed_batch_requests", "Requests per engine step over the window.", lambda r: r.observed.batch),
    ("observed_context_tokens", "KV tokens per running request over the window.", lambda r: r.observed.context_tokens),
    ("speculation_pays", "1 when the verdict is GO (speculation pays beyond the noise band), else 0.",
     lambda r: 1.0 if r.verdict == "GO" else 0.0),
    ("advised_switch_off_above_batch_requests", "Advice: switch speculation off above this batch (absent: no "
     "limit within the measured batches).", lambda r: r.switch_off_above_batch),
    ("advised_draft_steps", "Advice: the draft depth k the optimizer ranks first at the observed point.",
     lambda r: r.best_steps),
)


@dataclass(kw_only=True, eq=False)  # registered by identity (hashable)
class FleetCollector:
    """Holds the latest result per server; ``collect`` is what prometheus_client calls per scrape."""

    results: dict[str, ServerResult] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    clock: Callable[[], float] = time.time
    rounds: int = 0

    def update(self, results: list[ServerResult]) -> None:
        with self.lock:
            self.results = {r.name: r for r in results if r.event != "vanished"}
            self.rounds += 1

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily, Metric

        with self.lock:
            results = list(self.results.values())
            rounds = self.rounds
        now = self.clock()
        fams = {name: Metric(PREFIX + name, doc, "gauge") for name, doc, _ in GAUGES}
        verdict = Metric(PREFIX + "verdict_info", "The verdict (GO, MARGINAL, NO-GO, ...) and the advice, as "
                         "labels; value 1.", "gauge")
        event = Metric(PREFIX + "server_event_info", "Why a server has no reading this interval (event and "
                       "detail as labels); value 1.", "gauge")
        age = Metric(PREFIX + "reading_age_seconds", "Seconds since the newest scrape the reading is built on.",
                     "gauge")
        stamp = Metric(PREFIX + "reading_timestamp_seconds", "Prometheus' timestamp of the newest scrape the "
                       "reading is built on (Unix seconds).", "gauge")
        for res in results:
            labels = dict(res.labels)
            if res.sample_t_s is not None:
                age.add_sample(age.name, labels, max(now - res.sample_t_s, 0.0))
                stamp.add_sample(stamp.name, labels, res.sample_t_s)
            r = res.reading
            if r is None:
                event.add_sample(event.name, {**labels, "event": res.event or "", "detail": res.detail[:200]}, 1.0)
                continue
            for name, _, get in GAUGES:
                v = get(r)
                if v is not None and v == v and abs(v) != float("inf"):
                    fams[name].add_sample(PREFIX + name, labels, float(v))
            verdict.add_sample(verdict.name, {**labels, "verdict": r.verdict, "advice": r.advice}, 1.0)
        yield from fams.values()
        yield from (verdict, event, age, stamp)
        yield GaugeMetricFamily(PREFIX + "fleet_rounds", "Fleet readings taken since the exporter started.",
                                value=float(rounds))


def parse_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` or a bare ``PORT`` (loopback: the verdicts are the operator's, not the network's)."""
    host, sep, port = addr.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", addr
    host = host.strip("[]") or "127.0.0.1"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise FieldError(None, f"{{serve}} {verbatim(repr(addr))}: expected HOST:PORT or PORT (port 0-65535)")
    return host, int(port)


class Exporter:
    """The collector behind an HTTP server of its own thread (``/metrics``); ``stop`` closes it."""

    def __init__(self, addr: str) -> None:
        from wsgiref.simple_server import WSGIRequestHandler, make_server

        from prometheus_client import CollectorRegistry, make_wsgi_app

        class _Quiet(WSGIRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

        host, port = parse_addr(addr)
        self.collector = FleetCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)  # type: ignore[arg-type]
        try:
            self.httpd = make_server(host, port, make_wsgi_app(self.registry), handler_class=_Quiet)
        except OSError as exc:
            raise FieldError(None, f"{{serve}} {verbatim(addr)}: cannot listen: {verbatim(exc.strerror or exc)}") from None
        self.address = f"{host}:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)
