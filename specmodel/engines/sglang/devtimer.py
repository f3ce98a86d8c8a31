"""SGLang 0.5.23's own device timer, read from its ``/metrics`` page: GPU seconds per forward
category, the forward counts beside them, and the GPU's busy share. Every figure here is on one
clock, :data:`CLOCK` (``engine_device_timer``: CUDA events SGLang records around its forwards), never
the hook's.

The page (``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` and ``--enable-metrics``; read in sglang 0.5.23):

- ``sglang:forward_execution_seconds_total{category}`` (counter, ``srt/observability/metrics_collector.py``
  1054-1061, incremented in ``increment_forward_execution_seconds`` 1598-1612 by the reporter the
  scheduler gives its ``DeviceTimer``, ``srt/managers/scheduler_components/metrics_reporter.py``
  325-342). The timer (``srt/utils/device_timer.py``) records a CUDA event before and after each
  wrapped segment; the category is the string its caller passes. The same timer is installed on the
  target's runner and on the drafter's runner(s) (``metrics_reporter.py`` 363-374), so a category
  says the forward *mode*, not which model ran it. Per category, what it holds (see :data:`CATEGORIES`).
- ``sglang:cuda_graph_passes_total{mode}`` (counter, ``metrics_collector.py`` 737-741): one per
  decode-phase batch, ``decode_cuda_graph`` or ``decode_none`` (``increment_decode_cuda_graph_pass``
  1527-1529, called once per batch by ``batch_result_processor.py`` 993-996). On a speculative server a
  decode-phase batch is one cycle (one verify forward), so this is the count the per-forward
  costs divide by. No per-category count exists on the page: a category's seconds divided by this
  count is a cost per *cycle* (several drafter forwards of a cycle summed), never per forward.
- ``sglang:fwd_occupancy`` (gauge, ``metrics_collector.py`` 710-715): timed GPU seconds / wall
  seconds over the last window of ``decode_log_interval`` batches, in percent
  (``metrics_reporter.py`` 1329-1351). The rest of the wall time is the scheduler's host work and any
  GPU work outside a timed segment (sampling, the verify's accept kernels): host work per cycle
  = G (100 / occupancy - 1), G the cycle's timed GPU seconds (an upper bound on the host work alone).
- ``sglang:scheduler_idle_seconds_total``, ``sglang:spec_num_steps`` (the steps adaptive speculation
  runs now), ``sglang:num_running_reqs`` / ``sglang:num_used_tokens`` (the batch and its context).

Every TP rank's scheduler exports its own series (label ``tp_rank``); the lowest rank is read.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from specmodel.engines.prom import Sample, parse_page
from specmodel.errors import SpecmodelError
from specmodel.units import ms

CLOCK = "engine_device_timer"
SECONDS = "sglang:forward_execution_seconds_total"
PASSES = "sglang:cuda_graph_passes_total"
OCCUPANCY = "sglang:fwd_occupancy"
IDLE = "sglang:scheduler_idle_seconds_total"
SPEC_STEPS = "sglang:spec_num_steps"
RUNNING = "sglang:num_running_reqs"
USED_TOKENS = "sglang:num_used_tokens"
DECODE_PASS_MODES = ("decode_cuda_graph", "decode_none")
#: the categories that hold the drafter's CUDA-graph replays, one interval per cycle each
DRAFT_GRAPH = ("eagle_draft", "frozen_kv_draft")
DRAFT_EXTEND_GRAPH = ("eagle_draft_extend",)

#: category -> (what it holds, what it misses), read from the callers of ``device_timer_ctx``
CATEGORIES: Mapping[str, tuple[str, str]] = MappingProxyType({
    "target_verify": (
        "the target's verify forwards: eager (model_executor/runner/eager_runner.py 343-350), decode CUDA "
        "graph (decode_cuda_graph_runner.py 1986-1987, the mode's name) and piecewise prefill graph "
        "(model_runner.py 2045-2056, which also times load_batch)",
        "nothing of the drafter"),
    "decode": (
        "the target's decode forwards (non-speculative server) and, on a speculative server, the drafter's "
        "EAGER draft steps (eager_runner.py 261: every DECODE forward on any runner the timer is on)",
        "draft steps replayed from the EAGLE draft graph (they are eagle_draft)"),
    "extend": (
        "prefill chunks of the target AND the drafter's eager draft-extend (DRAFT_EXTEND_V2 is not "
        "target_verify: eager_runner.py 343-347) and the drafter's own prefill",
        "the split between prefill and draft-extend: a window with prefill cannot price the draft-extend"),
    "eagle_draft": (
        "one replay of the EAGLE draft graph, all draft steps of a cycle in one interval "
        "(speculative/eagle_draft_cuda_graph_runner.py 748)",
        "batches above the largest draft graph run eager (decode)"),
    "eagle_draft_extend": (
        "one replay of the draft-extend graph (eagle_draft_extend_cuda_graph_runner.py 676; multi-layer "
        "EAGLE multi_layer_eagle_draft_extend_cuda_graph_runner.py 536, 1115)",
        "batches above the largest draft-extend graph run eager (extend)"),
    "frozen_kv_draft": ("FROZEN_KV_MTP's draft graph replay (speculative/frozen_kv_mtp_cuda_graph_runner.py 462)", ""),
    "idle": ("idle forwards of a DP-attention rank with no batch (eager_runner.py 460)", ""),
    "split_prefill": ("split prefill chunks (model_runner.py 1802)", ""),
})
#: what no category holds (said once beside every figure)
NOT_SEEN = ("host work between forwards (batch building, tree building, sampling bookkeeping), GPU work "
            "outside a timed segment, the all-reduce share inside a forward (one interval per forward), and "
            "every forward of a drafter the timer is not installed on: it is set on the spec worker's "
            "draft_worker.draft_runner / draft_runner_list only (metrics_reporter.py 363-374), and DFlash / "
            "DSpark drive their drafter through a plain TpModelWorker without either (dflash_worker_v2.py "
            "649-654): their draft is not on the page")


def _rank0(ss: list[Sample]) -> list[Sample]:
    def rank(s: Sample) -> int:
        r = s.label("tp_rank") or "0"
        return int(r) if r.isdigit() else 0

    low = min(rank(s) for s in ss)
    return [s for s in ss if rank(s) == low and (s.label("dp_rank") or "") == min(x.label("dp_rank") or "" for x in ss)]


@dataclass(frozen=True, kw_only=True)
class DevicePage:
    """One scrape's device-timer figures (the lowest TP rank): counters since server start, gauges now."""

    seconds: Mapping[str, float]  # category -> GPU seconds
    decode_passes: float | None  # decode-phase batches (cycles on a speculative server)
    occupancy_pct: float | None
    running: float | None
    used_tokens: float | None
    spec_steps: float | None
    idle_s: float | None
    where: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", MappingProxyType(dict(self.seconds)))


