"""``specmodel watch --prometheus URL``: the fleet loop (one line / JSON object per server per
interval) and, with ``--serve``, the exporter of the same readings."""

from __future__ import annotations

import json
import sys
import time

import click

from specmodel.errors import SpecmodelError
from specmodel.schema.profile import Profile


def _load_profile(path: str | None) -> Profile:
    from specmodel.scenario.args import ScenarioArgs
    from specmodel.scenario.resolve import resolve_scenario

    return resolve_scenario(ScenarioArgs(profile=path), require_accept=False).profile


def watch_fleet(url: str, *, selector: str, targets_path: str | None, profile_path: str | None, interval_s: float,
                window_s: float, steps: int | None, count: int | None, method: str | None, timeout_s: float,
                as_json: bool, serve_addr: str | None, tp: int | None) -> None:
    from specmodel.live.fleet import Fleet, PromAPI, Target, load_targets, selector_matchers
    from specmodel.live.sources import SourceGone, is_url
    from specmodel.live.watch import now_stamp

    if not is_url(url):
        raise SpecmodelError(f"--prometheus {url!r}: expected the server's base URL, e.g. http://127.0.0.1:9090")
    selector_matchers(selector)  # a bad selector is refused before anything is asked
    if targets_path is not None:
        if profile_path is not None:
            raise SpecmodelError("--profile: with --targets the targets file names each server's profile")
        targets = load_targets(targets_path)
    else:  # every server against one profile (--profile, else predict's default)
        targets = (Target(match=(), profile=profile_path or "", tp=tp, method=method, steps=steps),)

    def load(path: str) -> Profile:
        return _load_profile(path or None)

    fleet = Fleet(api=PromAPI(url=url, timeout_s=timeout_s), selector=selector, targets=targets, window_s=window_s,
                  load_profile=load, method=method, steps=steps)
    exporter = None
    if serve_addr is not None:
        from specmodel.live.export import Exporter

        exporter = Exporter(serve_addr)
        click.echo(f"serving the fleet's verdicts on http://{exporter.address}/metrics", err=True)
    rounds = 0
    down = False
    try:
        while count is None or rounds < count:
            if rounds:
                time.sleep(interval_s)
            at = time.time()
            try:
                results = fleet.read(at)
            except SourceGone as exc:
                if fleet.rounds == 0:
                    raise SpecmodelError(f"{exc} (is Prometheus up, and is this its base URL?)") from None
                if not down:
                    _event(as_json, f"{now_stamp()}  Prometheus not answering ({exc}); retrying every {interval_s:g} s",
                           "prometheus gone", str(exc))
                down = True
                rounds += 1
                continue
            if down:
                _event(as_json, f"{now_stamp()}  Prometheus answering again", "prometheus back", "")
                down = False
            rounds += 1
            if exporter is not None:
                exporter.collector.update(results)
            stamp = now_stamp()
            for r in results:
                if as_json:
                    click.echo(json.dumps(r.to_dict(at), allow_nan=False))
                else:
                    click.echo(r.line(stamp))
                    for n in r.reading.notes if r.reading is not None else ():
                        click.echo(f"          note: {n}")
            sys.stdout.flush()
    finally:
        if exporter is not None:
            exporter.stop()


def _event(as_json: bool, text: str, event: str, detail: str) -> None:
    from specmodel.schema.formats import WATCH

    click.echo(json.dumps(WATCH.stamp({"event": event, "detail": detail}), allow_nan=False) if as_json else text)
