"""SGLang 0.5.23 ``/metrics`` pages with the device timer on, rendered by prometheus_client itself
with the real metric names, help strings and labels of sglang 0.5.23
``srt/observability/metrics_collector.py`` (SGLang cannot run on this box):

- ``sglang:forward_execution_seconds_total{category}`` (Counter, 1054-1061)
- ``sglang:cuda_graph_passes_total{mode}`` (Counter, 737-741; ``decode_cuda_graph`` / ``decode_none``
  per decode batch, 1527-1529)
- ``sglang:fwd_occupancy`` (Gauge, 710-715), ``sglang:num_running_reqs``, ``sglang:num_used_tokens``,
  ``sglang:spec_num_steps`` (535), ``sglang:spec_accept_length``
- labels ``model_name, engine_type, tp_rank, pp_rank, moe_ep_rank`` (1383-1388).

:class:`Server` accumulates the counters the way SGLang's scheduler does (seconds per category
and one pass per decode batch) so a test writes a run as cycles of known costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest

LABELS = {"model_name": "standin/model", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0"}
SECONDS_DOC = "Total time that GPU is busy executing model forward passes. Refer to ForwardMode for category labels."


@dataclass
class Server:
    """Counters since start, per TP rank (a rank other than 0 gets ``skew`` x rank more seconds)."""

    tp: int = 1
    skew: float = 0.0
    seconds: dict[str, float] = field(default_factory=dict)
    passes: float = 0.0
    running: float = 1.0
    used_tokens: float = 0.0
    occupancy_pct: float | None = None
    spec_steps: float | None = None
    accept_len: float = 0.0
    model: str = LABELS["model_name"]

    def cycles(self, n: int, batch: int, context: float, **per_cycle_s: float) -> None:
        """``n`` decode batches at ``batch`` requests of ``context`` KV tokens, each with the given
        GPU seconds per category (e.g. ``target_verify=0.023, eagle_draft=0.004``)."""
        for cat, s in per_cycle_s.items():
            self.seconds[cat] = self.seconds.get(cat, 0.0) + n * s
        self.passes += n
        self.running, self.used_tokens = batch, batch * context

    def prefill(self, seconds: float) -> None:
        self.seconds["extend"] = self.seconds.get("extend", 0.0) + seconds

    def page(self, *, with_timer: bool = True, with_passes: bool = True) -> str:
        reg = CollectorRegistry()
        sec = Counter("sglang:forward_execution_seconds_total", SECONDS_DOC,
                      labelnames=[*LABELS, "category"], registry=reg)
        passes = Counter("sglang:cuda_graph_passes_total", "Total number of forward passes categorized by CUDA graph.",
                         labelnames=[*LABELS, "mode"], registry=reg)
        gauges = {n: Gauge(n, d, labelnames=list(LABELS), registry=reg, multiprocess_mode="mostrecent") for n, d in (
            ("sglang:fwd_occupancy", "Forward pass GPU occupancy percentage."),
            ("sglang:num_running_reqs", "The number of running requests."),
            ("sglang:num_used_tokens", "The number of used tokens."),
            ("sglang:spec_num_steps", "The number of speculative decoding steps."),
            ("sglang:spec_accept_length", "The average acceptance length of speculative decoding."))}
        for rank in range(self.tp):
            lab = {**LABELS, "model_name": self.model, "tp_rank": str(rank)}
            if with_timer:
                for cat, s in self.seconds.items():
                    sec.labels(**lab, category=cat).inc(s * (1.0 + self.skew * rank))
            if with_passes:
                passes.labels(**lab, mode="decode_cuda_graph").inc(self.passes)
                passes.labels(**lab, mode="prefill_cuda_graph").inc(3)
            if self.occupancy_pct is not None:
                gauges["sglang:fwd_occupancy"].labels(**lab).set(self.occupancy_pct)
            gauges["sglang:num_running_reqs"].labels(**lab).set(self.running)
            gauges["sglang:num_used_tokens"].labels(**lab).set(self.used_tokens)
            if self.spec_steps is not None:
                gauges["sglang:spec_num_steps"].labels(**lab).set(self.spec_steps)
            gauges["sglang:spec_accept_length"].labels(**lab).set(self.accept_len)
        return generate_latest(reg).decode()
