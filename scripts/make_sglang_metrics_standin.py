"""Stand-in SGLang /metrics pages (SGLang cannot run here): one page per decode window of the
recorded-format log tests/data/logs_sglang_055/server.log, rendered by prometheus_client itself
with the gauge names, help strings and labels of sglang 0.5.5 ``srt/metrics/collector.py``
(``SchedulerMetricsCollector``: labels model_name, engine_type, tp_rank, pp_rank) and the values
``scheduler_metrics_mixin.py`` sets from the same figures as the log line.

    .venv-vllm/bin/python scripts/make_sglang_metrics_standin.py   # needs prometheus_client
"""

from __future__ import annotations

import sys
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specmodel.engines.logs import parse_log  # noqa: E402

GAUGES = {  # name -> documentation, as in collector.py (0.5.5)
    "sglang:num_running_reqs": "The number of running requests.",
    "sglang:num_used_tokens": "The number of used tokens.",
    "sglang:token_usage": "The token usage.",
    "sglang:gen_throughput": "The generation throughput (token/s).",
    "sglang:num_queue_reqs": "The number of requests in the waiting queue.",
    "sglang:spec_accept_length": "The average acceptance length of speculative decoding.",
    "sglang:spec_accept_rate": "The average acceptance rate of speculative decoding (`accepted tokens / total draft "
                               "tokens` in batch).",
}


def main() -> int:
    log = REPO / "tests" / "data" / "logs_sglang_055" / "server.log"
    out = REPO / "tests" / "data" / "sglang_metrics_055"
    out.mkdir(parents=True, exist_ok=True)
    labels = {"model_name": "moonshotai/Kimi-K2.5", "engine_type": "unified", "tp_rank": "0", "pp_rank": "0"}
    lf = parse_log(log)
    for i, w in enumerate(lf.windows):
        reg = CollectorRegistry()
        g = {n: Gauge(n, d, labelnames=list(labels), registry=reg) for n, d in GAUGES.items()}
        used = (w.context_tokens or 0.0) * w.batch
        vals = {"sglang:num_running_reqs": w.batch, "sglang:num_used_tokens": used, "sglang:token_usage": 0.01,
                "sglang:gen_throughput": w.tokens_per_s, "sglang:num_queue_reqs": 0,
                "sglang:spec_accept_length": w.accept_len or 0.0,
                "sglang:spec_accept_rate": (w.accept_len or 0.0) / 4.0}
        for n, v in vals.items():
            g[n].labels(**labels).set(v)
        (out / f"page_{i:02d}.txt").write_bytes(generate_latest(reg))
    (out / "README.md").write_text(
        "Stand-in SGLang 0.5.5 /metrics pages (SGLang cannot run on this box): one per decode window of\n"
        "../logs_sglang_055/server.log, rendered by prometheus_client with the names, help strings and labels\n"
        "of sglang 0.5.5 srt/metrics/collector.py. Regenerate: scripts/make_sglang_metrics_standin.py\n")
    print(f"{len(lf.windows)} pages in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
