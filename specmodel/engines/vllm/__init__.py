"""vLLM: its record (:mod:`.spec`), server-log and ``/metrics`` readers (:mod:`.log`, :mod:`.metrics`),
the step hook that runs inside its workers (:mod:`.hook`, with the torch.profiler :mod:`.capture`),
the hook log's reader (:mod:`.hooklog`, :mod:`.capture_ingest`); the server run lives beside its command
What the registry reads: ``SPEC`` and ``FORMATS``."""

from specmodel.engines.vllm import log, metrics
from specmodel.engines.vllm.spec import SPEC

FORMATS = (log.FORMAT, metrics.FORMAT)

__all__ = ["FORMATS", "SPEC"]
