"""The parts of the error promise a corpus case cannot show: bounded work on a 40K-digit log
line, pool workers that die with their parent, a stopped rank named by number, the SGLang shim
silent in foreign interpreters, and output sets that survive SIGKILL."""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from specmodel.io import (
    check_output_dir,
    clean_stale,
    commit_set,
    confined_name,
    gunzip,
    loads_json,
    read_json,
    staging_dir,
)
from tests.conftest import checkout_env, run_cli

REPO = Path(__file__).resolve().parent.parent


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


# ---------------------------------------------------------------- bounded work


def test_vllm_line_with_a_40k_digit_number_parses_in_bounded_time(tmp_path: Path) -> None:
    # the old pattern (\d+\.?\d*) backtracked quadratically: 40K digits took ~50 s, 80K ~200 s.
    # The subprocess gets 60 s for an 80K-digit line; linear matching needs milliseconds.
    code = textwrap.dedent("""
        from specmodel.engines.vllm import log as vllm_log
        d = "1" * 80000
        line = ("INFO 01-01 00:00:00 [m.py:1] SpecDecoding metrics: Mean acceptance length: " + d + "x, "
                "Accepted throughput: " + d + " tokens/x, Accepted: 1 tokens, Drafted: 2 tokens")
        v = vllm_log.parse_line(line)
        assert v is not None and "accepted_tokens_per_s" not in v and v["accepted"] == "1"
        t = "INFO 01-01 00:00:00 [l.py:1] Avg generation throughput: " + d + " tokens/X, Running: 1 reqs"
        assert vllm_log.TPUT.search(t) is None
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=checkout_env())
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_gzip_bomb_and_corrupt_streams_are_refused() -> None:
    bomb = gzip.compress(b"\0" * (4 << 20))
    with pytest.raises(SpecmodelError, match="decompresses to more than 1048576 bytes"):
        gunzip(bomb, "x.gz", max_bytes=1 << 20)
    assert gunzip(gzip.compress(b"a") + gzip.compress(b"b"), "x.gz") == b"ab"  # multi-member, like gzip(1)
    with pytest.raises(SpecmodelError, match="truncated gzip"):
        gunzip(gzip.compress(b"hello" * 100)[:-10], "x.gz")
    broken = bytearray(gzip.compress(b"hello" * 100))
    broken[12:20] = b"\xff" * 8
    with pytest.raises(SpecmodelError, match="corrupt gzip|truncated gzip"):
        gunzip(bytes(broken), "x.gz")
    assert isinstance(zlib.error("x"), Exception)


def test_json_limits_name_the_file() -> None:
    with pytest.raises(SpecmodelError, match="f.json: JSON nested too deeply"):
        loads_json("[" * 100 + "]" * 100, "f.json")
    with pytest.raises(SpecmodelError, match="f.json: an integer with 41 digits"):
        loads_json("[" + "1" * 41 + "]", "f.json")
    assert loads_json('{"a": [1, 2.5, ' + "9" * 40 + "]}", "f.json")["a"][2] == int("9" * 40)
    assert loads_json("[" * 64 + "]" * 64, "f.json") is not None  # the limit itself is fine


def test_fifo_and_directories_are_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "p.json"
    os.mkfifo(fifo)
    with pytest.raises(SpecmodelError, match="not a regular file"):
        read_json(fifo)  # would block forever if opened
    with pytest.raises(SpecmodelError, match="is a directory"):
        read_json(tmp_path)


# ---------------------------------------------------------------- names and outputs


@pytest.mark.parametrize("name", ["../x", "/abs", ".hidden", "a/b", "", "x" * 129, "..", "a\nb"])
def test_confined_name_refuses(name: str) -> None:
    with pytest.raises(SpecmodelError, match="--name"):
        confined_name(name, "--name")


def test_confined_name_accepts() -> None:
    assert confined_name("k25-tp8_v1.2+cpu", "--name") == "k25-tp8_v1.2+cpu"


def test_check_output_dir(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    assert check_output_dir(tmp_path / "new" / "deeper", "--png-dir") == tmp_path / "new" / "deeper"
    with pytest.raises(SpecmodelError, match="--png-dir: .*is a file"):
        check_output_dir(tmp_path / "f", "--png-dir")
    with pytest.raises(SpecmodelError, match="--png-dir: .*f is a file"):
        check_output_dir(tmp_path / "f" / "sub", "--png-dir")
    with pytest.raises(SpecmodelError, match="path component is 300 bytes"):
        check_output_dir(tmp_path / ("x" * 300), "--png-dir")


def test_a_set_killed_between_renames_is_finished_by_the_next_run(tmp_path: Path) -> None:
    for n, old in (("r.pdf", b"old pdf"), ("r.json", b"old json"), ("r.md", b"old md")):
        (tmp_path / n).write_bytes(old)
    st = staging_dir(tmp_path, "r")
    for n in ("r.pdf", "r.json", "r.md"):
        (st / n).write_bytes(b"new " + n.encode())
    (st / ".complete").write_text("r.pdf\nr.json\nr.md\n")
    os.replace(st / "r.pdf", tmp_path / "r.pdf")  # "killed" after the first of three renames
    # the dead writer's staging dir: its pid is ours, so rename it as another (dead) process would have
    dead = tmp_path / st.name.replace(f".p{os.getpid()}.", ".p999999999.")
    st.rename(dead)
    removed = clean_stale(tmp_path)
    assert dead in removed and not dead.exists()
    assert {n: (tmp_path / n).read_bytes() for n in ("r.pdf", "r.json", "r.md")} == {
        "r.pdf": b"new r.pdf", "r.json": b"new r.json", "r.md": b"new r.md"}


def test_an_incomplete_staging_dir_is_dropped_not_committed(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_bytes(b"old")
    st = tmp_path / ".r.p999999999.abc.staging"
    st.mkdir()
    (st / "r.json").write_bytes(b"half")
    clean_stale(tmp_path)
    assert not st.exists() and (tmp_path / "r.json").read_bytes() == b"old"


def test_commit_set_moves_every_file(tmp_path: Path) -> None:
    st = staging_dir(tmp_path, "x")
    (st / "x.a").write_text("a")
    (st / "x.b").write_text("b")
    assert commit_set(st, ["x.a", "x.b"]) == [tmp_path / "x.a", tmp_path / "x.b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.a", "x.b"]


@pytest.mark.slow  # renders a PDF
def test_report_removes_a_dead_writers_tmp_and_writes_the_set(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    stale = out / ".r.pdf.p999999999.zz.tmp"  # SIGKILL left it; pid 999999999 does not exist
    stale.write_bytes(b"partial")
    r = run_cli("report", "--accept-len", "2", "-o", str(out / "r.pdf"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in out.iterdir()) == ["r.json", "r.md", "r.pdf"]


@pytest.mark.slow  # renders a PDF
def test_report_killed_mid_write_leaves_no_temp_after_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p = subprocess.Popen([sys.executable, "-m", "specmodel.cli", "report", "--accept-len", "2", "-o",
                          str(out / "r.pdf")], cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (out.exists() and any(out.iterdir())):
        time.sleep(0.01)
    p.send_signal(signal.SIGKILL)
    p.wait()
    r = run_cli("report", "--accept-len", "2", "-o", str(out / "r.pdf"), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert sorted(x.name for x in out.iterdir()) == ["r.json", "r.md", "r.pdf"]


# ---------------------------------------------------------------- faults


def test_pool_workers_die_with_their_parent(tmp_path: Path) -> None:
    # the initializer `specmodel ingest --jobs N` gives its ProcessPoolExecutor
    code = textwrap.dedent("""
        import os, sys, time
        from concurrent.futures import ProcessPoolExecutor
        from multiprocessing import get_context
        from specmodel.procs import die_with_parent

        def work(_):
            # the initializer ran before any task: a worker that says so is covered (one write of one
            # line, atomic on a pipe: two workers' print() calls may interleave their text and newline)
            os.write(1, f"{os.getpid()}\\n".encode())
            time.sleep(120)
            return os.getpid()

        pool = ProcessPoolExecutor(max_workers=2, mp_context=get_context("fork"), initializer=die_with_parent,
                                   initargs=(os.getpid(),))
        futs = [pool.submit(work, i) for i in range(2)]
        time.sleep(300)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=checkout_env())
    assert p.stdout is not None
    pids = [int(p.stdout.readline()) for _ in range(2)]  # both workers running a task (no timed wait)
    assert len(set(pids)) == 2 and all(_alive(x) for x in pids)
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 60  # a bound on a hang: the loop ends as soon as they are gone
    while time.monotonic() < deadline and any(_alive(x) for x in pids):
        time.sleep(0.05)
    assert not any(_alive(x) for x in pids), "pool workers outlived their SIGKILLed parent"


