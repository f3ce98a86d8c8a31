"""specmodel installed as a user installs it: the built wheel (not the editable checkout) in an
environment of its own. Without torch, ``profile`` says in one line which extra to install before
any rank starts; in the engine's environment (its Python, its torch left as it is), the wheel
installed with ``--no-deps`` is what a hooked vLLM server imports (README, docs/vllm.md;
tests/test_install_wheel_live.py).

The environments are fresh venvs (``--without-pip``; pip installs into them with ``--python``)
whose packages come from an existing environment through a path entry, not a site directory: its
``.pth`` files -- the editable install of the checkout among them -- are not run, so ``specmodel``
there is the wheel's and nothing else."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import REPO

#: what the wheel is built from (pyproject.toml names README.md as its readme)
SOURCES = ("pyproject.toml", "setup.py", "README.md", "specmodel")
TORCH_FREE = ("torch", "torchgen", "functorch")


def build_wheel(python: Path | str, work: Path) -> Path:
    """The wheel ``python -m pip wheel --no-deps`` builds from a copy of the checkout's sources (a
    build writes build/ and *.egg-info beside its sources: never into the checkout)."""
    src = work / "src"
    src.mkdir(parents=True)
    for name in SOURCES:
        p = REPO / name
        if p.is_dir():
            shutil.copytree(p, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info"))
        else:
            shutil.copy2(p, src / name)
    r = subprocess.run([str(python), "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "-w", str(work / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = (work / "dist").glob("specmodel-*.whl")
    return whl


def site_of(python: Path | str) -> Path:
    r = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                       capture_output=True, text=True, timeout=300, env=_clean_env())
    assert r.returncode == 0, r.stderr
    return Path(r.stdout.strip())


def env_over(base_site: Path, root: Path, *, hide: tuple[str, ...] = ()) -> Path:
    """A fresh venv at ``root`` seeing ``base_site``'s packages through one path entry -- less any
    ``specmodel`` there (the checkout's editable install, its metadata too) and the top-level names
    ``hide``; returns its interpreter."""
    venv.EnvBuilder(with_pip=False, symlinks=True).create(root)
    py = root / "bin" / "python"
    view = root / "base-site"
    view.mkdir()
    for entry in base_site.iterdir():
        top = entry.name.split("-")[0].split(".")[0]
        if top in ("specmodel", *hide) or entry.suffix == ".pth" or entry.name.startswith("__editable__"):
            continue
        (view / entry.name).symlink_to(entry)
    (site_of(py) / "base-site.pth").write_text(f"{view}\n")
    return py


def pip_install(python: Path, whl: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                        "--no-index", str(whl)], capture_output=True, text=True, timeout=600, env=_clean_env())
    assert r.returncode == 0, r.stdout + r.stderr


def _clean_env(**extra: str) -> dict[str, str]:
    """This environment without PYTHONPATH (a user's shell has none pointing into a checkout)."""
    return {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, **extra}


def where(python: Path, *modules: str) -> dict[str, str | None]:
    code = ("import importlib.util, json, sys\n"
            "print(json.dumps({m: (s.origin if (s := importlib.util.find_spec(m)) else None) for m in sys.argv[1:]}))")
    r = subprocess.run([str(python), "-c", code, *modules], capture_output=True, text=True, timeout=300,
                       env=_clean_env())
    assert r.returncode == 0, r.stderr
    return dict(json.loads(r.stdout))


@pytest.fixture(scope="module")
def analysis_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(sys.executable, tmp_path_factory.mktemp("wheel"))


def test_profile_without_torch_names_the_extra_in_one_line_before_any_rank(analysis_wheel: Path,
                                                                           tmp_path: Path) -> None:
    py = env_over(Path(sysconfig.get_paths()["purelib"]), tmp_path / "venv", hide=TORCH_FREE)
    pip_install(py, analysis_wheel)
    found = where(py, "specmodel", "torch", "numpy")
    assert found["torch"] is None and found["numpy"] is not None
    assert Path(str(found["specmodel"])).is_relative_to(site_of(py)), found  # the wheel's, not the checkout's
    exe = str(tmp_path / "venv" / "bin" / "specmodel")
    work = tmp_path / "work"
    work.mkdir()
    # the rest of the wheel works there: predict on the shipped reference
    ok = subprocess.run([exe, "predict", "--accept-len", "3.2", "--json"], capture_output=True, text=True,
                        timeout=300, cwd=work, env=_clean_env())
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["verdict"]
    r = subprocess.run([exe, "profile", "--tp", "2", "--name", "p"], capture_output=True, text=True, timeout=300,
                       cwd=work, env=_clean_env())
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("specmodel: error: "), r.stderr
    assert "pip install 'specmodel[profile]'" in r.stderr and "torch" in r.stderr
    assert "rank" not in r.stdout + r.stderr  # said before any rank started, not as a rank's crash
    assert not (work / "profiles").exists()


def test_a_gpu_run_without_nvml_says_which_extra_records_the_links(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util
    from types import SimpleNamespace

    from specmodel.commands import profile as cmd

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pynvml" else real(name, *a))
    monkeypatch.delenv("RANK", raising=False)
    cmd._note_missing_gpu_extra(SimpleNamespace(backend="gloo"))  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""  # a CPU run has no GPU links to record
    cmd._note_missing_gpu_extra(SimpleNamespace(backend="nccl"))  # type: ignore[arg-type]
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install 'specmodel[gpu]'" in err and "unknown" in err
    monkeypatch.setenv("RANK", "3")  # under torchrun: said once, by rank 0
    cmd._note_missing_gpu_extra(SimpleNamespace(backend="nccl"))  # type: ignore[arg-type]
    assert capsys.readouterr().err == ""
