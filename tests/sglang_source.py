"""Where a test finds the source of a given SGLang version (parsed with ``ast``, never imported).

The wheel comes from the engine-wheel cache (``tests/engine_wheel_cache.py``: ``make engine-wheels``
fills it, a missing one is downloaded without dependencies); its ``sglang/`` tree is unpacked once
beside it (``<cache>/sglang-<version>/src``, written to a temp folder and renamed, so a torn unpack is
never read). A source that cannot be had fails the test, never skips it: a check that did not run
must not pass."""

from __future__ import annotations

import ast
import shutil
import tempfile
import zipfile
from pathlib import Path

from tests.engine_wheel_cache import engine_wheel


def sglang_root(version: str) -> Path:
    wheel = engine_wheel("sglang", version)
    dest = wheel.parent / "src"
    if not (dest / "sglang").is_dir():
        tmp = Path(tempfile.mkdtemp(prefix=".src-", dir=wheel.parent))
        with zipfile.ZipFile(wheel) as z:
            z.extractall(tmp, [n for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py")])
        try:
            tmp.rename(dest)
        except OSError:  # another worker unpacked it first: theirs is whole
            shutil.rmtree(tmp, ignore_errors=True)
    return dest / "sglang"


def sglang_module(version: str, rel: str) -> ast.Module:
    """``rel`` like ``srt/speculative/eagle_utils.py``."""
    return ast.parse((sglang_root(version) / rel).read_text(encoding="utf-8"))


def function(tree: ast.AST, name: str) -> ast.FunctionDef:
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
    raise AssertionError(f"function {name} not found")
