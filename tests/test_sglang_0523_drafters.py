"""SGLang 0.5.23's other drafters under the hook (multi-layer EAGLE, FROZEN_KV_MTP, DFlash) and the
PD-disaggregated servers' step bounds, against stand-ins (tests/data/sglang_standin) whose members
carry the real 0.5.23 names and signatures (checked against the real source, parsed with ``ast``)."""

from __future__ import annotations

import ast
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.sglang import hook
from specmodel.engines.sglang import steps as sgsteps
from specmodel.engines.sglang import targets as sgtargets
from specmodel.engines.sglang.hooklog import summarize
from tests.rank_files import rank_file
from tests.sglang_source import sglang_root
from tests.source_ast import class_def, methods
from tests.standins import STANDIN, FakeClock
from tests.standins import drop_sglang_modules as _drop_sglang_modules


@pytest.fixture
def load(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    saved = _drop_sglang_modules()
    monkeypatch.syspath_prepend(str(STANDIN))

    def _load(flavor: str = "0.5.23") -> None:
        monkeypatch.setenv("SGLANG_STANDIN_FLAVOR", flavor)
        hook.install(tmp_path / "logs")
        import sglang.srt.managers.scheduler  # noqa: F401 - patched as it is imported
        import sglang.srt.model_executor.model_runner  # noqa: F401
        if flavor == "0.5.23":
            import sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner  # noqa: F401
            import sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner  # noqa: F401

    try:
        yield _load
    finally:
        hook.uninstall()
        _drop_sglang_modules()
        sys.modules.update(saved)


def _records(tmp_path: Path, kind: str) -> list[dict[str, Any]]:
    hook.flush(wait=True)
    lines = rank_file(tmp_path / "logs", 0).read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["type"] == kind]


def _runners() -> tuple[Any, Any]:
    from sglang.srt.model_executor.model_runner import ModelRunner

    target, draft = ModelRunner(), ModelRunner(is_draft_worker=True)
    for r in (target, draft):
        r.server_args.skip_server_warmup = True
    return target, draft


def _fb(mode: str, batch: int, tokens: int) -> Any:
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    return ForwardBatch(ForwardMode[mode], batch, torch.zeros(tokens, dtype=torch.long))


def test_a_forward_on_the_draft_runner_is_a_draft_whatever_its_mode() -> None:
    assert sgtargets.phase_for_mode("TARGET_VERIFY", is_draft=True) == "draft"
    assert sgtargets.phase_for_mode("TARGET_VERIFY", is_draft=False) == "verify"
    assert sgtargets.phase_for_mode("DECODE", is_draft=True) == "draft"


def test_dflash_draft_block_is_a_draft_and_never_pools_into_verify(load: Any, tmp_path: Path) -> None:
    """DFlash (0.5.23 ``dflash_worker_v2.py``): its draft block is a TARGET_VERIFY forward of
    batch x block_size tokens on the draft runner; the target's verify has the same shape."""
    load()
    target, draft = _runners()
    target.forward(_fb("EXTEND", 2, 34))
    for _ in range(3):
        target.forward(_fb("DECODE", 2, 2))
        draft.forward(_fb("TARGET_VERIFY", 2, 32))  # the draft block, block size 16
        target.forward(_fb("TARGET_VERIFY", 2, 32))  # the target's verify of it
    got = Counter((r["phase"], r["runner"], r["tokens"]) for r in _records(tmp_path, "forward"))
    assert got == Counter({("extend", "target", 34): 1, ("decode", "target", 2): 3,
                           ("draft", "draft", 32): 3, ("verify", "target", 32): 3})


def test_multi_layer_eagle_graph_replays_are_timed_as_draft_extends(load: Any, tmp_path: Path) -> None:
    load()
    from sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner import (
        MultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
        OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
    )

    target, _ = _runners()
    layers = [_runners()[1] for _ in range(3)]  # one draft runner per MTP layer (steps 3)
    target.forward(_fb("EXTEND", 3, 30))
    per_step = MultiLayerEagleMultiStepDraftExtendCudaGraphRunner(layers, captured_req_width=4)
    one = OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner(layers, captured_req_width=4)
    for cgr in (per_step, one):
        cgr.prepare(_fb("DRAFT_EXTEND_V2", 3, 12))
        for step in range(3):  # multi_layer_eagle_worker_v2._draft_extend_for_decode: replay(step) per step
            cgr.replay(step)
    fw = [r for r in _records(tmp_path, "forward") if r["runner"] == "draft"]
    got = Counter((r["phase"], r["batch"], r["tokens"], r["forwards"], r["member"]) for r in fw)
    assert got == Counter({
        # per-layer graphs: one record per layer, the real batch (3, not the padded bucket 4)
        ("draft_extend", 3, 12, 1, "MultiLayerEagleDraftExtendCudaGraphRunner.replay"): 3,
        # one graph for every layer, replayed at step 0: one record holding 3 forwards
        ("draft_extend", 3, 12, 3, "OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner.replay"): 1,
    })


