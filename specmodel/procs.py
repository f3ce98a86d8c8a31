"""Child processes that do not outlive their parent: the one place parent death is handled
(ingest's pool workers, the profiler's ranks)."""

from __future__ import annotations

import os
import sys

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
