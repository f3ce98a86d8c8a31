"""Quantities are stored in SI units (seconds, bytes); these convert them, only when printing.

One formatter per unit, so a figure reads the same in the CLI, the Markdown and the PDF; the
all-reduce α-β pair (:func:`alpha_beta`) is printed by six commands and pages.
"""

from __future__ import annotations


def ms(seconds: float, digits: int = 2, *, unit: bool = True) -> str:
    """``0.0301`` -> ``"30.10 ms"`` (``unit=False``: ``"30.10"``, for a column headed in ms)."""
    text = f"{seconds * 1e3:.{digits}f}"
    return f"{text} ms" if unit else text


def us(seconds: float, digits: int = 2, *, unit: bool = True) -> str:
    """``6.81e-6`` -> ``"6.81 us"`` (ASCII ``us``: logs and terminals without UTF-8 stay readable)."""
    text = f"{seconds * 1e6:.{digits}f}"
    return f"{text} us" if unit else text


def gb_per_s(bytes_per_s: float, digits: int = 2, *, unit: bool = True) -> str:
    """``2.5e10`` -> ``"25.00 GB/s"`` (decimal GB, as NCCL and nccl-tests report bandwidth)."""
    text = f"{bytes_per_s / 1e9:.{digits}f}"
    return f"{text} GB/s" if unit else text


def alpha_beta(alpha_s: float, beta_bytes_per_s: float, digits: int = 2) -> str:
    """The α-β all-reduce fit, ``"alpha 6.81 us, beta 25.00 GB/s"``: α the latency per ring step,
    β the bandwidth per link (model/allreduce.py)."""
    return f"alpha {us(alpha_s, digits)}, beta {gb_per_s(beta_bytes_per_s, digits)}"
