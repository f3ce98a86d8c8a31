"""Shared test helpers: run the installed ``specmodel`` command in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

try:  # property tests judge properties, not how fast a shared CI box runs an example
    from hypothesis import settings

    settings.register_profile("specmodel", deadline=None)
    settings.load_profile("specmodel")
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
REFERENCE = REPO / "specmodel" / "reference" / "kimi-k2.5-int4-tp8-pcie"


def specmodel_exe() -> list[str]:
    exe = Path(sys.executable).parent / "specmodel"
    if exe.exists():
        return [str(exe)]
    return [sys.executable, "-m", "specmodel.cli"]


def sigint_default() -> None:
    """``preexec_fn`` for a child a test sends SIGINT: a shell's background job (``cmd &``, ``nohup``)
    inherits SIGINT ignored, and Python then installs no KeyboardInterrupt handler at all, so the
    Ctrl-C tests would test the launcher's shell, not specmodel (seen: CI started as ``nohup … &``)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def run_cli(*args: str, cwd: str | Path | None = None, timeout: float = 300,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ)
    e.setdefault("PYTHONUNBUFFERED", "1")
    if env:
        e.update(env)
    return subprocess.run(specmodel_exe() + list(args), cwd=cwd, capture_output=True, text=True, timeout=timeout, env=e)


def run_python(code: str, *, cwd: str | Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (what a cold start imports, a documented example as
    written); a failure shows its stderr."""
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, r.stderr
    return r


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture
def reference_profile() -> Path:
    return REFERENCE


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under ``make test`` (``-n 2 --dist loadgroup``) every test in a ``tests/*_live.py`` file -- the ones
    that start a live vLLM server -- is one work unit on one worker, one server at a time, so two engines
    never compete for the cores (their start-up and bounded waits were sized for one), a module's shared
    server starts once and the tiny models are built once; xdist sends the largest unit first, so the
    other worker runs the rest beside it. A scheduler of our own, not ``xdist_group`` marks: with pytest
    9.2 / xdist 3.8 the marks' ``@group`` suffix on the node id does not take (a file of marked tests
    ran spread over both workers, checked with ``-v``). Other ``--dist`` modes: xdist's own."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class LiveEngineGroup(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return "live-engine" if nodeid.split("::")[0].endswith("_live.py") else nodeid

    return LiveEngineGroup(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests marked ``torch`` skip, with the reason, only where torch is missing (the profiler's
    extra); a module-level importorskip would hide that module's torch-free tests as well.
    Tests marked ``gpu`` run only where CUDA is; elsewhere they are skipped, saying why."""
    if importlib.util.find_spec("torch") is None:
        skip = pytest.mark.skip(reason="needs torch (the `profile` extra: pip install -e '.[profile]')")
        for item in items:
            if "torch" in item.keywords:
                item.add_marker(skip)
    if any("gpu" in item.keywords for item in items) and not _cuda_available():
        skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU (this box has none); run scripts/gpu-check on a GPU box")
        for item in items:
            if "gpu" in item.keywords:
                item.add_marker(skip_gpu)


# --------------------------------------------------------------------------- the live vLLM engine
# (tests/vllm_engine.py; installed by `make engine`, which `make test` depends on)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """The engine venv's interpreter. Under `make test` ($SPECMODEL_VLLM_PYTHON set) a missing
    engine fails the run; a bare `pytest` without `make engine` skips, saying so."""
    from tests.vllm_engine import ENV_PYTHON, engine_python

    py = engine_python()
    if py is None:
        if os.environ.get(ENV_PYTHON):
            pytest.fail(f"${ENV_PYTHON}={os.environ[ENV_PYTHON]} is not an installed engine (run `make engine`)")
        pytest.skip("the vLLM engine is not installed here: `make engine` (`make test` does it)")
    return py


@pytest.fixture(scope="session")
def tiny_models(vllm_python: Path, tmp_path_factory: pytest.TempPathFactory):
    """Tiny offline Llama models (target, target + 5 % noise, random) sharing one BPE tokenizer."""
    from tests.vllm_engine import build_models

    return build_models(vllm_python, tmp_path_factory.mktemp("vllm-models"))


def baseline_standin(src: Path, dst: Path) -> Path:
    """A hook run without speculation, stood in for by a speculative run's decode-shaped steps with
    the drafter's fields removed (the recordings hold no TP 2 baseline, and their TP 1 one was made on a loaded box)."""
    dst.mkdir()
    for f in sorted(src.glob("rank*.jsonl")):
        lines = []
        for ln in f.read_text().splitlines():
            rec = json.loads(ln)
            if rec.get("type") == "meta":
                rec.pop("spec", None)
            elif rec.get("kind") != "decode":
                continue
            else:
                for k in ("draft_method", "draft_k", "draft_s", "draft_allreduce_s", "draft_n_allreduce"):
                    rec.pop(k, None)
            lines.append(json.dumps(rec))
        (dst / f.name).write_text("\n".join(lines) + "\n")
    return dst
