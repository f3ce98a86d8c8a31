"""The SGLang hook against CPU stand-ins shaped like SGLang 0.5.5 / 0.5.23 / a broken version
(tests/data/sglang_standin), in this process: patching on import, JSONL lines, torch.profiler
spans, version mismatch handling, and reading the logs back into a profile."""

from __future__ import annotations

import inspect
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from specmodel.engines.sglang import hook
from specmodel.engines.sglang import steps as sgsteps
from specmodel.engines.sglang import targets as sgtargets
from specmodel.engines.sglang import writer as sgwriter
from specmodel.engines.sglang.hooklog import read_forward_log, summarize
from specmodel.errors import SpecmodelError
from specmodel.schema.phases import parse_phase_label
from tests.rank_files import rank_file, rank_files
from tests.standins import STANDIN, FakeClock, FakeGPU  # noqa: F401 - STANDIN re-exported
from tests.standins import drop_sglang_modules as _drop_sglang_modules


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Any]:
    """Returns ``load(flavor) -> serve module``; the hook is installed (into tmp_path/logs)
    before the stand-in modules are imported, so they are patched by the import hook."""
    saved = _drop_sglang_modules()
    monkeypatch.syspath_prepend(str(STANDIN))

    def load(flavor: str = "0.5.5") -> Any:
        monkeypatch.setenv("SGLANG_STANDIN_FLAVOR", flavor)
        hook.install(tmp_path / "logs")
        import serve

        # what a TP worker imports at start-up (each is patched as it is imported)
        import sglang.srt.model_executor.model_runner  # noqa: F401
        import sglang.srt.speculative.eagle_draft_cuda_graph_runner  # noqa: F401
        import sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner  # noqa: F401

        return serve

    try:
        yield load
    finally:
        hook.uninstall()
        _drop_sglang_modules()
        sys.modules.update(saved)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def _forwards(tmp_path: Path) -> list[dict[str, Any]]:
    hook.flush(wait=True)
    return [r for r in _lines(rank_file(tmp_path / "logs", 0)) if r["type"] == "forward"]


def test_phase_mapping_by_name() -> None:
    assert hook.phase_for_mode("TARGET_VERIFY", is_draft=False) == "verify"
    assert hook.phase_for_mode("DECODE", is_draft=True) == "draft"
    assert hook.phase_for_mode("DECODE", is_draft=False) == "decode"
    assert hook.phase_for_mode("TARGET_VERIFY", is_draft=True) == "draft"  # DFlash's draft block
    assert hook.phase_for_mode("DRAFT_EXTEND", is_draft=True) == "draft_extend"
    assert hook.phase_for_mode("DRAFT_EXTEND_V2", is_draft=True) == "draft_extend"
    for m in ("EXTEND", "MIXED", "SPLIT_PREFILL"):
        assert hook.phase_for_mode(m, is_draft=False) == "extend"
    assert hook.phase_for_mode("IDLE", is_draft=False) is None
    with pytest.raises(KeyError):
        hook.phase_for_mode("SOMETHING_NEW", is_draft=False)


def test_055_standin_every_phase_recorded(standin: Any, tmp_path: Path) -> None:
    serve = standin("0.5.5")
    from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner

    assert sorted(hook.patched_members()) == ["EAGLEDraftCudaGraphRunner.replay",
                                              "EAGLEDraftExtendCudaGraphRunner.replay", "ModelRunner.forward"]
    assert hasattr(EAGLEDraftCudaGraphRunner.replay, "__specmodel_wrapped__")
    serve.run(tp_rank=0, iterations=3, batch=2)
    lines = _lines(rank_file(tmp_path / "logs", 0))
    meta = [r for r in lines if r["type"] == "meta"]
    assert len(meta) == 1 and meta[0]["sglang_version"] == "0.0.0+standin-0.5.5"
    assert meta[0]["spec"] == {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "num_draft_tokens": 4}
    fw = _forwards(tmp_path)
    got = Counter((r["phase"], r["batch"], r["tokens"], r["runner"], r["member"], r["forwards"]) for r in fw)
    assert got == Counter({
        ("extend", 2, 34, "target", "ModelRunner.forward", 1): 1,
        ("decode", 2, 2, "target", "ModelRunner.forward", 1): 3,
        ("draft", 2, 2, "draft", "EAGLEDraftCudaGraphRunner.replay", 2): 3,  # steps - 1 forwards per replay
        ("draft", 2, 2, "draft", "ModelRunner.forward", 1): 3,
        ("verify", 2, 8, "target", "ModelRunner.forward", 1): 3,
        ("draft_extend", 2, 8, "draft", "EAGLEDraftExtendCudaGraphRunner.replay", 1): 3,
        ("draft_extend", 2, 8, "draft", "ModelRunner.forward", 1): 3,
    })  # IDLE forwards are not recorded
    for r in fw:
        assert r["schema"] == sgtargets.LINE_SCHEMA and r["schema_version"] == sgtargets.LINE_SCHEMA_VERSION
        assert r["cpu_s"] > 0 and "gpu_s" not in r  # CPU stand-in: perf_counter
    starts = [r["t_start_unix_s"] for r in fw]
    assert starts == sorted(starts)


