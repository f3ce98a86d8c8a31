"""SGLang: its record (:mod:`.spec`), server-log, ``bench_speculative`` and ``/metrics`` readers
(:mod:`.log`, :mod:`.bench_speculative`, :mod:`.metrics`), the forward hook that runs inside its
workers (:mod:`.hook`) and the hook log's reader (:mod:`.hooklog`).
What the registry reads: ``SPEC`` and ``FORMATS``."""

from specmodel.engines.sglang import bench_speculative, log, metrics
from specmodel.engines.sglang.spec import SPEC

FORMATS = (log.FORMAT, bench_speculative.FORMAT, metrics.FORMAT)

__all__ = ["FORMATS", "SPEC"]
