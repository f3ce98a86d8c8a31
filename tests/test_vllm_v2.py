"""The vLLM hook on Model Runner V2 (``vllm/v1/worker/gpu/``, vLLM 0.32's default on GPUs).

Three layers: the seams the hook wraps checked against the installed engine's source (parsed
with ``ast``, nothing imported: the engine venv, ``make engine``); stand-ins shaped like V2's step
(registered under V2's module names) driven through the hook; and (slow) the real V2 classes
imported in the engine's interpreter with the hook installed. ``runner_env`` -- what
``specmodel vllm`` sets for the runner -- changes nothing unless asked, and says so when asked.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm import targets as vtargets
from specmodel.errors import SpecmodelError
from tests.rank_files import rank_file
from tests.source_ast import class_def as _class
from tests.source_ast import methods as _methods
from tests.standins import AR_S, DRAFT_COMPUTE_S, FWD_COMPUTE_S, HOST_S, vllm_v2
from tests.standins import so as _so

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- the installed source


@pytest.fixture(scope="module")
def vllm_src(vllm_python: Path) -> Path:
    found = sorted(vllm_python.parent.parent.glob("lib/python3*/site-packages/vllm"))
    assert found, f"no vllm package next to {vllm_python}"
    return found[0]


def _tree(src: Path, module: str) -> ast.Module:
    rel = Path(*module.split(".")[1:])
    path = src / rel.with_suffix(".py")
    if not path.is_file():
        path = src / rel / "__init__.py"
    assert path.is_file(), f"{path} missing: the hook looks up {module}"
    return ast.parse(path.read_text(encoding="utf-8"))




def _calls(fn: ast.AST, attr: str) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == attr]


def _installed_version(vllm_src: Path) -> str:
    found = sorted(vllm_src.parent.glob("vllm*.dist-info/METADATA"))
    assert found, f"no vLLM distribution beside {vllm_src}"
    for line in found[0].read_text(encoding="utf-8").splitlines():
        if line.startswith("Version:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"{found[0]}: no Version")


def test_every_v2_member_the_hook_wraps_is_defined_there(vllm_src: Path) -> None:
    version = _installed_version(vllm_src)
    for module, cls_name, method, _, _ in vtargets.V2_TARGETS + vtargets.TARGETS:
        if not vtargets.expected_in(module, cls_name, version):
            continue  # (a class of another release: SuffixSpeculator from 0.34.0)
        assert method in _methods(_class(_tree(vllm_src, module), cls_name)), f"{module}.{cls_name}.{method}"


def test_v2_step_shape_matches_what_the_hook_assumes(vllm_src: Path) -> None:
    runner = _methods(_class(_tree(vllm_src, vtargets.V2_RUNNER_MODULE), "GPUModelRunner"))
    ex = runner["execute_model"]
    # the hook reads the scheduler output first and dummy_run as the third positional argument
    assert [a.arg for a in ex.args.args][:4] == ["self", "scheduler_output", "intermediate_tensors", "dummy_run"]
    # forward_start once, right before every way V2 runs the target: FULL graph, ubatches,
    # PIECEWISE graph, eager; nothing of the model after the last of them but bookkeeping
    (start,) = _calls(ex, "forward_start")
    runs = [*_calls(ex, "run_fullgraph"), *_calls(ex, "run_pw_graph"), *_calls(ex, "run")]
    eager = [n for n in ast.walk(ex) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and n.func.attr == "model" and isinstance(n.func.value, ast.Name) and n.func.value.id == "self"]
    assert runs and eager and all(n.lineno > start.lineno for n in runs + eager)
    # the proposal: one speculator.propose per step, in sample_tokens; dummy runs pass dummy_run=True
    (prop,) = _calls(runner["sample_tokens"], "propose")
    assert isinstance(prop.func, ast.Attribute) and ast.unparse(prop.func.value) == "self.speculator"
    dummy = _calls(runner["_dummy_run"], "execute_model")
    assert dummy and all(any(k.arg == "dummy_run" and ast.unparse(k.value) == "True" for k in c.keywords) for c in dummy)
    assert "shutdown" in runner and "pool" in runner


def test_every_v2_speculator_that_proposes_is_wrapped(vllm_src: Path) -> None:
    """A speculator class that defines its own propose and is not in V2_SPECULATORS would run untimed."""
    spec_dir = vllm_src / "v1" / "worker" / "gpu" / "spec_decode"
    defining = set()
    for f in spec_dir.rglob("*.py"):
        mod = "vllm." + ".".join(f.relative_to(vllm_src.parent).with_suffix("").parts[1:])
        for node in ast.parse(f.read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ClassDef) and node.name != "BaseSpeculator" and "propose" in _methods(node):
                defining.add((mod, node.name))
    version = _installed_version(vllm_src)
    assert defining == {(m, c) for m, c in vtargets.V2_SPECULATORS if vtargets.expected_in(m, c, version)}


# --------------------------------------------------------------------------- stand-ins shaped like V2


@pytest.fixture()
def v2(tmp_path: Path) -> Iterator[types.SimpleNamespace]:
    """V2's step (tests/standins.py): execute_model (forward_start → model → return) + sample_tokens
    (sample, speculator.propose, an async output); _dummy_run calls execute_model(dummy_run=True)."""
    with vllm_v2(tmp_path / "hook") as ns:
        yield ns


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in rank_file(out, 0).read_text().splitlines()]


def test_v2_members_are_patched(v2: Any) -> None:
    assert sorted(v2.patched) == sorted([
        "v2:GPUModelRunner.execute_model", "v2:GPUModelRunner.sample_tokens", "v2:GPUModelRunner.pool",
        "v2:GPUModelRunner.shutdown", "v2:StepTimingCollector.forward_start", "v2:StandaloneARSpeculator.propose",
        "v2:SuffixSpeculator.propose", "GroupCoordinator._all_reduce_out_place"])


def test_v2_suffix_proposals_are_draft_time_not_overhead(v2: Any) -> None:
    """vLLM 0.34's SuffixSpeculator.propose (a host lookup, DRAFT_COMPUTE_S here) is timed as the
    proposal: draft_s holds it, so overhead_s (step less forward and proposal) does not."""
    runner = v2.Runner("suffix")
    for _ in range(2):
        assert runner.execute_model(_so(1, k=3)) is None
        assert runner.sample_tokens(None) == "async-output"
    steps = [x for x in _lines(v2.out)[1:] if x["type"] == "step"]
    assert len(steps) == 2
    for s in steps:
        assert s["draft_method"] == "suffix" and s["draft_k"] == 3 and s["draft_n_allreduce"] == 0
        # the lookup is the proposal's (unwrapped, draft_s would be None and its time in overhead_s)
        assert s["draft_s"] is not None and s["draft_s"] >= DRAFT_COMPUTE_S
        assert s["step_s"] == pytest.approx(s["forward_s"] + s["draft_s"] + s["overhead_s"], rel=1e-9)


def test_v2_skip_drafts_steps_are_recorded_as_k0(v2: Any, tmp_path: Path) -> None:
    """A step whose scheduler output says skip_drafts proposes K = 0 (vllm 0.34 model_runner.py:2185):
    its record says draft_k 0, the others the configured 3, and the summary reads them as one
    configuration (a K = 0 step drafted nothing), not as a mix of two."""
    from specmodel.engines.vllm.hooklog import summarize

    runner = v2.Runner("draft_model")
    for skip in (False, True, False, False, True, False):
        assert runner.execute_model(_so(1, k=3, skip_drafts=skip)) is None
        assert runner.sample_tokens(None) == "async-output"
    steps = [x for x in _lines(v2.out)[1:] if x["type"] == "step"]
    assert [s["draft_k"] for s in steps] == [3, 0, 3, 3, 0, 3]
    base = tmp_path / "base"
    base.mkdir()
    meta = {**_lines(v2.out)[0], "spec": None}
    dec = [{**s, "kind": "decode", "tokens": 1, "spec_tokens": 0, "draft_method": None, "draft_k": None,
            "draft_s": None, "draft_allreduce_s": None, "draft_n_allreduce": None} for s in steps]
    (base / "rank0-dp0-pp0-pid1.jsonl").write_text("".join(json.dumps(x) + "\n" for x in [meta, *dec]))
    prof = summarize([base, v2.out], name="skip", min_samples=1)
    assert (prof.spec.algorithm, prof.spec.steps) == ("DRAFT_MODEL", 3)
    (draft,) = [r for r in prof.costs if r.kind == "draft"]
    assert draft.samples == 4  # the four steps that drafted


def test_v2_step_is_split_and_dummy_runs_are_not_steps(v2: Any) -> None:
    runner = v2.Runner("draft_model")
    runner._dummy_run(8)  # warm-up / capture / DP padding
    for _ in range(2):
        assert runner.execute_model(_so(2, k=3, ctx=50)) is None
        assert runner.sample_tokens(None) == "async-output"
    assert runner.forwards == 3
    lines = _lines(v2.out)
    meta, steps = lines[0], [x for x in lines[1:] if x["type"] == "step"]  # (probe lines: the box's condition)
    assert meta["type"] == "meta" and meta["model_runner"] == "v2" and meta["model_runner_changed"] is None
    assert len(steps) == 2
    for s in steps:
        assert (s["kind"], s["batch"], s["tokens"]) == ("verify", 2, 8)
        # the forward runs from forward_start to the end of execute_model: its all-reduces, not the input prep
        assert s["forward_n_allreduce"] == 3 and s["forward_allreduce_s"] >= 3 * AR_S
        assert s["forward_s"] >= 3 * AR_S + FWD_COMPUTE_S
        assert s["draft_n_allreduce"] == 3 and s["draft_s"] >= 3 * AR_S + DRAFT_COMPUTE_S
        assert s["overhead_s"] >= HOST_S * 0.9
        assert s["step_s"] == pytest.approx(s["forward_s"] + s["draft_s"] + s["overhead_s"], rel=1e-9)


def test_v2_pooling_step_ends_at_pool(v2: Any) -> None:
    runner = v2.Runner(None)
    assert runner.execute_model(_so(1)) is None
    assert runner.pool() == "pooled"
    assert runner.execute_model(_so(1)) is None
    assert runner.sample_tokens(None) == "async-output"
    assert [s["kind"] for s in _lines(v2.out)[1:] if s["type"] == "step"] == ["decode", "decode"]


def test_the_meta_line_says_when_specmodel_chose_the_runner(v2: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    extra, _ = vtargets.runner_env({vtargets.RUNNER_ENV: "v2"})
    for k, v in extra.items():
        monkeypatch.setenv(k, v)
    runner = v2.Runner(None)
    runner.execute_model(_so(1))
    runner.sample_tokens(None)
    assert _lines(v2.out)[0]["model_runner_changed"] == f"asked by ${vtargets.RUNNER_ENV}=v2"


# --------------------------------------------------------------------------- runner_env


def test_runner_env_changes_nothing_by_default() -> None:
    """Both runners are hooked: the one vLLM picks (V2 on a GPU) is the one timed."""
    assert vtargets.runner_env({}) == ({}, None)
    assert vtargets.runner_env({vtargets.VLLM_RUNNER_ENV: "1"}) == ({}, None)  # the user's own choice stays


def test_runner_env_on_request_sets_says_and_records() -> None:
    extra, msg = vtargets.runner_env({vtargets.RUNNER_ENV: "v1"})
    assert extra[vtargets.VLLM_RUNNER_ENV] == "0" and extra[vtargets.RUNNER_CHANGED_ENV] == f"asked by ${vtargets.RUNNER_ENV}=v1"
    assert msg is not None and "VLLM_USE_V2_MODEL_RUNNER=0" in msg and "overridden" in msg
    assert vtargets.runner_env({vtargets.RUNNER_ENV: "V2", vtargets.VLLM_RUNNER_ENV: "1"})[0][vtargets.VLLM_RUNNER_ENV] == "1"
    with pytest.raises(SpecmodelError, match="contradicts"):
        vtargets.runner_env({vtargets.RUNNER_ENV: "v2", vtargets.VLLM_RUNNER_ENV: "0"})
    with pytest.raises(SpecmodelError, match="expected v1 or v2"):
        vtargets.runner_env({vtargets.RUNNER_ENV: "v3"})


# --------------------------------------------------------------------------- the real classes (slow)


@pytest.mark.slow
@pytest.mark.vllm
def test_the_hook_patches_the_installed_v2_classes(vllm_python: Path, tmp_path: Path) -> None:
    code = r"""
