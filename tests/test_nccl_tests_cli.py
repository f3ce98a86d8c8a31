"""`specmodel nccl-tests` run as the installed command."""

from __future__ import annotations

import hashlib
import json

import pytest

from specmodel.model.allreduce import allreduce_s
from specmodel.schema.profile import load_profile
from tests.conftest import DATA

PCIE8 = str(DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt")
PERITER = str(DATA / "nccl_tests_per_iter" / "all_reduce_perf.txt")
REDUCE = str(DATA / "nccl_tests_reduce" / "reduce_perf.txt")
WRONG = str(DATA / "nccl_tests_wrong" / "all_reduce_perf.txt")


def test_standalone_fit_json(cli, tmp_path):
    out = tmp_path / "fit.json"
    r = cli("nccl-tests", PCIE8, "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "8 ranks, 17 rows, check column #wrong" in r.stdout and f"wrote        {out}" in r.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "specmodel.allreduce_fit" and doc["schema_version"] == 1
    assert doc["allreduce_fit"]["tp"] == 8 and len(doc["allreduce_points"]) == 17
    assert 2.0e-6 < doc["allreduce_fit"]["alpha_s"] < 3.2e-6
    first = doc["allreduce_points"][0]
    assert (first["msg_bytes"], first["tp"], first["spread_s"]) == (1024, 8, 0.0)
    assert abs(first["latency_s"] - 36.10e-6) < 1e-12  # the 36.10 us of the first row, in seconds


def test_fit_into_a_profile_copy(cli, tmp_path, reference_profile):
    src = reference_profile / "profile.json"
    before = hashlib.sha256(src.read_bytes()).hexdigest()
    out = tmp_path / "box"
    r = cli("nccl-tests", PCIE8, "--profile", str(reference_profile), "-o", str(out), "--json")
    assert r.returncode == 0, r.stderr
    assert hashlib.sha256(src.read_bytes()).hexdigest() == before
    prof = load_profile(out)
    ref = load_profile(reference_profile)
    assert prof.allreduce_fit is not None
    assert prof.allreduce_fit.to_dict() == json.loads(r.stdout)["allreduce_fit"]
    # every all-reduce re-costed with the measured fit at its message size; the rest as it was
    for new, old in zip(prof.costs, ref.costs, strict=True):
        assert (new.compute_s, new.other_s, new.n_allreduce) == (old.compute_s, old.other_s, old.n_allreduce)
        want = old.n_allreduce * allreduce_s(old.allreduce_msg_bytes, 8, prof.allreduce_fit) + old.skew_s
        assert new.allreduce_s == pytest.approx(want, rel=1e-9)
    assert prof.source.kind == "derived" and prof.name == "box"
    assert [p.msg_bytes for p in prof.allreduce_points][:2] == [1024, 2048]
    assert "nccl-tests" in prof.source.allreduce_from


def test_per_iteration_output_infers_tp(cli):
    r = cli("nccl-tests", PERITER, "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["allreduce_fit"]["tp"] == 4 and len(doc["allreduce_points"]) == 11
    assert max(abs(e) for e in doc["relative_errors"]) < 0.1


def test_errors_exit_2_and_write_nothing(cli, tmp_path, reference_profile):
    out = tmp_path / "fit.json"
    for args, msg in (
        ((WRONG,), "data corruption: 4096 wrong elements at size 2097152 B"),
        ((REDUCE,), "not all_reduce_perf output (reduce_perf)"),
        ((PCIE8, "--tp", "4"), "--tp 4: "),
        ((PCIE8, PERITER), "different GPU counts"),
        ((str(DATA / "logs_sglang_055" / "server.log"),), "no nccl-tests result rows"),
    ):
        r = cli("nccl-tests", *args, "-o", str(out))
        assert r.returncode == 2, (args, r.stdout)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and msg in lines[0], lines
        assert not out.exists()
    r = cli("nccl-tests", PCIE8, "--profile", str(reference_profile))
    assert r.returncode == 2 and "-o: required with --profile" in r.stderr