def read_page(text: str, where: str) -> DevicePage:
    """A page -> its device-timer figures; a page without them is one line naming what to turn on."""
    return from_page(parse_page(text, where), where, declared=declared(text))


def declared(text: str) -> bool:
    """The page declares the timer's counter (its ``# TYPE`` line): the timer is on, even before its
    first forward (prometheus_client writes a labelled counter's samples only once one is counted)."""
    stem = SECONDS.removesuffix("_total")
    return any(line.startswith("# TYPE ") and line.split()[2].removesuffix("_total") == stem
               for line in text.splitlines() if line.startswith("# TYPE ") and len(line.split()) > 2)


def has_timer(page: Mapping[str, list[Sample]], text: str) -> bool:
    return bool(page.get(SECONDS)) or declared(text)


def from_page(page: Mapping[str, list[Sample]], where: str, *, declared: bool = False) -> DevicePage:
    ss = page.get(SECONDS, [])
    if not ss and not declared:
        raise SpecmodelError(f"{where}: no {SECONDS} on the page (start the SGLang >= 0.5.23 server with "
                             "SGLANG_ENABLE_METRICS_DEVICE_TIMER=1 and --enable-metrics)")
    secs: dict[str, float] = {}
    for s in _rank0(ss) if ss else ():
        cat = s.label("category")
        if not cat:
            raise SpecmodelError(f"{where}: {SECONDS} without a category label")
        if s.value < 0:
            raise SpecmodelError(f"{where}: {SECONDS}{{category={cat}}} is negative ({s.value})")
        secs[cat] = secs.get(cat, 0.0) + s.value

    def gauge(name: str) -> float | None:
        g = page.get(name)
        return _rank0(g)[0].value if g else None

    passes = page.get(PASSES)
    decode = None
    if passes:
        mine = [s for s in _rank0(passes) if s.label("mode") in DECODE_PASS_MODES]
        decode = math.fsum(s.value for s in mine) if mine else None
    occ = gauge(OCCUPANCY)
    if occ is not None and not 0.0 <= occ <= 100.0:
        raise SpecmodelError(f"{where}: {OCCUPANCY} = {occ} is not a percentage")
    return DevicePage(seconds=secs, decode_passes=decode, occupancy_pct=occ, running=gauge(RUNNING),
                      used_tokens=gauge(USED_TOKENS), spec_steps=gauge(SPEC_STEPS), idle_s=gauge(IDLE), where=where)


