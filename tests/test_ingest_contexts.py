"""Ingest keys rows by the KV context the span labels name (``ctx=``) and keeps each row's
95 % interval."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specmodel.schema.phases import parse_phase_context, parse_phase_label, phase_label
from specmodel.trace.ingest import ingest


def _trace(path: Path, passes: list[tuple[str, float]]) -> None:
    """A GPU trace: each (label, kernel µs) one annotated pass with one compute kernel."""
    ev: list[dict[str, Any]] = []
    t = 1000.0
    for i, (label, us) in enumerate(passes):
        ext = 100 + i
        ev.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 1, "tid": 1, "ts": t, "dur": us + 5,
                   "args": {"External id": ext}})
        ev.append({"ph": "X", "cat": "gpu_user_annotation", "name": label, "pid": 0, "tid": 7, "ts": t + 1,
                   "dur": us + 2, "args": {"External id": ext}})
        ev.append({"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": t + 2, "dur": us,
                   "args": {"correlation": i}})
        t += us + 50
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1, "backend": "nccl"},
                                "traceEvents": ev}))


def test_the_label_grammar_carries_the_context() -> None:
    lbl = phase_label("decode", 4, 4, context=32768)
    assert lbl == "specmodel.decode[bs=4,toks=4,ctx=32768]"
    assert parse_phase_label(lbl) == ("decode", 4, 4) and parse_phase_context(lbl) == 32768
    assert phase_label("draft", 1, 1, forwards=3, context=0) == "specmodel.draft[bs=1,toks=1,ctx=0,fwd=3]"
    assert parse_phase_context("specmodel.decode[bs=4,toks=4]") is None


def test_rows_are_keyed_by_context_with_their_interval(tmp_path: Path) -> None:
    short = [(phase_label("decode", 1, 1, context=0), 100.0 + i) for i in range(9)]
    long = [(phase_label("decode", 1, 1, context=32768), 400.0 + 2 * i) for i in range(9)]
    p = tmp_path / "rank0.trace.json"
    _trace(p, [x for pair in zip(short, long, strict=True) for x in pair])
    r = ingest([p], jobs=1)
    rows = {(ph.kind, ph.context_tokens): ph for ph in r.phases}
    assert set(rows) == {("decode", 0), ("decode", 32768)}  # not merged into context 0
    assert rows[("decode", 0)].span_s < 120e-6 < 390e-6 < rows[("decode", 32768)].span_s
    for ph in rows.values():
        assert ph.samples == 9 and ph.ci95_rel is not None and 0 < ph.ci95_rel < 0.1
        row = ph.cost_row()
        assert row.context_tokens == ph.context_tokens and row.ci95_rel == ph.ci95_rel
    assert any("keyed by the KV context" in n for n in r.notes)


def test_spans_without_a_context_say_so(tmp_path: Path) -> None:
    p = tmp_path / "rank0.trace.json"
    _trace(p, [(phase_label("decode", 1, 1), 100.0)] * 3)
    r = ingest([p], jobs=1)
    assert [ph.context_tokens for ph in r.phases] == [0]
    assert r.phases[0].ci95_rel is None  # three repetitions give no 95 % interval of a median
    assert any("name no KV context" in n for n in r.notes)
