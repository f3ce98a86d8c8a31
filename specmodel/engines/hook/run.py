"""What the engine-hook commands share (``specmodel sglang``, ``specmodel vllm``): the shim on the
server's PYTHONPATH, starting the server with the hook, counting what it wrote, and writing the
``--summarize`` profile. Engine-neutral: neither command imports the other."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from specmodel.errors import SpecmodelError

if TYPE_CHECKING:
    from specmodel.schema.profile import Profile


def shim_dir() -> Path:
    from specmodel.engines.hook.shim import SHIM_DIR

    return SHIM_DIR


def child_env(out_dir: Path, base: dict[str, str] | None = None, *, env_var: str = "SPECMODEL_SGLANG_DIR") -> dict[str, str]:
    """Environment for the server: the shim first on PYTHONPATH, the output directory named
    (``env_var``: which engine's hook the shim installs)."""
    env = dict(os.environ if base is None else base)
    pp = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(shim_dir()) + (os.pathsep + pp if pp else "")
    env[env_var] = str(out_dir.resolve())
    return env


def start(command: tuple[str, ...], out_dir: Path, *, tool: str = "sglang", env_var: str = "SPECMODEL_SGLANG_DIR",
          extra_env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    """Check ``--out`` and the command, then start the server with the hook."""
    if out_dir.exists() and not out_dir.is_dir():
        raise SpecmodelError(f"--out {out_dir}: exists and is not a directory")
    from specmodel.engines.hook.records import METRICS_FILE

    old = sorted([*out_dir.glob("rank*.jsonl"), *out_dir.glob(METRICS_FILE), *out_dir.glob("capture/rank*")]) \
        if out_dir.is_dir() else []
    if old:
        raise SpecmodelError(f"--out {out_dir}: already holds {old[0].name} from an earlier run; "
                             "choose an empty directory (runs must not mix)")
    exe = command[0]
    if shutil.which(exe) is None and not Path(exe).is_file():
        raise SpecmodelError(f"server command: '{exe}' not found")
    out_dir.mkdir(parents=True, exist_ok=True)
    click.echo(f"specmodel {tool}: hook on; per-process logs go to {out_dir}/rank<tp>-dp<dp>-pp<pp>-pid<pid>.jsonl",
               err=True)
    try:
        return subprocess.Popen(list(command), env={**child_env(out_dir, env_var=env_var), **(extra_env or {})})
    except OSError as exc:
        raise SpecmodelError(f"server command: cannot run '{exe}': {exc.strerror}") from None


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