import importlib, inspect, json, sys
from specmodel.engines.vllm import hook
from specmodel.engines.vllm import targets as vtargets
hook.install(sys.argv[1])
from specmodel.engines.vllm.place import vllm_version
live = [t for t in vtargets.V2_TARGETS if vtargets.expected_in(t[0], t[1], vllm_version())]
for m in dict.fromkeys(t[0] for t in live):
    importlib.import_module(m)
out = {"patched": hook.patched_members(), "signatures": {}, "version": vllm_version()}
for module, cls, method, _, _ in live:
    fn = getattr(getattr(sys.modules[module], cls), method)
    out["signatures"][f"{cls}.{method}"] = [hasattr(fn, "__specmodel_wrapped__"),
        str(inspect.signature(fn)) == str(inspect.signature(fn.__specmodel_wrapped__))]
print(json.dumps(out))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run([str(vllm_python), "-c", code, str(tmp_path)], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    want = {f"v2:{c}.{m}" for mod, c, m, _, _ in vtargets.V2_TARGETS if vtargets.expected_in(mod, c, got["version"])}
    assert want <= set(got["patched"]), want - set(got["patched"])
    assert all(v == [True, True] for v in got["signatures"].values()), got["signatures"]
    assert "not found" not in r.stderr, r.stderr[-2000:]


@pytest.mark.parametrize("runner", [None, "v1"])
def test_specmodel_vllm_leaves_the_runner_to_vllm_unless_told(tmp_path: Path, runner: str | None) -> None:
    """The launcher passes the runner choice through runner_env: by default nothing is forced (vLLM
    picks V1 or V2 and the hook times it); SPECMODEL_VLLM_RUNNER=v1 forces it and says so."""
    from tests.conftest import run_cli

    if "VLLM_USE_V2_MODEL_RUNNER" in os.environ or "SPECMODEL_VLLM_RUNNER" in os.environ:
        pytest.fail("this test needs an environment without VLLM_USE_V2_MODEL_RUNNER / SPECMODEL_VLLM_RUNNER")
    seen = tmp_path / "env.txt"
    code = f"import os; open({str(seen)!r}, 'w').write(str(os.environ.get('VLLM_USE_V2_MODEL_RUNNER')))"
    env = {"SPECMODEL_VLLM_RUNNER": runner} if runner else None
    r = run_cli("vllm", "--out", str(tmp_path / "out"), "--health-timeout", "30", "--", sys.executable, "-c", code,
                cwd=tmp_path, env=env)
    assert r.returncode == 2 and "exited with status 0" in r.stderr  # (the stand-in never serves)
    assert seen.read_text() == ("None" if runner is None else "0")
    assert ("overridden" in r.stderr) == (runner is not None)
