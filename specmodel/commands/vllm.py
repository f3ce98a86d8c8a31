"""``specmodel vllm``: run a vLLM server with the step hook, or turn its logs into a profile.

    specmodel vllm --out runs/spec -- python -m vllm.entrypoints.openai.api_server --model M \\
        --tensor-parallel-size 2 --speculative-config '{"method":"ngram","num_speculative_tokens":3}'
    specmodel vllm --summarize runs/base --summarize runs/spec -o profiles/my-box

The mirror of ``specmodel sglang`` (same shim, same ``--out`` rule, same exit status), plus a
bounded health wait: a server that does not answer ``/health`` within ``--health-timeout`` is
stopped (the server and every process it started, each by its id) and the command exits 2 with one line.
Once healthy, the server's ``/metrics`` page is kept as ``DIR/metrics.prom`` (the last one scraped):
``--summarize`` reads from it what a request costs outside the engine's steps.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

import click

from specmodel.engines.hook.records import METRICS_FILE
from specmodel.engines.hook.run import count_records, start, write_hook_profile
from specmodel.errors import SpecmodelError
from specmodel.limits import MAX_CAPTURE_STEPS, MAX_METRICS_PAGE_BYTES, MAX_PROCESS_RANK, MAX_TP

ENV_VAR = "SPECMODEL_VLLM_DIR"
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


class _MetricsKeeper:
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
            req = urllib.request.Request(self.url, headers={"Accept": "text/plain"})
            with urllib.request.urlopen(req, timeout=2) as r:  # noqa: S310 - the server this command started
                if r.status != 200:
                    return
                body = r.read(MAX_METRICS_PAGE_BYTES + 1)
            if len(body) > MAX_METRICS_PAGE_BYTES:
                return
            from specmodel.io import atomic_write_bytes

            atomic_write_bytes(self.path, body)
        except Exception:  # noqa: BLE001 - a page not kept never stops the run (http.client's errors included)
            pass
        finally:
            self.busy = False


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (Linux /proc; empty elsewhere): the server's engine core and workers."""
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


def _stop_server(proc: subprocess.Popen[bytes], grace_s: float = 30.0) -> None:
    """SIGTERM to the server (vLLM stops its engine core and workers), then SIGKILL to it and to every
    process it started, each by its own id. The server stays in the caller's process group, so a
    caller that stops that group stops the server too."""
    kids = _descendants(proc.pid)
    with contextlib.suppress(ProcessLookupError):
        proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        pass
    for pid in [proc.pid, *kids]:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace_s)


def launch(command: tuple[str, ...], out_dir: Path, health_timeout_s: float, capture_steps: int | None = None) -> int:
    """Run the server with the hook until it exits; refuse (exit 2) one that never gets healthy.
    ``capture_steps``: the hook's torch.profiler capture (:mod:`specmodel.engines.vllm.capture`;
    None: its default, on where a worker runs CUDA graphs)."""
    url = health_url(command)
    # the hook times whichever runner vLLM picks (V1 or V2); only SPECMODEL_VLLM_RUNNER changes it, and says so
    from specmodel.engines.vllm.capture import ENV_STEPS
    from specmodel.engines.vllm.hook import runner_env

    extra, msg = runner_env(os.environ)
    if capture_steps is not None:
        extra[ENV_STEPS] = str(capture_steps)
    proc = start(command, out_dir, tool="vllm", env_var=ENV_VAR, extra_env=extra)
    if msg:
        click.echo(msg, err=True)

    metrics = _MetricsKeeper(url.rsplit("/", 1)[0] + "/metrics", out_dir)
    healthy = False

    def forward(signum: int, frame: FrameType | None) -> None:
        if healthy and proc.poll() is None:
            metrics.scrape()  # the last page before the server stops serving it
        proc.send_signal(signum)

    prev = signal.signal(signal.SIGTERM, forward)
    try:
        deadline = time.monotonic() + health_timeout_s
        next_scrape = 0.0
        while True:
            try:
                if not healthy:
                    rc = proc.poll()
                    if rc is not None:
                        raise SpecmodelError(f"server command: exited with status {128 - rc if rc < 0 else rc} "
                                             f"before {url} answered (see the server's output above)")
                    if _healthy(url):
                        healthy = True
                        click.echo(f"specmodel vllm: server healthy at {url.rsplit('/', 1)[0]}", err=True)
                        next_scrape = time.monotonic()
                        continue
                    if time.monotonic() > deadline:
                        _stop_server(proc)
                        raise SpecmodelError(f"server command: {url} not healthy after {health_timeout_s:.0f} s "
                                             "(--health-timeout); the server was stopped")
                    time.sleep(0.5)
                    continue
                if time.monotonic() >= next_scrape:
                    metrics.scrape()
                    next_scrape = time.monotonic() + SCRAPE_PERIOD_S
                try:
                    rc = proc.wait(timeout=max(next_scrape - time.monotonic(), 0.01))
                    break
                except subprocess.TimeoutExpired:
                    continue
            except KeyboardInterrupt:
                # the terminal sent SIGINT to the whole group; let the server shut down cleanly
                continue
    finally:
        signal.signal(signal.SIGTERM, prev)
    return 128 - rc if rc < 0 else rc