def test_frozen_kv_mtp_graph_replay_is_timed_as_the_whole_draft(load: Any, tmp_path: Path) -> None:
    load()
    from sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner import FrozenKVMTPCudaGraphRunner

    target, draft = _runners()
    draft.server_args.speculative_eagle_topk = 2
    target.forward(_fb("EXTEND", 2, 30))

    class Worker:
        draft_model_runner = draft

    runner = FrozenKVMTPCudaGraphRunner(Worker())
    runner.execute(_fb("DECODE", 4, 4))  # 2 requests expanded to 2 x topk rows
    (rec,) = [r for r in _records(tmp_path, "forward") if r["runner"] == "draft"]
    # seed forward + steps - 1 recurrent forwards, each over batch x topk tokens
    assert (rec["phase"], rec["batch"], rec["tokens"], rec["forwards"]) == ("draft", 2, 4, 3)
    assert rec["member"] == "FrozenKVMTPCudaGraphRunner.execute"


def _disagg_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, load: Any, *, flavor: str, loop: str) -> None:
    clock = FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(sgsteps, "probe", lambda cal: None)
    load(flavor)
    from sglang.srt.managers.scheduler import ScheduleBatch, Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    monkeypatch.setattr(ModelRunner, "on_forward", lambda runner, fb: clock.advance(0.01))
    target, draft = _runners()
    sched = Scheduler(target, draft, host_work=lambda what: clock.advance(0.001))
    mode = ForwardMode.DECODE if loop == "decode" else ForwardMode.EXTEND
    sched.queue = [ScheduleBatch(mode, 2) for _ in range(3)]
    getattr(sched, f"event_loop_normal_disagg_{loop}")()


@pytest.mark.parametrize("flavor", ["0.5.5", "0.5.23"])
def test_a_disaggregated_decode_server_writes_its_steps(load: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        flavor: str) -> None:
    _disagg_server(tmp_path, monkeypatch, load, flavor=flavor, loop="decode")
    steps = _records(tmp_path, "step")
    assert [(s["forward_mode"], s["phases"]) for s in steps] == \
        [("DECODE", {"draft": 2, "verify": 1, "draft_extend": 1})] * 3
    assert all(s["overhead_s"] > 0 for s in steps)


