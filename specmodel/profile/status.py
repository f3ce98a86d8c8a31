"""A tiny shared status board (one mmap'd file, one fixed slot per rank) between the ranks and
the supervising parent: progress for the bar, and enough to name the rank that hangs.

Each rank writes only its own slot (a few stores per unit and per collective: cheap enough to
leave on in measured forwards); the parent only reads. No locks: a torn read is harmless, the
parent polls again.
"""

from __future__ import annotations

import mmap
import os
import struct
import time
from dataclasses import dataclass
from pathlib import Path

_FMT = "<qqqqqd"  # pid, stage, unit, coll_entered, coll_done, heartbeat
SLOT = 64
STARTING, JOINED, RUNNING, DONE, FAILED, PEER_FAILED = range(6)
STAGE_NAMES = {STARTING: "starting", JOINED: "joined", RUNNING: "running", DONE: "done", FAILED: "failed",
               PEER_FAILED: "peer failed"}


@dataclass(frozen=True)
class Slot:
    rank: int
    pid: int
    stage: int
    unit: int
    coll_entered: int
    coll_done: int
    heartbeat: float

    @property
    def in_collective(self) -> bool:
        return self.coll_entered > self.coll_done

    def key(self) -> tuple[int, int, int, int]:
        """Changes whenever the rank makes progress."""
        return (self.stage, self.unit, self.coll_entered, self.coll_done)


def create(path: str | Path, world: int) -> None:
    Path(path).write_bytes(b"\0" * (SLOT * world))


class Writer:
    """A rank's handle on its own slot."""

    def __init__(self, path: str | Path, rank: int) -> None:
        self._fd = os.open(str(path), os.O_RDWR)
        self._mm = mmap.mmap(self._fd, 0)
        self._off = rank * SLOT
        self.pid = os.getpid()
        self.stage = STARTING
        self.unit = -1
        self.entered = 0
        self.done = 0
        self._write()

    def _write(self) -> None:
        struct.pack_into(_FMT, self._mm, self._off, self.pid, self.stage, self.unit, self.entered, self.done,
                         time.time())

    def set(self, *, stage: int | None = None, unit: int | None = None) -> None:
        if stage is not None:
            self.stage = stage
        if unit is not None:
            self.unit = unit
        self._write()

    def enter_collective(self) -> None:
        self.entered += 1
        self._write()

    def leave_collective(self) -> None:
        self.done += 1
        self._write()

    def close(self) -> None:
        try:
            self._mm.flush()
            self._mm.close()
            os.close(self._fd)
        except (OSError, ValueError):
            pass


def read(path: str | Path, world: int) -> list[Slot]:
    try:
        raw = Path(path).read_bytes()
    except OSError:
        return []
    out = []
    for r in range(world):
        if len(raw) < (r + 1) * SLOT:
            break
        pid, stage, unit, ent, done, hb = struct.unpack_from(_FMT, raw, r * SLOT)
        out.append(Slot(rank=r, pid=pid, stage=stage, unit=unit, coll_entered=ent, coll_done=done, heartbeat=hb))
    return out


def laggard(slots: list[Slot]) -> tuple[int, str] | None:
    """The rank the others are waiting for, and why we think so; None when nothing stands out.

    A hung rank stops entering collectives while the others block inside the next one: it is the
    rank with the fewest collectives entered (ties: not inside a collective, then oldest heartbeat).
    """
    live = [s for s in slots if s.pid]
    if not live:
        return None
    most = max(s.coll_entered for s in live)
    behind = sorted(live, key=lambda s: (s.coll_entered, s.in_collective, s.heartbeat))
    cand = behind[0]
    if cand.coll_entered < most:
        return cand.rank, f"{most - cand.coll_entered} collective(s) behind the others"
    outside = [s for s in live if not s.in_collective and s.stage not in (DONE,)]
    if len(outside) == 1 and len(live) > 1:
        return outside[0].rank, "the only rank not waiting in a collective"
    return None


def stopped(slots: list[Slot]) -> list[int]:
    """Ranks whose process is stopped (SIGSTOP, a debugger: state T/t in /proc/PID/stat), Linux only.

    A rank frozen *inside* a collective looks like every other waiting rank on the board (same
    counts, no heartbeat while blocked); the kernel still knows it is not runnable.
    """
    out = []
    for s in slots:
        if not s.pid:
            continue
        try:
            stat = Path(f"/proc/{s.pid}/stat").read_text()
        except OSError:
            continue
        # "PID (comm) STATE ...": comm may hold spaces or parentheses, the state follows the last ')'
        state = stat.rsplit(")", 1)[-1].split()[:1]
        if state and state[0] in ("T", "t"):
            out.append(s.rank)
    return out
