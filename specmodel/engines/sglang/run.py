"""Running an SGLang server under the forward hook (``specmodel sglang``), and ``--summarize``:
what every hooked server run does (:mod:`specmodel.engines.hook.run`), with SGLang's names."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from specmodel.engines.hook.run import run_until_exit, start, write_hook_profile
from specmodel.engines.sglang.targets import ENV_DIR


def launch(command: tuple[str, ...], out_dir: Path) -> int:
    """Run ``command`` with the hook; return its exit status (128 + signal when killed)."""
    return run_until_exit(start(command, out_dir, tool="sglang", env_var=ENV_DIR))


def summarize_to(dirs: tuple[Path, ...], output: Path, name: str | None, tp: int | None, dp_rank: int | None) -> None:
    """``--summarize``: the hook's rank files under ``dirs`` -> a profile at ``output``."""
    from specmodel.engines.sglang.hooklog import summarize

    write_hook_profile(partial(summarize, dp_rank=dp_rank), dirs, output, name, tp, engine="SGLang")