@click.command("vllm", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--out", "out_dir", type=click.Path(path_type=Path), default=Path("vllm-forward"), show_default=True,
              help="Directory for the per-process rank files (must not hold an earlier run's files).")
@click.option("--health-timeout", "health_timeout_s", type=click.FloatRange(min=1), default=900.0, show_default=True,
              help="Seconds the server may take to answer /health before it is stopped (exit 2).")
@click.option("--summarize", "summarize_dirs", multiple=True, type=click.Path(path_type=Path),
              help="Instead of launching: aggregate the logs in DIR (repeatable) into a profile.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None,
              help="With --summarize: profile directory or .json to write (e.g. profiles/my-box).")
@click.option("--name", default=None, help="With --summarize: profile name (default: the output directory's name).")
@click.option("--tp", type=click.IntRange(min=1, max=MAX_TP), default=None,
              help="With --summarize: TP degree, when the logs do not say.")
@click.option("--dp-rank", type=click.IntRange(min=0, max=MAX_PROCESS_RANK), default=None,
              help="With --summarize: the data-parallel replica to read (logs of several replicas are refused "
                   "without it: each replica is its own engine).")
@click.option("--capture-steps", type=click.IntRange(min=0, max=MAX_CAPTURE_STEPS), default=None,
              help="Record N cycle steps (decode/verify with their proposal) per worker with torch.profiler into "
                   "DIR/capture/ after a few warm-up steps: the all-reduce share where the hook's wrapper cannot see "
                   "it (CUDA-graph replays). 0: off. Default: on (8) where a worker runs CUDA graphs, off on the "
                   "CPU and in eager mode.")
@click.option("--min-samples", type=click.IntRange(min=1, max=1_000_000), default=None,
              help="With --summarize: leave out (kind, batch, tokens) cells seen fewer times per rank "
                   "(ramp steps) [default: 5].")
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.pass_context
def vllm_cmd(ctx: click.Context, out_dir: Path, health_timeout_s: float, summarize_dirs: tuple[Path, ...],
             output: Path | None, name: str | None, tp: int | None, capture_steps: int | None,
             min_samples: int | None, dp_rank: int | None, command: tuple[str, ...]) -> None:
    """Run a vLLM server with every TP worker's engine steps split and timed.

    \b
    specmodel vllm [--out DIR] -- python -m vllm.entrypoints.openai.api_server <args...>
    specmodel vllm --summarize DIR [--summarize DIR2] -o profiles/NAME

    Per engine step, one JSON line in DIR/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl (one file per
    process): kind (prefill / decode / verify), batch,
    tokens, context, the target forward and the all-reduces inside it, the draft proposal (with
    its all-reduces), and the rest of the step (sampling, rejection, bookkeeping, scheduling gap)
    measured as overhead. The server's last /metrics page (scraped every 5 s once healthy) is kept
    in DIR/metrics.prom: the time a request spends outside the engine's steps. With
    --capture-steps N each worker also writes a torch.profiler trace of N steps to
    DIR/capture/rank<k>-....pt.trace.json.gz; --summarize reads each phase's all-reduce share from it
    for the rows the wrapper did not see. The server's exit status is passed through.
    """
    if summarize_dirs:
        if capture_steps is not None:
            raise SpecmodelError("--capture-steps applies to a server run, not --summarize (which reads DIR/capture/)")
        if command:
            raise SpecmodelError("--summarize: give either a server command or --summarize, not both")
        if output is None:
            raise SpecmodelError("--summarize: -o/--output is required (e.g. -o profiles/my-box)")
        _summarize(summarize_dirs, output, name, tp, min_samples, dp_rank)
        return
    if output is not None or name is not None or tp is not None or min_samples is not None or dp_rank is not None:
        raise SpecmodelError("-o/--name/--tp/--min-samples/--dp-rank only apply with --summarize")
    if not command:
        raise SpecmodelError("give the server command after `--`, e.g. "
                             "specmodel vllm -- python -m vllm.entrypoints.openai.api_server --model ...")
    rc = launch(command, out_dir, health_timeout_s, capture_steps)
    files, steps = count_records(out_dir, "step")
    nxt = (f"next: specmodel vllm --summarize {out_dir} -o profiles/<name>" if steps else
           "nothing to summarize: no step was recorded (did the hook load? did the server serve a request?)")
    captures = len(list((out_dir / "capture").glob("rank*.pt.trace.json.gz")))
    cap = f", {captures} capture trace(s) in {out_dir / 'capture'}" if captures else ""
    click.echo(f"specmodel vllm: server exited with status {rc}; {steps} steps in {files} rank file(s) "
               f"under {out_dir}{cap}; {nxt}", err=True)
    ctx.exit(rc)


def _summarize(dirs: tuple[Path, ...], output: Path, name: str | None, tp: int | None,
               min_samples: int | None, dp_rank: int | None) -> None:
    from functools import partial

    from specmodel.engines.vllm.hooklog import MIN_SAMPLES, summarize

    write_hook_profile(partial(summarize, min_samples=min_samples or MIN_SAMPLES, dp_rank=dp_rank), dirs, output,
                       name, tp, engine="vLLM")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(vllm_cmd())
