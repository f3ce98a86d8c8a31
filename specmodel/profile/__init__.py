"""Measuring: the TP profiler, the annotation seam, the SGLang hook."""
