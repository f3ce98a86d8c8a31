"""``specmodel watch URL|LOGFILE``: is speculation paying on this running server, now?"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from typing import Any

import click

from specmodel.engines import engine_spec, log_help, metrics_help
from specmodel.engines.base import COUNTERS, EngineConfig
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_STEPS, MAX_TP, bounded_int
from specmodel.live.sources import LogSource, MetricsSource, SourceGone, is_url
from specmodel.live.watch import assess, check_method_matches_profile, check_source_matches_profile, now_stamp, spec_for
from specmodel.live.window import MetricsWindow, Observed, Scrape, observe_log, observe_metrics


def _load_profile(path: str | None) -> Any:
    from specmodel.scenario.args import ScenarioArgs
    from specmodel.scenario.resolve import resolve_scenario

    return resolve_scenario(ScenarioArgs(profile=path), require_accept=False).profile


@click.command("watch", epilog=f"SOURCE: a {metrics_help()} URL, or a {log_help(text_only=True)} being written.")
@click.argument("source", required=False)
@click.option("--prometheus", "prometheus_url", default=None,
              help="Read every server from this Prometheus server (its base URL) instead of SOURCE (docs/watch.md).")
@click.option("--selector", default="{}", show_default=True,
              help="With --prometheus: label matchers of the servers, e.g. '{job=\"vllm\"}'.")
@click.option("--targets", "targets_path", type=click.Path(), default=None,
              help="With --prometheus: JSON file mapping label sets to profiles (docs/watch.md).")
@click.option("--serve", "serve_addr", default=None,
              help="Also expose each server's verdict (a /metrics SOURCE's, or with --prometheus every server's) as "
                   "Prometheus gauges on HOST:PORT (a bare PORT listens on 127.0.0.1).")
@click.option("--profile", "profile_path", type=click.Path(), default=None,
              help="Profile of the server's box, model and TP (default: as predict).")
@click.option("--interval", "interval_s", type=click.FloatRange(min=0.05, max=3600), default=10.0, show_default=True,
              help="Seconds between readings.")
@click.option("--window", "window_s", type=click.FloatRange(min=0.1, max=86400), default=60.0, show_default=True,
              help="Sliding window, seconds: acceptance, batch and context are taken over it.")
@click.option("--steps", type=bounded_int(1, MAX_STEPS), default=None,
              help="Draft depth the server runs (SGLang; vLLM's counters say it). Default: the log's, else the profile's.")
@click.option("--tp", type=bounded_int(1, MAX_TP), default=None,
              help="The server's TP degree, checked against the profile (a /metrics page does not say it).")
@click.option("--count", type=bounded_int(1, 1_000_000), default=None, help="Stop after N readings (default: run until Ctrl-C).")
@click.option("--once", is_flag=True,
              help="One reading, then exit (a URL: scraped every --interval until the window holds drafts, at most "
                   "--window seconds).")
@click.option("--method", default=None,
              help="The speculative method the server runs (a /metrics page does not say it; a log does). "
                   "Default: the log's, else the profile's.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1, max=600), default=5.0, show_default=True,
              help="Seconds one scrape may take.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per reading (schema specmodel.watch).")
def watch_cmd(source: str | None, profile_path: str | None, interval_s: float, window_s: float, steps: int | None,
              tp: int | None, count: int | None, once: bool, method: str | None, timeout_s: float, as_json: bool,
              prometheus_url: str | None, selector: str, targets_path: str | None, serve_addr: str | None,
              **_: Any) -> None:
    """Watch a running server: SOURCE is its Prometheus /metrics URL (of a registered engine) or a server log
    being written. Each interval prints the predicted speedup at the observed acceptance, batch and
    context, the margin to break-even, and the advice (keep / switch off above batch N / use k = K).

    Example: specmodel watch http://127.0.0.1:8000/metrics --profile profiles/mybox

    A fleet: specmodel watch --prometheus http://127.0.0.1:9090 --selector '{job="vllm"}' --targets fleet.json
    """
    if prometheus_url is not None or source is None:
        from specmodel.commands.watch_fleet import watch_fleet

        if source is not None:
            raise SpecmodelError("--prometheus: give either SOURCE (one server) or --prometheus URL (a fleet), not both")
        if prometheus_url is None:
            raise SpecmodelError("SOURCE: give a server's /metrics URL or log, or --prometheus URL for a fleet")
        watch_fleet(prometheus_url, selector=selector, targets_path=targets_path, profile_path=profile_path,
                    interval_s=interval_s, window_s=window_s, steps=steps, count=1 if once else count, method=method,
                    timeout_s=timeout_s, as_json=as_json, serve_addr=serve_addr, tp=tp)
        return
    if targets_path is not None:
        raise SpecmodelError("--targets: with --prometheus URL (the fleet watch)")
    if serve_addr is not None and not is_url(source):
        raise SpecmodelError("--serve: with a server's /metrics URL or --prometheus URL (a log has no target labels)")
    profile = _load_profile(profile_path)
    if tp is not None and tp != profile.tp:
        raise SpecmodelError(f"--tp: the server runs TP {tp} but profile {profile.name} is TP {profile.tp}; "
                             "watch it against a profile of the same box and TP degree")
    limit = 1 if once else count
    emitted = 0
    if is_url(source):
        src = MetricsSource(url=source, timeout_s=timeout_s)
        try:
            first = src.fetch()
        except SourceGone as exc:
            raise SpecmodelError(f"{exc} (is the server up, and is this its /metrics URL?)") from None
        eng = engine_spec(first.engine)
        counters = eng.metrics_kind == COUNTERS
        if counters and first.drafts is None:
            raise SpecmodelError(f"{source}: the page has no {eng.metric_names[0]} counter: the server runs without "
                                 "speculative decoding (start it with speculation on)")
        if not counters and first.accept_len_gauge is None and first.running:
            raise SpecmodelError(f"{source}: {eng.metric_names[0]} is absent or 0 while requests run: the server "
                                 "runs without speculative decoding")
        check_source_matches_profile(EngineConfig(engine=first.engine, where=source, model=first.model, tp=tp), profile)
        _check_method_name(method, eng)
        check_method_matches_profile(method, profile, "--method")
        k = steps or profile.spec.steps
        win = MetricsWindow(window_s=window_s)
        win.push(Scrape(t_s=time.monotonic(), sample=first))
        t0 = time.monotonic()
        exporter = _single_exporter(serve_addr, source)
        try:
            _watch_url(src, win, exporter, eng, k, profile, steps, method, limit, once, interval_s, window_s, t0, as_json)
        finally:
            if exporter is not None:
                exporter.stop()
        return
    # a log file being written
    lsrc = LogSource(path=source)
    windows, cfg, eng = lsrc.read()
    if cfg is not None:
        check_source_matches_profile(cfg if tp is None else _with_tp(cfg, tp), profile)
        steps = steps or cfg.steps
    _check_method_name(method, eng)
    server_method = method or (cfg.algorithm if cfg is not None else None)
    check_method_matches_profile(server_method, profile, cfg.where if cfg is not None and not method else "--method")
    k = steps or profile.spec.steps
    while True:
        obs = observe_log(windows, eng, k, window_s)
        if isinstance(obs, Observed):
            obs = replace(obs, method=server_method)
        emitted += _report(obs, profile, steps, as_json)[0]
        if once or (limit is not None and emitted >= limit):
            return
        time.sleep(interval_s)
        windows = lsrc.read()[0]


def _single_exporter(serve_addr: str | None, source: str) -> Any:
    """``--serve`` for one server: the fleet exporter's gauges, the server named by its URL's host:port."""
    if serve_addr is None:
        return None
    from specmodel.live.export import Exporter

    exporter = Exporter(serve_addr)
    click.echo(f"serving the verdict on http://{exporter.address}/metrics", err=True)
    return exporter


def _publish(exporter: Any, source: str, reading: Any = None, event: str = "", detail: str = "") -> None:
    if exporter is None:
        return
    import urllib.parse

    from specmodel.live.fleet import ServerResult

    inst = urllib.parse.urlsplit(source).netloc
    exporter.collector.update([ServerResult(name=inst, labels={"instance": inst}, reading=reading,
                                            event=event or None, detail=detail, sample_t_s=time.time())])


def _watch_url(src: Any, win: MetricsWindow, exporter: Any, eng: Any, k: int, profile: Any, steps: int | None,
               method: str | None, limit: int | None, once: bool, interval_s: float, window_s: float, t0: float,
               as_json: bool) -> None:
    """The single-server loop on a /metrics URL; each reading (or why there is none) also goes to the exporter."""
    emitted = 0
    gone = False
    while limit is None or emitted < limit:
        time.sleep(interval_s)
        try:
            s = src.fetch()
        except SourceGone as exc:
            if not gone:
                _say(as_json, f"{now_stamp()}  server not answering ({exc}); retrying every {interval_s:g} s",
                     {"event": "server gone", "detail": str(exc)})
                _publish(exporter, src.url, event="server gone", detail=str(exc))
            gone = True
            if once and time.monotonic() - t0 >= window_s:
                return
            continue
        if gone:
            _say(as_json, f"{now_stamp()}  server answering again", {"event": "server back"})
            gone = False
        if win.push(Scrape(t_s=time.monotonic(), sample=s)):
            _say(as_json, f"{now_stamp()}  counters went backwards (server restarted): the window starts again",
                 {"event": "counter reset"})
            _publish(exporter, src.url, event="counter reset", detail="counters went backwards (server restarted)")
            continue
        obs = observe_metrics(win, k, eng)
        if isinstance(obs, Observed):
            obs = replace(obs, method=method)
        elif once and time.monotonic() - t0 < window_s:
            # one reading is asked for: a window without drafts yet is widened, not reported,
            # until it spans --window (a busy server's counters then show its drafts)
            continue
        n, reading = _report(obs, profile, steps, as_json)
        emitted += n
        _publish(exporter, src.url, reading=reading, event="no reading" if reading is None else "",
                 detail=obs if isinstance(obs, str) else "")
        if once:
            return


def _check_method_name(method: str | None, eng: Any) -> None:
    if method is not None and method not in eng.methods and method.lower() not in (m.lower() for m in eng.methods):
        raise SpecmodelError(f"--method: {method!r} is not a method {eng.label} runs (known: {', '.join(eng.methods)})")


def _with_tp(cfg: EngineConfig, tp: int) -> EngineConfig:
    if cfg.tp is not None and cfg.tp != tp:
        raise SpecmodelError(f"--tp {tp} contradicts the log: the server ran TP {cfg.tp} ({cfg.where})")
    return replace(cfg, tp=tp)


def _say(as_json: bool, text: str, event: dict[str, Any]) -> None:
    from specmodel.schema.formats import WATCH

    click.echo(json.dumps(WATCH.stamp(event), allow_nan=False) if as_json else text)


def _report(obs: Observed | str, profile: Any, steps: int | None, as_json: bool) -> tuple[int, Any]:
    """Print one reading ((1, it)) or why there is none this interval ((0, None))."""
    if isinstance(obs, str):
        _say(as_json, f"{now_stamp()}  {obs}", {"event": "no reading", "detail": obs})
        return 0, None
    r = assess(profile, obs, spec_for(profile, obs, steps))
    if as_json:
        click.echo(json.dumps(r.to_dict(), allow_nan=False))  # (to_dict maps a non-finite float to null)
    else:
        click.echo(r.line(now_stamp()))
        for n in r.notes:
            click.echo(f"          note: {n}")
    return 1, r
