"""What an engine hook keeps in each process it runs in, and what both hooks do with it: the rank
file (opened on the first record, its meta line first), one ``os.write`` per line, the GPU records
waiting for their events, the patched members and the finder that patches modules on import, the
idle flusher thread, warnings said once, ``install`` / ``uninstall``.

Kept free of torch and of any engine import: the shim loads the hooks in every Python process.
"""

from __future__ import annotations

import atexit
import json
import os
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import Any

from specmodel.engines.hook.calibration import Calibrator
from specmodel.engines.hook.patch import PatchOnImport, open_rank_file
from specmodel.engines.seams import SeamLedger


def write_fd(fd: int, obj: dict[str, Any]) -> None:
    """One line on an O_APPEND fd, in one ``os.write``: a crash loses at most the line in flight,
    and two processes sharing a file never interleave inside a line."""
    os.write(fd, (json.dumps(obj, allow_nan=False) + "\n").encode())


class HookState:
    """Per-process state of one engine's hook (``tag``: ``vllm`` / ``sglang``, in its warnings;
    ``env_dir``: the variable naming the output directory, else ``default_dir``). An engine's hook
    subclasses it with what only it keeps; ``reset`` starts over (for tests)."""

    def __init__(self, *, tag: str, env_dir: str, default_dir: str) -> None:
        self.tag, self.env_dir, self.default_dir = tag, env_dir, default_dir
        self.out_dir: Path | None = None
        self.fd: int | None = None
        self.path: Path | None = None
        self.lock = threading.Lock()
        self.pending: deque[Any] = deque()  # GPU records whose events are not resolved yet
        self.patched: dict[Any, tuple[type, str, Any]] = {}  # key -> (class, method, original)
        self.warned: set[str] = set()
        self.finder: PatchOnImport | None = None
        self.atexit = False
        self.thread: threading.Thread | None = None
        self.stop = threading.Event()
        self.calibrator: Calibrator | None = None  # the box's condition, probed between steps
        self.dropped = 0  # GPU records dropped because the queue was full (stamped on every later line)
        # the seams this process wrapped and those it could not (the meta line's seams_found / seams_missing)
        self.seams = SeamLedger()

    def warn_once(self, key: str, msg: str) -> None:
        if key in self.warned:
            return
        self.warned.add(key)
        # stderr directly, not logging: the server's logging config must not hide it
        print(f"specmodel {self.tag} hook: warning: {msg}", file=sys.stderr, flush=True)

    def output_dir(self) -> Path:
        return self.out_dir or Path(os.environ.get(self.env_dir) or self.default_dir)

    def open(self, *, rank: str, dp: int | None, pp: int | None, meta: dict[str, Any], device: Any) -> None:
        """Open this process's rank file and write its meta line (with the seams this process
        wrapped and those it could not: ``seams_found`` / ``seams_missing``); no record line goes out
        without it: a meta line that cannot be written closes the file, and the next record tries
        again on the same file. Then the box's calibration probe for ``device``."""
        out = self.output_dir()
        out.mkdir(parents=True, exist_ok=True)
        if self.path is None:
            fd, self.path = open_rank_file(out, rank=rank, dp=dp, pp=pp)
        else:  # a retry after the meta line failed: the same file
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            write_fd(fd, {**meta, **self.seams.meta()})
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.calibrator = Calibrator(device)

    def write_line(self, obj: dict[str, Any]) -> None:
        if self.fd is not None:
            write_fd(self.fd, obj)

    def start_flusher(self, loop: Callable[[], None], flush: Callable[..., int]) -> None:
        """The idle flusher (a daemon thread running ``loop``), and ``flush(wait=True)`` at exit; once each."""
        if self.thread is None:
            self.thread = threading.Thread(target=loop, name=f"specmodel-{self.tag}-flush", daemon=True)
            self.thread.start()
        self.flush_at_exit(flush)

    def flush_at_exit(self, flush: Callable[..., int]) -> None:
        if not self.atexit:
            atexit.register(flush, wait=True)
            self.atexit = True

    def install(self, out_dir: str | os.PathLike[str] | None, modules: Iterable[str],
                on_import: Callable[[str, ModuleType], None]) -> None:
        """Patch the engine's ``modules`` now (those already imported) and as they are imported."""
        if out_dir is not None:
            self.out_dir = Path(out_dir)
        elif os.environ.get(self.env_dir):
            self.out_dir = Path(os.environ[self.env_dir])
        names = list(dict.fromkeys(modules))
        for name in names:
            mod = sys.modules.get(name)
            if mod is not None:
                on_import(name, mod)
        if self.finder is None:
            self.finder = PatchOnImport(names, on_import)
            sys.meta_path.insert(0, self.finder)

    def uninstall(self, flush: Callable[..., int]) -> None:
        """Undo :meth:`install`: flush (waiting), stop the flusher, restore the originals, close the file."""
        flush(wait=True)
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)
        for cls, method, orig in self.patched.values():
            setattr(cls, method, orig)
        if self.finder is not None and self.finder in sys.meta_path:
            sys.meta_path.remove(self.finder)
        if self.fd is not None:
            os.close(self.fd)
        if self.atexit:
            atexit.unregister(flush)
