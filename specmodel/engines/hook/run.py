"""What running a server under an engine hook shares (``specmodel sglang``, ``specmodel vllm``): the
shim on the server's PYTHONPATH, starting the server with the hook, waiting for it while passing
SIGTERM on, counting what it wrote, and writing the ``--summarize`` profile. Engine-neutral: each
engine's run (:mod:`specmodel.engines.vllm.run`, :mod:`specmodel.engines.sglang.run`) calls it and
neither imports the other."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import click

from specmodel.engines.hook.records import METRICS_FILE
from specmodel.errors import FieldError, SpecmodelError
from specmodel.limits import MAX_METRICS_PAGE_BYTES

if TYPE_CHECKING:
    from specmodel.schema.profile import Profile


def shim_dir() -> Path:
    from specmodel.engines.hook.shim import SHIM_DIR

    return SHIM_DIR


def child_env(out_dir: Path, base: dict[str, str] | None = None, *, env_var: str) -> dict[str, str]:
    """Environment for the server: the shim first on PYTHONPATH, the output directory named
    (``env_var``: which engine's hook the shim installs)."""
    env = dict(os.environ if base is None else base)
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(shim_dir()) + (os.pathsep + pp if pp else "")
    env[env_var] = str(out_dir.resolve())
    return env


def start(command: tuple[str, ...], out_dir: Path, *, tool: str, env_var: str,
          extra_env: dict[str, str] | None = None, hook: bool = True,
          log_path: Path | None = None) -> subprocess.Popen[bytes]:
    """Check the output directory and the command, then start the server with the hook.
    ``hook`` False: the server's environment as it is (no shim on PYTHONPATH, no specmodel code in
    the server). ``log_path``: the server's stdout and stderr also kept there (:func:`tee`)."""
    if out_dir.exists() and not out_dir.is_dir():
        raise FieldError(None, f"{{out}} {out_dir}: exists and is not a directory")
    old = sorted([*out_dir.glob("rank*.jsonl"), *out_dir.glob(METRICS_FILE), *out_dir.glob("capture/rank*")]) \
        if out_dir.is_dir() else []
    if old:
        raise FieldError(None, f"{{out}} {out_dir}: already holds {old[0].name} from an earlier run; "
                             "choose an empty directory (runs must not mix)")
    exe = command[0]
    if shutil.which(exe) is None and not Path(exe).is_file():
        raise SpecmodelError(f"server command: '{exe}' not found")
    out_dir.mkdir(parents=True, exist_ok=True)
    if hook:
        click.echo(f"specmodel {tool}: hook on; per-process logs go to {out_dir}/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl",
                   err=True)
    else:
        click.echo(f"specmodel {tool}: hook off (no specmodel code in the server); its output goes to {log_path}",
                   err=True)
    env = {**(child_env(out_dir, env_var=env_var) if hook else os.environ), **(extra_env or {})}
    try:
        if log_path is None:
            return subprocess.Popen(list(command), env=env)
        proc = subprocess.Popen(list(command), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    except OSError as exc:
        raise SpecmodelError(f"server command: cannot run '{exe}': {exc.strerror}") from None
    tee(proc, log_path)
    return proc


def tee(proc: subprocess.Popen[bytes], log_path: Path) -> threading.Thread:
    """Copy the server's merged output to this process's stderr and to ``log_path``, line by line
    (flushed per line: a server killed mid-run leaves every line it printed). A daemon thread that
    ends when the server's side of the pipe closes; kept on ``proc.tee`` so the caller can join it."""
    assert proc.stdout is not None
    src = proc.stdout

    def copy() -> None:
        with open(log_path, "ab") as fh:
            for line in iter(src.readline, b""):
                fh.write(line)
                fh.flush()
                try:
                    sys.stderr.buffer.write(line)
                    sys.stderr.flush()
                except (OSError, ValueError, AttributeError):
                    pass  # a closed terminal never stops the copy into the file

    t = threading.Thread(target=copy, name="server-log", daemon=True)
    t.start()
    proc.tee = t  # type: ignore[attr-defined]
    return t


def exit_status(rc: int) -> int:
    """The server's exit status as a shell reports it (128 + signal when killed)."""
    return 128 - rc if rc < 0 else rc


def run_until_exit(proc: subprocess.Popen[bytes], *, wait_once: Callable[[], int | None] | None = None,
                   before_forward: Callable[[], None] | None = None) -> int:
    """Wait for the server to exit and return its :func:`exit_status`. SIGTERM is passed on to it
    (``before_forward`` first); the terminal's SIGINT reached the whole group, so the server shuts
    down by itself and this keeps waiting. ``wait_once``: one round of the caller's own waiting,
    returning the server's return code once it exited (default: wait for it)."""
    def forward(signum: int, frame: FrameType | None) -> None:
        if before_forward is not None:
            before_forward()
        proc.send_signal(signum)

    prev = signal.signal(signal.SIGTERM, forward)
    try:
        while True:
            try:
                rc = wait_once() if wait_once is not None else proc.wait()
                if rc is not None:
                    break
            except KeyboardInterrupt:
                continue
    finally:
        signal.signal(signal.SIGTERM, prev)
    return exit_status(rc)


def count_records(out_dir: Path, record_type: str) -> tuple[int, int]:
    """(rank files, records of ``record_type``) a hook wrote under ``out_dir`` (unreadable files count 0)."""
    files = sorted(out_dir.glob("rank*.jsonl"))
    marker = f'"type": "{record_type}"'.encode()
    n = 0
    for f in files:
        try:
            n += sum(1 for line in f.read_bytes().split(b"\n") if marker in line)
        except OSError:
            pass
    return len(files), n


def write_hook_profile(summarize: Callable[..., Profile], dirs: tuple[Path, ...], output: Path, name: str | None,
                       tp: int | None, *, engine: str) -> None:
    """``--summarize`` of an engine hook (SGLang, vLLM): the hook's JSONL -> a profile at ``output``."""
    from specmodel.schema.profile import save_profile

    prof_name = name or (output.parent.name if output.suffix == ".json" else output.name) or engine.lower()
    profile = summarize(dirs, name=prof_name, tp=tp)
    path = save_profile(profile, output)
    kinds = sorted({r.kind for r in profile.costs})
    click.echo(f"wrote {path}: {len(profile.costs)} cost rows ({', '.join(kinds)}), tp {profile.tp}, "
               f"{engine} {profile.source.engine_version}")
    for note in profile.notes:
        click.echo(f"note: {note}")


def fetch_page(url: str) -> bytes | None:
    """The server's ``/metrics`` page as served (None: not 200, or over
    :data:`~specmodel.limits.MAX_METRICS_PAGE_BYTES`), for a run that keeps its pages. Errors propagate:
    each caller keeps pages best effort and decides what a failed scrape means to it."""
    req = urllib.request.Request(url, headers={"Accept": "text/plain"})
    with urllib.request.urlopen(req, timeout=2) as r:  # noqa: S310 - the server this command started
        if r.status != 200:
            return None
        body: bytes = r.read(MAX_METRICS_PAGE_BYTES + 1)
    return None if len(body) > MAX_METRICS_PAGE_BYTES else body
