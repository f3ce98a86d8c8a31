"""Faults and bad input for `specmodel profile`: a rank killed mid-run, a rank that hangs, Ctrl-C,
and user errors (one line, exit 2, before any rank starts). An earlier profile at the same path
must come out byte-identical."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specmodel.schema.costrows import CostRow
from specmodel.schema.profile import Profile, save_profile
from tests.conftest import DATA, run_cli, run_cli_batch, sigint_default, specmodel_exe

pytestmark = pytest.mark.torch  # the profiler itself needs torch; the rest of the suite does not

TINY = ["--batches", "1,2", "--verify-tokens", "4", "--warmup", "1", "--repeats", "2", "--layers", "1",
        "--allreduce-sizes", "none", "--context-len", "64", "--time-budget", "2", "--min-passes", "2"]


def earlier_profile(out: Path, name: str) -> dict[Path, bytes]:
    """A measured profile already at OUT/NAME; returns every file's bytes."""
    d = out / name
    save_profile(Profile(name=name, source={"kind": "measured", "description": "an earlier run"}, tp=2,
                         costs=(CostRow(kind="decode", batch=1, tokens=1, total_s=0.01, allreduce_s=0.004,
                                        compute_s=0.006),)), d)
    (d / "costs.csv").write_text("kind,batch\ndecode,1\n")
    (d / "traces").mkdir()
    (d / "traces" / "rank0.trace.json").write_text('{"traceEvents": []}')
    return snapshot(d)


def snapshot(d: Path) -> dict[Path, bytes]:
    return {p.relative_to(d): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def children(pid: int) -> dict[int, int]:
    """{rank: pid} of the worker processes started by ``pid`` (Linux /proc): its descendants named
    ``specmodel-rank<r>`` (ranks forked from one process), or carrying ``RANK=`` in their
    environment (one interpreter per rank)."""
    parent: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            parent[int(entry)] = int(stat[stat.rindex(")") + 2:].split()[1])
        except (OSError, ValueError):
            continue
    below, grew = {pid}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in below} - below
        below |= more
        grew = bool(more)
    out = {}
    for p in below - {pid}:
        try:
            comm = Path(f"/proc/{p}/comm").read_text().strip()
            env = Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if comm.startswith("specmodel-rank"):
            out[int(comm[len("specmodel-rank"):])] = p
            continue
        for kv in env:
            if kv.startswith(b"RANK="):
                out[int(kv[5:])] = p
    return out


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


#: a guard against a test that never ends, not a speed check: the launcher alone may spend 120 s
#: importing torch on a loaded box (IMPORT_LIMIT_S) before a rank's own --timeout starts counting
FINISH_S = 600.0


class Run:
    """``specmodel profile`` in the background, its stderr lines readable as they come."""

    def __init__(self, *args: str, cwd: Path, env: dict[str, str] | None = None) -> None:
        e = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
        self.t0 = time.monotonic()
        self.p = subprocess.Popen(specmodel_exe() + ["profile", *args], cwd=cwd, env=e, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, preexec_fn=sigint_default)
        self.lines: queue.Queue[str] = queue.Queue()
        self.err: list[str] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.p.stderr is not None
        for line in self.p.stderr:
            self.err.append(line)
            self.lines.put(line)

    def wait_for(self, fragment: str, timeout: float = FINISH_S) -> None:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            try:
                if fragment in self.lines.get(timeout=0.5):
                    return
            except queue.Empty:
                if self.p.poll() is not None:
                    break
        raise AssertionError(f"never saw {fragment!r}; stderr: {''.join(self.err)}")

    def finish(self, timeout: float = FINISH_S) -> tuple[int, str, float]:
        self.p.wait(timeout=timeout)
        time.sleep(0.2)  # let the pump thread drain
        return self.p.returncode, "".join(self.err), time.monotonic() - self.t0


#: rank 1 pauses at the first verify (the others wait in a collective): a window, on any machine,
#: in which the run is certainly mid-sweep
PAUSE = {"SPECMODEL_PROFILE_FAULT": "rank=1,at=verify,mode=sleep,secs=60"}


@pytest.mark.slow
def test_a_rank_killed_mid_run(tmp_path):
    before = earlier_profile(tmp_path, "box")
    run = Run("--tp", "3", "--name", "box", "--out-dir", str(tmp_path), *TINY, "--timeout", "60", cwd=tmp_path,
              env=PAUSE)
    run.wait_for("] specmodel.verify")  # decode measured, verify started: mid-sweep
    ranks = children(run.p.pid)
    assert sorted(ranks) == [0, 1, 2], ranks
    os.kill(ranks[1], signal.SIGKILL)
    rc, err, _ = run.finish()
    assert rc == 1, err
    last = err.strip().splitlines()[-1]
    assert last.startswith("specmodel: error: rank 1 was killed by SIGKILL during specmodel."), err
    assert "Traceback" not in err
    assert snapshot(tmp_path / "box") == before
    time.sleep(0.5)
    assert not any(alive(pid) for pid in ranks.values())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["box"]  # no staging directory left


@pytest.mark.slow
def test_a_rank_that_hangs_is_named_within_the_timeout(tmp_path):
    before = earlier_profile(tmp_path, "box")
    # 8 s: above the few seconds a first torch.profiler start takes on a loaded 2-core box (no
    # collective runs meanwhile), far below the process group's own timeout
    run = Run("--tp", "2", "--name", "box", "--out-dir", str(tmp_path), *TINY, "--timeout", "8", "--quiet",
              cwd=tmp_path, env={"SPECMODEL_PROFILE_FAULT": "rank=1,at=verify,mode=hang"})
    rc, err, _ = run.finish()
    assert rc == 1, err
    # the supervisor's words, not the process group's own timeout (38 s): no wall-clock bound, which a
    # loaded box's start-up would decide
    assert "rank 1 hung during specmodel.verify" in err and "no progress for 8 s" in err, err
    assert snapshot(tmp_path / "box") == before


