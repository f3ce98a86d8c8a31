"""nccl-tests all_reduce_perf parsing and the α-β fit from it."""

# ruff: noqa: UP031  -- lines are built with the engines' own printf-style format strings
from __future__ import annotations

import json
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmodel.errors import SpecmodelError
from specmodel.model.allreduce import fit_alpha_beta, ring_allreduce_s
from specmodel.trace.nccl_tests import (
    allreduce_points,
    check_corruption,
    fit_document,
    load_fit_document,
    parse_nccl_tests,
)
from tests.conftest import DATA

PCIE8 = DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt"
OLD = DATA / "nccl_tests_old_error" / "all_reduce_perf.txt"
PERITER = DATA / "nccl_tests_per_iter" / "all_reduce_perf.txt"
REDUCE = DATA / "nccl_tests_reduce" / "reduce_perf.txt"
WRONG = DATA / "nccl_tests_wrong" / "all_reduce_perf.txt"


def test_current_format_with_root_column():
    run = parse_nccl_tests(PCIE8)
    assert run.program == "all_reduce_perf" and run.version == "2.19.6"
    assert run.n_ranks == 8 and run.check_column == "#wrong" and not run.per_iteration
    assert len(run.rows) == 17 and run.is_allreduce
    r = run.rows[0]
    assert (r.size_bytes, r.count, r.dtype, r.redop, r.root) == (1024, 512, "bfloat16", "sum", -1)
    assert r.time_s == pytest.approx(36.10e-6) and r.in_place_time_s == pytest.approx(35.72e-6)
    assert r.busbw_bytes_per_s == pytest.approx(0.05e9) and r.wrong == 0
    assert run.config["iters"] == 20 and run.config["nGpus"] == 8
    assert run.avg_busbw_bytes_per_s == pytest.approx(9.63618e9) and run.out_of_bounds == 0
    check_corruption(run)


def test_old_format_without_root_and_with_error_column():
    run = parse_nccl_tests(OLD)
    assert run.program == "" and run.check_column == "error" and run.n_ranks == 8
    assert all(r.root is None for r in run.rows) and run.is_allreduce
    assert run.rows[3].wrong == pytest.approx(2e-7)  # a max delta, not a count: not corruption
    check_corruption(run)
    assert run.rows[-1].time_s == pytest.approx(2648.7e-6)


def test_per_iteration_cycles_and_mpirun_tags():
    run = parse_nccl_tests(PERITER)
    assert run.per_iteration and run.n_ranks == 4 and len(run.rows) == 33
    r = run.rows[0]
    assert r.iter_min_s == pytest.approx(14.84e-6) and r.iter_max_s == pytest.approx(19.31e-6)
    assert r.in_place_time_s == pytest.approx(15.93e-6) and r.in_place_wrong == 0
    pts = allreduce_points(run, 4)
    assert len(pts) == 11
    first = [x.time_s for x in run.rows if x.size_bytes == 4096]
    assert len(first) == 3 and pts[0].latency_s == pytest.approx(statistics.median(first))
    assert pts[0].spread_s == pytest.approx(max(first) - min(first))


def test_timestamp_and_cputime_columns(tmp_path):
    # -S 1 appends "%21s" of "%Y-%m-%d %H:%M:%S" after the in-place body; -C 1 renames time -> cputime
    out = []
    for ln in PCIE8.read_text().splitlines():
        if ln.startswith("#") and "redop" in ln and "size" in ln:
            ln = ln.replace("  time", "  cputime").rstrip() + " %*s" % (19, "timestamp")
        elif ln[:1] == " ":
            ln += "%21s" % "2025-10-17 12:34:56"
        out.append(ln)
    p = tmp_path / "ts.txt"
    p.write_text("\n".join(out) + "\n")
    a, b = parse_nccl_tests(p), parse_nccl_tests(PCIE8)
    assert a.rows == b.rows


def test_reduce_root_column_is_not_an_allreduce():
    run = parse_nccl_tests(REDUCE)
    assert run.program == "reduce_perf" and {r.root for r in run.rows} == {0}
    assert not run.is_allreduce


def test_nonzero_wrong_is_data_corruption():
    run = parse_nccl_tests(WRONG)
    with pytest.raises(SpecmodelError, match=r"all_reduce_perf.txt:29: data corruption: 4096 wrong elements at size 2097152 B"):
        check_corruption(run)


def test_fit_recovers_the_generating_link():
    # the fixture was written with alpha 2.6 us, beta 21 GB/s, +-3% noise; a unit slip would be off by 1e6
    run = parse_nccl_tests(PCIE8)
    pts = allreduce_points(run, 8)
    fit = fit_alpha_beta([p.msg_bytes for p in pts], [p.latency_s for p in pts], 8)
    assert fit.alpha_s == pytest.approx(2.6e-6, rel=0.1)
    assert fit.beta_bytes_per_s == pytest.approx(21e9, rel=0.1)


