"""The live-server wing: what specmodel does beside a running server or fleet, one package.

``watch`` (a server's verdict per interval: ``sources`` reads its ``/metrics`` page or growing log,
``window`` turns the reads into what was observed), ``fleet`` (every server Prometheus scrapes, through
its HTTP API), ``export`` (the gauges ``watch --serve`` publishes), ``rules`` and ``dashboard`` (the
Prometheus alerting rules and the Grafana dashboard ``plan`` writes for a fleet) and ``validation``
(predicted against observed tok/s per window of a server's log). It reads engines' pages and logs
through the engine registry and prices through ``model/``; the commands over it are
``commands/watch.py``, ``commands/watch_fleet.py``, ``commands/validate.py`` and ``plan``'s rule
options. Like ``scenario/`` it imports no click, command or report (``tests/test_layering.py``)."""