def test_a_disaggregated_prefill_server_writes_its_steps_on_0523(load: Any, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _disagg_server(tmp_path, monkeypatch, load, flavor="0.5.23", loop="prefill")
    assert [(s["forward_mode"], s["phases"]) for s in _records(tmp_path, "step")] == [("EXTEND", {"extend": 1})] * 3


def test_055_prefill_server_has_no_step_seam_and_says_so_quietly(load: Any, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch,
                                                                   capfd: pytest.CaptureFixture[str]) -> None:
    # 0.5.5's prefill loop calls get_new_batch_prefill directly: no step is written, and the missing
    # 0.5.23 seam is expected there (no warning); the summary then says host work was not measured
    _disagg_server(tmp_path, monkeypatch, load, flavor="0.5.5", loop="prefill")
    assert _records(tmp_path, "step") == []
    assert "get_next_disagg_prefill_batch_to_run" not in capfd.readouterr().err
    assert "Scheduler.get_next_disagg_prefill_batch_to_run" not in hook.patched_members()
    assert "Scheduler.get_next_disagg_decode_batch_to_run" in hook.patched_members()


def test_the_dflash_draft_never_reaches_the_summarys_verify_rows(load: Any, tmp_path: Path) -> None:
    load()
    target, draft = _runners()
    for _ in range(3):
        target.forward(_fb("DECODE", 2, 2))
        draft.forward(_fb("TARGET_VERIFY", 2, 8))
        target.forward(_fb("TARGET_VERIFY", 2, 8))
    hook.flush(wait=True)
    prof = summarize([tmp_path / "logs"], name="dflash")
    verify = [r for r in prof.costs if r.kind == "verify"]
    assert [r.samples for r in verify] == [3]  # the target's three verifies, not six


# --------------------------------------------------------------------------- stand-ins vs the real source


def _real_class(rel: str, name: str) -> ast.ClassDef:
    return class_def(ast.parse((sglang_root("0.5.23") / rel).read_text(encoding="utf-8")), name)


def _standin_class(rel: str, name: str) -> ast.ClassDef:
    return class_def(ast.parse((STANDIN / "sglang" / rel).read_text(encoding="utf-8")), name)


def _params(fn: ast.FunctionDef) -> tuple[list[str], list[str]]:
    return [a.arg for a in fn.args.args], [a.arg for a in fn.args.kwonlyargs]


@pytest.mark.parametrize("target", sgtargets.DRAFTER_TARGETS_0523, ids=lambda t: t.cls)
def test_each_0523_drafter_seam_matches_the_real_source_and_its_standin(target: sgtargets.Target) -> None:
    rel = "/".join(target.module.split(".")[1:]) + ".py"
    real = methods(_real_class(rel, target.cls))
    (method,) = target.methods
    assert method in real, f"{target.cls}.{method} not in the 0.5.23 source"
    assert _params(methods(_standin_class(rel, target.cls))[method]) == _params(real[method])


def test_the_0523_workers_call_the_wrapped_members_and_read_what_the_hook_reads() -> None:
    spec = sglang_root("0.5.23") / "srt" / "speculative"
    mle = (spec / "multi_layer_eagle_worker_v2.py").read_text(encoding="utf-8")
    assert "cgr.replay(step)" in mle and "Graph replay bypasses ModelRunner.forward" in mle
    runner_src = (spec / "multi_layer_eagle_draft_extend_cuda_graph_runner.py").read_text(encoding="utf-8")
    # the composite runner sets the per-step runner's real batch before each replay
    assert "runner.raw_bs = self.raw_bs" in runner_src and "self.raw_num_tokens = num_tokens" in runner_src
    frozen = (spec / "frozen_kv_mtp_worker_v2.py").read_text(encoding="utf-8")
    assert "self.cuda_graph_runner.execute(forward_batch)" in frozen
    fr = methods(_real_class("srt/speculative/frozen_kv_mtp_cuda_graph_runner.py", "FrozenKVMTPCudaGraphRunner"))
    init = ast.unparse(fr["__init__"])
    assert "self.speculative_num_steps = " in init and "self.topk = " in init and "self.model_runner = " in init
    dflash = (spec / "dflash_worker_v2.py").read_text(encoding="utf-8")
    assert "forward_mode=ForwardMode.TARGET_VERIFY" in dflash
    assert "draft_out = self.draft_model_runner.forward(forward_batch)" in dflash
    common = (spec / "draft_worker_common.py").read_text(encoding="utf-8")
    assert "is_draft_worker=True" in common  # DFlash's draft runner (build_draft_tp_worker)


def test_the_disaggregated_loops_call_the_wrapped_bounds() -> None:
    root = sglang_root("0.5.23") / "srt" / "disaggregation"
    for rel, member in (("prefill.py", "get_next_disagg_prefill_batch_to_run"),
                        ("decode.py", "get_next_disagg_decode_batch_to_run")):
        tree = ast.parse((root / rel).read_text(encoding="utf-8"))
        loops = [f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and f.name.startswith("event_loop_")]
        assert loops
        for f in loops:
            calls = {n.func.attr for n in ast.walk(f) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)}
            assert member in calls and "get_next_batch_to_run" not in calls, f.name
    assert {t.methods[0] for t in sgtargets.DISAGG_STEP_TARGETS} == {"get_next_disagg_prefill_batch_to_run",
                                                                     "get_next_disagg_decode_batch_to_run"}


