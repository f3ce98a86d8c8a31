"""One attribution engine: `specmodel ingest` of a profile's own traces gives that profile's
all-reduce seconds and message bytes (two separate analysers would differ by 9-13 %, and a
message size of 0 is not an answer)."""

from __future__ import annotations

import json

import pytest

from specmodel.profile import analysis
from specmodel.trace import attribution as engine
from tests.conftest import run_cli

# one context: a span label names kind, batch and tokens, not the context (see docs/ingest.md)
SMALL = ["--layers", "2", "--hidden", "128", "--batches", "1,2", "--verify-tokens", "4", "--warmup", "1",
         "--repeats", "4", "--contexts", "256", "--allreduce-sizes", "none", "--timeout", "120"]


@pytest.fixture(scope="module")
def tp2(tmp_path_factory):
    out = tmp_path_factory.mktemp("attr")
    r = run_cli("profile", "--tp", "2", "--name", "p", "--out-dir", str(out), *SMALL, cwd=out)
    assert r.returncode == 0, r.stderr
    ing = run_cli("ingest", str(out / "p" / "traces"), "--json", "--no-save", cwd=out)
    assert ing.returncode == 0, ing.stderr
    return json.loads((out / "p" / "profile.json").read_text()), json.loads(ing.stdout)


@pytest.mark.slow  # starts TP ranks (a profile run)
@pytest.mark.torch
def test_ingest_of_a_profiles_traces_reproduces_its_allreduce_and_message_bytes(tp2) -> None:
    prof, ing = tp2
    phases = {(p["kind"], p["batch"], p["tokens"]): p for p in ing["phases"]}
    assert len(prof["costs"]) >= 6
    for row in prof["costs"]:
        p = phases[(row["kind"], row["batch"], row["tokens"])]
        assert row["allreduce_s"] > 0
        assert p["allreduce_s"] == pytest.approx(row["allreduce_s"], rel=0.01), row
        assert row["allreduce_msg_bytes"] > 0
        assert p["allreduce_msg_bytes"] == pytest.approx(row["allreduce_msg_bytes"], rel=0.01), row
        assert p["n_allreduce"] == row["n_allreduce"]
        assert p["samples"] == 2 * 4  # every profiled repetition of every rank is in the traces


def test_profiler_path_and_ingest_path_are_one_engine() -> None:
    # the worker's analysis is a caller of the engine, not a second implementation
    ev = [{"ph": "X", "cat": "user_annotation", "name": "L", "ts": 0.0, "dur": 100.0, "pid": 1, "tid": 1},
          {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 10.0, "dur": 2.0, "pid": 1, "tid": 1},
          {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "ts": 13.0, "dur": 30.0, "pid": 1,
           "tid": 9, "args": {"Input Dims": [[4, 8]], "Input type": ["float"]}},
          {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 47.0, "dur": 1.0, "pid": 1, "tid": 1}]
    (rep,) = analysis.analyse_cpu(ev, "L")
    col = engine.Collector(path="x", span_name="L".__eq__)
    for e in ev:
        col.on_event(e)
    (rec,) = engine.cpu_passes(col, [engine.PhaseSpan(span=col.cpu_spans[0], kind="decode", batch=1, tokens=1,
                                                      label="L")])
    assert rep.comm_s == rec.comm_s == pytest.approx(37e-6)  # 10 -> 47: until the caller's next op
    assert rep.msg_bytes == list(rec.msg_bytes) == [4 * 8 * 4]