@pytest.mark.slow
def test_a_rank_that_raises_is_named_not_its_peers(tmp_path):
    r = run_cli("profile", "--tp", "2", "--name", "box", "--out-dir", str(tmp_path), *TINY, "--quiet",
                cwd=tmp_path, env={"SPECMODEL_PROFILE_FAULT": "rank=0,at=draft_extend,mode=raise"}, timeout=FINISH_S)
    assert r.returncode == 1, r.stderr
    assert "rank 0 exited with code 1 during specmodel.draft_extend" in r.stderr
    assert "RuntimeError: injected fault" in r.stderr
    assert not (tmp_path / "box").exists()


@pytest.mark.slow
def test_ctrl_c_stops_every_rank(tmp_path):
    run = Run("--tp", "2", "--name", "box", "--out-dir", str(tmp_path), *TINY, cwd=tmp_path, env=PAUSE)
    run.wait_for("] specmodel.verify")
    ranks = children(run.p.pid)
    assert len(ranks) == 2
    run.p.send_signal(signal.SIGINT)
    rc, err, _ = run.finish(timeout=120)
    assert rc == 130, err
    assert "interrupted: stopped all 2 ranks" in err
    time.sleep(0.5)
    assert not any(alive(pid) for pid in ranks.values())
    assert not (tmp_path / "box").exists()


CONFIGS = DATA / "profile_configs"


BAD_INPUTS = [
    (["--tp", "0"], "--tp: must be >= 1, got 0"),
    (["--model-config", str(CONFIGS / "missing.json")], "file not found"),
    (["--model-config", str(CONFIGS / "broken.json")], "invalid JSON at line"),
    (["--model-config", str(CONFIGS / "unknown_arch.json")], "unknown architecture (model_type 'mamba'"),
    (["--backend", "nccl", "--tp", "64"], "--backend nccl: needs 64 CUDA GPUs"),
    (["--name", "../x"], "--name"),
    (["--tp", "2", "--batches", "1,x"], "--batches: expected comma-separated integers"),
    (["--tp", "2", "--steps", "3", "--num-draft-tokens", "9"], "spec.num_draft_tokens"),
    (["--tp", "2", "--allreduce-sizes", "12Q"], "--allreduce-sizes"),
    (["--tp", "2", "--accept-len", "3"], "--accept-len: only with --spec-loop"),
    (["--tp", "2", "--spec-loop", "--accept-len", "9"], "--accept-len"),
    (["--tp", "2", "--profile", "x"], "--profile: only with --spec-loop"),
    (["--tp", "3", "--model-config", str(CONFIGS / "llama3_8b.json"), "--full-size"], "not divisible by --tp 3"),
    (["--tp", "2", "--contexts", "0,4Q"], "--contexts: expected KV lengths in tokens like 0,4K,32K,128K, got '4Q'"),
    (["--tp", "2", "--contexts", "2M"], "--contexts: 2M = 2097152 tokens is above the limit"),
    (["--tp", "2", "--contexts", ",".join(str(i) for i in range(17))], "--contexts: at most 16 values"),
    (["--tp", "2", "--contexts", "1K", "--context-len", "64"], "not both"),
    (["--tp", "2", "--ci-target", "0"], "--ci-target: must be in (0, 100]"),
    (["--tp", "2", "--time-budget", "-1"], "--time-budget"),
]


@pytest.fixture(scope="module")
def bad_input_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Every bad command line of BAD_INPUTS run by the real command in one interpreter (each in an empty
    folder of its own, its --out-dir): most get past argument parsing to the device check, which
    imports torch -- once here, not once per case."""
    cases = {}
    for i, (args, _) in enumerate(BAD_INPUTS):
        d = tmp_path_factory.mktemp(f"bad{i}")
        cases[str(i)] = (["profile", "--out-dir", str(d), *args], d)
    runs = run_cli_batch(cases)
    for cid, (_, d) in cases.items():
        runs[cid]["dir"] = d
    return runs


@pytest.mark.parametrize("case", range(len(BAD_INPUTS)), ids=[" ".join(a)[:60] for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_and_exit_2(bad_input_runs: dict[str, dict[str, Any]], case: int) -> None:
    r, fragment = bad_input_runs[str(case)], BAD_INPUTS[case][1]
    assert r["rc"] == 2, (r["stdout"], r["stderr"])
    lines = r["stderr"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmodel: error: "), r["stderr"]
    assert fragment in lines[0]
    assert list(r["dir"].iterdir()) == []


def test_a_bad_input_is_one_line_and_exit_2_from_the_installed_command(tmp_path):
    # the batch above calls the command's main in-process: one case through the real executable
    r = run_cli("profile", "--out-dir", str(tmp_path), "--tp", "2", "--contexts", "2M", cwd=tmp_path, timeout=FINISH_S)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert r.stderr.startswith("specmodel: error: --contexts: 2M = 2097152 tokens is above the limit")
    assert list(tmp_path.iterdir()) == []


def test_never_replaces_something_that_is_not_a_measured_profile(tmp_path):
    (tmp_path / "ref").mkdir()
    (tmp_path / "ref" / "notes.txt").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "ref")
    for name in ("ref", "link"):
        r = run_cli("profile", "--tp", "2", "--name", name, "--out-dir", str(tmp_path), cwd=tmp_path, timeout=FINISH_S)
        assert r.returncode == 2 and "choose another --name" in r.stderr, r.stderr
    assert (tmp_path / "ref" / "notes.txt").read_text() == "mine"
