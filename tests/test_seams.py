"""The seam tables (specmodel/engines/*/seams.py) against the real source of every engine version
they name, the hooks' wrap targets against the tables, what a hooked worker records when a seam is
not wrapped, and how that reaches the profile and the verdict.

The sources: vLLM 0.32.0 is the live engine (``$SPECMODEL_VLLM_PYTHON``'s installed package);
every other version is its wheel, downloaded once by ``make engine-wheels`` (``make test`` depends
on it) into ``$SPECMODEL_ENGINE_WHEELS`` and read as a zip, parsed with ``ast``, never imported.
A missing wheel fails the test with the command that fetches it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.seams import (
    Seam,
    SeamTable,
    Source,
    check_source,
    markdown,
    mismatches,
)
from specmodel.engines.sglang import targets as sgtargets
from specmodel.engines.sglang.seams import TABLE as SGLANG
from specmodel.engines.vllm import targets as vtargets
from specmodel.engines.vllm.seams import TABLE as VLLM
from tests.conftest import REPO, run_cli

TABLES = {"vllm": VLLM, "sglang": SGLANG}
LIVE = ("vllm", "0.32.0")


def _wheel_dir() -> Path:
    return Path(os.environ.get("SPECMODEL_ENGINE_WHEELS") or Path.home() / ".cache" / "specmodel" / "engine-wheels")


def _source_root(engine: str, version: str) -> Path:
    if (engine, version) == LIVE:
        from tests.vllm_engine import ENV_PYTHON, engine_python

        py = engine_python()
        if py is None:
            if os.environ.get(ENV_PYTHON):
                pytest.fail(f"${ENV_PYTHON}={os.environ[ENV_PYTHON]} is not an installed engine (run `make engine`)")
            pytest.skip("the live vLLM engine is not installed here: `make engine` (`make test` does it)")
        from specmodel.engines.seams import locate

        root, ver = locate(VLLM, str(py))
        assert ver == version, f"the live engine is vLLM {ver}, the table's live version is {version}"
        return root
    wheels = sorted((_wheel_dir() / f"{engine}-{version}").glob("*.whl"))
    if not wheels:
        pytest.fail(f"no {engine} {version} wheel under {_wheel_dir()}: run `make engine-wheels`")
    return wheels[0]


@pytest.mark.parametrize(("engine", "version"), [(e, v) for e, t in TABLES.items() for v in t.versions])
def test_the_table_holds_in_the_real_source(engine: str, version: str) -> None:
    """Every member, log text and metric name the table says is in ``version`` is found in its
    source; every one it says is absent is not found there."""
    table = TABLES[engine]
    with Source(_source_root(engine, version), table.package) as src:
        findings = check_source(table, src)
    assert mismatches(table, version, findings) == []
    # the table says something about every seam in every checked version (no "?" cell)
    assert all(s.status(version) is not None for s in table.seams)


def test_vllm_0_34_dropped_the_v1_runner_and_added_the_suffix_speculator() -> None:
    """0.34.0 removed Model Runner V1 and added the suffix speculator: read from its wheel itself."""
    with Source(_source_root("vllm", "0.34.0"), "vllm") as src:
        found = {f.seam.key: f.found for f in check_source(VLLM, src)}
    assert found[f"{vtargets.RUNNER_MODULE}.GPUModelRunner.execute_model"] is False
    assert found[f"{vtargets.V2_SPEC}.suffix.speculator.SuffixSpeculator.propose"] is True
    assert found[f"{vtargets.V2_RUNNER_MODULE}.GPUModelRunner.execute_model"] is True


def test_sglang_0_5_23_hisparse_line_and_its_drafters_are_in_the_table() -> None:
    with Source(_source_root("sglang", "0.5.23"), "sglang") as src:
        found = {f.seam.key: f.found for f in check_source(SGLANG, src)}
    assert found["log:#gpu token: "] is True
    assert found["sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner.FrozenKVMTPCudaGraphRunner.execute"] is True


# --------------------------------------------------------------------------- the hooks against the tables


def test_every_vllm_wrap_target_is_a_table_row_and_back() -> None:
    targets = {(m, c, f): (role, runner) for m, c, f, role, runner in vtargets.ALL_TARGETS}
    rows = {(s.module, s.cls, s.method): (s.role, s.runner) for s in VLLM.members() if s.role}
    assert targets == rows


def test_every_sglang_wrap_target_is_a_table_row_and_back() -> None:
    """Every Target declared in targets.py (whatever tuple holds it) is a table row -- with the
    same role where the row names one (a row read but not wrapped says ""); every row with a role
    is a target."""
    declared = [t for v in vars(sgtargets).values() if isinstance(v, tuple)
                for t in v if isinstance(t, sgtargets.Target)]
    targets = {(t.module, t.cls, m): t.role for t in declared for m in t.methods}
    rows = {(s.module, s.cls, s.method): s.role for s in SGLANG.members()}
    assert [k for k in targets if k not in rows] == []
    assert [(k, role) for k, role in targets.items() if rows[k] not in ("", role)] == []
    assert [k for k, role in rows.items() if role and k not in targets] == []


def test_since_and_until_read_off_the_table() -> None:
    """The version a seam arrived in or left, as the hooks' "expected absent" rules need it."""
    def row(table: SeamTable, key: str) -> Seam:
        return next(s for s in table.seams if s.key == key)

    suffix = row(VLLM, f"{vtargets.V2_SPEC}.suffix.speculator.SuffixSpeculator.propose")
    v1 = row(VLLM, f"{vtargets.RUNNER_MODULE}.GPUModelRunner._model_forward")
    ar = row(VLLM, f"{vtargets.PARALLEL_MODULE}.GroupCoordinator._all_reduce_out_place")
    assert (VLLM.since(suffix), VLLM.until(suffix)) == ("0.34.0", None)
    assert (VLLM.since(v1), VLLM.until(v1)) == (None, "0.34.0")
    assert (VLLM.since(ar), VLLM.until(ar)) == (None, None)
    prefill = row(SGLANG, "sglang.srt.managers.scheduler.Scheduler.get_next_disagg_prefill_batch_to_run")
    assert SGLANG.since(prefill) == "0.5.23"