def test_malformed_outputs(tmp_path):
    lines = PCIE8.read_text().splitlines()
    hdr = next(i for i, ln in enumerate(lines) if "size" in ln and "redop" in ln)
    p = tmp_path / "a.txt"
    p.write_text("\n".join(lines[:hdr] + lines[hdr + 2:]) + "\n")
    with pytest.raises(SpecmodelError, match="before the column header"):
        parse_nccl_tests(p)
    p.write_text("\n".join(lines[: hdr + 3] + [lines[hdr + 3][:60]]) + "\n")
    with pytest.raises(SpecmodelError, match=r"a.txt:\d+: row has \d+ fields"):
        parse_nccl_tests(p)
    p.write_text("# nThread 1 nGpus 8\nNCCL failure common.cu:1 'unhandled system error'\n")
    with pytest.raises(SpecmodelError, match="no nccl-tests result rows"):
        parse_nccl_tests(p)
    p.write_text("\n".join(ln.replace("  36.10  ", "  36.x0  ") for ln in lines) + "\n")
    with pytest.raises(SpecmodelError, match="column time: not a number"):
        parse_nccl_tests(p)
    old = OLD.read_text().replace("Out of bounds values : 0 OK", "Out of bounds values : 2 FAILED")
    p.write_text(old)
    with pytest.raises(SpecmodelError, match="data corruption: 'Out of bounds values : 2 FAILED'"):
        check_corruption(parse_nccl_tests(p))


def test_fit_document_round_trip(tmp_path):
    run = parse_nccl_tests(PCIE8)
    pts = allreduce_points(run, 8)
    fit = fit_alpha_beta([p.msg_bytes for p in pts], [p.latency_s for p in pts], 8)
    p = tmp_path / "fit.json"
    p.write_text(json.dumps(fit_document(fit, pts, [run])))
    fit2, pts2 = load_fit_document(p)
    assert fit2 == fit and pts2 == pts
    doc = json.loads(p.read_text())
    doc["allreduce_fit"]["beta_bytes_per_s"] = -1
    p.write_text(json.dumps(doc))
    with pytest.raises(SpecmodelError, match="fit.json: allreduce_fit: beta_bytes_per_s"):
        load_fit_document(p)


# ---- hypothesis: rows printed with nccl-tests' own format fit back to the link that made them

def _fstr(v: float, w: int) -> str:  # getFloatStr() in src/util.cu
    for f in ("%*.2f", "%*.1f", "%*.0f"):
        s = f % (w, v)
        if len(s) <= w:
            return s
    return ("%*.1e" if w >= 7 else "%*.0e") % (w, v)


@settings(max_examples=30, deadline=None)
@given(alpha_us=st.floats(1.0, 20.0), beta_gbs=st.floats(2.0, 200.0), p=st.sampled_from([2, 4, 8]),
       variant=st.sampled_from(["current", "per_iter", "old"]))
def test_printed_rows_fit_back(tmp_path_factory, alpha_us, beta_gbs, p, variant):
    out = [f"# nThread 1 nGpus {p} minBytes 1024 maxBytes 16777216 step: 2(factor) warmup iters: 5 iters: 20 validation: 1"]
    if variant == "old":
        out.append("# %10s  %12s  %8s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s" % (
            "size", "count", "type", "redop", "time", "algbw", "busbw", "error", "time", "algbw", "busbw", "error"))
    elif variant == "current":
        out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"))
    else:
        out.append("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s  %7s  %6s  %6s  %6s  %7s  %7s  %7s  %7s " % (
            "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99",
            "i_cv%", "time", "algbw", "busbw", "#wrong", "i_min", "i_max", "i_p99", "i_cv%"))
    size = 1024
    while size <= 16 * 1024 * 1024:
        t = ring_allreduce_s(size, p, alpha_us * 1e-6, beta_gbs * 1e9) * 1e6
        alg = size / t / 1e3
        row = "%12li  %12li  %8s  %6s" % (size, size // 2, "bfloat16", "sum")
        if variant == "old":
            row += ("  %7s  %6.2f  %6.2f  %5.0e" % (("%7.1f" if t >= 100 else "%7.2f") % t, alg, alg, 0.0)) * 2
        else:
            body = "  %7s  %6s  %6s  %6g" % (_fstr(t, 7), _fstr(alg, 6), _fstr(alg, 6), 0)
            if variant == "per_iter":
                body += "  %7s  %7s  %7s  %7s" % (_fstr(t * 0.9, 7), _fstr(t * 1.2, 7), _fstr(t * 1.1, 7), _fstr(3.0, 7))
            row += "  %6s" % ("%6i" % -1) + body * 2
        out.append(row)
        size *= 4
    path = tmp_path_factory.mktemp("nt") / "out.txt"
    path.write_text("\n".join(out) + "\n")
    run = parse_nccl_tests(path)
    assert run.per_iteration is (variant == "per_iter")
    pts = allreduce_points(run, p)
    fit = fit_alpha_beta([x.msg_bytes for x in pts], [x.latency_s for x in pts], p)
    assert fit.alpha_s == pytest.approx(alpha_us * 1e-6, rel=0.02)
    assert fit.beta_bytes_per_s == pytest.approx(beta_gbs * 1e9, rel=0.02)
