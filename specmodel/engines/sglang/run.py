"""Running an SGLang server under the forward hook (``specmodel sglang``), and ``--summarize``:
what every hooked server run does (:mod:`specmodel.engines.hook.run`), with SGLang's names.

The engine's own device timer is turned on for the run (``SGLANG_ENABLE_METRICS_DEVICE_TIMER=1`` and
``--enable-metrics``, unless the command or the environment already set them: a user's value is
kept), and the server's ``/metrics`` page is scraped every :data:`SCRAPE_PERIOD_S` while it answers:
every page is kept as ``DIR/metrics/NNNNNN.prom`` (in scrape order) and the last one as
``DIR/metrics.prom``. ``--summarize`` reads the device timer from them
(:mod:`specmodel.engines.sglang.devtimer`, clock ``engine_device_timer``) beside the hook's rows.
"""

from __future__ import annotations

import os
import subprocess
from functools import partial
from pathlib import Path

from specmodel.engines.hook.records import METRICS_FILE
from specmodel.engines.hook.run import fetch_page, run_until_exit, start, write_hook_profile
from specmodel.engines.sglang.targets import ENV_DIR
from specmodel.schema.profile import Profile

#: seconds between two scrapes of ``/metrics`` while the server runs
SCRAPE_PERIOD_S = 5.0
DEVICE_TIMER_ENV = "SGLANG_ENABLE_METRICS_DEVICE_TIMER"
ENABLE_METRICS = "--enable-metrics"
PAGES_DIR = "metrics"


def _arg(command: tuple[str, ...], flag: str) -> str | None:
    args = list(command)
    for i, a in enumerate(args):
        if a.startswith(flag + "="):
            return a.split("=", 1)[1]
        if a == flag and i + 1 < len(args):
            return args[i + 1]
    return None


def metrics_url(command: tuple[str, ...]) -> str:
    """Where the server will answer: its ``--host``/``--port`` (SGLang's defaults 127.0.0.1:30000)."""
    host = _arg(command, "--host") or "127.0.0.1"
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{_arg(command, '--port') or '30000'}/metrics"


def with_device_timer(command: tuple[str, ...], env: dict[str, str]) -> tuple[tuple[str, ...], dict[str, str], list[str]]:
    """The command and extra environment that turn SGLang's device timer on, and what was changed
    (a value the user set is kept: their ``SGLANG_ENABLE_METRICS_DEVICE_TIMER=0`` stays off). The flag
    is added only to a command that names sglang (``python -m sglang.launch_server``, ``sglang serve``)."""
    said: list[str] = []
    extra: dict[str, str] = {}
    if DEVICE_TIMER_ENV not in env:
        extra[DEVICE_TIMER_ENV] = "1"
        said.append(f"{DEVICE_TIMER_ENV}=1")
    if ENABLE_METRICS not in command and not any(a.startswith(ENABLE_METRICS + "=") for a in command):
        if any("sglang" in a for a in command):
            command = (*command, ENABLE_METRICS)
            said.append(ENABLE_METRICS)
        else:
            # a wrapper script's arguments are not SGLang's: its own command line must add the flag
            said.append(f"not {ENABLE_METRICS}: the command does not name sglang (add it to the server's flags)")
    return command, extra, said


class PageKeeper:
    """Keeps every ``/metrics`` page the server serves (``DIR/metrics/NNNNNN.prom``) and the last one
    (``DIR/metrics.prom``), written atomically. Best effort: a page that does not come (a server
    still starting or stopping), or is too large, is skipped silently."""

    def __init__(self, url: str, out_dir: Path) -> None:
        self.url, self.out_dir, self.n = url, out_dir, 0

    def scrape(self) -> None:
        from specmodel.io import atomic_write_bytes

        try:
            body = fetch_page(self.url)
            if body is None:
                return
            (self.out_dir / PAGES_DIR).mkdir(exist_ok=True)
            atomic_write_bytes(self.out_dir / PAGES_DIR / f"{self.n:06d}.prom", body)
            atomic_write_bytes(self.out_dir / METRICS_FILE, body)
            self.n += 1
        except Exception:  # noqa: BLE001 - a page not kept never stops the run (http.client's errors included)
            pass


def _scraping(proc: subprocess.Popen[bytes], keeper: PageKeeper) -> int | None:
    """One round of waiting: a scrape, then up to :data:`SCRAPE_PERIOD_S` for the server to exit."""
    if proc.poll() is None:
        keeper.scrape()
    try:
        return proc.wait(timeout=SCRAPE_PERIOD_S)
    except subprocess.TimeoutExpired:
        return None


def launch(command: tuple[str, ...], out_dir: Path) -> int:
    """Run ``command`` with the hook and the device timer; return its exit status (128 + signal when killed)."""
    import click

    command, extra, said = with_device_timer(command, dict(os.environ))
    old = sorted((out_dir / PAGES_DIR).glob("*.prom")) if (out_dir / PAGES_DIR).is_dir() else []
    if old:
        from specmodel.errors import FieldError

        raise FieldError(None, f"{{out}} {out_dir}: already holds {PAGES_DIR}/{old[0].name} from an earlier run; "
                               "choose an empty directory (runs must not mix)")
    proc = start(command, out_dir, tool="sglang", env_var=ENV_DIR, extra_env=extra)
    if said:
        click.echo(f"specmodel sglang: SGLang's device timer on ({', '.join(said)}); /metrics pages go to "
                   f"{out_dir}/{PAGES_DIR}/", err=True)
    keeper = PageKeeper(metrics_url(command), out_dir)
    return run_until_exit(proc, wait_once=partial(_scraping, proc, keeper),
                          before_forward=lambda: keeper.scrape() if proc.poll() is None else None)


def summarize_to(dirs: tuple[Path, ...], output: Path, name: str | None, tp: int | None, dp_rank: int | None) -> None:
    """``--summarize``: the hook's rank files under ``dirs`` -> a profile at ``output``, with the
    device timer's figures where the directories hold its pages."""
    from specmodel.engines.sglang.devsummary import with_device_timer as add_timer
    from specmodel.engines.sglang.hooklog import summarize

    def both(d: tuple[Path, ...], *, name: str, tp: int | None) -> Profile:
        return add_timer(summarize(d, name=name, tp=tp, dp_rank=dp_rank), d)

    write_hook_profile(both, dirs, output, name, tp, engine="SGLang")
