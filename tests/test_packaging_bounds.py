"""Declared dependency bounds admit only versions the code runs on."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _lower_bound(extra: str, package: str) -> tuple[int, ...]:
    doc = tomllib.loads((ROOT / "pyproject.toml").read_text())
    for req in doc["project"]["optional-dependencies"][extra]:
        m = re.fullmatch(rf"{package}\s*>=\s*([0-9.]+)", req.strip())
        if m:
            return tuple(int(x) for x in m.group(1).split("."))
    raise AssertionError(f"no '{package}>=' bound in the {extra} extra")


@pytest.mark.torch
def test_torch_bound_admits_init_process_group_device_id() -> None:
    # the worker passes init_process_group(device_id=...) on CUDA; torch grew that keyword in 2.3
    src = (ROOT / "specmodel/profile/worker.py").read_text()
    assert re.search(r"""\[["']device_id["']\]|device_id=""", src), "the worker no longer passes device_id"
    import torch.distributed as dist

    assert "device_id" in inspect.signature(dist.init_process_group).parameters
    bound = _lower_bound("profile", "torch")
    assert bound >= (2, 3), f"torch>={'.'.join(map(str, bound))} admits a torch without device_id"