def test_0523_standin_execute_and_return_values(standin: Any, tmp_path: Path) -> None:
    serve = standin("0.5.23")
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner, ModelRunnerOutput

    assert sorted(hook.patched_members()) == ["EAGLEDraftCudaGraphRunner.execute",
                                              "EAGLEDraftExtendCudaGraphRunner.execute", "ModelRunner.forward"]
    # the wrapper keeps the signature and passes the return value through untouched
    params = list(inspect.signature(ModelRunner.forward).parameters)
    assert params[:3] == ["self", "forward_batch", "skip_attn_backend_init"]
    import torch

    out = ModelRunner().forward(forward_batch=ForwardBatch(ForwardMode.TARGET_VERIFY, 3, torch.zeros(12)))
    assert isinstance(out, ModelRunnerOutput) and out.logits_output.shape == (12, 64)
    serve.run(tp_rank=0, iterations=2, batch=2)
    fw = _forwards(tmp_path)
    assert fw[0]["phase"] == "verify" and fw[0]["batch"] == 3 and fw[0]["tokens"] == 12  # keyword call seen
    ext = [r for r in fw if r["phase"] == "draft_extend"]
    assert {r["forward_mode"] for r in ext} == {"DRAFT_EXTEND", "DRAFT_EXTEND_V2"}
    assert {r["member"] for r in ext} == {"EAGLEDraftExtendCudaGraphRunner.execute", "ModelRunner.forward"}


def test_unsupported_version_warns_and_never_breaks(standin: Any, tmp_path: Path,
                                                    capfd: pytest.CaptureFixture[str]) -> None:
    serve = standin("broken")
    assert serve.run(tp_rank=0, iterations=3, batch=2) == "broken"  # the "server" ran to the end
    err = capfd.readouterr().err
    assert ("specmodel sglang hook: warning: SGLang 0.0.0+standin-broken: "
            "sglang.srt.speculative.eagle_draft_cuda_graph_runner.EAGLEDraftCudaGraphRunner has no execute / "
            "replay method; draft CUDA-graph replays will not be timed") in err
    assert "EAGLEDraftExtendCudaGraphRunner has no execute / replay method" in err
    # an unknown ForwardMode member: one warning, however many forwards
    assert err.count("ForwardMode.QUANTUM_EXTEND is not known to specmodel") == 1
    assert hook.patched_members() == ["ModelRunner.forward"]
    phases = Counter(r["phase"] for r in _forwards(tmp_path))
    assert phases == Counter({"decode": 3, "verify": 3, "draft": 3, "extend": 1})


def test_missing_class_warns(capfd: pytest.CaptureFixture[str]) -> None:
    mod = ModuleType(sgtargets.DRAFT_RUNNER_MODULE)  # a version that renamed the class
    try:
        assert hook._patch_module(mod, hook.TARGETS[1]) is False
        err = capfd.readouterr().err
        assert "class sglang.srt.speculative.eagle_draft_cuda_graph_runner.EAGLEDraftCudaGraphRunner not found" in err
        assert "server runs unpatched there" in err
    finally:
        hook.uninstall()


