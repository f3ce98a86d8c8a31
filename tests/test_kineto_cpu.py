"""A real torch.profiler trace recorded on the CPU with 2 gloo ranks (tests/data/kineto_cpu_gloo_tp2,
re-recorded by its record.py): checked against an independent json.load computation."""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from specmodel.trace import _intervals as iv
from specmodel.trace.ingest import build_profile, ingest
from specmodel.trace.kineto import IngestOptions

CPU = Path(__file__).parent / "data" / "kineto_cpu_gloo_tp2"


def _reference() -> dict[str, dict[str, list[list[float]]]]:
    """Per label, per pass (in order), per rank: span and blocked-in-all-reduce time, the obvious
    way: each c10d::allreduce_ call blocks its caller from its start until the caller runs its
    next op on that thread, at the earliest when the gloo:all_reduce work it enqueued (the next
    unclaimed one) ends."""
    out: dict[str, dict[str, list[list[float]]]] = {}
    for f in sorted(CPU.glob("*.trace.json.gz")):
        ev = [e for e in json.loads(gzip.decompress(f.read_bytes()))["traceEvents"] if e.get("ph") == "X"]
        work = sorted((e["ts"], e["ts"] + e["dur"]) for e in ev if e["name"].startswith("gloo:all_reduce"))
        calls = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ev if e["name"] == "c10d::allreduce_")
        host = sorted((e["ts"], e["ts"] + e["dur"], e["tid"]) for e in ev if e.get("cat") == "cpu_op"
                      or (e.get("cat") == "user_annotation" and not e["name"].startswith(("specmodel.", "gloo:"))))
        claimed: set[int] = set()
        blocked = []
        for c0, c1, tid in calls:
            j = next(i for i, w in enumerate(work) if i not in claimed and w[0] >= c0 - 1.0)
            claimed.add(j)
            nxt = next((h[0] for h in host if h[2] == tid and h[0] >= c1 and h[1] > c1), c1)
            blocked.append((c0, max(c1, work[j][1], nxt)))
        seen: dict[str, int] = {}
        for s in sorted((e for e in ev if e["name"].startswith("specmodel.")), key=lambda e: e["ts"]):
            lo, hi = s["ts"], s["ts"] + s["dur"]
            inside = [b for b in blocked if lo <= b[0] < hi]
            d = out.setdefault(s["name"], {"span": [], "comm": [], "n": []})
            k = seen[s["name"]] = seen.get(s["name"], -1) + 1
            for key, v in (("span", s["dur"] * 1e-6), ("comm", iv.length(iv.merge(iv.clip(inside, lo, hi))) * 1e-6),
                           ("n", float(len(inside)))):
                if len(d[key]) <= k:
                    d[key].append([])
                d[key][k].append(v)
    return out


def _typical(per_pass: list[list[float]]) -> float:
    return statistics.median([statistics.fmean(ranks) for ranks in per_pass])


@pytest.fixture(scope="module")
def cpu_result():
    return ingest([CPU], jobs=2)


def test_cpu_trace_matches_reference(cpu_result) -> None:
    ref = _reference()
    assert cpu_result.mode == "cpu" and cpu_result.world_size == 2
    assert {(p.kind, p.tokens) for p in cpu_result.phases} == {("decode", 1), ("verify", 4), ("draft", 1)}
    for p in cpu_result.phases:
        (label,) = p.labels
        r = ref[label]
        assert p.samples == sum(len(x) for x in r["span"]) == 6  # 3 passes x 2 ranks
        assert p.span_s == pytest.approx(_typical(r["span"]), abs=1e-9)  # 1 ns: the trace resolution
        assert p.allreduce_s == pytest.approx(_typical(r["comm"]), abs=1e-9)
        assert p.exposed_s == p.allreduce_s  # CPU: the caller blocks on every collective
        assert p.n_allreduce == 2 and {n for x in r["n"] for n in x} == {2}  # record.py: one all-reduce per layer, 2 layers
        assert p.busy_s == p.span_s and p.other_s == 0.0
        assert 0 <= p.skew_s <= p.allreduce_s


def test_cpu_profile(cpu_result) -> None:
    prof = build_profile(cpu_result, name="cpu", opts=IngestOptions())
    assert prof.backend == "gloo" and prof.hardware == {"device": "cpu"}
    for row in prof.costs:
        assert row.allreduce_s + row.compute_s + row.other_s == pytest.approx(row.total_s, rel=1e-9)
        assert row.allreduce_s > 0
    assert any("CPU trace" in n for n in prof.notes)
