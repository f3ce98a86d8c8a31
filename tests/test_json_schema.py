"""Every ``--json`` output names its format and version (``schema``, ``schema_version``), one of the
formats declared in specmodel/schema/formats.py; each command runs as the installed CLI.
(``profile --json`` is checked where the profiler runs: tests/test_profile_run.py.)"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from specmodel.schema import formats
from tests.conftest import DATA, REFERENCE, run_cli

SG055 = DATA / "logs_sglang_055" / "server.log"
VNEW = DATA / "logs_vllm_new" / "server.log"
PCIE8 = DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt"

CASES = {
    "predict": (formats.PREDICTION, ["predict", "--accept-len", "3.2", "--json"]),
    "plan": (formats.PLAN, ["plan", "--accept-len", "3.2", "--json"]),
    "plan --engine": (formats.SCHEDULE, ["plan", "--accept-len", "3.2", "--engine", "vllm", "--json"]),
    "accept": (formats.ACCEPT, ["accept", str(VNEW), "--json"]),
    "validate": (formats.VALIDATION, ["validate", "--profile", str(REFERENCE), str(SG055), "--json"]),
    "nccl-tests": (formats.ALLREDUCE_FIT, ["nccl-tests", str(PCIE8), "--json"]),
    "ingest": (formats.INGEST, ["ingest", str(DATA / "kineto_gpu_tp2"), "--json", "--no-save",
                                "--num-draft-tokens", "6"]),
}


def _check(doc: dict, fmt: formats.Format) -> None:
    assert (doc["schema"], doc["schema_version"]) == (fmt.name, fmt.version)
    assert list(doc)[:2] == ["schema", "schema_version"]
    assert fmt.check(doc, "stdout") == fmt.version


@pytest.mark.parametrize("name", sorted(CASES))
def test_json_output_carries_its_schema(name: str, tmp_path: Path) -> None:
    fmt, args = CASES[name]
    r = run_cli(*args, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _check(json.loads(r.stdout), fmt)


def test_nccl_tests_into_a_profile_copy_json_carries_the_fit_schema(tmp_path: Path) -> None:
    prof = tmp_path / "ref"
    shutil.copytree(REFERENCE, prof)
    r = run_cli("nccl-tests", str(PCIE8), "--profile", str(prof), "-o", str(tmp_path / "out"), "--json", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    _check(json.loads(r.stdout), formats.ALLREDUCE_FIT)


def test_check_drafter_json_carries_its_schema(tmp_path: Path) -> None:
    from tests.test_drafter_checks import published_pair

    d, t, ref, _, _ = published_pair(tmp_path)
    r = run_cli("check-drafter", "--drafter", str(d), "--target", str(t), "--reference-drafter", str(ref), "--json")
    assert r.returncode == 1, r.stderr  # the published mismatch is a FAIL; stdout is still the document
    _check(json.loads(r.stdout), formats.DRAFTER_CHECK)


def test_every_format_is_declared_once_and_checked_on_read() -> None:
    names = [f.name for f in formats.ALL]
    assert len(names) == len(set(names))
    assert all(v in formats.ALL for v in vars(formats).values() if isinstance(v, formats.Format))
    from specmodel.errors import SpecmodelError

    with pytest.raises(SpecmodelError, match=r"stdout: schema: expected 'specmodel.plan', got 'specmodel.report'"):
        formats.PLAN.check(formats.REPORT.header(), "stdout")
    with pytest.raises(SpecmodelError, match=r"f.json: schema_version: this specmodel reads 1, 2, file has 3"):
        formats.PROFILE.check({"schema": "specmodel.profile", "schema_version": 3}, "f.json")
    with pytest.raises(SpecmodelError, match="expected a JSON object"):
        formats.ACCEPT.check([1, 2], "a.json")