def test_hook_failure_never_breaks_a_forward(standin: Any, tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    standin("0.5.5")
    from sglang.srt.model_executor.model_runner import ModelRunner

    class OddBatch:  # a future ForwardBatch without .forward_mode
        batch_size = 1
        input_ids = __import__("torch").zeros(5)

    out, graph = ModelRunner().forward(OddBatch())
    assert out.shape == (5, 64) and graph is False
    ModelRunner().forward(OddBatch())
    err = capfd.readouterr().err
    assert err.count("cannot annotate ModelRunner.forward") == 1
    assert not rank_files(tmp_path / "logs", 0)  # nothing recorded, nothing crashed


def test_exception_in_forward_propagates_unrecorded(standin: Any, tmp_path: Path) -> None:
    serve = standin("0.5.5")
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    runner = ModelRunner()
    runner.weight = None  # the original forward raises
    with pytest.raises(AttributeError, match="shape"):
        runner.forward(ForwardBatch(ForwardMode.DECODE, 2, torch.zeros(2)))
    serve.run(iterations=1)
    fw = _forwards(tmp_path)
    assert fw[0]["phase"] == "extend"  # the failed decode left no line


def test_nested_wrapped_call_counted_once(standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    serve = standin("0.5.5")
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode
    from sglang.srt.speculative.eagle_draft_cuda_graph_runner import EAGLEDraftCudaGraphRunner

    def run_via_forward(self: Any, fb: Any) -> Any:  # a version whose replay calls ModelRunner.forward
        return self.model_runner.forward(ForwardBatch(ForwardMode.DECODE, fb.batch_size, torch.zeros(fb.batch_size)))

    monkeypatch.setattr(EAGLEDraftCudaGraphRunner, "_run", run_via_forward)
    serve.run(iterations=2)
    members = Counter(r["member"] for r in _forwards(tmp_path) if r["phase"] == "draft")
    assert members == Counter({"EAGLEDraftCudaGraphRunner.replay": 2, "ModelRunner.forward": 2})


def test_torch_profiler_sees_phase_spans(standin: Any, tmp_path: Path) -> None:
    serve = standin("0.5.5")
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        serve.run(iterations=2, batch=2)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    spans = Counter(e["name"] for e in events if e.get("cat") == "user_annotation" and e["name"].startswith("specmodel."))
    # a draft replay is steps - 1 forwards in one span: the label says so
    assert spans == Counter({"specmodel.verify[bs=2,toks=8]": 2, "specmodel.draft[bs=2,toks=2,fwd=2]": 2,
                             "specmodel.draft[bs=2,toks=2]": 2,
                             "specmodel.draft_extend[bs=2,toks=8]": 4, "specmodel.decode[bs=2,toks=2]": 2,
                             "specmodel.extend[bs=2,toks=34]": 1})
    assert parse_phase_label("specmodel.verify[bs=2,toks=8]") == ("verify", 2, 8)
    # the span wraps the forward's own work (the matmul runs inside it)
    verify = next(e for e in events if e["name"] == "specmodel.verify[bs=2,toks=8]")
    inner = [e for e in events if e.get("cat") == "cpu_op" and "mm" in e["name"]
             and verify["ts"] <= e["ts"] <= verify["ts"] + verify["dur"]]
    assert inner


# ----------------------------------------------------------------------------- reading back


def _standin_logs(standin: Any, tmp_path: Path) -> Path:
    serve = standin("0.5.5")
    serve.run(tp_rank=0, iterations=5, batch=2)
    serve.run(tp_rank=0, iterations=1, batch=4)
    hook.flush(wait=True)
    return tmp_path / "logs"


def test_read_log_roundtrip_and_summarize(standin: Any, tmp_path: Path) -> None:
    logs = _standin_logs(standin, tmp_path)
    lg = read_forward_log(rank_file(logs, 0))
    assert len(lg.meta) == 1 and not lg.truncated
    prof = summarize([logs], name="standin")
    assert prof.source_kind == "ingested" and prof.tp == 2
    assert (prof.spec.steps, prof.spec.topk, prof.spec.num_draft_tokens) == (3, 1, 4)
    keys = {(r.kind, r.batch, r.tokens) for r in prof.costs}
    assert keys == {("extend", 2, 34), ("extend", 4, 68), ("decode", 2, 2), ("decode", 4, 4), ("draft", 2, 2),
                    ("draft", 4, 4), ("verify", 2, 8), ("verify", 4, 16), ("draft_extend", 2, 8),
                    ("draft_extend", 4, 8 * 2)}
    # draft(2, 2): 5 replays (each / 2 forwards) + 5 eager forwards -> median of those 10 figures
    fw = [r for r in lg.forwards if (r["phase"], r["batch"]) == ("draft", 2)]
    per_forward = sorted(r["cpu_s"] / r["forwards"] for r in fw)
    row = next(r for r in prof.costs if (r.kind, r.batch) == ("draft", 2))
    assert row.samples == 10
    assert row.total_s == pytest.approx((per_forward[4] + per_forward[5]) / 2)
    assert row.other_s == row.total_s and row.allreduce_s == 0.0
    assert any("perf_counter" in n for n in prof.notes)


def test_truncated_last_line_ignored(standin: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    logs = _standin_logs(standin, tmp_path)
    f = rank_file(logs, 0)
    n_before = len(read_forward_log(f).forwards)
    with f.open("a") as fh:
        fh.write('{"schema": "specmodel.sglang_forward", "schema_version": 1, "type": "forw')  # died mid-write
    lg = read_forward_log(f)
    assert lg.truncated and len(lg.forwards) == n_before
    assert "truncated last line ignored" in caplog.text


@pytest.mark.parametrize(("edit", "message"), [
    (lambda ls: ls.insert(3, "{not json"), "line 4: not valid JSON"),
    (lambda ls: ls.__setitem__(2, ls[2].replace('"phase": "decode"', '"phase": "warp"')), "line 3: phase: expected one of"),
    (lambda ls: ls.__setitem__(2, ls[2].replace('"batch": 2', '"batch": 0')), "line 3: batch: expected an integer >= 1"),
    (lambda ls: ls.__setitem__(1, ls[1].replace('"schema_version": 2', '"schema_version": 9')), "line 2: schema_version"),
    (lambda ls: ls.__setitem__(1, ls[1].replace('"cpu_s"', '"wall_s"')), "line 2: expected exactly one of gpu_s / cpu_s"),
])
def test_malformed_line_names_file_and_line(standin: Any, tmp_path: Path, edit: Any, message: str) -> None:
    logs = _standin_logs(standin, tmp_path)
    f = rank_file(logs, 0)
    ls = [x for x in f.read_text().splitlines() if '"specmodel.probe"' not in x]  # the lines edited: meta, forwards
    edit(ls)
    f.write_text("\n".join(ls) + "\n")
    with pytest.raises(SpecmodelError) as ei:
        read_forward_log(f)
    assert str(ei.value).startswith(f"{f}: ") and message in str(ei.value)


def test_summarize_needs_a_decode_row(tmp_path: Path) -> None:
    d = tmp_path / "spec-only"
    d.mkdir()
    line = {"schema": sgtargets.LINE_SCHEMA, "schema_version": 1, "type": "forward", "phase": "verify", "batch": 1,
            "tokens": 4, "forwards": 1, "runner": "target", "gpu_s": 0.02}
    (d / "rank0.jsonl").write_text(json.dumps(line) + "\n")
    with pytest.raises(SpecmodelError, match="no target decode forwards recorded"):
        summarize([d], name="x")


def test_flush_never_waits_on_unfinished_timings(standin: Any, tmp_path: Path) -> None:
    """CUDA timings are resolved lazily: an unfinished end event holds back it and every later
    timing (same stream, FIFO) until it completes; flush(wait=True) (at exit) takes all."""
    serve = standin("0.5.5")
    serve.run(iterations=1)
    hook.flush(wait=True)
    before = len(_forwards(tmp_path))

    class Pending:  # a Stopwatch whose CUDA end event has not completed yet
        use_cuda = True
        done = False
        elapsed_s = 0.004

        def ready(self) -> bool:
            return self.done

    sw1, sw2 = Pending(), Pending()
    sw2.done = True
    rec = {"schema": sgtargets.LINE_SCHEMA, "schema_version": 1, "type": "forward", "phase": "verify", "batch": 1,
           "tokens": 4, "forwards": 1, "runner": "target"}
    sgwriter.STATE.pending.extend([(dict(rec), sw1), (dict(rec), sw2)])
    lines = [x for x in _lines(rank_file(tmp_path / "logs", 0)) if x["type"] != "probe"]  # the box's: apart
    assert hook.flush() == 0 and len(lines) == before + 1
    sw1.done = True
    assert hook.flush() == 2
    fw = _forwards(tmp_path)
    assert [r.get("gpu_s") for r in fw[-2:]] == [0.004, 0.004]


@pytest.mark.parametrize("flavor", ["0.5.5", "0.5.23"])
def test_graph_capture_warmups_are_not_forwards(standin: Any, tmp_path: Path, flavor: str) -> None:
    """SGLang runs run_once() twice uncaptured (and once captured) per batch size inside
    model_capture_mode(): steps - 1 eager draft forwards each, with dummy inputs."""
    serve = standin(flavor)
    serve.run(tp_rank=0, iterations=2, batch=2, capture_bs=(1, 2, 4))
    fw = _forwards(tmp_path)
    eager_draft = [r for r in fw if r["phase"] == "draft" and r["member"] == "ModelRunner.forward"]
    assert len(eager_draft) == 2  # the two real eager draft steps; none of the 3 x 3 x 2 capture runs
    assert {r["batch"] for r in fw if r["phase"] == "draft"} == {2}
    import importlib

    mod = importlib.import_module(hook.CAPTURE_MODE_MODULES[0 if flavor == "0.5.23" else 1])
    assert mod.get_is_capture_mode() is False  # the flag went back down after capture


def test_server_warmup_request_is_not_recorded(standin: Any, tmp_path: Path) -> None:
    serve = standin("0.5.5")
    serve.run(tp_rank=0, iterations=2, batch=2, warmup=True)
    fw = _forwards(tmp_path)
    assert {r["batch"] for r in fw} == {2}  # the warm-up request ran at batch 1
    assert Counter(r["phase"] for r in fw)["extend"] == 1  # the real prefill only
    assert Counter(r["phase"] for r in fw)["verify"] == 2


# ----------------------------------------------------------------------------- the scheduler's step


#: Host work (s) where the stand-in scheduler does it, and each forward's time on the fake clock.
HOST_S = {"recv": 0.0001, "schedule": 0.0004, "prepare": 0.0003, "build_tree": 0.0005,
          "verify_bookkeeping": 0.0006, "process": 0.0007}
FORWARD_S = {("EXTEND", False): 0.050, ("DECODE", False): 0.015, ("TARGET_VERIFY", False): 0.020,
             ("DECODE", True): 0.002, ("DRAFT_EXTEND", True): 0.003}
# By hand, one step = schedule + prepare + [forwards and the host work between them] + process +
# the next pass's recv (a step runs from one get_next_batch_to_run to the next):
#   baseline decode: 0.4 + 0.3 + 15 + 0.7 + 0.1 = 16.5 ms, host work 1.5 ms
#   EAGLE cycle: 0.4 + 0.3 + 2 x 2 (draft) + 0.5 (tree) + 20 (verify) + 0.6 (bookkeeping) + 3 (draft-extend)
#                + 0.7 + 0.1 = 29.6 ms, forwards 27 ms, host work 2.6 ms
BASE_STEP_S, BASE_HOST_S = 0.0165, 0.0015
CYCLE_S, CYCLE_FORWARDS_S, CYCLE_HOST_S = 0.0296, 0.027, 0.0026


def _run_scheduler(load: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, speculative: bool,
                   cycles: int = 3, batch: int = 2, flavor: str = "0.5.5", probe: bool = False,
                   clock: FakeClock | None = None) -> Path:
    """One stand-in server under the hook: a prefill, then ``cycles`` decode steps, on the fake clock."""
    clock = clock or FakeClock()
    monkeypatch.setattr(time, "perf_counter", clock)
    if not probe:
        monkeypatch.setattr(sgsteps, "probe", lambda cal: None)  # the box's probe would time nothing on this clock
    load(flavor)
    from sglang.srt.managers.scheduler import ScheduleBatch, Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    monkeypatch.setattr(ModelRunner, "on_forward",
                        lambda runner, fb: clock.advance(FORWARD_S[(fb.forward_mode.name, runner.is_draft_worker)]))
    target, draft = ModelRunner(), ModelRunner(is_draft_worker=True)
    for r in (target, draft):
        r.server_args.skip_server_warmup = True
        if not speculative:
            r.server_args.speculative_algorithm = None
    sched = Scheduler(target, draft if speculative else None, host_work=lambda what: clock.advance(HOST_S[what]))
    sched.queue = [ScheduleBatch(ForwardMode.EXTEND, batch)] + [ScheduleBatch(ForwardMode.DECODE, batch)
                                                                for _ in range(cycles)]
    sched.event_loop_normal()
    hook.flush(wait=True)
    assert sgwriter.STATE.out_dir is not None
    return sgwriter.STATE.out_dir  # where the fixture's hook writes


def _two_servers(load: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flavor: str = "0.5.5") -> list[Path]:
    """A server without speculation, then an EAGLE one, each in its own log directory."""
    out = []
    for speculative in (False, True):
        logs = _run_scheduler(load, tmp_path, monkeypatch, speculative=speculative, flavor=flavor)
        hook.uninstall()
        _drop_sglang_modules()
        tmp_path.mkdir(exist_ok=True)
        out.append(logs.rename(tmp_path / ("spec" if speculative else "base")))
    return out


def _steps(logs: Path) -> list[dict[str, Any]]:
    return [r for r in _lines(rank_file(logs, 0)) if r["type"] == "step"]


def test_scheduler_step_spans_contain_the_forwards(standin: Any, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    logs = _run_scheduler(standin, tmp_path, monkeypatch, speculative=True)
    assert sorted(hook.patched_members()) == ["EAGLEDraftCudaGraphRunner.replay", "EAGLEDraftExtendCudaGraphRunner.replay",
                                              "ModelRunner.forward", "Scheduler.get_next_batch_to_run",
                                              "Scheduler.get_next_disagg_decode_batch_to_run", "Scheduler.run_batch"]
    steps = _steps(logs)
    # the prefill step and three cycles; the idle pass that ends the loop ran no batch: not a step
    assert [(s["forward_mode"], s["batch"]) for s in steps] == [("EXTEND", 2)] + [("DECODE", 2)] * 3
    prefill, cycles = steps[0], steps[1:]
    assert prefill["phases"] == {"extend": 1}
    assert prefill["step_s"] == pytest.approx(0.0004 + 0.0003 + 0.050 + 0.0007 + 0.0001)
    assert prefill["overhead_s"] == pytest.approx(0.0015)
    for s in cycles:
        assert s["schema_version"] == 2 and s["clock"] == "perf_counter"
        assert s["phases"] == {"draft": 2, "verify": 1, "draft_extend": 1}
        assert s["step_s"] == pytest.approx(CYCLE_S) and s["host_s"] == pytest.approx(CYCLE_S)
        assert s["forwards_s"] == pytest.approx(CYCLE_FORWARDS_S)
        assert s["overhead_s"] == pytest.approx(CYCLE_HOST_S)
    # the forwards a step holds are the forward lines written beside it
    fw = [r for r in _forwards(tmp_path) if r["phase"] != "extend"]
    assert sum(r["cpu_s"] for r in fw) == pytest.approx(3 * CYCLE_FORWARDS_S)


def test_summary_cycle_includes_the_host_work(standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from specmodel.model.cyclecost import cycle_costs
    from specmodel.schema.profile import profile_from_dict, profile_to_dict

    prof = summarize(_two_servers(standin, tmp_path, monkeypatch), name="stepped")
    assert prof.source.host_work_in_rows
    assert profile_from_dict(profile_to_dict(prof)).source.host_work_in_rows  # kept on disk
    row = {r.kind: r for r in prof.costs if r.batch == 2}
    assert row["decode"].total_s == pytest.approx(BASE_STEP_S)  # 15 ms forward + 1.5 ms host work
    assert row["verify"].total_s == pytest.approx(0.020 + CYCLE_HOST_S)
    assert row["draft"].total_s == pytest.approx(0.002) and row["draft_extend"].total_s == pytest.approx(0.003)
    cc = cycle_costs(prof, batch=2, spec=prof.spec)
    # the model's cycle is the stand-in's cycle on the fake clock: forwards + host work
    assert cc.cycle_s == pytest.approx(CYCLE_S) and cc.base.total_s == pytest.approx(BASE_STEP_S)
    assert cc.assumptions == () and not any("no per-cycle overhead" in w for w in cc.warnings)
    assert any("carry the scheduler's host work" in n for n in prof.notes)


def test_missing_scheduler_seam_warns_and_leaves_the_host_work_unmeasured(
        standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    from specmodel.model.cyclecost import SGLANG_HOST_WORK_UNMEASURED, cycle_costs

    # the "broken" stand-in's Scheduler has no get_next_batch_to_run (a version that renamed it)
    logs = _run_scheduler(standin, tmp_path, monkeypatch, speculative=True, flavor="broken")
    err = capfd.readouterr().err
    assert err.count("sglang.srt.managers.scheduler.Scheduler has no get_next_batch_to_run method; the "
                     "scheduler's host work per step will not be timed") == 1
    assert "Scheduler.run_batch" in hook.patched_members()
    assert _steps(logs) == []  # no bound, no step
    assert Counter(r["phase"] for r in _forwards(tmp_path)) == Counter({"extend": 1, "draft": 6, "verify": 3})
    hook.uninstall()
    _drop_sglang_modules()
    logs.rename(tmp_path / "first")
    base, spec = _two_servers(standin, tmp_path / "pair", monkeypatch, flavor="broken")
    prof = summarize([base, spec], name="unstepped")
    assert not prof.source.host_work_in_rows
    assert any(n.startswith("SGLang host work not measured (2 server run(s) logged no scheduler step")
               for n in prof.notes)
    cc = cycle_costs(prof, batch=2, spec=prof.spec)
    # the draft runners' graph replays could not be wrapped either (no execute / replay): the meta
    # lines say so, and the cycle names those figures beside the host work (named once)
    assert [a.label for a in cc.assumptions] == [SGLANG_HOST_WORK_UNMEASURED] + [
        f"{what} not recorded: {cls}.execute/replay not found in SGLang 0.0.0+standin-broken (the draft cost is "
        "lower than the truth by an unknown amount)"
        for what, cls in (("draft time", "EAGLEDraftCudaGraphRunner"),
                          ("draft-extend time", "EAGLEDraftExtendCudaGraphRunner"))]


def test_gpu_step_and_forwards_share_the_gpu_clock(standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capfd: pytest.CaptureFixture[str]) -> None:
    """On a GPU a forward call only launches its kernels: the host-visible forward time (0.1 ms a
    launch here) says nothing of the GPU's. The step's bounds are CUDA events like the forwards', so
    its host work is the forwards' stream's time outside them. By hand, per cycle (ms, GPU idle
    before the step): schedule + prepare 0.7 idle; drafts 0.7-2.7, 2.7-4.7 (the 0.5 ms tree building
    runs on the host meanwhile); verify 4.7-24.7; bookkeeping waits for it, 0.6 idle; draft-extend
    25.3-28.3; process waits for it, then process + recv 0.8 idle: step 29.1 ms, forwards 27,
    host work 0.7 + 0.6 + 0.8 = 2.1 ms (on the host clock the step also spans 29.1 ms)."""
    import torch

    from specmodel.engines.hook import annotate

    clock = FakeClock()
    gpu = FakeGPU(clock)
    monkeypatch.setattr(time, "perf_counter", clock)
    monkeypatch.setattr(sgsteps, "probe", lambda cal: None)
    monkeypatch.setattr(annotate, "cuda_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "Event", gpu.event_class())
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    standin("0.5.5")
    from sglang.srt.managers.scheduler import ScheduleBatch, Scheduler
    from sglang.srt.model_executor.forward_batch_info import ForwardMode
    from sglang.srt.model_executor.model_runner import ModelRunner

    def launch(runner: Any, fb: Any) -> None:
        gpu.launch(FORWARD_S[(fb.forward_mode.name, runner.is_draft_worker)])
        clock.advance(0.0001)

    def host_work(what: str) -> None:
        if what in ("verify_bookkeeping", "process"):  # they read the GPU's results: the host waits
            gpu.sync()
        clock.advance(HOST_S[what])

    monkeypatch.setattr(ModelRunner, "on_forward", launch)
    target, draft = ModelRunner(), ModelRunner(is_draft_worker=True)
    for r in (target, draft):
        r.device = "cuda"  # the timers' device (the stand-in's tensors stay on the CPU)
        r.server_args.skip_server_warmup = True
    sched = Scheduler(target, draft, host_work=host_work, device="cuda")
    sched.queue = [ScheduleBatch(ForwardMode.DECODE, 2) for _ in range(3)]
    sched.event_loop_normal()
    hook.flush(wait=True)
    steps = _steps(tmp_path / "logs")
    assert len(steps) == 3
    for s in steps:
        assert s["clock"] == "cuda_event"
        assert s["step_s"] == pytest.approx(0.0291) and s["forwards_s"] == pytest.approx(0.027)
        assert s["overhead_s"] == pytest.approx(0.0021)
        assert s["host_s"] == pytest.approx(0.0291)
    fw = _forwards(tmp_path)
    assert sorted({round(r["gpu_s"], 6) for r in fw}) == [0.002, 0.003, 0.02]
    assert set(gpu.streams) == {None}  # no overlap: every bound on the current stream, as the forwards

    # the overlap scheduler queues the forwards on its forward_stream: the bounds go there too
    gpu.streams.clear()
    sched.enable_overlap, sched.forward_stream = True, "forward-stream"
    sched.queue = [ScheduleBatch(ForwardMode.DECODE, 2)]
    sched.event_loop_normal()
    assert "forward-stream" in gpu.streams
    hook.flush(wait=True)
    assert len(_steps(tmp_path / "logs")) == 4

    # a scheduler whose device is not timed on its forwards' clock: its steps are dropped, never mixed
    sched.enable_overlap, sched.device = False, "cpu"
    sched.queue = [ScheduleBatch(ForwardMode.DECODE, 2)]
    sched.event_loop_normal()
    hook.flush(wait=True)
    assert len(_steps(tmp_path / "logs")) == 4
    assert "is not timed on its forwards' clock; the scheduler's host work is not recorded" in capfd.readouterr().err


@pytest.mark.parametrize(("field", "bad", "message"), [
    ("clock", "wall", "clock: expected one of cuda_event, perf_counter, got 'wall'"),
    ("overhead_s", -0.001, "overhead_s: expected a finite number in 0..86400 s, got -0.001"),
    ("step_s", "NaN", "step_s: expected a finite number"),
    ("phases", {"warp": 1}, "phases: expected an object of phase -> count"),
    ("batch", 0, "batch: expected an integer in 1..65536 or null, got 0"),
])
def test_malformed_step_record_names_file_line_and_field(tmp_path: Path, field: str, bad: Any, message: str) -> None:
    step = {"schema": sgtargets.LINE_SCHEMA, "schema_version": 2, "type": "step", "forward_mode": "DECODE", "batch": 2,
            "phases": {"verify": 1}, "clock": "perf_counter", "step_s": 0.03, "forwards_s": 0.027,
            "overhead_s": 0.003, "host_s": 0.03}
    f = tmp_path / "rank0.jsonl"
    f.write_text(json.dumps(step) + "\n")
    assert [r for _, r in read_forward_log(f).steps] == [step]  # the good line reads
    bad_text = "NaN" if bad == "NaN" else json.dumps(bad)
    line = json.dumps(step).replace(f'"{field}": {json.dumps(step[field])}', f'"{field}": {bad_text}')
    f.write_text(json.dumps(step) + "\n" + line + "\n")
    with pytest.raises(SpecmodelError) as ei:
        read_forward_log(f)
    assert str(ei.value).startswith(f"{f}: line 2: {message}")


def test_a_failing_step_seam_never_breaks_the_scheduler(standin: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        capfd: pytest.CaptureFixture[str]) -> None:
    def boom(sched: Any) -> None:
        raise RuntimeError("step bound failed")

    monkeypatch.setattr(sgsteps, "step_boundary", boom)
    logs = _run_scheduler(standin, tmp_path, monkeypatch, speculative=True)
    err = capfd.readouterr().err
    assert err.count("timing the scheduler's step at Scheduler.get_next_batch_to_run failed "
                     "(RuntimeError('step bound failed'))") == 1
    assert _steps(logs) == []  # no step, and the loop ran every batch: the forwards are all there
    assert Counter(r["phase"] for r in _forwards(tmp_path)) == Counter({"extend": 1, "draft": 6, "verify": 3,
                                                                        "draft_extend": 3})


def test_a_step_the_calibration_probe_ran_in_is_not_written(standin: Any, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The box's probe runs after a target forward (first step, then every PERIOD_S): its time
    would pass for the engine's host work, so that step is left out; the others are as by hand."""
    from specmodel.engines.hook.calibration import PERIOD_S, Calibrator

    clock = FakeClock()

    class Done:
        use_cuda = False

        def record(self) -> dict[str, Any]:
            return {"schema": "specmodel.probe", "schema_version": 1, "type": "probe"}

    def run(self: Calibrator) -> Done:
        self.next_at = clock.t + PERIOD_S
        clock.advance(0.1)  # the probe's own matmuls
        return Done()

    monkeypatch.setattr(Calibrator, "run", run)
    cycles = 4
    logs = _run_scheduler(standin, tmp_path, monkeypatch, speculative=True, cycles=cycles, probe=True, clock=clock)
    steps = _steps(logs)
    # the prefill step held the first probe (PERIOD_S later than the last cycle: no second one)
    assert PERIOD_S > 0.1 + cycles * CYCLE_S
    assert [s["forward_mode"] for s in steps] == ["DECODE"] * cycles
    assert [round(s["overhead_s"], 9) for s in steps] == [CYCLE_HOST_S] * cycles
    assert sum(1 for r in _lines(rank_file(logs, 0)) if r["type"] == "probe") == 1


def test_the_process_place_comes_from_sglangs_own_state(monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.5 keeps tp_rank / pp_rank on the ModelRunner and the DP replica only in the scheduler
    (its process title ``sglang::scheduler_DP1_TP0``, or ``$SGLANG_DP_RANK``); 0.5.23 keeps them
    in ``runtime_context.get_parallel()``, which raises on a name not published yet."""
    import types

    monkeypatch.delenv("SGLANG_DP_RANK", raising=False)
    title = types.ModuleType("setproctitle")
    title.getproctitle = lambda: "sglang::scheduler_DP3_PP1_TP0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "setproctitle", title)
    monkeypatch.delitem(sys.modules, "sglang.srt.runtime_context", raising=False)
    runner = types.SimpleNamespace(tp_rank=0)
    assert sgwriter.place(runner) == {"tp_rank": 0, "pp_rank": 1, "dp_rank": 3, "pp_size": None, "dp_size": None}
    monkeypatch.setenv("SGLANG_DP_RANK", "2")
    assert sgwriter.place(runner)["dp_rank"] == 2

    class Parallel:  # 0.5.23's ParallelContext: names read through __getattr__, unpublished ones raise
        tp_rank, pp_rank, pp_size = 5, 0, 1

        def __getattr__(self, name: str) -> Any:
            raise RuntimeError(f"{name} is not published")

    ctx = types.ModuleType("sglang.srt.runtime_context")
    ctx.get_parallel = Parallel  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "sglang.srt.runtime_context", ctx)
    monkeypatch.delenv("SGLANG_DP_RANK")
    assert sgwriter.place(types.SimpleNamespace()) == {"tp_rank": 5, "pp_rank": 0, "dp_rank": 3, "pp_size": 1,
                                                    "dp_size": None}
