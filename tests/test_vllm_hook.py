"""The vLLM step hook against stand-ins of vLLM's own classes (registered under the real module
names, so install() finds them the way it finds vLLM), its reader/summarizer, and the command's
bad-input paths. The same hook against the real engine: tests/test_vllm_live.py (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specmodel.engines.vllm import hook
from specmodel.engines.vllm import targets as vtargets
from specmodel.engines.vllm.hooklog import summarize
from specmodel.engines.vllm.steplog import read_step_log
from specmodel.errors import SpecmodelError
from tests.rank_files import rank_file, rank_files
from tests.standins import AR_S, DRAFT_COMPUTE_S, DRAFT_STEP_S, FWD_COMPUTE_S, HOST_S, vllm_v1  # noqa: F401 - re-exported
from tests.standins import SO as _SO
from tests.standins import so as _so


@pytest.fixture()
def standin(tmp_path: Path) -> Iterator[types.SimpleNamespace]:
    """Fake vllm.distributed.parallel_state + vllm.v1.worker.gpu_model_runner (tests/standins.py); the hook installed."""
    with vllm_v1(tmp_path / "hook") as ns:
        yield ns


def _run(runner: Any, so: _SO) -> None:
    assert runner.execute_model(so) is None
    runner.sample_tokens(None)


def _steps(out: Path) -> list[dict[str, Any]]:
    lines = [json.loads(x) for x in rank_file(out, 1).read_text().splitlines()]
    assert lines[0]["type"] == "meta" and lines[0]["tp_size"] == 2 and lines[0]["clock"] == "perf_counter"
    return [x for x in lines[1:] if x["type"] == "step"]


def test_every_seam_is_patched(standin: Any) -> None:
    assert sorted(standin.patched) == sorted(f"{c}.{m}" for _, c, m, _, _ in vtargets.TARGETS)


def test_a_verify_step_is_split_into_forward_draft_allreduce_and_host_work(standin: Any) -> None:
    runner = standin.Runner("draft_model", k=3)
    _run(runner, _so(2, k=3, ctx=120))
    hook.flush(wait=True)
    (s,) = _steps(standin.out)
    assert (s["kind"], s["batch"], s["tokens"], s["spec_tokens"], s["context_tokens"]) == ("verify", 2, 8, 6, 120)
    assert s["forward_n_allreduce"] == 3 and s["draft_n_allreduce"] == 1
    # sleeps are lower bounds; the split must put each in its own bucket
    assert s["forward_allreduce_s"] >= 3 * AR_S
    assert s["forward_s"] >= s["forward_allreduce_s"] + FWD_COMPUTE_S
    assert s["draft_s"] >= AR_S + DRAFT_COMPUTE_S and s["draft_allreduce_s"] >= AR_S
    assert s["overhead_s"] >= HOST_S
    assert s["step_s"] == pytest.approx(s["forward_s"] + s["draft_s"] + s["overhead_s"], rel=1e-9)
    assert s["draft_method"] == "draft_model" and s["draft_k"] == 3 and s["gap_s"] is None


def test_decode_prefill_and_the_gap_between_steps(standin: Any) -> None:
    runner = standin.Runner(None)
    _run(runner, _so(1, prefill=40))
    time.sleep(0.01)
    _run(runner, _so(1))
    hook.flush(wait=True)
    a, b = _steps(standin.out)
    assert a["kind"] == "extend" and a["tokens"] == 40
    assert b["kind"] == "decode" and b["draft_s"] is None and b["gap_s"] >= 0.01


def test_allreduce_outside_a_forward_is_not_counted(standin: Any) -> None:
    runner = standin.Runner(None)
    standin.group._all_reduce_out_place(1)  # start-up / dummy runs: no step in flight
    assert not rank_files(standin.out, 1)
    _run(runner, _so(1))
    hook.flush(wait=True)
    (s,) = _steps(standin.out)
    assert s["forward_n_allreduce"] == 3


def test_step_kind_rules() -> None:
    assert vtargets.step_kind(4, 4, 0) == "decode"
    assert vtargets.step_kind(4, 16, 12) == "verify"
    assert vtargets.step_kind(2, 30, 3) == "extend"  # a verify batched with a prefill
    assert vtargets.step_kind(1, 30, 0) == "extend"
    assert vtargets.step_kind(0, 0, 0) is None


def _record_run(standin: Any, method: str | None, batch: int, n: int) -> None:
    runner = standin.Runner(method)
    for _ in range(n):
        _run(runner, _so(batch, k=3 if method else 0))
    hook.flush(wait=True)


def test_summarize_builds_rows_with_the_allreduce_split_and_host_time(standin: Any, tmp_path: Path) -> None:
    _record_run(standin, None, 1, 5)
    _record_run(standin, "draft_model", 1, 5)
    prof = summarize([standin.out], name="t")
    dec = prof.rows("decode")[0]
    ver = prof.rows("verify")[0]
    drf = prof.rows("draft")[0]
    assert (ver.batch, ver.tokens) == (1, 4) and dec.tokens == 1
    assert dec.n_allreduce == 3 and dec.allreduce_s >= 3 * AR_S
    assert dec.other_s >= HOST_S  # the host work is in the row, not lost
    # the first forward (with the all-reduce) is the draft_extend row; the others one token each
    ext = prof.rows("draft_extend")[0]
    assert ext.total_s >= AR_S + DRAFT_COMPUTE_S and ext.n_allreduce == 1 and ext.tokens == 4
    assert drf.total_s >= DRAFT_STEP_S and drf.n_allreduce == 0
    assert prof.tp == 2 and prof.source.engine == "vllm" and prof.overhead_s == 0
    assert prof.spec.steps == 3 and prof.spec.num_draft_tokens == 4


def test_ramp_cells_seen_few_times_are_left_out_and_said(standin: Any, tmp_path: Path) -> None:
    """A request wave ramps 4 -> 3 -> ... : the batch-3 cell is seen once or twice. Kept, one slow step
    there becomes a cost row the running-max surface carries to every larger batch (78 ms, measured)."""
    _record_run(standin, None, 1, 6)
    _record_run(standin, None, 4, 6)
    _record_run(standin, None, 3, 2)  # the ramp
    prof = summarize([standin.out], name="t")
    assert sorted(r.batch for r in prof.rows("decode")) == [1, 4]
    assert any("fewer than 5 times" in n and "decode b3 t3 (2)" in n for n in prof.notes)
    keep = summarize([standin.out], name="t", min_samples=1)
    assert sorted(r.batch for r in keep.rows("decode")) == [1, 3, 4]
    out = tmp_path / "p"
    r = subprocess.run([sys.executable, "-m", "specmodel", "vllm", "--summarize", str(standin.out), "-o", str(out),
                        "--min-samples", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    doc = json.loads((out / "profile.json").read_text())
    assert sorted(c["batch"] for c in doc["costs"] if c["kind"] == "decode") == [1, 3, 4]
    r = subprocess.run([sys.executable, "-m", "specmodel", "vllm", "--min-samples", "2", "--", "true"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "--min-samples/--dp-rank only apply with --summarize" in r.stderr


def test_summary_names_the_model_and_the_device_the_checks_read(standin: Any) -> None:
    """The model/device checks of validate and watch read model.name and hardware.cpu_name/gpu_name."""
    from specmodel.live.validation import profile_device

    _record_run(standin, None, 1, 5)
    prof = summarize([standin.out], name="t")
    assert prof.model["name"] == "/models/tiny" and profile_device(prof) == "cpu"
    assert prof.hardware["cpu_name"]


def test_ngram_proposal_time_is_the_profiles_overhead_not_a_draft_row(standin: Any) -> None:
    _record_run(standin, None, 1, 3)
    _record_run(standin, "ngram", 1, 5)
    prof = summarize([standin.out], name="t")
    assert not prof.has("draft")
    assert prof.overhead_s >= DRAFT_COMPUTE_S
    assert any("host proposer (ngram)" in n for n in prof.notes)


def test_summarize_refuses_logs_without_a_decode_step(standin: Any) -> None:
    _record_run(standin, "ngram", 1, 2)
    with pytest.raises(SpecmodelError, match="no decode steps recorded"):
        summarize([standin.out], name="t")


def test_reader_names_file_and_line(tmp_path: Path) -> None:
    p = tmp_path / "rank0.jsonl"
    p.write_text(json.dumps({"schema": "specmodel.vllm_step", "schema_version": 1, "type": "step", "kind": "verify",
                             "batch": 2, "tokens": 1, "step_s": 0.1, "overhead_s": 0.0}) + "\n")
    with pytest.raises(SpecmodelError, match=r"rank0.jsonl: line 1: tokens: must be >= batch"):
        read_step_log(p)
    p.write_text('{"schema": "specmodel.sglang_forward", "schema_version": 1}\n')
    with pytest.raises(SpecmodelError, match=r"line 1: schema: expected 'specmodel.vllm_step'"):
        read_step_log(p)


def _cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "specmodel", "vllm", *args], capture_output=True, text=True,
                          timeout=timeout)


def test_cli_summarize_a_dir_without_logs_is_one_line_exit_2(tmp_path: Path) -> None:
    r = _cli("--summarize", str(tmp_path), "-o", str(tmp_path / "p"))
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "no rank*.jsonl files" in r.stderr and "Traceback" not in r.stderr


def test_cli_server_that_never_gets_healthy_is_stopped_one_line_exit_2(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    # a "server" that never listens; it records its pid so the test can check it was stopped
    code = f"import os, time; open({str(pidfile)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    t0 = time.monotonic()
    r = _cli("--out", str(tmp_path / "o"), "--health-timeout", "3", "--", sys.executable, "-c", code,
             "--port", "1")
    assert r.returncode == 2 and time.monotonic() - t0 < 60
    last = r.stderr.strip().splitlines()[-1]
    assert "not healthy after 3 s" in last and "http://127.0.0.1:1/health" in last and "Traceback" not in r.stderr
    pid = int(pidfile.read_text())
    assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text().lower()


def test_cli_server_that_exits_before_healthy_is_exit_2(tmp_path: Path) -> None:
    r = _cli("--out", str(tmp_path / "o"), "--", sys.executable, "-c", "import sys; sys.exit(3)")
    assert r.returncode == 2 and "exited with status 3 before" in r.stderr.strip().splitlines()[-1]


def test_health_url_follows_the_servers_flags() -> None:
    from specmodel.engines.vllm.run import health_url

    assert health_url(("python", "-m", "x", "--host", "0.0.0.0", "--port", "9001")) == "http://127.0.0.1:9001/health"
    assert health_url(("python", "--port=7")) == "http://127.0.0.1:7/health"
    assert health_url(("python",)) == "http://127.0.0.1:8000/health"


def test_the_shim_installs_the_vllm_hook_only_where_vllm_imports(tmp_path: Path) -> None:
    from specmodel.engines.hook.run import child_env
    from specmodel.engines.vllm.targets import ENV_DIR as ENV_VAR

    env = child_env(tmp_path / "out", env_var=ENV_VAR)
    env.pop("SPECMODEL_SGLANG_DIR", None)
    code = "import sys; print('specmodel.engines.vllm.hook' in sys.modules, 'specmodel.engines.sglang.hook' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    # this interpreter has no vLLM: the shim stays silent and loads nothing
    assert r.stdout.split() == ["False", "False"]
    fake = tmp_path / "fakevllm"
    (fake / "vllm").mkdir(parents=True)
    (fake / "vllm" / "__init__.py").write_text("")
    env["PYTHONPATH"] += f":{fake}"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.stdout.split() == ["True", "False"], r.stderr


def test_the_draft_span_is_keyed_per_drafter_forward(standin: Any) -> None:
    """The proposal's span holds k drafter forwards of one token per request: its label says
    bs=B, toks=B, fwd=k (ingest divides by fwd and keys the row as the hook's summary does,
    tokens = batch), not toks=B·k."""
    import torch

    from specmodel.schema.phases import parse_phase_label

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        _run(standin.Runner("draft_model", k=3), _so(2, k=3))
    names = {e.name for e in prof.events() if e.name.startswith("specmodel.")}
    assert "specmodel.draft[bs=2,toks=2,fwd=3]" in names, names
    assert "specmodel.verify[bs=2,toks=8]" in names
    assert parse_phase_label("specmodel.draft[bs=2,toks=2,fwd=3]") == ("draft", 2, 2)
    _run(standin.Runner(None), _so(2))  # the baseline step a summary needs
    hook.flush(wait=True)
    s = _steps(standin.out)[0]
    assert s["batch"] == 2 and s["draft_k"] == 3
    summary = summarize([standin.out], name="t", min_samples=1)
    assert [(r.batch, r.tokens) for r in summary.rows("draft")] == [(2, 2)]  # the row the span names


def _record_k3_and_baseline(standin: Any) -> None:
    """Six draft_model k = 3 verify steps at batch 2 and six baseline decode steps, written."""
    runner = standin.Runner("draft_model", k=3)
    for _ in range(6):
        _run(runner, _so(2, k=3))
    for _ in range(6):
        _run(standin.Runner(None), _so(2))
    hook.flush(wait=True)


def test_the_first_drafter_forward_is_timed_apart_and_becomes_a_draft_extend_row(standin: Any) -> None:
    """vLLM's proposal is one forward over the verified tokens and k - 1 over one token per request:
    the hook marks the end of the first (its sampling) so the summary prices them apart; a proposal
    priced as k mean forwards makes k = 1 look cheaper than it is (the first is the big one)."""
    _record_k3_and_baseline(standin)
    s = _steps(standin.out)[0]
    assert s["draft_first_s"] >= AR_S + DRAFT_COMPUTE_S and s["draft_first_n_allreduce"] == 1
    assert s["draft_first_allreduce_s"] >= AR_S and s["draft_first_allreduce_s"] <= s["draft_allreduce_s"]
    rest = s["draft_s"] - s["draft_first_s"]
    assert 2 * DRAFT_STEP_S <= rest < s["draft_first_s"]
    p = summarize([standin.out], name="t", min_samples=1)
    (ext,) = p.rows("draft_extend")
    (step,) = p.rows("draft")
    assert (ext.batch, ext.tokens, step.batch, step.tokens) == (2, 8, 2, 2)
    assert ext.total_s >= AR_S + DRAFT_COMPUTE_S and ext.n_allreduce == 1
    assert DRAFT_STEP_S <= step.total_s < ext.total_s and step.n_allreduce == 0


def test_k1_from_a_k3_profile_prices_the_first_forward_between_measured_ones(standin: Any) -> None:
    """k = 1 pays the first drafter forward over 2 tokens per request: read between a single-token
    drafter forward (draft, B tokens) and the measured first forward (draft_extend, B·4), not as
    a mean forward of the k = 3 run."""
    from specmodel.model.costs import forward_cost
    from specmodel.model.cyclecost import cycle_costs
    from specmodel.schema.costrows import SpecConfig

    _record_k3_and_baseline(standin)
    p = summarize([standin.out], name="t", min_samples=1)
    (ext,) = p.rows("draft_extend")
    (step,) = p.rows("draft")
    fc = forward_cost(p, "draft_extend", 4)
    assert not fc.extrapolations and "single-token drafter forward" in fc.note
    assert step.total_s < fc.total_s < ext.total_s
    k1 = SpecConfig(algorithm="DRAFT_MODEL", steps=1, topk=1, num_draft_tokens=2)
    cc = cycle_costs(p, batch=2, spec=k1)
    assert cc.draft_total_s == pytest.approx(fc.total_s, rel=1e-9)  # one forward: the first, nothing more
    k3 = cycle_costs(p, batch=2, spec=p.spec)
    assert k3.draft_total_s == pytest.approx(ext.total_s + 2 * step.total_s, rel=1e-9)


def test_a_v1_gpu_log_is_read_as_before_and_its_mixed_clocks_are_said(tmp_path: Path) -> None:
    """An older hook's GPU log (vllm_step v1, ``rank<k>.jsonl``, overhead_s = host step − GPU
    forward): read as written -- the row is forward + overhead + host gap, hand-summed -- and the
    notes say its overhead mixed two clocks."""
    d = tmp_path / "old"
    d.mkdir()
    head = {"schema": "specmodel.vllm_step", "schema_version": 1}
    lines = [{**head, "type": "meta", "vllm_version": "0.32.0", "pid": 7, "rank": "0", "tp_size": 1,
              "device": "cuda:0", "device_name": "NVIDIA H200", "clock": "cuda_event", "model_path": "/m"}]
    lines += [{**head, "type": "step", "kind": "decode", "batch": 4, "tokens": 4, "spec_tokens": 0,
               "context_tokens": 100.0, "draft_method": None, "draft_k": None, "forward_s": 0.010,
               "forward_allreduce_s": 0.0, "forward_n_allreduce": 0, "draft_s": None, "draft_allreduce_s": None,
               "draft_n_allreduce": None, "step_s": 0.012, "overhead_s": 0.002, "gap_s": 0.001} for _ in range(5)]
    (d / "rank0.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    prof = summarize([d], name="t")
    (row,) = prof.rows("decode")
    assert row.total_s == pytest.approx(0.010 + 0.002 + 0.001, rel=1e-9) and row.other_s == pytest.approx(0.003)
    assert any("older GPU logs (vllm_step v1)" in n and "two clocks" in n for n in prof.notes)
    assert not any("dropped" in n for n in prof.notes)


def test_a_v2_gpu_step_without_its_gpu_span_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "rank0-dp0-pp0-pid1.jsonl"
    p.write_text(json.dumps({"schema": "specmodel.vllm_step", "schema_version": 2, "type": "step", "kind": "decode",
                             "batch": 1, "tokens": 1, "step_s": 0.1, "overhead_s": 0.0, "host_step_s": 0.05,
                             "step_clock": "cuda_event", "gpu_step_s": None}) + "\n")
    with pytest.raises(SpecmodelError, match=r"pid1.jsonl: line 1: gpu_step_s: a step on the cuda_event clock"):
        read_step_log(p)
    p.write_text(json.dumps({"schema": "specmodel.vllm_step", "schema_version": 2, "type": "meta",
                             "dp_rank": -1}) + "\n")
    with pytest.raises(SpecmodelError, match=r"line 1: dp_rank: expected an integer in 0\.\."):
        read_step_log(p)
