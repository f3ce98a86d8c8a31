"""Running a vLLM server under the step hook (``specmodel vllm``), and ``--summarize``.

Beside what every hooked server run does (:mod:`specmodel.engines.hook.run`), a bounded health
wait: a server that does not answer ``/health`` within the limit is stopped (the server and every
process it started, each by its id: :func:`specmodel.procs.stop_tree`) and the run fails with one
line. Once healthy, the server's ``/metrics`` page is kept as ``DIR/metrics.prom`` (the last one
scraped): ``--summarize`` reads from it what a request costs outside the engine's steps.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import click

from specmodel.engines.hook.records import METRICS_FILE
from specmodel.engines.hook.run import fetch_page, run_until_exit, start, write_hook_profile
from specmodel.engines.vllm.capture import ENV_STEPS
from specmodel.engines.vllm.installed import check_command
from specmodel.engines.vllm.targets import ENV_DIR, runner_env
from specmodel.errors import FieldError, SpecmodelError, spell, verbatim
from specmodel.procs import stop_tree

#: seconds between two scrapes of ``/metrics`` while the server runs
SCRAPE_PERIOD_S = 5.0


def health_url(command: tuple[str, ...]) -> str:
    """Where the server will answer: its ``--host``/``--port`` (vLLM's defaults 0.0.0.0:8000 → 127.0.0.1:8000)."""
    host, port = "127.0.0.1", "8000"
    args = list(command)
    for i, a in enumerate(args):
        for flag in ("--host", "--port"):
            val = a.split("=", 1)[1] if a.startswith(flag + "=") else (args[i + 1] if a == flag and i + 1 < len(args) else None)
            if val is None:
                continue
            if flag == "--host":
                host = "127.0.0.1" if val in ("0.0.0.0", "::", "") else val
            else:
                port = val
    return f"http://{host}:{port}/health"


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError, ValueError):
        return False


class MetricsKeeper:
    """Keeps the server's last ``/metrics`` page in ``out_dir/metrics.prom`` (written atomically).
    Best effort: a page that does not come (a busy or stopping server), is too large or cannot be
    written leaves the previous file as it was, silently."""

    def __init__(self, url: str, out_dir: Path) -> None:
        self.url = url
        self.path = out_dir / METRICS_FILE
        self.busy = False

    def scrape(self) -> None:
        if self.busy:
            return  # a SIGTERM arrived during a scrape: the one in progress finishes it
        self.busy = True
        try:
            body = fetch_page(self.url)
            if body is None:
                return
            from specmodel.io import atomic_write_bytes

            atomic_write_bytes(self.path, body)
        except Exception:  # noqa: BLE001 - a page not kept never stops the run (http.client's errors included)
            pass
        finally:
            self.busy = False


