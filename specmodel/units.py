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


def gib(n_bytes: float, digits: int = 1) -> str:
    """``3.2e9`` -> ``"3.0 GiB"`` (binary GiB, as GPU memory is reported)."""
    return f"{n_bytes / 1024**3:.{digits}f} GiB"


def tokens_text(tokens: float) -> str:
    """128K / 32K / 1.5K / 0: a token count (a context) as users write it (K = 1024 tokens)."""
    c = float(tokens)
    if c >= 1024:
        k = c / 1024
        return f"{k:.0f}K" if abs(k - round(k)) < 1e-9 else f"{k:.1f}K"
    return f"{c:g}"


# --- into SI: what readers and plots convert, once each -------------------------------------------


def to_ms(seconds: float) -> float:
    """Seconds -> milliseconds, for a plot axis or a column labelled in ms."""
    return seconds * 1e3


def to_us(seconds: float) -> float:
    """Seconds -> microseconds, for a plot axis or a column labelled in us."""
    return seconds * 1e6


def from_ms(milliseconds: float) -> float:
    """Milliseconds (a --verify-ms flag, CUDA events' elapsed_time) -> seconds."""
    return milliseconds / 1e3


def from_us(microseconds: float) -> float:
    """Microseconds (Kineto's ts/dur, nccl-tests' time column) -> seconds."""
    return microseconds * 1e-6


def from_ns(nanoseconds: float) -> float:
    """Nanoseconds (Kineto's baseTimeNanoseconds) -> seconds."""
    return nanoseconds / 1e9


def from_gb_per_s(gb_per_s_value: float) -> float:
    """Decimal GB/s (nccl-tests' algbw / busbw columns) -> bytes per second."""
    return gb_per_s_value * 1e9


def gb(n_bytes: float, digits: int = 1) -> str:
    """``5.95e11`` -> ``"595.0 GB"`` (decimal GB, as checkpoints and GPU memory specs are quoted)."""
    return f"{n_bytes / 1e9:.{digits}f} GB"


def from_khz(kilohertz: float) -> float:
    """Kilohertz (cpufreq's ``scaling_cur_freq``) -> hertz."""
    return kilohertz * 1e3


def from_mhz(megahertz: float) -> float:
    """Megahertz (NVML's clocks) -> hertz."""
    return megahertz * 1e6


def ghz(hertz: float, digits: int = 2) -> str:
    """Hertz as ``2.40 GHz``."""
    return f"{hertz / 1e9:.{digits}f} GHz"
