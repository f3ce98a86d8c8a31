"""SGLang's Prometheus ``/metrics`` page (checked in sglang 0.5.5, ``srt/metrics/collector.py``
``SchedulerMetricsCollector`` and ``srt/managers/scheduler_metrics_mixin.py``).

Gauges (labels ``model_name``, ``engine_type``, ``tp_rank``, ``pp_rank`` [, ``dp_rank``]), set
every ``--decode-log-interval`` decode batches from the same figures as the ``Decode batch`` log
line: ``sglang:spec_accept_length`` (the window's ``accept len``: tokens per verify step incl. the
bonus token; 0 when speculation is off), ``sglang:spec_accept_rate``, ``sglang:num_running_reqs``,
``sglang:num_used_tokens`` (``#token``), ``sglang:gen_throughput`` (token/s). Acceptance is a gauge
here, not a counter: a window over several scrapes averages the gauge weighted by running requests.
The scheduler of each rank may export; the lowest ``tp_rank`` is read (they log the same batch).

SGLang >= 0.5.23 with its device timer on also exports GPU seconds per forward category and the
decode-batch count (:mod:`specmodel.engines.sglang.devtimer`): each sample carries them (``live``), and
``live_costs`` turns two samples into the verify / draft / decode costs per cycle between them
(clock ``engine_device_timer``), which ``watch`` prices the server with.
"""

from __future__ import annotations

from typing import Any

from specmodel.engines.base import MetricsFormat, MetricsSample
from specmodel.engines.prom import Sample, model_name, parse_page
from specmodel.engines.sglang import devtimer

NAME = "sglang-metrics"
ACCEPT_LEN = "sglang:spec_accept_length"
RUNNING = "sglang:num_running_reqs"
USED_TOKENS = "sglang:num_used_tokens"
GEN_TPUT = "sglang:gen_throughput"


def sniff(text: str) -> bool:
    return "sglang:" in text


def _rank0(ss: list[Sample] | None) -> float | None:
    if not ss:
        return None
    return min(ss, key=lambda s: (int(s.label("tp_rank") or 0) if (s.label("tp_rank") or "0").isdigit() else 0,
                                  s.label("dp_rank") or "")).value


def parse(text: str, where: str) -> MetricsSample:
    return from_page(parse_page(text, where), where)


def from_page(page: dict[str, list[Sample]], where: str) -> MetricsSample:
    a = _rank0(page.get(ACCEPT_LEN))
    running = _rank0(page.get(RUNNING))
    used = _rank0(page.get(USED_TOKENS))
    ctx = used / running if used is not None and running else None
    return MetricsSample(engine="sglang", accept_len_gauge=a if a is not None and a >= 1.0 else None,
                         running=running, context_tokens=ctx, gen_tokens_per_s_gauge=_rank0(page.get(GEN_TPUT)),
                         model=model_name(page),
                         drafts=None,
                         live=devtimer.from_page(page, where) if devtimer.has_timer(page, "") else None)


def live_costs(a: Any, b: Any) -> Any:
    """Per-cycle costs between two samples' device-timer pages (:func:`devtimer.window`), or why none."""
    if b is None:
        return (f"no {devtimer.SECONDS} on the page (start SGLang >= 0.5.23 with "
                "SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 and --enable-metrics)")
    if a is None:
        return "waiting for a second page with the device timer"
    return devtimer.window(a, b)


def has_spec(text: str) -> bool:
    return ACCEPT_LEN in text


FORMAT = MetricsFormat(name=NAME, description="SGLang Prometheus /metrics page", help_name="SGLang /metrics",
                       sniff=sniff, parse=parse, from_page=from_page, series=(ACCEPT_LEN, RUNNING, USED_TOKENS, GEN_TPUT),
                       live_costs=live_costs)
