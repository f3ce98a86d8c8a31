"""`specmodel profile`'s progress line (units done / total and the time left, weighted by what
each unit runs), its final line (where the time went), and the forked ranks' exit statuses as
the launcher reads them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specmodel.commands import profile as cmd
from specmodel.profile import configs as C
from specmodel.profile.launcher import ForkedRank
from specmodel.profile.plan import RunPlan, sweep_points


def plan() -> RunPlan:
    s, src = C.load_shape(None, "kimi-k2.5")
    t, d, sc = C.scale(s, C.drafter_for(s), 2, layers=4, hidden=256, reason="t")
    pts = sweep_points(kinds=("decode", "verify", "draft", "draft_extend"), batches=(1, 8), verify_tokens=(4,),
                       topk=1, num_draft_tokens=4)
    return RunPlan(name="x", tp=2, backend="gloo", device="cpu", dtype="float32", target=t, drafter=d, scaling=sc,
                   model_source=src, points=pts, allreduce_sizes=(4, 1024), warmup=1, repeats=2, min_passes=6)


def test_unit_weights_follow_what_each_unit_runs():
    p = plan()
    w = p.unit_weights()
    assert len(w) == len(p.units())
    by = dict(zip(p.units(), w, strict=True))
    # a target forward (9 all-reduces at 4 layers) outweighs a drafter one (3)
    assert by["specmodel.decode[bs=1,toks=1] ctx=0"] > 2 * by["specmodel.draft[bs=1,toks=1] ctx=0"]
    # the passes: min_passes bare forwards of every point, each cheaper than a profiled one
    assert by["interleaved timing passes"] > sum(w[:len(p.points)]) * 6 / (1 + 3 * 2) * 0.99


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_progress_line_says_done_of_total_and_the_time_left(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(cmd.time, "monotonic", clock)
    p = plan()
    units, w = p.units(), p.unit_weights()
    prog = cmd._Progress(False, p, "t")
    clock.t += 5  # start-up: not work, not in the rate
    prog(0, len(units), units[0])
    clock.t += 4
    prog(1, len(units), units[1])
    err = capsys.readouterr().err.splitlines()
    assert err[1] == f"[1/{len(units)}] {units[0]}  (5 s)"  # nothing done yet: no estimate
    left = 4.0 / w[0] * sum(w[1:])
    assert err[2] == f"[2/{len(units)}] {units[1]}  (9 s, ~{left:.0f} s left)"


def test_final_line_says_what_took_the_time(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cmd.time, "monotonic", clock)
    p = plan()
    units = p.units()
    prog = cmd._Progress(True, p, "t")  # --quiet still keeps the times
    n = len(p.points)
    for i in range(len(units)):
        clock.t += 3 if i == 0 else 2  # start-up 3 s, then 2 s per unit
        prog(i, len(units), units[i])
    ranks_done = clock.t + 2
    line = prog.took(ranks_done, ranks_done + 1)
    total = 3 + 2 * (len(units) - 1) + 2 + 1
    assert "cycle overhead" in units  # the overhead pass after the timing passes: its own stage
    assert line == (f"{total} s: start-up 3 s, {n} cells {2 * n} s, timing passes 2 s, cycle overhead 2 s, "
                    "2 all-reduce sizes 4 s, writing 1 s")


class Parent:
    def __init__(self, code: int | None) -> None:
        self.returncode = code

    def poll(self) -> int | None:
        return self.returncode


def test_a_forked_rank_reads_its_exit_status_like_popen(tmp_path: Path):
    exit_path = tmp_path / "exit1"
    r = ForkedRank(123, exit_path, Parent(None))  # type: ignore[arg-type]
    assert r.poll() is None  # running
    exit_path.write_text(str(-int(signal.SIGKILL)))
    assert r.poll() == -9 and r.returncode == -9
    gone = ForkedRank(124, tmp_path / "exit2", Parent(0))  # type: ignore[arg-type]
    assert gone.poll() == -int(signal.SIGKILL)  # its parent went without saying: it went down with it


@pytest.mark.torch
@pytest.mark.slow  # forks real ranks
def test_fork_ranks_reports_every_exit_status(tmp_path: Path):
    """The forking process itself: ranks that fail at once (no process group to join) each get an
    ``exit<r>`` file and the forker exits 0 once all are reaped."""
    import dataclasses
    import os

    from specmodel.profile.launcher import free_port

    plan_path = tmp_path / "plan.json"
    dataclasses.replace(plan(), timeout_s=3.0).save(plan_path)  # rank 0 gives up waiting for rank 1 after 3 s
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
           "SPECMODEL_PROFILE_FAULT": "rank=1,at=start,mode=exit"}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parent.parent)
    r = subprocess.run([sys.executable, "-m", "specmodel.profile.worker", "--plan", str(plan_path), "--run-dir",
                        str(tmp_path), "--fork", "2"], env={**os.environ, **env}, timeout=120, capture_output=True)
    assert r.returncode == 0, r.stderr
    codes = {int(p.name[4:]): int(p.read_text()) for p in tmp_path.glob("exit*")}
    assert codes[1] == 17  # the injected exit
    assert codes[0] != 0  # rank 0 cannot join without rank 1
    assert "injected fault (exit) at start" in (tmp_path / "rank1.log").read_text()
    assert sorted(int(k) for k in json.loads((tmp_path / "pids.json").read_text())) == [0, 1]


def test_the_estimate_starts_from_the_first_unit_seen(monkeypatch, capsys):
    """A unit shorter than the launcher's poll is never reported: the rate starts at the first seen."""
    clock = Clock()
    monkeypatch.setattr(cmd.time, "monotonic", clock)
    p = plan()
    units, w = p.units(), p.unit_weights()
    prog = cmd._Progress(False, p, "t")
    prog(2, len(units), units[2])  # units 0 and 1 went unseen
    clock.t += 6
    prog(3, len(units), units[3])
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.endswith(f"~{6.0 / w[2] * sum(w[3:]):.0f} s left)"), last
