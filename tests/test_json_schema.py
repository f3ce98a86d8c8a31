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
    "watch": (formats.WATCH, ["watch", str(SG055), "--profile", str(REFERENCE), "--once", "--window", "600", "--json"]),
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


#: every format name a released specmodel wrote: files and --json streams carry it, so a reader keyed on it
#: (another tool, an older specmodel, a saved watch stream) breaks when it is renamed -- a module move
#: renamed two of them once (specmodel.watch, specmodel.validation); a version bump is how a format changes
PUBLISHED = ("specmodel.accept", "specmodel.allreduce_fit", "specmodel.check_drafter", "specmodel.gpu_check",
             "specmodel.gpu_check_trace", "specmodel.ingest", "specmodel.plan", "specmodel.prediction",
             "specmodel.probe", "specmodel.profile", "specmodel.profile_run", "specmodel.report",
             "specmodel.schedule", "specmodel.sglang_forward", "specmodel.validation", "specmodel.vllm_capture",
             "specmodel.vllm_step", "specmodel.watch")


def test_published_format_names_never_change() -> None:
    names = {f.name for f in formats.ALL}
    assert set(PUBLISHED) <= names, sorted(set(PUBLISHED) - names)


def test_every_format_is_declared_once() -> None:
    names = [f.name for f in formats.ALL]
    assert len(names) == len(set(names))
    assert all(v in formats.ALL for v in vars(formats).values() if isinstance(v, formats.Format))


def _one_line_error(r, *needles: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("specmodel: error: ") and "Traceback" not in r.stderr, r.stderr
    for n in needles:
        assert n in lines[0], r.stderr


def _bad_headers(fmt: formats.Format) -> list[tuple[dict, str]]:
    """(header change, what the reader must say) for a wrong schema, an unread version, a bool version."""
    reads = f"schema_version: this specmodel reads {', '.join(map(str, fmt.readable_versions))}, file has"
    return [({"schema": formats.REPORT.name}, f"schema: expected {fmt.name!r}, got 'specmodel.report'"),
            ({"schema_version": 99}, f"{reads} 99"),
            ({"schema_version": True}, f"{reads} True")]


@pytest.mark.parametrize("case", range(3))
def test_profile_reader_checks_the_header(case: int, tmp_path: Path) -> None:
    change, needle = _bad_headers(formats.PROFILE)[case]
    doc = json.loads((REFERENCE / "profile.json").read_text())
    (tmp_path / "p").mkdir()
    (tmp_path / "p" / "profile.json").write_text(json.dumps({**doc, **change}))
    r = run_cli("predict", "--profile", str(tmp_path / "p"), "--accept-len", "2", cwd=tmp_path)
    _one_line_error(r, f"{tmp_path / 'p' / 'profile.json'}: {needle}")


@pytest.mark.parametrize("case", range(3))
def test_accept_reader_checks_the_header(case: int, tmp_path: Path) -> None:
    change, needle = _bad_headers(formats.ACCEPT)[case]
    saved = tmp_path / "a.json"
    assert run_cli("accept", str(SG055), "-o", str(saved), cwd=tmp_path).returncode == 0
    saved.write_text(json.dumps({**json.loads(saved.read_text()), **change}))
    for args in (["accept", str(saved)], ["predict", "--profile", str(REFERENCE), "--accept-log", str(saved)]):
        _one_line_error(run_cli(*args, cwd=tmp_path), f"{saved}: {needle}")


@pytest.mark.parametrize("case", range(3))
def test_sglang_forward_reader_checks_the_header(case: int, tmp_path: Path) -> None:
    change, needle = _bad_headers(formats.SGLANG_FORWARD)[case]
    d = tmp_path / "logs"
    d.mkdir()
    good = {**formats.SGLANG_FORWARD.header(), "type": "forward", "phase": "decode", "batch": 1, "tokens": 1,
            "forwards": 1, "runner": "target", "gpu_s": 0.01}
    (d / "rank0.jsonl").write_text(json.dumps(good) + "\n" + json.dumps({**good, **change}) + "\n")
    r = run_cli("sglang", "--summarize", str(d), "-o", str(tmp_path / "p"), cwd=tmp_path)
    _one_line_error(r, f"{d / 'rank0.jsonl'}: line 2: {needle}")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("case", range(3))
def test_allreduce_fit_reader_checks_the_header(case: int, tmp_path: Path) -> None:
    from specmodel.errors import SpecmodelError
    from specmodel.trace.nccl_tests import load_fit_document

    change, needle = _bad_headers(formats.ALLREDUCE_FIT)[case]
    fit = tmp_path / "fit.json"
    assert run_cli("nccl-tests", str(PCIE8), "-o", str(fit), cwd=tmp_path).returncode == 0
    assert load_fit_document(fit)[0].tp == 8  # what the writer wrote, the reader reads
    fit.write_text(json.dumps({**json.loads(fit.read_text()), **change}))
    with pytest.raises(SpecmodelError) as exc:
        load_fit_document(fit)
    assert str(exc.value).startswith(f"{fit}: {needle}") and "\n" not in str(exc.value)


def test_a_profile_given_where_an_accept_log_goes_names_both_formats(tmp_path: Path) -> None:
    r = run_cli("predict", "--profile", str(REFERENCE), "--accept-log", str(REFERENCE / "profile.json"), cwd=tmp_path)
    _one_line_error(r, "schema: expected 'specmodel.accept', got 'specmodel.profile'")


@pytest.mark.parametrize("case", range(3))
def test_vllm_capture_reader_checks_the_header(case: int, tmp_path: Path) -> None:
    change, needle = _bad_headers(formats.VLLM_CAPTURE)[case]
    run = tmp_path / "run"
    shutil.copytree(DATA / "vllm_cpu_032_capture" / "base", run)
    side = run / "capture" / "rank1.json"
    side.write_text(json.dumps({**json.loads(side.read_text()), **change}))
    r = run_cli("vllm", "--summarize", str(run), "-o", str(tmp_path / "p"), cwd=tmp_path)
    _one_line_error(r, f"{side}: {needle}")
    assert not (tmp_path / "p").exists()
