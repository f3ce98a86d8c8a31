"""A real engine module, read from the engine's own wheel (SGLang cannot be installed or run on this
box): downloaded once by ``scripts/engine_wheels.py`` (``pip download --no-deps``) into ``~/.cache/specmodel/engine-wheels/NAME-VERSION/``
once (the same cache layout every engine-source test reads; ``SPECMODEL_ENGINE_WHEELS`` moves it), then
one file is taken out of the wheel and executed as a module of its own, with only its own imports.

A wheel that cannot be had is a failure (the command to run is in the message), never a skip.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path


def wheel_cache() -> Path:
    return Path(os.environ.get("SPECMODEL_ENGINE_WHEELS") or Path.home() / ".cache" / "specmodel" / "engine-wheels")


def engine_wheel(name: str, version: str) -> Path:
    """The cached wheel of ``name==version``, downloaded (without dependencies) when missing."""
    d = wheel_cache() / f"{name}-{version}"
    found = sorted(d.glob(f"{name}-{version}-*.whl"))
    if not found:
        # one downloader (the platform tags the wheels need are its own): scripts/engine_wheels.py
        cmd = [sys.executable, str(Path(__file__).resolve().parents[1] / "scripts" / "engine_wheels.py")]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        found = sorted(d.glob(f"{name}-{version}-*.whl"))
        if r.returncode != 0 or not found:
            raise AssertionError(f"{name} {version} wheel not cached and not downloadable (make engine-wheels): "
                                 f"{r.stderr.strip()[-300:]}")
    return found[-1]


def engine_module(name: str, version: str, member: str) -> types.ModuleType:
    """``member`` (a path inside the wheel, e.g. ``sglang/srt/.../dspark_sps.py``) as a module."""
    with zipfile.ZipFile(engine_wheel(name, version)) as z:
        source = z.read(member).decode("utf-8")
    mod_name = f"_engine_{name}_{version.replace('.', '_')}_" + Path(member).stem
    mod = types.ModuleType(mod_name)
    mod.__file__ = f"{name}-{version}/{member}"
    sys.modules[mod_name] = mod  # msgspec resolves the Structs' annotations through the module
    exec(compile(source, mod.__file__, "exec"), mod.__dict__)  # noqa: S102 - the engine's own file
    return mod
