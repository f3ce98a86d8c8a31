"""specmodel's Prometheus text reader (``engines/prom.py``) against ``prometheus_client``'s
(``text_string_to_metric_families``) on a real vLLM 0.32 ``/metrics`` page: do they read the same
samples, and how long does each take per page?

Interleaved like pyperf: the two readers alternate, one page each, in rounds; repeated until the
95 % interval of the per-round ratio's median is within 2 % (or 200 rounds). Prints each reader's
median time per page and the ratio with its interval.

Run: python benchmarks/bench_prom_parse.py [PAGE]   (default: tests/data/vllm_cpu_032/tp1_ngram/metrics.txt)
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from specmodel.engines.prom import parse_page

PAGE = Path(__file__).resolve().parent.parent / "tests" / "data" / "vllm_cpu_032" / "tp1_ngram" / "metrics.txt"


def _ours(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels))): s.value for ss in parse_page(text, "page").values() for s in ss}


def _theirs(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for fam in text_string_to_metric_families(text)
            for s in fam.samples if math.isfinite(s.value)}


def main() -> int:
    page = Path(sys.argv[1]) if len(sys.argv) > 1 else PAGE
    text = page.read_text()
    a, b = _ours(text), _theirs(text)
    same = a == b
    ratios: list[float] = []
    t_ours: list[float] = []
    t_theirs: list[float] = []
    for i in range(200):
        order = (_ours, _theirs) if i % 2 == 0 else (_theirs, _ours)
        times = {}
        for fn in order:
            t0 = time.perf_counter()
            fn(text)
            times[fn] = time.perf_counter() - t0
        t_ours.append(times[_ours])
        t_theirs.append(times[_theirs])
        ratios.append(times[_theirs] / times[_ours])
        if i >= 20:
            qs = sorted(ratios)
            n = len(qs)
            lo, hi = qs[max(int(n / 2 - 0.98 * n**0.5), 0)], qs[min(int(n / 2 + 0.98 * n**0.5), n - 1)]
            med = statistics.median(qs)
            if (hi - lo) / 2 <= 0.02 * med:
                break
    qs = sorted(ratios)
    n = len(qs)
    lo, hi = qs[max(int(n / 2 - 0.98 * n**0.5), 0)], qs[min(int(n / 2 + 0.98 * n**0.5), n - 1)]
    print(f"page {page} ({len(text)} bytes, {len(a)} finite samples); same samples read: {same}")
    print(f"specmodel prom.py      {statistics.median(t_ours) * 1e3:.2f} ms per page (median of {n})")
    print(f"prometheus_client      {statistics.median(t_theirs) * 1e3:.2f} ms per page")
    print(f"ratio prometheus_client / prom.py: {statistics.median(qs):.2f}x (95 % interval {lo:.2f}-{hi:.2f}, "
          f"{n} interleaved rounds)")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
