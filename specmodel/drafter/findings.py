"""Result types of ``check-drafter`` (re-exported by :mod:`specmodel.drafter`)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from specmodel.errors import SpecmodelError
from specmodel.schema.formats import DRAFTER_CHECK

STATUSES = ("PASS", "WARN", "FAIL")
_RANK = {s: i for i, s in enumerate(STATUSES)}


def worst(statuses: list[str] | tuple[str, ...]) -> str:
    """FAIL > WARN > PASS; PASS for no findings."""
    return max(statuses, key=_RANK.__getitem__, default="PASS")


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One check: ``name`` a short id (``d2t.reference_mismatch``), ``message`` one line with
    the numbers, ``values`` the JSON-serialisable numbers behind it."""

    name: str
    status: str
    message: str
    values: dict[str, Any]

    def __post_init__(self) -> None:
        if self.status not in _RANK:
            raise ValueError(f"finding {self.name}: status must be one of {STATUSES}, got {self.status!r}")
        if not self.name or "\n" in self.message:
            raise ValueError(f"finding {self.name!r}: needs a name and a one-line message")
        # fail here, not later in --json, if a check put a numpy scalar or NaN in values
        json.dumps(self.values, allow_nan=False)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "message": self.message, "values": dict(self.values)}


@dataclass(frozen=True, kw_only=True)
class DrafterReport:
    """All findings for one drafter against one target (and optionally a reference drafter).

    ``acceptance_ceiling``: share (0..1) of the target-token frequency mass the draft vocab
    covers (None without a token-frequency file). A token outside the draft vocab can never be
    drafted, so this bounds the per-token acceptance rate from above.
    """

    drafter_dir: str
    target_dir: str
    reference_dir: str | None
    findings: tuple[Finding, ...]
    acceptance_ceiling: float | None

    def __post_init__(self) -> None:
        c = self.acceptance_ceiling
        if c is not None and (math.isnan(c) or not 0.0 <= c <= 1.0):
            raise SpecmodelError(f"acceptance ceiling must be in [0, 1], got {c}")

    @property
    def status(self) -> str:
        return worst(tuple(f.status for f in self.findings))

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.findings if f.status == s) for s in STATUSES}

    def finding(self, name: str) -> Finding | None:
        return next((f for f in self.findings if f.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            **DRAFTER_CHECK.header(),
            "drafter_dir": self.drafter_dir,
            "target_dir": self.target_dir,
            "reference_dir": self.reference_dir,
            "status": self.status,
            "counts": self.counts(),
            "acceptance_ceiling": self.acceptance_ceiling,
            "findings": [f.to_dict() for f in self.findings],
        }
