"""The hook's by-name lookups checked against the real SGLang source (installed without its
dependencies, so nothing is imported: the files are parsed with ``ast``).

CI installs it with ``pip install --no-deps sglang==0.5.5``. Without it these tests fail (a
missing package must not pass as a skipped test). ``SPECMODEL_SGLANG_SRC=<dir holding
sglang/>`` checks another unpacked version instead (e.g. 0.5.23).
"""

from __future__ import annotations

import ast
import importlib.util
import os
from pathlib import Path

import pytest

from specmodel.engines.sglang import hook
from specmodel.engines.sglang import targets as sgtargets
from tests.source_ast import class_def as _class
from tests.source_ast import methods as _methods

INSTALL = "pip install --no-deps sglang==0.5.5"


def _root() -> Path:
    if os.environ.get("SPECMODEL_SGLANG_SRC"):
        return Path(os.environ["SPECMODEL_SGLANG_SRC"]) / "sglang"
    spec = importlib.util.find_spec("sglang")  # top-level find_spec imports nothing
    if spec is None or not spec.submodule_search_locations:
        pytest.fail(f"the real sglang package is not installed; run: {INSTALL}")
    return Path(list(spec.submodule_search_locations)[0])


def _module(name: str) -> ast.Module:
    path = _root().joinpath(*name.split(".")[1:]).with_suffix(".py")
    assert path.is_file(), f"{path} missing: the hook looks up {name}"
    return ast.parse(path.read_text(encoding="utf-8"))




def _self_attrs(fn: ast.FunctionDef) -> set[str]:
    return {t.attr for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) and t.value.id == "self"}


def _reads(fn: ast.FunctionDef, var: str) -> set[str]:
    return {n.attr for n in ast.walk(fn)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == var}


def test_forward_mode_members_all_mapped() -> None:
    cls = _class(_module("sglang.srt.model_executor.forward_batch_info"), "ForwardMode")
    members = [t.id for n in cls.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    assert {"DECODE", "TARGET_VERIFY", "EXTEND", "IDLE"} <= set(members)
    unknown = [m for m in members if m != "DECODE" and m not in sgtargets.MODE_PHASES]
    assert unknown == [], f"ForwardMode members the hook does not map: {unknown}"


def test_model_runner_forward_signature() -> None:
    cls = _class(_module(hook.MODEL_RUNNER_MODULE), "ModelRunner")
    fwd = _methods(cls)["forward"]
    names = [a.arg for a in fwd.args.args]
    # the wrapper reads the batch as the first positional argument or the keyword forward_batch
    assert names[:2] == ["self", "forward_batch"]
    assert "is_draft_worker" in _self_attrs(_methods(cls)["__init__"])


@pytest.mark.parametrize("target", hook.TARGETS[1:], ids=lambda t: t.cls)
def test_draft_runner_members(target: hook.Target) -> None:
    cls = _class(_module(target.module), target.cls)
    methods = _methods(cls)
    chosen = next((m for m in target.methods if m in methods), None)
    assert chosen is not None, f"{target.cls} defines none of {target.methods}"
    fn = methods[chosen]
    assert [a.arg for a in fn.args.args][:2] == ["self", "forward_batch"]
    read = _reads(fn, "forward_batch")
    assert "batch_size" in read  # the hook's batch
    if target.role == "draft_extend":
        assert "input_ids" in read  # the hook's token count
    else:  # batch × topk tokens, steps - 1 forwards per replay
        assert {"topk", "speculative_num_steps"} <= _self_attrs(methods["__init__"])
    # the speculative workers call exactly the method the hook wraps
    calls = {n.func.attr for f in (_root() / "srt" / "speculative").glob("*worker*.py")
             for n in ast.walk(ast.parse(f.read_text(encoding="utf-8")))
             if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
             and isinstance(n.func.value, ast.Attribute) and "cuda_graph_runner" in n.func.value.attr}
    assert chosen in calls


def test_capture_mode_flag_exists_and_wraps_draft_capture() -> None:
    """One of CAPTURE_MODE_MODULES defines get_is_capture_mode(), and the draft runner's
    capture() (whose run_once() warm-ups go through ModelRunner.forward) runs under
    model_capture_mode(): the flag the hook reads is up exactly then."""
    found = []
    for name in hook.CAPTURE_MODE_MODULES:
        path = _root().joinpath(*name.split(".")[1:]).with_suffix(".py")
        if path.is_file():
            tree = ast.parse(path.read_text(encoding="utf-8"))
            if any(isinstance(n, ast.FunctionDef) and n.name == "get_is_capture_mode" for n in tree.body):
                found.append(name)
    assert found, f"get_is_capture_mode not in any of {hook.CAPTURE_MODE_MODULES}"
    src = _root().joinpath("srt/speculative/eagle_draft_cuda_graph_runner.py").read_text(encoding="utf-8")
    assert "with model_capture_mode():" in src and "self.capture()" in src
    assert "run_once()" in src or "run_once," in src


def _self_calls(node: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of every ``self.<name>(...)`` call under ``node``, in source order."""
    return sorted((n.lineno, n.func.attr) for n in ast.walk(node)
                  if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                  and isinstance(n.func.value, ast.Name) and n.func.value.id == "self")


def test_scheduler_step_seams() -> None:
    """The seams that bound the scheduler's step: each event loop's ``while True`` pass calls
    ``get_next_batch_to_run`` once, then ``run_batch`` once (its batch the first argument); the
    overlap scheduler queues the forwards on ``forward_stream`` (``run_batch`` enters
    ``forward_stream_ctx``), the stream the hook's step bounds are recorded on there."""
    cls = _class(_module(sgtargets.SCHEDULER_MODULE), "Scheduler")
    methods = _methods(cls)
    for t in hook.STEP_TARGETS:
        assert t.cls == "Scheduler" and t.methods[0] in methods, f"Scheduler.{t.methods[0]} missing"
    run_batch = methods["run_batch"]
    assert [a.arg for a in run_batch.args.args][:2] == ["self", "batch"]
    for loop in ("event_loop_normal", "event_loop_overlap"):
        whiles = [n for n in methods[loop].body if isinstance(n, ast.While)]
        assert len(whiles) == 1, f"{loop}: expected one while loop"
        calls = [name for _, name in _self_calls(whiles[0])]
        assert calls.count("get_next_batch_to_run") == 1 and calls.count("run_batch") == 1, loop
        assert calls.index("get_next_batch_to_run") < calls.index("run_batch"), loop
    with_items = {ast.unparse(i.context_expr) for n in ast.walk(run_batch) if isinstance(n, ast.With) for i in n.items}
    assert "self.forward_stream_ctx" in with_items
    assert "enable_overlap" in _reads(run_batch, "self")
    assert "device" in {a for f in methods.values() for a in _reads(f, "self")}