def test_a_dflash_recording_is_refused_by_name_not_priced_as_a_chain(load: Any, tmp_path: Path) -> None:
    from specmodel.errors import SpecmodelError

    load()
    target, draft = _runners()
    for r in (target, draft):  # SGLang's DFLASH server args: steps and topk forced to 1, a 16-token block
        r.server_args.speculative_algorithm = "DFLASH"
        r.server_args.speculative_num_steps, r.server_args.speculative_num_draft_tokens = 1, 16
    target.forward(_fb("DECODE", 2, 2))
    draft.forward(_fb("TARGET_VERIFY", 2, 32))
    target.forward(_fb("TARGET_VERIFY", 2, 32))
    hook.flush(wait=True)
    with pytest.raises(SpecmodelError, match="DFLASH drafts a block of 16 tokens in one drafter forward"):
        summarize([tmp_path / "logs"], name="dflash")


def test_a_multi_layer_eagle_profile_says_its_draft_is_not_in_the_cycle(load: Any, tmp_path: Path) -> None:
    from specmodel.model.cyclecost import cycle_costs

    load()
    from sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner import (
        MultiLayerEagleMultiStepDraftExtendCudaGraphRunner,
    )

    target, _ = _runners()
    cgr = MultiLayerEagleMultiStepDraftExtendCudaGraphRunner([_runners()[1] for _ in range(3)], captured_req_width=4)
    for _ in range(3):
        target.forward(_fb("DECODE", 2, 2))
        target.forward(_fb("TARGET_VERIFY", 2, 8))
        cgr.prepare(_fb("DRAFT_EXTEND_V2", 2, 8))
        for step in range(3):
            cgr.replay(step)
    hook.flush(wait=True)
    prof = summarize([tmp_path / "logs"], name="mle")
    assert any(n.startswith("multi-layer EAGLE: the draft is steps draft-extend forwards") for n in prof.notes)
    assert prof.has("draft_extend") and not prof.has("draft")
    cc = cycle_costs(prof, batch=2, spec=prof.spec)
    # the verdict carries it: the draft is an assumption (free), never a measured lower figure
    assert cc.draft_total_s == 0.0 and any(a.kind == "draft" for a in cc.assumptions)


def test_a_verify_record_from_the_draft_runner_in_an_older_log_is_read_as_a_draft(tmp_path: Path) -> None:
    """A log the hook wrote before it knew DFlash's draft block (phase verify, runner draft) is read
    as the drafter's forward: the target's verify rows hold the target's verifies only."""
    from specmodel.schema.formats import SGLANG_FORWARD

    d = tmp_path / "logs"
    d.mkdir()
    head = SGLANG_FORWARD.header()
    meta = {**head, "type": "meta", "sglang_version": "0.5.23", "pid": 1, "rank": "0", "tp_rank": 0, "tp_size": 1,
            "spec": {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "num_draft_tokens": 4}}

    def fwd(phase: str, runner: str, tokens: int, s: float) -> dict[str, Any]:
        return {**head, "type": "forward", "phase": phase, "batch": 2, "tokens": tokens, "forwards": 1,
                "forward_mode": "TARGET_VERIFY" if phase == "verify" else "DECODE", "runner": runner,
                "member": "ModelRunner.forward", "t_start_unix_s": 1.0, "cpu_s": s}

    recs = [meta] + [fwd("decode", "target", 2, 0.010)] * 3 + [fwd("verify", "target", 8, 0.020)] * 3 + \
        [fwd("verify", "draft", 8, 0.002)] * 3
    (d / "rank0-dp0-pp0-pid1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    prof = summarize([d], name="old")
    rows = {(r.kind, r.tokens): r for r in prof.costs}
    assert rows[("verify", 8)].total_s == pytest.approx(0.020) and rows[("verify", 8)].samples == 3
    assert rows[("draft", 8)].total_s == pytest.approx(0.002)


def test_a_seam_newer_than_the_installed_version_is_expected_absent_only_there() -> None:
    prefill = next(t for t in sgtargets.DISAGG_STEP_TARGETS if t.methods == ("get_next_disagg_prefill_batch_to_run",))
    assert sgtargets.expected_absent(prefill, "0.5.5")
    assert not sgtargets.expected_absent(prefill, "0.5.23")
    assert not sgtargets.expected_absent(prefill, "0.5.23rc1")  # read as 0.5.23
    assert not sgtargets.expected_absent(prefill, "0.6.0")  # a later version that lacks it is warned
    # a seam every supported version has is never expected absent
    assert not any(sgtargets.expected_absent(t, "0.5.5") for t in sgtargets.TARGETS + sgtargets.STEP_TARGETS)
