"""Child processes that do not outlive their parent."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """Pool-worker initializer: when ``parent_pid`` dies (even by SIGKILL), this process gets SIGKILL.

    Linux: ``prctl(PR_SET_PDEATHSIG, SIGKILL)``; the parent may already be gone by the time this
    runs (then the worker was reparented), so it checks and exits. Elsewhere: a no-op (the pool's
    own shutdown still ends its workers on a normal exit or an exception).
    """
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            return
    if os.getppid() != parent_pid:
        os._exit(1)
