"""Shared test helpers: run the installed ``specmodel`` command in a subprocess."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
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


def run_cli_batch(cases: dict[str, tuple[list[str], Path]], *, timeout: float = 600) -> dict[str, dict[str, Any]]:
    """Many ``specmodel`` command lines (id -> (argv, working directory)) in one fresh interpreter
    (tests/cli_batch.py): what each would print and exit with, without a start-up (and an import of
    torch) apiece. id -> {"rc", "stdout", "stderr"}; a traceback escaping the command is rc -1."""
    batch = [{"id": cid, "argv": argv, "cwd": str(cwd)} for cid, (argv, cwd) in cases.items()]
    r = subprocess.run([sys.executable, "-m", "tests.cli_batch"], input=json.dumps(batch), capture_output=True,
                       text=True, timeout=timeout, env=checkout_env())
    assert r.returncode == 0, r.stderr[-4000:]
    return {x["id"]: x for x in json.loads(r.stdout)}


def run_python(code: str, *, cwd: str | Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (what a cold start imports, a documented example as
    written); a failure shows its stderr."""
    r = subprocess.run([sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=timeout,
                       env=checkout_env())
    assert r.returncode == 0, r.stderr
    return r


def checkout_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` (default: this process's) with the checkout first on PYTHONPATH: a child started outside
    the checkout (every test's is) imports this tree's ``specmodel`` and ``tests``, as one started in it would."""
    e = dict(os.environ if env is None else env)
    e["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in e.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return e


@pytest.fixture
def cli():
    return run_cli


# --------------------------------------------------------------------------- hermetic: the checkout's state
# `make demo` writes profiles/cpu-demo and reports/cpu-demo.pdf into the checkout, and a bare command
# (`predict`, `plan` without --profile) uses the one measured profile under ./profiles: a test run from
# the checkout after the demo (the README's order) would read the demo's profile. So every test runs in
# a working directory of its own, and a test that writes into, lists or opens the checkout's profiles/
# or reports/ -- or starts a process in the checkout -- fails, naming what it touched.
#: the checkout the check guards (tests/test_hermetic.py points it at a stand-in to see it fail)
GUARDED = Path(os.environ.get("SPECMODEL_TESTS_GUARDED_CHECKOUT") or REPO)
CHECKOUT_STATE = tuple(str(GUARDED / d) for d in ("profiles", "reports"))
# what git ships there: the link to the packaged reference and the folder's placeholder
SHIPPED_STATE = tuple(str(GUARDED / d) for d in ("profiles/kimi-k2.5-int4-tp8-pcie", "reports/.gitkeep"))
_touched: list[str] = []
#: set once the tests' working directories exist (collection imports run before; what they start is no test's)
_armed: list[bool] = []
#: what tools beside the suite keep at the checkout's top (a developer's `make lint` during a run)
TOOL_CACHES = frozenset({".mypy_cache", ".ruff_cache", ".pytest_cache"})


def _in_checkout_state(path: str) -> bool:
    for d in CHECKOUT_STATE:
        if path == d or path.startswith(d + os.sep):
            return not any(path == s or path.startswith(s + os.sep) for s in SHIPPED_STATE)
    return False


def _abspath(p: object) -> str | None:
    if p is None:
        p = "."
    if isinstance(p, int):
        return None
    try:
        s = os.fsdecode(os.fspath(p))  # type: ignore[arg-type]
    except TypeError:
        return None
    return os.path.normpath(s if os.path.isabs(s) else os.path.join(os.getcwd(), s))


_WATCHED = frozenset({"open", "os.listdir", "os.scandir", "subprocess.Popen"})


def _audit(event: str, args: tuple[Any, ...]) -> None:
    """A read or a listing of the checkout's profiles/ or reports/ in this process, or a process
    started with the checkout as its working directory (its bare commands would read ./profiles)."""
    if event not in _WATCHED or not _armed:
        return
    if event == "subprocess.Popen":
        cwd = _abspath(args[2])
        if cwd is not None and (cwd == str(GUARDED) or _in_checkout_state(cwd)):
            argv = [args[1]] if isinstance(args[1], (str, bytes)) else list(args[1])
            _touched.append(f"started {argv[:3]!r} in the checkout ({cwd})")
        return
    path = _abspath(args[0])
    if path is not None and _in_checkout_state(path):
        _touched.append(f"{event} {path}")


def _checkout_state() -> dict[str, tuple[int, int]]:
    """Every entry under the checkout's profiles/ and reports/ (not following links), with its size and
    modification time; and the checkout's top-level names (a file a test left beside the sources)."""
    seen = len(_touched)
    out: dict[str, tuple[int, int]] = {name: (0, 0) for name in os.listdir(GUARDED) if name not in TOOL_CACHES}
    for d in CHECKOUT_STATE:
        for root, dirs, files in os.walk(d):
            for name in dirs + files:
                st = os.lstat(os.path.join(root, name))
                out[os.path.join(root, name)] = (st.st_size, st.st_mtime_ns)
    del _touched[seen:]  # the check's own listing is no test's read
    return out


def pytest_configure(config: pytest.Config) -> None:
    sys.addaudithook(_audit)  # once per process (a hook cannot be removed); cheap for unwatched events


@pytest.fixture(scope="session", autouse=True)
def _session_cwd(tmp_path_factory: pytest.TempPathFactory):
    """The working directory of the run-wide and per-module fixtures (they start before a test's own)."""
    cwds = tmp_path_factory.mktemp("cwd")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(cwds)
        _armed.append(True)
        yield cwds


@pytest.fixture(autouse=True)
def hermetic(_session_cwd: Path, monkeypatch: pytest.MonkeyPatch):
    """Each test runs in an empty working directory of its own (not its tmp_path: a test that builds
    tmp_path/profiles/x must not thereby change what a bare command there uses) and leaves the
    checkout's profiles/, reports/ and top level as it found them, reading neither."""
    before = _checkout_state()
    monkeypatch.chdir(tempfile.mkdtemp(dir=_session_cwd))
    yield
    touched, after = list(_touched), _checkout_state()
    del _touched[:]
    changed = sorted(k for k in before.keys() | after.keys() if before.get(k) != after.get(k))
    assert not changed, (f"the checkout changed during this test (or one running beside it): {changed}; "
                         "tests write only under their tmp_path")
    assert not touched, (f"this test (or a fixture it uses) read the checkout's state; tests read only what they "
                         f"made: {touched[:5]}")


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