def test_a_rank_dies_with_its_parent_even_without_the_death_signal(tmp_path: Path) -> None:
    # a profiler rank's handling (procs.die_with_parent, watch=True), with PDEATHSIG cleared so only
    # the watcher thread can end it: the backstop off Linux, and one home for both callers
    code = textwrap.dedent("""
        import ctypes, os, subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", (
            "import ctypes, os, time\\n"
            "from specmodel.procs import die_with_parent\\n"
            "die_with_parent(os.getppid(), watch=True, exit_code=4)\\n"
            "ctypes.CDLL(None).prctl(1, 0, 0, 0, 0)\\n"
            "print('watching', flush=True)\\n"
            "time.sleep(120)\\n")])
        print(child.pid, flush=True)
        time.sleep(300)
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=checkout_env())
    assert p.stdout is not None
    pid = int(p.stdout.readline())
    assert p.stdout.readline().strip() == "watching"  # its watcher started, its death signal cleared
    assert _alive(pid)
    p.send_signal(signal.SIGKILL)
    p.wait()
    deadline = time.monotonic() + 60  # a bound on a hang: the loop ends as soon as it is gone
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    assert not _alive(pid), "a rank outlived its SIGKILLed parent"


def test_a_process_whose_parent_is_already_gone_exits_at_once() -> None:
    r = subprocess.run([sys.executable, "-c", "from specmodel.procs import die_with_parent\n"
                        "die_with_parent(-1, exit_code=4)\nprint('still here')"], capture_output=True, text=True,
                       env=checkout_env(), timeout=300)
    assert r.returncode == 4 and "still here" not in r.stdout


def test_a_stopped_rank_is_named_by_number(tmp_path: Path) -> None:
    from specmodel.profile import status

    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        os.kill(sleeper.pid, signal.SIGSTOP)
        time.sleep(0.2)
        # both ranks inside the same collective: the board alone cannot tell them apart
        slots = [status.Slot(rank=0, pid=other.pid, stage=status.RUNNING, unit=3, coll_entered=7, coll_done=6,
                             heartbeat=1.0),
                 status.Slot(rank=1, pid=sleeper.pid, stage=status.RUNNING, unit=3, coll_entered=7, coll_done=6,
                             heartbeat=1.0)]
        assert status.laggard(slots) is None
        assert status.stopped(slots) == [1]
        from specmodel.profile.launcher import _hang

        class _Plan:
            tp = 2

            def units(self) -> list[str]:
                return ["a", "b", "c", "specmodel.verify[bs=1,toks=4]"]

        try:
            exc = _hang(_Plan(), slots, 4.0, tmp_path)  # type: ignore[arg-type]
        except AttributeError:
            pytest.fail("launcher._hang needs a RunPlan-like object")
        assert exc.rank == 1 and str(exc).startswith("rank 1 is stopped"), str(exc)
    finally:
        for p in (sleeper, other):
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


# ---------------------------------------------------------------- the SGLang shim


def test_sglang_shim_is_silent_in_an_interpreter_without_sglang(tmp_path: Path) -> None:
    from specmodel.engines.hook.run import child_env

    env = child_env(tmp_path / "out", env_var="SPECMODEL_SGLANG_DIR")
    base = getattr(sys, "_base_executable", sys.executable)
    probe = subprocess.run([base, "-c", "import importlib.util as u; print(u.find_spec('sglang') is None)"],
                           capture_output=True, text=True, env={k: v for k, v in env.items() if k != "PYTHONPATH"})
    if probe.stdout.strip() != "True":
        pytest.skip("the base interpreter can import sglang: no foreign interpreter to run")
    r = subprocess.run([base, "-c", "print('hello')"], capture_output=True, text=True, env=env)
    assert r.returncode == 0 and r.stdout == "hello\n"
    assert r.stderr == "", r.stderr
    # an interpreter that has SGLang still gets the hook
    r2 = subprocess.run([sys.executable, "-c", "import sys; print('specmodel.engines.sglang.hook' in sys.modules)"],
                        capture_output=True, text=True, env=env)
    assert r2.stdout.strip() == "True", r2.stderr
