"""The one exception type that user-facing commands turn into one line and exit 2."""

from __future__ import annotations


class SpecmodelError(Exception):
    """Bad input from the user (a flag, a file, a field).

    The message must name the file/field and say what is wrong; the CLI prints
    ``specmodel: error: <message>`` and exits with :data:`EXIT_USAGE`.
    """


class FindingsFailed(Exception):
    """A check ran fine but found FAIL results (exit 1, so scripts can gate on it)."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C after a command cleaned up: the message says what was stopped; the CLI prints it as
    its one line ``specmodel: interrupted: <message>`` (exit 130)."""


EXIT_USAGE = 2
EXIT_FINDINGS = 1


def require_finite(name: str, value: float, *, minimum: float | None = None,
                   maximum: float | None = None, strict_min: bool = False) -> float:
    """Validate one number from user input; raise :class:`SpecmodelError` naming ``name``."""
    import math

    try:
        v = float(value)
    except (TypeError, ValueError):
        raise SpecmodelError(f"{name}: expected a number, got {value!r}") from None
    if math.isnan(v) or math.isinf(v):
        raise SpecmodelError(f"{name}: must be a finite number, got {value!r}")
    if minimum is not None:
        if strict_min and v <= minimum:
            raise SpecmodelError(f"{name}: must be > {minimum:g}, got {v:g}")
        if not strict_min and v < minimum:
            raise SpecmodelError(f"{name}: must be >= {minimum:g}, got {v:g}")
    if maximum is not None and v > maximum:
        raise SpecmodelError(f"{name}: must be <= {maximum:g}, got {v:g}")
    return v
