"""Leave-one-context-out check of the context interpolation.

Drop one interior measured context (all its rows), predict the step time there for every batch
measured at it and at both neighbouring contexts, and compare with the measured one. Two predictions per left-out
point: the shipped model (``forward_cost`` on the sweep profile without that row: linear in L)
and the former axis, ln(1 + L), between the same two neighbours.

Run: python scripts/context_loo.py [SWEEP.csv ...]   (default: the GLM-5.1 DCP8 / DCP1 sweeps)
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from specmodel.model.costs import forward_cost
from specmodel.trace.sweep import sweep_profile

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "glm51_rtx6kpro_tp8_mtp"
DEFAULT = (DATA / "baseline_dcp8.csv", DATA / "baseline_dcp1.csv")


def _between(x: Callable[[float], float], lo: tuple[int, float], hi: tuple[int, float], L: int) -> float:
    w = (x(L) - x(lo[0])) / (x(hi[0]) - x(lo[0]))
    return lo[1] + w * (hi[1] - lo[1])


def leave_one_out(path: str) -> dict[str, list[float]]:
    """|relative error| per left-out (batch, context): ``model`` = the shipped surface with that
    context's rows removed, ``linear`` / ``log1p`` = between the two neighbours on that axis."""
    prof = sweep_profile(path, 1)
    rows = prof.rows("decode")
    ctxs = sorted({r.context_tokens for r in rows})
    at = {(r.batch, r.context_tokens): r.total_s for r in rows}
    out: dict[str, list[float]] = {"model": [], "linear": [], "log1p": []}
    for i in range(1, len(ctxs) - 1):
        lo, L, hi = ctxs[i - 1], ctxs[i], ctxs[i + 1]
        kept = prof.with_costs([r for r in prof.costs if r.context_tokens != L])
        for b in sorted({r.batch for r in rows}):
            if not all((b, c) in at for c in (lo, L, hi)):
                continue  # only points measured at both neighbouring contexts: no batch-axis guess
            want = at[(b, L)]
            out["model"].append(abs(forward_cost(kept, "decode", b, L).total_s / want - 1))
            for name, x in (("linear", float), ("log1p", math.log1p)):
                got = _between(x, (lo, at[(b, lo)]), (hi, at[(b, hi)]), L)
                out[name].append(abs(got / want - 1))
    return out


def main(argv: list[str]) -> None:
    for path in argv or [str(p) for p in DEFAULT]:
        errs = leave_one_out(path)
        n = len(errs["model"])
        print(f"{Path(path).name}: {n} left-out points")
        for name, e in errs.items():
            if e:
                print(f"  {name:7s} median {100 * statistics.median(e):5.2f} %  max {100 * max(e):5.2f} %")


if __name__ == "__main__":
    main(sys.argv[1:])
