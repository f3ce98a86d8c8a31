"""specmodel: will a speculative-decoding drafter pay off on this hardware, and why.

The Python API (``specmodel.load_profile``, ``specmodel.predict``, ``specmodel.load_accept``;
see docs/api.md) is imported on first use, so ``import specmodel`` (and the CLI's cold start)
stays cheap.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"

_API = ("load_profile", "load_accept", "predict", "predict_args", "reference_profile_path", "Profile", "Prediction",
        "AcceptDist", "ScenarioArgs")
__all__ = ["__version__", *_API]


def __getattr__(name: str) -> Any:
    if name in _API:
        from specmodel import api

        return getattr(api, name)
    raise AttributeError(f"module 'specmodel' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_API))
