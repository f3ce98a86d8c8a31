"""Declared dependency bounds admit only versions the code runs on (issue 11, defect 10)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def _extra(name: str, package: str) -> Requirement:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    reqs = [Requirement(r) for r in doc["project"]["optional-dependencies"][name]]
    return next(r for r in reqs if r.name == package)


def test_torch_bound_admits_init_process_group_device_id() -> None:
    # the worker passes init_process_group(device_id=...) on CUDA; torch grew that keyword in 2.3
    src = (ROOT / "specmodel/profile/worker.py").read_text()
    assert re.search(r"""\[["']device_id["']\]|device_id=""", src), "the worker no longer passes device_id"
    import torch.distributed as dist

    assert "device_id" in inspect.signature(dist.init_process_group).parameters
    spec = _extra("profile", "torch").specifier
    assert not spec.contains("2.2.2"), f"torch{spec} admits 2.2, whose init_process_group has no device_id"
    assert spec.contains("2.3.0") and spec.contains("2.13.0")
