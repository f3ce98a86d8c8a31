"""A seam an engine hook could not wrap, as a profile carries it (``missing_seams``, profile v7):
the engine, its version, the member, and the figure that rests on it. The hooks record these in
their meta lines (:mod:`specmodel.engines.seams`); the readers carry them into the profile; the
cycle's costs name each one (:mod:`specmodel.model.cyclecost`) -- a figure timed without its seam
is never given as measured."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class MissingSeam:
    """A seam a hooked worker could not wrap, as its meta line records it, and the figure that
    rests on it (``draft_s``, ``forward_s``, ...)."""

    engine: str
    engine_version: str
    seam: str  # Class.method
    figure: str
    why: str = "not found"

    def __post_init__(self) -> None:
        for f in ("engine", "seam", "figure"):
            if not isinstance(getattr(self, f), str) or not getattr(self, f):
                raise ValueError(f"missing seam: {f} must be a non-empty string")

    def line(self) -> str:
        """What predict / report / watch print: the figure, the seam, the version."""
        label = FIGURE_LABELS.get(self.figure, self.figure)
        eng = {"vllm": "vLLM", "sglang": "SGLang"}.get(self.engine, self.engine)
        return f"{label} not recorded: {self.seam} {self.why} in {eng} {self.engine_version or 'unknown'}"

    def as_dict(self) -> dict[str, str]:
        return {"engine": self.engine, "engine_version": self.engine_version, "seam": self.seam,
                "figure": self.figure, "why": self.why}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], where: str) -> MissingSeam:
        from specmodel.errors import SpecmodelError

        if not isinstance(d, Mapping):
            raise SpecmodelError(f"{where}: expected an object, got {type(d).__name__}")
        try:
            return cls(engine=d["engine"], engine_version=str(d.get("engine_version") or ""), seam=d["seam"],
                       figure=d["figure"], why=str(d.get("why") or "not found"))
        except (KeyError, ValueError, TypeError) as exc:
            raise SpecmodelError(f"{where}: {exc}") from None


#: the figure names a missing seam may take, as the lines say them
FIGURE_LABELS: dict[str, str] = {
    "forward_s": "target forward time",
    "draft_s": "draft time",
    "draft_extend_s": "draft-extend time",
    "draft_first_s": "first draft forward time",
    "step_s": "step time",
    "host_s": "host time per step",
    "allreduce_s": "all-reduce time",
    "flush": "pending GPU records at shutdown",
}
#: figure -> the cycle cost it is part of (an Assumption kind): a missing one qualifies that cost, never
#: lowers it in silence (first-draft split and the shutdown flush are not costs)
COST_FIGURES: dict[str, str] = {"forward_s": "verify", "allreduce_s": "verify", "draft_s": "draft",
                                "draft_extend_s": "draft", "step_s": "host", "host_s": "host"}
