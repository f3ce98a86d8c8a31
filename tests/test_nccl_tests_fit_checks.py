"""nccl-tests output cut before its footer, and fits the rows cannot support, are flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specmodel.schema.costrows import AllReduceFit, AllReducePoint
from specmodel.trace.nccl_tests import fit_warnings, parse_nccl_tests
from tests.conftest import DATA

FULL = DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt"


def _cut(tmp_path: Path, rows: int) -> Path:
    """The PCIe TP8 run as if killed after its first ``rows`` sizes (1-16 KB for 5)."""
    lines = FULL.read_text().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.split() and ln.split()[0].isdigit())
    p = tmp_path / "killed.txt"
    p.write_text("".join(lines[:first + rows]))
    return p


def test_the_footer_marks_a_finished_run(tmp_path: Path) -> None:
    assert parse_nccl_tests(FULL).complete
    assert not parse_nccl_tests(_cut(tmp_path, 5)).complete


def test_a_killed_run_and_its_impossible_beta_are_flagged(tmp_path: Path, cli: Any) -> None:
    r = cli("nccl-tests", str(_cut(tmp_path, 5)), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    beta = doc["allreduce_fit"]["beta_bytes_per_s"]
    assert beta > 100e9  # what the five latency-bound rows fit to (232 GB/s on a 21 GB/s PCIe box)
    warns = doc["warnings"]
    assert len(warns) == 2
    assert "no footer" in warns[0] and "16384 B of maxBytes 67108864 B" in warns[0]
    assert "latency-bound" in warns[1] and "0.78 GB/s" in warns[1]
    assert r.stderr.count("warning: ") == 2


def test_a_complete_bandwidth_bound_run_has_no_warning(cli: Any) -> None:
    r = cli("nccl-tests", str(FULL), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["warnings"] == [] and "warning" not in r.stderr


def test_a_beta_beyond_any_link_is_physically_impossible() -> None:
    run = parse_nccl_tests(FULL)
    pts = [AllReducePoint(msg_bytes=1024, tp=8, latency_s=36e-6), AllReducePoint(msg_bytes=2048, tp=8, latency_s=36e-6)]
    w = fit_warnings([run], AllReduceFit(alpha_s=2.6e-6, beta_bytes_per_s=5e12, tp=8), pts)
    assert len(w) == 1 and "physically impossible" in w[0] and "5000 GB/s" in w[0]
    assert fit_warnings([run], AllReduceFit(alpha_s=2.6e-6, beta_bytes_per_s=21e9, tp=8), pts) == ()


def test_a_latency_no_collective_can_have_is_one_line_not_a_linalg_error(tmp_path: Path) -> None:
    """A row whose time reads 1e-308 us (a corrupt or hand-edited table, found by fuzzing): the fit
    weighs points by 1/latency, which overflows, and numpy's least squares raised LinAlgError."""
    import subprocess
    import sys

    lines = FULL.read_text().splitlines(keepends=True)
    first = next(i for i, ln in enumerate(lines) if ln.split() and ln.split()[0].isdigit())
    parts = lines[first].split()
    parts[5 if len(parts) == 13 else 4] = "1e-308"  # the out-of-place time (after the root column, when there is one)
    lines[first] = "  " + "  ".join(parts) + "\n"
    bad = tmp_path / "corrupt.txt"
    bad.write_text("".join(lines))
    r = subprocess.run([sys.executable, "-m", "specmodel", "nccl-tests", str(bad), "--json"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "not a measurement" in r.stderr
