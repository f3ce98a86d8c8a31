"""Measuring: the TP profiler (ranks, plan, worker, spec loop)."""
