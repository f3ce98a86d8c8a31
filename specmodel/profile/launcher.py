"""Start N ranks on this host and supervise them.

One process per rank, each in its own process group (``setsid``), with torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR=127.0.0.1``,
``MASTER_PORT`` = a free port). By default one ``python -m specmodel.profile.worker --fork N``
imports torch once and forks the N ranks (on 2 cores, 8 ranks importing torch and the profiler
each cost ~20 s of wall time); it reaps them and reports each exit status in ``exit<r>``, read
here as ``Popen.poll`` would. ``SPECMODEL_PROFILE_SPAWN=1``: one fresh interpreter per rank
instead. The parent polls exit codes and the status board:

* a rank exits non-zero → stop every rank, name it (a rank that merely lost its peer exits 3
  and is not blamed when another one failed first);
* no rank makes progress for ``timeout`` seconds → stop every rank, name the one the others wait for;
* Ctrl-C / SIGTERM → stop every rank.

Nothing is written to the profile directory here: on success the parent gets rank 0's
``result.json`` and the trace directory.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmodel.errors import field_name
from specmodel.procs import stop_groups
from specmodel.profile import status
from specmodel.profile.plan import CHILD_ENV, RunPlan
from specmodel.profile.result import RunResult

EXIT_PEER = 3
SPAWN_ENV = "SPECMODEL_PROFILE_SPAWN"  # "1": one interpreter per rank instead of forking them from one
POLL_S = 0.05
GRACE_S = 0.5  # after the first failure, how long to wait for the others' exit codes before judging
IMPORT_LIMIT_S = 120.0  # before the ranks exist: the one import of torch may take this long on a loaded box


class RankFailed(Exception):
    """A rank crashed or hung; the message names it. ``log_dir`` keeps every rank's output."""

    def __init__(self, message: str, *, rank: int | None, log_dir: Path | None, port_conflict: bool = False) -> None:
        super().__init__(message)
        self.rank = rank
        self.log_dir = log_dir
        self.port_conflict = port_conflict


@dataclass
class RunOutput:
    result: RunResult
    trace_dir: Path
    run_dir: Path
    wall_s: float


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _tail(path: Path, n: int = 40) -> list[str]:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return []
    return [ln for ln in lines if ln.strip()][-n:]


def _reason(path: Path) -> str:
    """The most telling line of a rank's output: the last exception line, else the last line."""
    lines = _tail(path)
    for ln in reversed(lines):
        s = ln.strip()
        if s.startswith("specmodel profile:") or (":" in s and s.split(":", 1)[0].endswith(("Error", "Exception",
                                                                                              "Interrupt", "Failed"))):
            return s[:300]
    return lines[-1].strip()[:300] if lines else "no output"


def _describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


class ForkedRank:
    """A rank forked by ``worker --fork``: ``pid``/``poll()``/``returncode`` as a Popen has. Its
    exit status comes from the forking process (its parent, which reaps it) via ``exit<r>``; if
    that process is gone without writing it, the rank went down with it."""

    def __init__(self, pid: int, exit_path: Path, parent: subprocess.Popen[bytes]) -> None:
        self.pid, self.exit_path, self.parent = pid, exit_path, parent
        self.returncode: int | None = None

    def _read(self) -> int | None:
        try:
            return int(self.exit_path.read_text())
        except (OSError, ValueError):
            return None

    def poll(self) -> int | None:
        if self.returncode is None:
            gone = self.parent.poll() is not None  # (asked first: it writes every exit file before it exits)
            code = self._read()
            if code is None and gone:
                code = self.parent.returncode or -int(signal.SIGKILL)
            self.returncode = code
        return self.returncode


def forking() -> bool:
    return hasattr(os, "fork") and os.environ.get(SPAWN_ENV) != "1"


def _unit_label(plan: RunPlan, unit: int) -> str:
    units = plan.units()
    return units[unit] if 0 <= unit < len(units) else ("start-up" if unit < 0 else "finishing")


