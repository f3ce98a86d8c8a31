"""Where a test finds an unpacked SGLang wheel of a given version (parsed with ``ast``, never imported).

``$SPECMODEL_ENGINE_SRC/sglang__<version>/sglang`` (default ``/work/engine-src``: wheels unpacked
without their dependencies). A missing source fails the test, never skips it: a check that did
not run must not pass."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest


def sglang_root(version: str) -> Path:
    base = Path(os.environ.get("SPECMODEL_ENGINE_SRC", "/work/engine-src"))
    root = base / f"sglang__{version}" / "sglang"
    if not root.is_dir():
        pytest.fail(f"SGLang {version} source not found at {root}; unpack the wheel there "
                    f"(pip download --no-deps sglang=={version}; unzip) or set SPECMODEL_ENGINE_SRC")
    return root


def sglang_module(version: str, rel: str) -> ast.Module:
    """``rel`` like ``srt/speculative/eagle_utils.py``."""
    return ast.parse((sglang_root(version) / rel).read_text(encoding="utf-8"))


def function(tree: ast.AST, name: str) -> ast.FunctionDef:
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef) and n.name == name:
            return n
    raise AssertionError(f"function {name} not found")