class _HealthWait:
    """One round of waiting for the server: until it answers ``/health`` (bounded), then between
    two scrapes of its ``/metrics`` page. Returns the server's return code once it exited."""

    def __init__(self, proc: subprocess.Popen[bytes], url: str, health_timeout_s: float, metrics: MetricsKeeper) -> None:
        self.proc, self.url, self.health_timeout_s, self.metrics = proc, url, health_timeout_s, metrics
        self.healthy = False
        self.deadline = time.monotonic() + health_timeout_s
        self.next_scrape = 0.0

    def before_forward(self) -> None:
        if self.healthy and self.proc.poll() is None:
            self.metrics.scrape()  # the last page before the server stops serving it

    def __call__(self) -> int | None:
        if not self.healthy:
            rc = self.proc.poll()
            if rc is not None:
                raise SpecmodelError(f"server command: exited with status {128 - rc if rc < 0 else rc} "
                                     f"before {self.url} answered (see the server's output above)")
            if _healthy(self.url):
                self.healthy = True
                click.echo(f"specmodel vllm: server healthy at {self.url.rsplit('/', 1)[0]}", err=True)
                self.next_scrape = time.monotonic()
                return None
            if time.monotonic() > self.deadline:
                stop_tree(self.proc)
                raise FieldError(None, f"server command: {self.url} not healthy after {self.health_timeout_s:.0f} s "
                                       "({health_timeout}); the server was stopped")
            time.sleep(0.5)
            return None
        if time.monotonic() >= self.next_scrape:
            self.metrics.scrape()
            self.next_scrape = time.monotonic() + SCRAPE_PERIOD_S
        try:
            return self.proc.wait(timeout=max(self.next_scrape - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            return None


def launch(command: tuple[str, ...], out_dir: Path, health_timeout_s: float, capture_steps: int | None = None,
           *, hook: bool = True) -> int:
    """Run the server with the hook until it exits; refuse (exit 2) one that never gets healthy.
    ``capture_steps``: the hook's torch.profiler capture (:mod:`specmodel.engines.vllm.capture`;
    None: its default, on where a worker runs CUDA graphs). ``hook`` False: no specmodel code in
    the server (no shim on its PYTHONPATH); the profile then comes from the engine's own step log.

    Either way the server's own step clock is turned on (``--enable-logging-iteration-details``;
    hook-free at TP 1 also ``--distributed-executor-backend mp``:
    :func:`specmodel.engines.vllm.enginerun.engine_args` says why), its output is kept in
    ``DIR/server.log`` and what ran in ``DIR/engine_run.json``."""
    from specmodel.engines.vllm.enginerun import RUN_FILE, SERVER_LOG, engine_args, write_run

    # (an earlier hook's files are refused by start(), naming them; these are what a hook-free run leaves)
    if out_dir.is_dir() and not (out_dir / METRICS_FILE).exists() and not any(out_dir.glob("rank*.jsonl")) \
            and any((out_dir / n).exists() for n in (SERVER_LOG, RUN_FILE)):
        raise FieldError(None, f"{{out}} {out_dir}: already holds {SERVER_LOG} from an earlier run; "
                               "choose an empty directory (runs must not mix)")
    command, added = engine_args(command, hook=hook)
    url = health_url(command)
    # the hook times whichever runner vLLM picks (V1 or V2); only SPECMODEL_VLLM_RUNNER changes it, and says so
    check_command(command, os.environ)  # what the installed engine cannot run: refused before it starts
    extra, msg = runner_env(os.environ) if hook else ({}, "")
    if capture_steps is not None and hook:
        extra[ENV_STEPS] = str(capture_steps)
    proc = start(command, out_dir, tool="vllm", env_var=ENV_DIR, extra_env=extra, hook=hook,
                 log_path=out_dir / SERVER_LOG)
    write_run(out_dir, command, hook=hook, added=added)
    if added:
        click.echo(f"specmodel vllm: added {' '.join(added)} to the server command (the engine's own step clock; "
                   f"its output is kept in {out_dir / SERVER_LOG})", err=True)
    if msg:
        click.echo(msg, err=True)
    wait = _HealthWait(proc, url, health_timeout_s, MetricsKeeper(url.rsplit("/", 1)[0] + "/metrics", out_dir))
    try:
        return run_until_exit(proc, wait_once=wait, before_forward=wait.before_forward)
    finally:
        copier = getattr(proc, "tee", None)
        if copier is not None:
            copier.join(timeout=30)  # the last lines into server.log before --summarize reads it


def summarize_to(dirs: tuple[Path, ...], output: Path, name: str | None, tp: int | None,
                 min_samples: int | None, dp_rank: int | None, engine_log: bool = False) -> None:
    """``--summarize``: the hook's rank files under ``dirs`` -> a profile at ``output``, with the
    engine's own step log beside it (a note per row: how far the two clocks agree). Where a
    directory holds no hook file (``--no-hook``) or ``engine_log`` is asked, the profile comes
    from the engine's step log alone (:func:`specmodel.engines.vllm.enginelog.summarize_engine_log`)."""
    import dataclasses

    from specmodel.engines.vllm.enginelog import summarize_engine_log
    from specmodel.engines.vllm.enginerun import read_run
    from specmodel.engines.vllm.hooklog import MIN_SAMPLES, summarize

    n_min = min_samples or MIN_SAMPLES
    hooked = [d for d in dirs if d.is_dir() and any(d.glob("rank*.jsonl"))]
    runs = [r for r in (read_run(d) for d in dirs if d.is_dir()) if r is not None]
    if engine_log or (not hooked and runs):
        if len(runs) < len(dirs):
            kept = {r.dir for r in runs}
            missing = next(d for d in dirs if str(d) not in kept)
            raise FieldError(None, f"{verbatim(missing)}: no engine_run.json / server.log (run the server under this "
                                   "specmodel's `vllm`, which keeps them)")

        def from_log(ds: tuple[Path, ...], *, name: str, tp: int | None) -> object:
            hook_rows = summarize(ds, name=name, tp=tp, min_samples=n_min, dp_rank=dp_rank).costs \
                if len(hooked) == len(dirs) else ()
            return summarize_engine_log(runs, name=name, tp=tp, min_samples=n_min, hook_rows=hook_rows)

        write_hook_profile(from_log, dirs, output, name, tp, engine="vLLM")  # type: ignore[arg-type]
        return

    def with_engine_log(ds: tuple[Path, ...], *, name: str, tp: int | None) -> object:
        prof = summarize(ds, name=name, tp=tp, min_samples=n_min, dp_rank=dp_rank)
        if len(runs) == len(dirs):
            if any(r.forward_outside for r in runs):
                note = ("engine log not compared: a CPU server at TP 1 under the uni executor (its forward ends before "
                        "vLLM's step timer starts; run it with --distributed-executor-backend mp to compare)")
                return dataclasses.replace(prof, notes=(*prof.notes, note))
            side = summarize_engine_log(runs, name=name, tp=tp, min_samples=n_min, hook_rows=prof.costs)
            beside = next((n for n in side.notes if n.startswith("engine log")), None)
            extra = [beside] if beside else []
            if prof.missing_seams:
                # the engine's clock times the whole step whatever the hook could not wrap
                extra.append(spell("the hook missed " + ", ".join(m.seam for m in prof.missing_seams)
                                   + ": the engine's own step log of these runs times every step whole; "
                                     "{engine_log} makes the profile from it (no all-reduce or draft/verify split)"))
            if extra:
                return dataclasses.replace(prof, notes=(*prof.notes, *extra))
        return prof

    write_hook_profile(with_engine_log, dirs, output, name, tp, engine="vLLM")  # type: ignore[arg-type]