def run(plan: RunPlan, *, timeout_s: float, on_progress: Callable[[int, int, str], None] | None = None,
        env_extra: dict[str, str] | None = None) -> RunOutput:
    """Run ``plan`` on ``plan.tp`` local ranks; return rank 0's result. Raises :class:`RankFailed`."""
    try:
        return _run_once(plan, timeout_s=timeout_s, on_progress=on_progress, env_extra=env_extra)
    except RankFailed as exc:
        if not exc.port_conflict:
            raise
        return _run_once(plan, timeout_s=timeout_s, on_progress=on_progress, env_extra=env_extra)


def _run_once(plan: RunPlan, *, timeout_s: float, on_progress: Callable[[int, int, str], None] | None,
              env_extra: dict[str, str] | None) -> RunOutput:
    run_dir = Path(tempfile.mkdtemp(prefix="specmodel-profile-"))
    plan_path = run_dir / "plan.json"
    plan.save(plan_path)
    board = run_dir / "status.bin"
    status.create(board, plan.tp)
    port = free_port()
    n_units = len(plan.units())
    procs: list[Any] = []  # one per rank: Popen, or ForkedRank once the forking process says who
    logs = [run_dir / f"rank{r}.log" for r in range(plan.tp)]
    launch_log = run_dir / "launch.log"
    zygote: subprocess.Popen[bytes] | None = None
    t_start = time.monotonic()
    prev_term = signal.getsignal(signal.SIGTERM)

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        if prev_term in (signal.SIG_DFL, None) or callable(prev_term):
            signal.signal(signal.SIGTERM, on_term)
    except ValueError:  # not the main thread
        pass
    try:
        cmd = [sys.executable, "-m", "specmodel.profile.worker", "--plan", str(plan_path), "--run-dir", str(run_dir)]
        common = dict(os.environ)
        common.update({"WORLD_SIZE": str(plan.tp), "LOCAL_WORLD_SIZE": str(plan.tp), "MASTER_ADDR": "127.0.0.1",
                       "MASTER_PORT": str(port), CHILD_ENV: "1", "PYTHONUNBUFFERED": "1",
                       "TORCH_SHOW_CPP_STACKTRACES": "0"})
        if plan.device == "cpu":
            common.update({"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"})
        if env_extra:
            common.update(env_extra)
        if forking():
            common.pop("RANK", None)
            common.pop("LOCAL_RANK", None)
            with open(launch_log, "wb") as fh:
                zygote = subprocess.Popen([*cmd, "--fork", str(plan.tp)], stdin=subprocess.DEVNULL, stdout=fh,
                                          stderr=subprocess.STDOUT, env=common, start_new_session=True)
        else:
            for r in range(plan.tp):
                env = {**common, "RANK": str(r), "LOCAL_RANK": str(r)}
                with open(logs[r], "wb") as fh:
                    procs.append(subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.STDOUT,
                                                  env=env, start_new_session=True))
        last_key: tuple[Any, ...] = ()
        last_change = time.monotonic()
        last_unit = -2
        while True:
            if zygote is not None and not procs:
                pids = _read_pids(run_dir / "pids.json", plan.tp)
                if pids is not None:
                    procs = [ForkedRank(pid, run_dir / f"exit{r}", zygote) for r, pid in enumerate(pids)]
                    last_change = time.monotonic()  # (importing is not a hang: the clock starts with the ranks)
                elif zygote.poll() is not None:
                    raise RankFailed(f"rank 0 {_describe_exit(zygote.returncode or 1)} during start-up: "
                                     f"{_reason(launch_log)}", rank=0, log_dir=run_dir)
                elif time.monotonic() - last_change > max(timeout_s, IMPORT_LIMIT_S):
                    raise RankFailed(f"the ranks were not started within {max(timeout_s, IMPORT_LIMIT_S):g} s "
                                     "(importing torch)", rank=None, log_dir=run_dir)
                else:
                    time.sleep(POLL_S)
                    continue
            codes = [p.poll() for p in procs]
            if all(c == 0 for c in codes):
                break
            if any(c not in (None, 0) for c in codes):
                time.sleep(GRACE_S)
                codes = [p.poll() for p in procs]
                slots = status.read(board, plan.tp)
                stop_groups(procs)
                raise _crash(plan, codes, slots, logs, run_dir)
            slots = status.read(board, plan.tp)
            key = tuple(s.key() for s in slots)
            now = time.monotonic()
            if key != last_key:
                last_key, last_change = key, now
            if slots and on_progress is not None:
                unit = slots[0].unit
                if slots[0].stage >= status.RUNNING and unit != last_unit:
                    last_unit = unit
                    on_progress(unit, n_units, _unit_label(plan, unit))
            if now - last_change > timeout_s:
                stop_groups(procs)
                raise _hang(plan, slots, timeout_s, run_dir)
            time.sleep(POLL_S)
        res_path = run_dir / "result.json"
        try:
            result = RunResult.from_dict(json.loads(res_path.read_text()))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise RankFailed(f"rank 0 finished but left no readable result ({exc})", rank=0, log_dir=run_dir) from None
        return RunOutput(result=result, trace_dir=run_dir / "traces", run_dir=run_dir,
                         wall_s=time.monotonic() - t_start)
    finally:
        stop_groups(procs + ([zygote] if zygote is not None else []))
        try:
            signal.signal(signal.SIGTERM, prev_term)
        except (ValueError, TypeError):
            pass


