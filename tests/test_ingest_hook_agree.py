"""`specmodel ingest` (Kineto traces) and `specmodel vllm --summarize` (the step hook) read the
same recorded run (tests/data/vllm_cpu_032: both were on at once) into the same costs: per phase
of the cycle (decode, verify, draft: the forwards the model prices) within 10 %, draft rows keyed
per drafter forward by both, a host proposer named from the trace, its server's decode-shaped
steps kept apart by both. The hook's steps are taken inside the traces' window (the profiler
stretches what it records, the hook times the same stretched steps)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm.hooklog import summarize
from specmodel.errors import SpecmodelError
from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import Profile
from specmodel.trace.ingest import build_profile, ingest
from specmodel.trace.kineto import IngestOptions
from tests.conftest import DATA, run_cli

REC = DATA / "vllm_cpu_032"
TOL = 0.10


def _window(traces: Path) -> tuple[float, float]:
    """[first, last] unix seconds of the specmodel spans of every rank's trace."""
    lo, hi = float("inf"), 0.0
    for f in traces.glob("rank*.pt.trace.json.gz"):
        d = json.loads(gzip.decompress(f.read_bytes()))
        base = d["baseTimeNanoseconds"] / 1e9
        ev = [e for e in d["traceEvents"] if e.get("ph") == "X" and str(e.get("name", "")).startswith("specmodel.")]
        lo = min(lo, base + min(e["ts"] for e in ev) / 1e6)
        hi = max(hi, base + max(e["ts"] + e["dur"] for e in ev) / 1e6)
    return lo, hi


def _hook_in_window(name: str, out: Path) -> Path:
    lo, hi = _window(REC / name / "traces")
    out.mkdir(parents=True)
    for f in (REC / name / "hook").glob("rank*.jsonl"):
        recs = [json.loads(x) for x in f.read_text().splitlines()]
        keep = [r for r in recs if r["type"] == "meta" or lo - 0.01 <= r["t_start_unix_s"] <= hi + 0.01]
        (out / f.name).write_text("".join(json.dumps(r) + "\n" for r in keep))
    return out


def _tp2_baseline(out: Path) -> Path:
    """The recordings hold no TP 2 server without speculation: a stand-in baseline (same model,
    version and TP) so the speculative rows can be summarized; its rows are not compared."""
    out.mkdir()
    meta = json.loads((REC / "tp2_draft_model" / "hook" / "rank0.jsonl").read_text().splitlines()[0])
    for rank in (0, 1):
        step = {"schema": "specmodel.vllm_step", "schema_version": 1, "type": "step", "kind": "decode", "batch": 1,
                "tokens": 1, "context_tokens": 64.0, "step_s": 0.01, "forward_s": 0.008, "overhead_s": 0.002}
        lines = [{**meta, "rank": str(rank), "spec": None}] + [step] * 5
        (out / f"rank{rank}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    return out


def _forward(r: CostRow) -> float:
    """The part of a row a trace span covers: a draft row is the proposal / k in both; a target
    step row of the hook adds the step's host work to the forward (other_s)."""
    return r.total_s if r.kind == "draft" else r.allreduce_s + r.compute_s


def _by_key(rows: Any) -> dict[tuple[str, int, int], CostRow]:
    return {(r.kind, r.batch, r.tokens): r for r in rows}


def _profiles(name: str, tmp: Path) -> tuple[Profile, Profile]:
    hook = _hook_in_window(name, tmp / "hook")
    base = (REC / "tp1_none" / "hook") if name.startswith("tp1") else _tp2_baseline(tmp / "base")
    hp = summarize([hook] if name == "tp1_none" else [base, hook], name="hook", min_samples=1)
    opts = IngestOptions()
    res = ingest([REC / name / "traces"], opts, jobs=1)
    ip = build_profile(res, name="traces", opts=opts, baseline=None if name == "tp1_none" else hp)
    return hp, ip


@pytest.mark.parametrize("name", ["tp1_none", "tp1_ngram", "tp2_ngram", "tp1_draft_model", "tp2_draft_model"])
def test_ingest_and_the_hook_agree_per_phase_on_the_same_run(name: str, tmp_path: Path) -> None:
    hp, ip = _profiles(name, tmp_path)
    kinds = ("decode",) if name == "tp1_none" else ("verify", "draft")
    hook_rows = {k: r for k, r in _by_key(hp.costs).items() if k[0] in kinds}
    trace_rows = {k: r for k, r in _by_key(ip.costs).items() if k[0] in kinds}
    assert hook_rows and set(hook_rows) == set(trace_rows)  # the same cells: draft per forward in both
    for k, h in hook_rows.items():
        t = trace_rows[k]
        assert t.samples == h.samples, k
        assert t.total_s == pytest.approx(_forward(h), rel=TOL), k
    if "draft_model" in name:
        assert all(r.tokens == r.batch for r in ip.rows("draft"))  # one forward over B tokens
    if "ngram" in name:
        assert ip.spec.algorithm == hp.spec.algorithm == "NGRAM" and not ip.has("draft")
        # the server's own decode-shaped steps: apart from the baseline in both
        own_h, own_t = _by_key(hp.host_proposer.decode), _by_key(ip.host_proposer.decode)
        assert own_h and set(own_h) == set(own_t)
        for k, h in own_h.items():
            assert own_t[k].total_s == pytest.approx(_forward(h), rel=TOL), k
    if name != "tp1_none":
        assert ip.model == hp.model and ip.model["path"] == "/tmp/vllm_me_models/target"
        assert ip.source.engine == "vllm" and ip.source.engine_version == "0.32.0"


def test_an_ngram_trace_alone_is_not_its_own_baseline(tmp_path: Path) -> None:
    opts = IngestOptions()
    res = ingest([REC / "tp1_ngram" / "traces"], opts, jobs=1)
    with pytest.raises(SpecmodelError, match="not the baseline"):
        build_profile(res, name="x", opts=opts)


def test_ingest_refuses_a_baseline_of_another_tp(tmp_path: Path) -> None:
    base = tmp_path / "base"
    r = run_cli("vllm", "--summarize", str(REC / "tp1_none" / "hook"), "-o", str(base))
    assert r.returncode == 0, r.stderr
    r = run_cli("ingest", str(REC / "tp2_draft_model" / "traces"), "--baseline", str(base), "-o", str(tmp_path / "p"))
    assert r.returncode == 2 and "TP 1 but the traces" in r.stderr and "are TP 2" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "p").exists()
