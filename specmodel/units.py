"""Quantities are stored in SI units (seconds, bytes); these convert them, only when printing."""

from __future__ import annotations


def ms(seconds: float, digits: int = 2, *, unit: bool = True) -> str:
    """``0.0301`` -> ``"30.10 ms"`` (``unit=False``: ``"30.10"``, for a column headed in ms)."""
    text = f"{seconds * 1e3:.{digits}f}"
    return f"{text} ms" if unit else text
