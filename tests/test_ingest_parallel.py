"""`ingest` over a process pool: this process reads one file itself when there is a core per file;
any split of the work gives the serial result, and a broken file is named wherever it was read."""

from __future__ import annotations

import gzip
import os
import re
import shutil
import time
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


def _children() -> list[int]:
    """Live child processes of this one (from /proc: a zombie counts, it was not reaped)."""
    me = os.getpid()
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                out.append(int(d.name))
    return out


@pytest.mark.parametrize("how", ["crash", "dies", "parent-fails"])
def test_a_forked_worker_that_fails_is_named_and_no_child_is_left(monkeypatch: pytest.MonkeyPatch,
                                                                    tmp_path: Path, how: str) -> None:
    # a core per file: this process reads the first, forked children the rest (trace/ingest.py _forked)
    from specmodel.trace import ingest as ing

    files = sorted(GPU.iterdir())
    real = ing._parse_one
    me = os.getpid()

    def odd(w: tuple, hold: list | None = None) -> object:
        child = os.getpid() != me
        if child and how == "crash":
            raise RuntimeError("boom")
        if child and how == "dies":
            os._exit(3)
        if not child and how == "parent-fails":
            time.sleep(0.2)
            raise SpecmodelError(f"{w[0]}: refused here")
        return real(w, hold)

    monkeypatch.setattr(ing, "_parse_one", odd)
    want = {"crash": f"{files[1].name}: worker failed: RuntimeError: boom",
            "dies": f"{files[1].name}: the worker reading it died", "parent-fails": "refused here"}[how]
    with pytest.raises(SpecmodelError, match=re.escape(want)):
        ingest([GPU], jobs=2)
    assert _children() == []


def test_the_forked_split_gives_the_pooled_result(monkeypatch: pytest.MonkeyPatch) -> None:
    from specmodel.trace import ingest as ing

    forked = ingest([GPU], jobs=2)
    monkeypatch.setattr(ing.sys, "platform", "other")  # (the pool: a box without fork)
    assert ingest([GPU], jobs=2).to_dict() == forked.to_dict()
    assert _children() == []
