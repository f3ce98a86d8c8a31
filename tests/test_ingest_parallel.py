"""`ingest` over a process pool: this process reads one file itself when there is a core per file;
any split of the work gives the serial result, and a broken file is named wherever it was read."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from specmodel.trace.ingest import ingest
from tests.conftest import DATA

GPU = DATA / "kineto_gpu_tp2"
REPO = Path(__file__).resolve().parent.parent


def _four_ranks(tmp_path: Path) -> Path:
    """A TP 4 trace set (the benchmark's generator, 0.3 MB a rank): more files than two cores."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        from make_kineto_trace_set import write_rank
    finally:
        sys.path.pop(0)
    d = tmp_path / "tp4"
    d.mkdir()
    for r in range(4):
        write_rank(d / f"bench-TP-{r}.trace.json.gz", r, 4, 300_000, seed=1)
    return d


@pytest.mark.parametrize("jobs", [2, 3, 8])
def test_every_split_of_the_work_gives_the_serial_result(jobs: int) -> None:
    serial = ingest([GPU], jobs=1)
    par = ingest([GPU], jobs=jobs)
    assert par.to_dict() == serial.to_dict()
    assert [t.meta.rank for t in par.traces] == [0, 1]


def test_more_files_than_jobs_every_core_a_worker(tmp_path: Path) -> None:
    d = _four_ranks(tmp_path)
    serial = ingest([d], jobs=1)
    assert ingest([d], jobs=2).to_dict() == ingest([d], jobs=4).to_dict() == serial.to_dict()
    assert [t.meta.rank for t in serial.traces] == [0, 1, 2, 3] and serial.world_size == 4


@pytest.mark.parametrize("bad_rank", [0, 1])
def test_a_broken_file_is_named_whether_this_process_or_a_worker_read_it(tmp_path: Path, bad_rank: int) -> None:
    d = tmp_path / "set"
    shutil.copytree(GPU, d)
    victim = sorted(d.iterdir())[bad_rank]
    if victim.suffix == ".gz":
        text = gzip.decompress(victim.read_bytes()).decode()
        victim.write_bytes(gzip.compress(text.replace('"dur":', '"dur": "x",', 1).encode()))
    else:
        victim.write_text(victim.read_text().replace('"dur":', '"dur": "x",', 1))
    with pytest.raises(SpecmodelError, match=victim.name):
        ingest([d], jobs=2)
