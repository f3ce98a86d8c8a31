"""Child processes that do not outlive their parent, and stopping them: the one place parent
death is handled (ingest's pool workers, the profiler's ranks) and the one place a process is
signalled to stop (the profiler's ranks, ingest's forked readers, a server run under an engine hook)."""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import subprocess

_PR_SET_PDEATHSIG = 1
#: how often the watcher thread (``watch=True``) looks for a new parent
_WATCH_S = 0.5


def die_with_parent(parent_pid: int, *, watch: bool = False, exit_code: int = 1) -> None:
    """When ``parent_pid`` dies (even by SIGKILL), this process ends: never an orphan holding a
    port, a GPU or a core.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; the parent may already be gone by the time this
    runs (then the process was reparented), so it checks and exits with ``exit_code``. ``watch``
    adds a daemon thread that exits with ``exit_code`` once the parent changes: the backstop where
    the signal is not available (other systems) or was reset (a rank that exec'd). Without it,
    elsewhere than Linux this is a no-op (a pool's own shutdown still ends its workers).
    """
    # (imported here: ctypes and signal are ~4 ms of a cold start no command's parent needs)
    import signal

    if sys.platform.startswith("linux"):
        import ctypes

        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent_pid:
        os._exit(exit_code)
    if watch:
        import threading
        import time

        def loop() -> None:
            while True:
                time.sleep(_WATCH_S)
                if os.getppid() != parent_pid:
                    os._exit(exit_code)

        threading.Thread(target=loop, name="specmodel-parent-watch", daemon=True).start()


class Pollable(Protocol):
    """A started process: its pid and ``poll()`` (a ``Popen``, or a rank the launcher forked)."""

    pid: int

    def poll(self) -> int | None: ...


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere): a server's engine core and workers."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        for task in Path(f"/proc/{p}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                kids = [int(x) for x in task.read_text().split()]
                out.extend(kids)
                todo.extend(kids)
    return out


def stop_tree(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM to ``proc`` (a server stops its own workers), then SIGKILL to it and to every process
    it started, each by its own id. ``proc`` stays in the caller's process group, so a caller that
    stops that group stops it too."""
    import signal
    import subprocess  # (here: only a server run stops a tree; ingest imports this module cold)

    kids = descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)
    for pid in [proc.pid, *kids]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def stop_groups(procs: Sequence[Pollable], *, grace_s: float = 3.0, kill_wait_s: float = 5.0) -> None:
    """SIGTERM the process group of every live one of ``procs`` (each leads its own), then SIGKILL
    what is left after ``grace_s``."""
    import signal

    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, kill_wait_s)):
        live = [p for p in procs if p.poll() is None]
        if not live:
            return
        for p in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline and any(p.poll() is None for p in live):
            time.sleep(0.05)


def kill_and_reap(pid: int) -> None:
    """SIGKILL a child of this process and wait for it (it may be gone already)."""
    import signal

    with contextlib.suppress(ProcessLookupError, ChildProcessError):
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