def _read_pids(path: Path, n: int) -> list[int] | None:
    try:
        d = json.loads(path.read_text())
        return [int(d[str(r)]) for r in range(n)]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _crash(plan: RunPlan, codes: list[int | None], slots: list[status.Slot], logs: list[Path],
           run_dir: Path) -> RankFailed:
    failed = [(r, c) for r, c in enumerate(codes) if c not in (None, 0)]
    culprits = [(r, c) for r, c in failed if c != EXIT_PEER]
    where = {s.rank: _unit_label(plan, s.unit) if s.stage >= status.RUNNING else status.STAGE_NAMES.get(s.stage, "?")
             for s in slots}
    if culprits:
        culprits.sort(key=lambda rc: (rc[1] >= 0, rc[0]))  # killed by a signal first, then lowest rank
        r, c = culprits[0]
        reason = _reason(logs[r])
        conflict = "address already in use" in "\n".join(_tail(logs[r], 80)).lower()
        return RankFailed(f"rank {r} {_describe_exit(c)} during {where.get(r, 'start-up')}: {reason}",
                          rank=r, log_dir=run_dir, port_conflict=conflict)
    lag = status.laggard(slots)
    if lag is not None:
        r, why = lag
        return RankFailed(f"rank {r} stopped responding during {where.get(r, '?')} ({why}); the other ranks' "
                          "collectives failed", rank=r, log_dir=run_dir)
    r, c = failed[0]
    return RankFailed(f"rank {r} {_describe_exit(c)} during {where.get(r, '?')}: {_reason(logs[r])}",
                      rank=r, log_dir=run_dir)


def _hang(plan: RunPlan, slots: list[status.Slot], timeout_s: float, run_dir: Path) -> RankFailed:
    lag = status.laggard(slots)
    started = [s for s in slots if s.stage >= status.JOINED]
    if len(started) < plan.tp:
        missing = [s.rank for s in slots if s.stage < status.JOINED]
        r = missing[0] if missing else None
        return RankFailed(f"rank {r} did not join the process group within {field_name('timeout')} {timeout_s:g} s "
                          f"(ranks not joined: {', '.join(map(str, missing))})", rank=r, log_dir=run_dir)
    if lag is not None:
        r, why = lag
        unit = next(s.unit for s in slots if s.rank == r)
        return RankFailed(f"rank {r} hung during {_unit_label(plan, unit)}: no progress for {timeout_s:g} s "
                          f"({why})", rank=r, log_dir=run_dir)
    frozen = status.stopped(slots)
    if frozen:
        r = frozen[0]
        unit = next(s.unit for s in slots if s.rank == r)
        return RankFailed(f"rank {r} is stopped (SIGSTOP or a debugger) during {_unit_label(plan, unit)}: no progress "
                          f"for {timeout_s:g} s (stopped ranks: {', '.join(map(str, frozen))})", rank=r, log_dir=run_dir)
    unit = min(s.unit for s in slots)
    return RankFailed(f"no rank made progress for {timeout_s:g} s during {_unit_label(plan, unit)} "
                      f"(all ranks waiting; raise {field_name('timeout')} for a slow machine)", rank=None,
                      log_dir=run_dir)
