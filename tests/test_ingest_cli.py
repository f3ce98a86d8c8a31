"""`specmodel ingest` end to end, in a subprocess: profile out, predict reads it, bad input exits 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import DATA, run_cli

GPU = DATA / "kineto_gpu_tp2"
BAD = DATA / "kineto_bad"


def test_ingest_writes_profile_that_predict_reads(tmp_path: Path) -> None:
    out = tmp_path / "profiles" / "fx"
    csv_path = tmp_path / "phases.csv"
    r = run_cli("ingest", str(GPU), "-o", str(out), "--csv", str(csv_path), "--jobs", "2")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "GPU trace, TP2, 2 rank file(s)"
    dec = next(ln.split() for ln in lines if ln.startswith("decode "))
    # phase batch tokens samples ranks span busy comm exposed compute other skew n_coll n_ar msg
    assert dec == ["decode", "1", "1", "6", "2", "0.100", "0.095", "0.033", "0.033", "0.062", "0.005", "0.003",
                   "2", "2", "14336"]
    assert f"wrote {out / 'profile.json'}" in r.stdout
    prof = json.loads((out / "profile.json").read_text())
    assert prof["source"]["kind"] == "ingested" and prof["name"] == "fx" and prof["tp"] == 2
    assert csv_path.read_text().splitlines()[1].startswith("decode,1,1,6,2,0.100,")
    p = run_cli("predict", "--profile", str(out), "--accept-len", "3.0", "--json")
    assert p.returncode == 0, p.stderr
    pred = json.loads(p.stdout)
    assert pred["profile_source_kind"] == "ingested"
    assert pred["baseline_step_s"] == pytest.approx(100e-6, rel=1e-6)


def test_ingest_json_output(tmp_path: Path) -> None:
    r = run_cli("ingest", str(GPU), "--json", "--no-save", "--num-draft-tokens", "6")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["profile"] is None and d["mode"] == "gpu"
    verify = next(p for p in d["phases"] if p["kind"] == "verify")
    assert verify["tokens"] == 6 and verify["exposed_s"] == pytest.approx(60e-6, abs=1e-9)
    assert any("--num-draft-tokens (6)" in n for n in d["notes"])


@pytest.mark.parametrize(("case", "says"), [
    ("truncated_gz", "truncated gzip"),
    ("invalid_json", "invalid JSON"),
    ("no_kernels", "no GPU kernels and no CPU-side collectives"),
    ("duplicate_ranks", "are both rank 0 (duplicate rank"),
    ("mismatched_runs", "come from different runs (world_size 2 vs 4)"),
])
def test_bad_input_one_line_exit_2_nothing_written(tmp_path: Path, case: str, says: str) -> None:
    out = tmp_path / "out"
    # a good rank beside a broken one: the good one must not be written as if complete
    args = [str(BAD / case)]
    if case in ("truncated_gz", "invalid_json"):
        args.append(str(GPU / ("1764000000-TP-0.trace.json" if case == "truncated_gz" else "1764000000-TP-1.trace.json.gz")))
    r = run_cli("ingest", *args, "-o", str(out))
    assert r.returncode == 2
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("specmodel: error: ") and says in err[0]
    assert "Traceback" not in r.stderr
    named = [str(f) for f in (BAD / case).iterdir()]
    assert any(n in err[0] for n in named)  # names the file
    assert not out.exists()


def test_duplicate_ranks_and_runs_name_both_files() -> None:
    r = run_cli("ingest", str(BAD / "mismatched_runs"), "--no-save")
    assert "1764000000-TP-0.trace.json and " in r.stderr and "1764000000-TP-1.trace.json " in r.stderr


def test_no_decode_in_traces_is_an_error_and_writes_nothing(tmp_path: Path) -> None:
    src = json.loads((GPU / "1764000000-TP-0.trace.json").read_text())
    src["traceEvents"] = [e for e in src["traceEvents"] if "DECODE" not in str(e.get("name"))]
    (tmp_path / "rank0.trace.json").write_text(json.dumps(src))
    out = tmp_path / "out"
    r = run_cli("ingest", str(tmp_path / "rank0.trace.json"), "-o", str(out))
    assert r.returncode == 2 and "no decode forward passes" in r.stderr and not out.exists()


def test_not_a_trace_and_empty_dir(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("nothing here\n")
    r = run_cli("ingest", str(log))
    assert r.returncode == 2 and "not a trace file" in r.stderr
    r = run_cli("ingest", str(tmp_path))
    assert r.returncode == 2 and "no trace files" in r.stderr


def test_speculative_trace_takes_its_baseline_from_another_profile(tmp_path: Path) -> None:
    src = json.loads((GPU / "1764000000-TP-0.trace.json").read_text())
    src["traceEvents"] = [e for e in src["traceEvents"] if "DECODE" not in str(e.get("name"))]
    (tmp_path / "rank0.trace.json").write_text(json.dumps(src))
    base = tmp_path / "base"
    r = run_cli("ingest", str(GPU), "-o", str(base))
    assert r.returncode == 0, r.stderr
    out = tmp_path / "spec"
    r = run_cli("ingest", str(tmp_path / "rank0.trace.json"), "-o", str(out), "--baseline", str(base))
    assert r.returncode == 0, r.stderr
    prof = json.loads((out / "profile.json").read_text())
    base_prof = json.loads((base / "profile.json").read_text())
    decode = [c for c in prof["costs"] if c["kind"] == "decode"]
    assert decode and decode == [c for c in base_prof["costs"] if c["kind"] == "decode"]
    assert any("copied from profile" in n for n in prof["notes"])
    r = run_cli("predict", "--profile", str(out), "--accept-len", "2.5", "--json")
    assert r.returncode == 0, r.stderr
