"""A made-up third engine, shaped like a real one (``specmodel/engines/<engine>/``): its record
(:mod:`.record`), a server-log reader (:mod:`.log`) and a counters ``/metrics`` reader
(:mod:`.metrics`). tests/test_toy_engine.py adds it to a copy of specmodel with the one registry
line docs/engines.md asks for and runs the commands through it.

What the registry reads: ``SPEC`` and ``FORMATS``."""

from tests.toy_engine import log, metrics
from tests.toy_engine.record import SPEC

FORMATS = (log.FORMAT, metrics.FORMAT)

__all__ = ["FORMATS", "SPEC"]