@dataclass(frozen=True, kw_only=True)
class DeviceCosts:
    """Per-cycle GPU seconds over a window of two pages, on :data:`CLOCK`. A cost the timer did not
    see is None, and ``unknown`` says why (never a 0 standing in for it)."""

    cycles: float  # decode-phase batches in the window
    speculative: bool
    verify_s: float | None
    decode_s: float | None
    draft_s: float | None  # the drafter's whole cycle: its steps + its draft-extend
    #: the drafter seconds per cycle the page did attribute (graph replays + eager steps): a lower
    #: bound where ``draft_s`` is unknown because 'extend' also moved
    draft_min_s: float | None
    host_s: float | None  # wall - timed GPU per cycle, from the occupancy gauge
    batch: float | None
    context_tokens: float | None
    spec_steps: float | None
    seconds: Mapping[str, float] = field(default_factory=dict)  # category -> window seconds
    unknown: Mapping[str, str] = field(default_factory=dict)
    clock: str = CLOCK

    def __post_init__(self) -> None:
        object.__setattr__(self, "seconds", MappingProxyType(dict(self.seconds)))
        object.__setattr__(self, "unknown", MappingProxyType(dict(self.unknown)))

    def to_dict(self) -> dict[str, Any]:
        return {"clock": self.clock, "cycles": self.cycles, "speculative": self.speculative, "verify_s": self.verify_s,
                "decode_s": self.decode_s, "draft_s": self.draft_s, "draft_min_s": self.draft_min_s, "host_s": self.host_s, "batch": self.batch,
                "context_tokens": self.context_tokens, "spec_steps": self.spec_steps,
                "category_seconds": dict(self.seconds), "unknown": dict(self.unknown)}


def window(a: DevicePage | None, b: DevicePage) -> DeviceCosts | str:
    """The costs per cycle between two scrapes (``a`` None: since server start), or why there are none."""
    if b.decode_passes is None:
        return (f"{b.where}: no {PASSES}{{mode=decode_*}} on the page: no count to divide the device timer's "
                "seconds by")
    n = b.decode_passes - (a.decode_passes if a is not None and a.decode_passes is not None else 0.0)
    d = {c: v - (a.seconds.get(c, 0.0) if a is not None else 0.0) for c, v in b.seconds.items()}
    if n < 0 or any(v < 0 for v in d.values()):
        return "counters went backwards (server restarted)"
    if n < 1:
        return "no decode batch in the window"
    spec = d.get("target_verify", 0.0) > 0
    unknown: dict[str, str] = {}
    verify = d["target_verify"] / n if spec else None
    # adaptive speculation (spec_num_steps) changes the verify's length: a window across a change
    # mixes cycles of several k, and k = 0 runs a one-token verify with no draft
    # (eagle_worker_v2.py 1469-1472, 1681-1686): no cost of the configured cycle is on the page then
    was = a.spec_steps if a is not None else None
    if spec and was is not None and b.spec_steps is not None and was != b.spec_steps:
        verify = None
        unknown["verify"] = unknown["draft"] = (f"the adaptive steps changed in the window (spec_num_steps "
                                                f"{was:g} -> {b.spec_steps:g}): its cycles mix verify lengths")
    elif spec and b.spec_steps == 0:
        verify = None
        unknown["verify"] = unknown["draft"] = ("drafting off (spec_num_steps 0): the target_verify forwards "
                                                "verify one token per request, no draft")
    decode = None if spec else d.get("decode", 0.0) / n
    if spec:
        unknown["decode"] = ("a speculative server runs no target decode; its 'decode' category holds the "
                             "drafter's eager steps")
    else:
        unknown["verify"] = "no target_verify seconds: the server does not speculate"
    draft: float | None = None
    seen: float | None = None
    if spec and "draft" not in unknown:
        seen = (math.fsum(d.get(c, 0.0) for c in DRAFT_GRAPH + DRAFT_EXTEND_GRAPH) + d.get("decode", 0.0)) / n
        prefill = d.get("extend", 0.0) + d.get("split_prefill", 0.0)
        if seen == 0.0:
            unknown["draft"] = ("no drafter category moved (a drafter the timer is not installed on, e.g. "
                                "DFlash / DSpark, or a host proposer such as NGRAM)")
        elif prefill > 0:
            unknown["draft"] = ("the window had prefill: 'extend' holds both the target's prefill and the "
                                "drafter's eager draft-extend, so the drafter's share is not on the page "
                                f"(at least {ms(seen)} per cycle)")
        else:
            draft = seen
    gpu = math.fsum(d.values()) / n
    host = None
    occ = b.occupancy_pct
    if occ is not None and occ > 0:
        host = gpu * (100.0 / occ - 1.0)
    else:
        unknown["host"] = f"no {OCCUPANCY} on the page (or 0 %)"
    ctx = b.used_tokens / b.running if b.used_tokens is not None and b.running else None
    return DeviceCosts(cycles=n, speculative=spec, verify_s=verify, decode_s=decode, draft_s=draft,
                       draft_min_s=seen if seen else None, host_s=host,
                       batch=b.running, context_tokens=ctx, spec_steps=b.spec_steps, seconds=d, unknown=unknown)