def test_the_log_and_metric_rows_are_what_the_readers_match() -> None:
    """The table's metric names are the readers' series (less prometheus_client's ``_total``),
    and each log text is matched by the reader's pattern it stands for."""
    from specmodel.engines.sglang import metrics as sgm
    from specmodel.engines.vllm import metrics as vm

    for table, fmt in ((VLLM, vm.FORMAT), (SGLANG, sgm.FORMAT)):
        names = {s.text for s in table.seams if s.kind == "metric"}
        for series in fmt.series:
            assert any(series == n or series.startswith(n + "_") for n in names), series


# --------------------------------------------------------------------------- the checker finds a change


def _tree(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def test_a_renamed_member_contradicts_the_table(tmp_path: Path) -> None:
    """An engine tree where the seam moved (a class renamed, a method gone) is told apart from the
    table, by name and by reason."""
    seam = Seam(engine="x", kind="method", module="eng.spec", cls="Suffix", method="propose", figure="draft_s",
                present=("1.0",))
    gone = Seam(engine="x", kind="method", module="eng.old", cls="Old", method="run", figure="forward_s",
                present=(), absent=("1.0",))
    log = Seam(engine="x", kind="log", text="#gpu token: ", figure="context tokens", present=("1.0",))
    fld = Seam(engine="x", kind="field", module="eng.run", cls="Runner", method="speculator", figure="draft_s",
               present=("1.0",))
    table = SeamTable(engine="x", package="eng", versions=("1.0",), seams=(seam, gone, log, fld))
    ok = _tree(tmp_path / "ok", {"eng/__init__.py": "", "eng/spec.py": "class Suffix:\n    def propose(self): ...\n",
                                 "eng/run.py": "class Runner:\n    def __init__(self):\n        self.speculator = 1\n",
                                 "eng/old.py": "", "eng/log.py": "f'x, #gpu token: {n}'\n"})
    with Source(ok, "eng") as src:
        assert mismatches(table, "1.0", check_source(table, src)) == []
    bad = _tree(tmp_path / "bad", {"eng/__init__.py": "", "eng/spec.py": "class Suffix2:\n    def propose(self): ...\n",
                                   "eng/old.py": "class Old:\n    def run(self): ...\n",
                                   "eng/log.py": "f'x, #token: {n}'\n",
                                   "eng/run.py": "class Runner:\n    def __init__(self):\n        self.drafter = 1\n"})
    with Source(bad, "eng") as src:
        out = mismatches(table, "1.0", check_source(table, src))
    assert out == ["x 1.0: eng.spec.Suffix.propose is listed present but class Suffix not in eng.spec",
                   "x 1.0: eng.old.Old.run is listed absent but was found",
                   "x 1.0: log:#gpu token:  is listed present but '#gpu token: ' not in eng/",
                   "x 1.0: eng.run.Runner.speculator is listed present but Runner defines no field speculator"]


def test_a_table_naming_an_unchecked_version_is_refused() -> None:
    s = Seam(engine="x", kind="method", module="m", cls="C", method="f", figure="draft_s", present=("2.0",))
    with pytest.raises(ValueError, match="not checked versions"):
        SeamTable(engine="x", package="m", versions=("1.0",), seams=(s,))


# --------------------------------------------------------------------------- a worker that cannot wrap a seam


def test_a_drafter_the_hook_has_no_target_for_is_recorded_missing_and_qualifies_the_verdict(tmp_path: Path) -> None:
    """A V2 worker whose speculator is a class no hook target names (as SuffixSpeculator was before
    0.34's was wrapped, or a 0.35 drafter): its proposals land in overhead, the meta line says
    draft_s rests on a seam not wrapped, the profile carries it, and predict's verdict is
    qualified by that line -- not a plain GO on a draft cost that reads low."""
    from specmodel.engines.vllm import hook
    from specmodel.engines.vllm.hooklog import summarize
    from specmodel.model.cyclecost import cycle_costs
    from specmodel.schema.profile import load_profile, save_profile
    from tests.standins import so, vllm_v2

    class NewSpeculator:  # not a class the hook wraps
        def propose(self, *a: Any, **kw: Any) -> str:
            return "drafts"

    # one server without speculation, one with (each its own process: its own meta line)
    for method in (None, "draft_model"):
        with vllm_v2(tmp_path / str(method)) as ns:
            runner = ns.Runner(method)
            if method:
                runner.speculator = NewSpeculator()
            for _ in range(6):
                runner.execute_model(so(1, k=3 if method else 0))
                runner.sample_tokens(None)
            hook.flush(wait=True)
    [spec_meta] = [json.loads(f.read_text().splitlines()[0]) for f in (tmp_path / "draft_model").glob("rank*.jsonl")]
    assert {"seam": "NewSpeculator.propose", "figure": "draft_s",
            "why": "not wrapped (no hook target for this drafter)"} in spec_meta["seams_missing"]
    assert "StandaloneARSpeculator.propose" in spec_meta["seams_found"]
    [base_meta] = [json.loads(f.read_text().splitlines()[0]) for f in (tmp_path / "None").glob("rank*.jsonl")]
    assert base_meta["seams_missing"] == [] and "GPUModelRunner.execute_model" in base_meta["seams_found"]

    prof = summarize([tmp_path / "None", tmp_path / "draft_model"], name="t")
    [ms] = prof.missing_seams
    assert (ms.seam, ms.figure, ms.engine) == ("NewSpeculator.propose", "draft_s", "vllm")
    assert any(n.startswith("draft time not recorded: NewSpeculator.propose not wrapped") for n in prof.notes)
    # written (v7) and read back; the box's condition is left out: a busy CI box would change the
    # probe between the two recordings, and that check is not this test's
    import dataclasses

    prof = dataclasses.replace(prof, conditions=None)
    path = save_profile(prof, tmp_path / "p")
    assert json.loads(path.read_text())["schema_version"] == 7
    assert load_profile(path).missing_seams == prof.missing_seams

    from specmodel.schema.costrows import SpecConfig

    cc = cycle_costs(prof, batch=1, spec=SpecConfig(algorithm="DRAFT_MODEL", steps=3, topk=1, num_draft_tokens=4))
    assert not cc.measured
    labels = [a.label for a in cc.assumptions]
    assert any(lb.startswith("draft time not recorded: NewSpeculator.propose not wrapped") for lb in labels)
    r = run_cli("predict", "--json", "--profile", str(path), "--accept-len", "2.5", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["measured"] is False and "draft time not recorded: NewSpeculator.propose" in d["verdict_label"]
    # the report shows the same qualified verdict
    from specmodel.model.accept import from_mean
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict
    from specmodel.report.content import build_report
    from specmodel.report.markdown import render_markdown

    spec = SpecConfig(algorithm="DRAFT_MODEL", steps=3, topk=1, num_draft_tokens=4)
    dist = from_mean(2.5, 4)
    p = predict(prof, dist, OperatingPoint(batch=1, spec=spec))
    assert "draft time not recorded: NewSpeculator.propose" in p.verdict_label and not p.measured
    md = render_markdown(build_report(profile=prof, dist=dist, spec=spec, prediction=p, notes=(), per_position=None,
                                      observation=None, max_batch=4, inputs=[]))
    assert f"## Verdict: **{p.verdict_label}**" in md
    # a draft cost given on the command line replaces the unrecorded one
    r = run_cli("predict", "--json", "--profile", str(path), "--accept-len", "2.5", "--draft-ms", "1", cwd=tmp_path)
    assert "draft time not recorded" not in json.loads(r.stdout)["verdict_label"]


def test_a_target_module_without_its_member_is_recorded_with_the_engine_version(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A vLLM whose suffix speculator module has the class but no ``propose`` (a rename in a newer
    version): the hook warns, the meta line records the seam and its figure, and the line the
    verdict carries names the version."""
    from specmodel.engines.seams import missing_from_meta
    from specmodel.engines.vllm import hook
    from tests.standins import so, vllm_v2

    suffix = types.ModuleType(f"{vtargets.V2_SPEC}.suffix.speculator")

    class SuffixSpeculator:
        def propose_v3(self) -> None: ...

    suffix.SuffixSpeculator = SuffixSpeculator  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(__version__="0.35.0"))
    with vllm_v2(tmp_path / "hook", replace={suffix.__name__: suffix}) as ns:
        runner = ns.Runner(None)
        runner.execute_model(so(1))
        runner.sample_tokens(None)
        hook.flush(wait=True)
    [f] = (tmp_path / "hook").glob("rank*.jsonl")
    meta = json.loads(f.read_text().splitlines()[0])
    assert meta["seams_missing"] == [{"seam": "SuffixSpeculator.propose", "figure": "draft_s", "why": "not found"}]
    [ms] = missing_from_meta([meta], engine="vllm", version_key="vllm_version")
    assert ms.line() == "draft time not recorded: SuffixSpeculator.propose not found in vLLM 0.35.0"


def test_a_runner_that_overrides_a_wrapped_method_is_recorded() -> None:
    """A platform runner subclassing the hooked one and overriding ``execute_model`` (the wrapper is
    on the base class only): the worker's own class is looked at, not the names."""
    from specmodel.engines.vllm.seams import runtime_missing

    def wrapped(self: Any) -> None: ...

    wrapped.__specmodel_wrapped__ = True  # type: ignore[attr-defined]

    class Base:
        execute_model = wrapped
        sample_tokens = wrapped
        _model_forward = wrapped
        propose_draft_token_ids = wrapped

    class Platform(Base):
        def execute_model(self) -> None: ...

    runner = Platform()
    runner.speculative_config = types.SimpleNamespace(method="eagle3")  # type: ignore[attr-defined]
    assert runtime_missing(runner, "v1") == [("Platform.execute_model", "step_s", "not wrapped (Platform overrides it)")]
    assert runtime_missing(Base(), "v1") == []


def test_a_bad_seams_missing_in_a_meta_line_is_the_files_error(tmp_path: Path) -> None:
    from specmodel.engines.vllm.steplog import read_step_log

    p = tmp_path / "rank0-dp0-pp0-pid1.jsonl"
    p.write_text(json.dumps({"schema": "specmodel.vllm_step", "schema_version": 2, "type": "meta",
                             "seams_missing": [{"seam": "X.f"}]}) + "\n")
    from specmodel.errors import SpecmodelError

    with pytest.raises(SpecmodelError, match=r"seams_missing\[0\]: expected an object with seam and figure"):
        read_step_log(p)


def test_a_v6_profile_still_loads_and_v6_with_missing_seams_is_refused(tmp_path: Path) -> None:
    from specmodel.errors import SpecmodelError
    from specmodel.schema.profile import load_profile, profile_from_dict, profile_to_dict

    prof = load_profile(REPO / "specmodel" / "reference" / "kimi-k2.5-int4-tp8-pcie")
    d = profile_to_dict(prof)
    assert d["schema_version"] <= 6 and "missing_seams" not in d
    assert profile_from_dict(json.loads(json.dumps(d))).missing_seams == ()
    d["missing_seams"] = [{"engine": "vllm", "engine_version": "0.35.0", "seam": "S.propose", "figure": "draft_s"}]
    d["schema_version"] = 6
    with pytest.raises(SpecmodelError, match="missing_seams: needs schema_version 7"):
        profile_from_dict(d, "p.json")
    d["schema_version"] = 7
    [ms] = profile_from_dict(d, "p.json").missing_seams
    assert ms.line() == "draft time not recorded: S.propose not found in vLLM 0.35.0"


# --------------------------------------------------------------------------- --check


def _fake_vllm(root: Path, *, version: str, suffix: bool, allreduce: bool = True) -> Path:
    """A vllm package tree and its dist-info, as pip would leave them (source only)."""
    site = root / "site"
    files = {"vllm/__init__.py": "raise RuntimeError('imported')\n",
             f"{vtargets.V2_RUNNER_MODULE.replace('.', '/')}.py":
                 "class GPUModelRunner:\n" + "".join(f"    def {m}(self): ...\n" for m in
                                                     ("execute_model", "sample_tokens", "pool", "shutdown")),
             f"{vtargets.V2_TIMING_MODULE.replace('.', '/')}.py": "class StepTimingCollector:\n"
                                                                   "    def forward_start(self): ...\n",
             f"{vtargets.PARALLEL_MODULE.replace('.', '/')}.py":
                 "class GroupCoordinator:\n" + ("    def _all_reduce_out_place(self): ...\n" if allreduce else
                                                "    def all_reduce(self): ...\n"),
             "vllm/v1/core/sched/output.py": "class SchedulerOutput:\n" + "".join(
                 f"    {f}: int\n" for f in ("num_scheduled_tokens", "total_num_scheduled_tokens",
                                             "scheduled_spec_decode_tokens"))}
    if suffix:
        files[f"{vtargets.V2_SPEC.replace('.', '/')}/suffix/speculator.py"] = ("class SuffixSpeculator:\n"
                                                                              "    def propose(self): ...\n")
    _tree(site, files)
    di = site / f"vllm-{version}.dist-info"
    di.mkdir()
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    py = root / "python"
    py.write_text(f"#!/bin/sh\nPYTHONPATH={site} exec {sys.executable} \"$@\"\n")
    py.chmod(0o755)
    return py


def test_check_a_fake_engine_names_its_seams_and_its_unchecked_version(tmp_path: Path) -> None:
    py = _fake_vllm(tmp_path, version="0.35.0", suffix=False)
    r = run_cli("vllm", "--check", "--engine-python", str(py), cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert "vLLM 0.35.0 at" in lines[1] and lines[2].startswith("version 0.35.0: NOT checked")
    assert any(ln.split()[:3] == ["found", "[v2]", "GPUModelRunner.execute_model"] for ln in lines)
    # SuffixSpeculator.propose is in 0.34 (the newest checked): its absence is a loss, said so
    assert any(ln.split()[:2] == ["MISSING", "[v2]"] and "SuffixSpeculator.propose" in ln for ln in lines)
    # V1 left in 0.34: absent, not a loss
    assert any(ln.split()[:3] == ["absent", "[v1]", "GPUModelRunner._model_forward"] for ln in lines)


def test_check_a_fake_engine_without_a_required_seam_exits_1(tmp_path: Path) -> None:
    py = _fake_vllm(tmp_path, version="0.34.0", suffix=True, allreduce=False)
    r = run_cli("vllm", "--check", "--engine-python", str(py), cwd=tmp_path, timeout=120)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "version 0.34.0: checked" in r.stdout
    assert "missing required seam(s): GroupCoordinator._all_reduce_out_place" in r.stdout
    assert "differs from the checked table: vllm 0.34.0: vllm.distributed.parallel_state.GroupCoordinator." \
           "_all_reduce_out_place is listed present but GroupCoordinator defines no method _all_reduce_out_place" in r.stdout


def test_check_refuses_a_server_command_and_a_python_without_the_engine(tmp_path: Path) -> None:
    r = run_cli("vllm", "--check", "--", "python", "-m", "vllm", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and r.stderr.strip().startswith("specmodel: error: --check reads the installed engine")
    bare = tmp_path / "bare"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=300)
    r = run_cli("sglang", "--check", "--engine-python", str(bare / "bin" / "python"), cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "no sglang package installed" in r.stderr and "Traceback" not in r.stderr


def test_check_the_real_sglang_0_5_5_in_the_dev_venv(tmp_path: Path) -> None:
    r = run_cli("sglang", "--check", "--engine-python", sys.executable, cwd=tmp_path, timeout=120)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[1].startswith("SGLang 0.5.5 at") and lines[2].startswith("version 0.5.5: checked")
    assert any(ln.split()[:2] == ["found", "ModelRunner.forward"] for ln in lines)
    assert any(ln.split()[:2] == ["absent", "FrozenKVMTPCudaGraphRunner.execute"] for ln in lines)
    assert not any("differs from the checked table" in ln for ln in lines)


# --------------------------------------------------------------------------- the docs' table


def test_docs_engines_md_carries_the_table() -> None:
    text = (REPO / "docs" / "engines.md").read_text()
    assert markdown((VLLM, SGLANG)) in text
