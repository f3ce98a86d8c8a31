"""Bounded fuzzing of every reader a user's file reaches: only SpecmodelError may escape.

CI budget: SPECMODEL_FUZZ_SECONDS (default 30 s over all targets); `make fuzz` runs 600 s.
The sequence of inputs is deterministic for a given budget and machine speed (seeded RNG)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from specmodel.errors import SpecmodelError
from tests.conftest import DATA, REFERENCE
from tests.fuzz import PROFILE_MUTATIONS, FuzzResult, fuzz, mutated_profile_text

TOTAL_S = float(os.environ.get("SPECMODEL_FUZZ_SECONDS", "30"))
TARGETS = ("trace", "log", "nccl_tests", "profile", "accept_hist", "safetensors", "vllm_hook", "sglang_hook",
           "metrics", "watch_log", "vllm_capture")
PER_TARGET_S = TOTAL_S / len(TARGETS)
#: the reference profile with one field at an extreme (tests/fuzz.py PROFILE_MUTATIONS)
MUTATED = DATA / "profile_mutated"
#: CPU seconds one input may cost at most (bounded work: a seed costs milliseconds; CPU time, not wall
#: time, so a box busy with other tests does not count against the reader)
MAX_EXAMPLE_CPU_S = 20.0


def _trace(p: Path) -> object:
    from specmodel.trace.kineto import IngestOptions, parse_rank_file

    name = p.with_name("rank0.trace.json" + (".gz" if p.read_bytes()[:2] == b"\x1f\x8b" else ""))
    p.replace(name)
    return parse_rank_file(str(name), IngestOptions(), single=True)


def _log(p: Path) -> object:
    from specmodel.engines.logs import summarize

    try:
        return summarize([str(p)])
    except Exception as exc:  # the SGLang path needs --steps: try it both ways
        from specmodel.errors import SpecmodelError

        if not isinstance(exc, SpecmodelError):
            raise
        return summarize([str(p)], 4)


def _nccl(p: Path) -> object:
    from specmodel.model.allreduce import fit_alpha_beta
    from specmodel.trace.nccl_tests import allreduce_points, check_corruption, parse_nccl_tests

    run = parse_nccl_tests(p)
    check_corruption(run)
    pts = allreduce_points(run, run.n_ranks or 8) if (run.n_ranks or 8) >= 2 else ()
    if len(pts) >= 2:
        fit_alpha_beta([x.msg_bytes for x in pts], [x.latency_s for x in pts], run.n_ranks or 8)
    return run


def _profile(p: Path) -> object:
    from specmodel.commands.predict import format_prediction
    from specmodel.model.accept import from_mean
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict
    from specmodel.schema.profile import load_profile

    prof = load_profile(p)
    out = ""
    for request in (None, 64):  # the decode phase, and a request priced end to end (prefill rows or not)
        try:
            pred = predict(prof, from_mean(2.0, prof.spec.max_accept_tokens), OperatingPoint(batch=1, spec=prof.spec,
                                                                                             request_tokens=request))
        except Exception as exc:  # a profile without prefill rows cannot price a request: refused in one line
            from specmodel.errors import SpecmodelError

            if request is None or not isinstance(exc, SpecmodelError):
                raise
            continue
        format_prediction(pred)  # what `predict` prints,
        out = json.dumps(pred.to_dict(), allow_nan=False)  # and what `predict --json` prints
    return out


def _accept_hist(p: Path) -> object:
    from specmodel.model.accept import from_histogram
    from specmodel.scenario.parse import parse_histogram

    raw = p.read_bytes()
    text = raw.decode("utf-8", errors="replace")
    for arg in ((text if "\x00" not in text else text.replace("\x00", "")), str(p)):
        try:
            from_histogram(parse_histogram(arg), max_tokens=65)
        except Exception as exc:
            from specmodel.errors import SpecmodelError

            if not isinstance(exc, SpecmodelError):
                raise
    return None


def _safetensors(p: Path) -> object:
    from specmodel.drafter.safetensors_io import read_checkpoint_headers, read_header

    if p.read_bytes()[:1] == b"{":  # an index: the shard it names sits beside it
        d = p.parent / "ckpt"
        d.mkdir(exist_ok=True)
        p.replace(d / "model.safetensors.index.json")
        return read_checkpoint_headers(d)
    return read_header(p)


def _hook_profile(prof: object) -> object:
    """What `--summarize` writes and `predict` prints of a hook's profile, every step of it."""
    from specmodel.commands.predict import format_prediction
    from specmodel.model.accept import from_mean
    from specmodel.model.inputs import OperatingPoint
    from specmodel.model.predict import predict
    from specmodel.schema.profile import Profile, profile_from_dict, profile_to_dict

    assert isinstance(prof, Profile)
    profile_from_dict(json.loads(json.dumps(profile_to_dict(prof), allow_nan=False)))
    for rate, request in ((None, None), (0.0, None), (None, 128)):
        point = OperatingPoint(batch=1, spec=prof.spec, proposal_rate=rate if prof.host_proposer is not None else None,
                               request_tokens=request if prof.requests is not None or prof.has("extend") else None)
        pred = predict(prof, from_mean(2.0, prof.spec.max_accept_tokens), point)
        format_prediction(pred)
        json.dumps(pred.to_dict(), allow_nan=False)
    return prof


def _vllm_hook(p: Path) -> object:
    """A mutated rank file summarized beside the unmutated baseline server's log (so the mutation
    reaches every step of `vllm --summarize`, not only the 'no baseline' refusal)."""
    from specmodel.engines.vllm.hooklog import summarize

    run = p.parent / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    p.replace(run / "rank0.jsonl")
    base = p.parent / "base"
    if not base.exists():
        shutil.copytree(DATA / "vllm_cpu_032" / "tp1_none" / "hook", base)
    return _hook_profile(summarize([base, run], name="fuzz"))


def _vllm_capture(p: Path) -> object:
    """A mutated capture sidecar beside the recorded run's real traces, read as `vllm --summarize` reads it."""
    from specmodel.engines.vllm.capture_ingest import read_capture

    run = p.parent / "caprun"
    if not run.exists():
        shutil.copytree(DATA / "vllm_cpu_032_capture" / "base", run)
    p.replace(run / "capture" / "rank0.json")
    return read_capture(run)


def _sglang_hook(p: Path) -> object:
    from specmodel.engines.sglang.hooklog import summarize

    run = p.parent / "run"
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir()
    p.replace(run / "rank0.jsonl")
    return _hook_profile(summarize([run], name="fuzz"))


def _sglang_seed(tmp: Path) -> Path:
    hdr = {"schema": "specmodel.sglang_forward", "schema_version": 1}
    lines = [{**hdr, "type": "meta", "sglang_version": "0.5.5", "rank": "0", "tp_size": 1, "model_path": "/m",
              "spec": {"algorithm": "EAGLE3", "steps": 3, "topk": 1, "num_draft_tokens": 4}}]
    for phase, b, t, n, s in (("decode", 1, 1, 1, 0.01), ("verify", 1, 4, 1, 0.012), ("draft", 1, 1, 2, 0.004),
                              ("draft_extend", 1, 4, 1, 0.003), ("extend", 1, 60, 1, 0.05)):
        lines += [{**hdr, "type": "forward", "phase": phase, "batch": b, "tokens": t, "forwards": n,
                   "runner": "target" if phase in ("decode", "verify", "extend") else "draft", "gpu_s": s}] * 3
    f = tmp / "sglang_rank0.jsonl"
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    return f


def _reading_json(obs: object, engine: str) -> str | None:
    """What `watch --json` prints for an observation (the profile of the seed's server)."""
    from specmodel.live.watch import assess, spec_for
    from specmodel.live.window import Observed
    from specmodel.schema.profile import load_profile

    if not isinstance(obs, Observed):
        return None
    prof = load_profile(DATA / "vllm_cpu_032_watch" / "tp1_ngram" / "profile" if engine == "vllm" else REFERENCE)
    return json.dumps(assess(prof, obs, spec_for(prof, obs, None)).to_dict(), allow_nan=False)


def _metrics(p: Path) -> object:
    """A /metrics page as `watch` reads it: sniffed, parsed, differenced against the seed's own
    first page over the window, assessed and encoded as `watch --json` does."""
    from specmodel.engines import metrics_format_of
    from specmodel.errors import SpecmodelError
    from specmodel.live.window import MetricsWindow, Scrape, observe_metrics

    text = p.read_bytes().decode("utf-8", errors="replace")
    fmt = metrics_format_of(text)
    if fmt is None:
        raise SpecmodelError("not a metrics page")
    sample = fmt.parse(text, str(p))
    first = (DATA / "vllm_cpu_032_watch" / "tp1_ngram" / "metrics_0.txt" if sample.engine == "vllm"
             else sorted((DATA / "sglang_metrics_055").glob("page_*.txt"))[5]).read_text()
    win = MetricsWindow(window_s=600)
    win.push(Scrape(t_s=0.0, sample=fmt.parse(first, "first")))
    win.push(Scrape(t_s=10.0, sample=sample))
    return _reading_json(observe_metrics(win, 3), sample.engine)


def _watch_log(p: Path) -> object:
    """A server log as `watch LOG --once --json` reads it: followed, observed, assessed, encoded."""
    from specmodel.live.sources import LogSource
    from specmodel.live.window import observe_log

    windows, _, eng = LogSource(path=str(p)).read()
    return _reading_json(observe_log(windows, eng, 3, 1e12), eng.name)


def _seeds(target: str, tmp: Path) -> tuple[list[Path], object]:
    if target == "trace":
        return [DATA / "kineto_cpu_gloo_tp2" / "cpu-gloo-rank0.trace.json.gz",
                DATA / "kineto_gpu_tp2" / "1764000000-TP-0.trace.json"], _trace
    if target == "log":
        return [DATA / "logs_sglang_055" / "server.log", DATA / "logs_vllm_new" / "server.log",
                DATA / "logs_vllm_old" / "server.log", DATA / "logs_bench_speculative" / "output.jsonl"], _log
    if target == "nccl_tests":
        return [DATA / "nccl_tests_pcie8" / "all_reduce_perf.txt", DATA / "nccl_tests_per_iter" / "all_reduce_perf.txt",
                DATA / "nccl_tests_old_error" / "all_reduce_perf.txt"], _nccl
    if target == "profile":
        return [REFERENCE / "profile.json", DATA / "profile_v1" / "profile.json",
                DATA / "profile_v4_requests" / "profile.json", DATA / "vllm_cli_1620_tp1" / "profile_ngram.json",
                *(MUTATED / f"{name}.json" for name, _, _ in PROFILE_MUTATIONS)], _profile
    if target == "vllm_hook":
        rec = DATA / "vllm_cpu_032"
        return [rec / "tp1_ngram" / "hook" / "rank0.jsonl", rec / "tp1_draft_model" / "hook" / "rank0.jsonl",
                rec / "tp1_none" / "hook" / "rank0.jsonl"], _vllm_hook
    if target == "sglang_hook":
        return [_sglang_seed(tmp)], _sglang_hook
    if target == "vllm_capture":
        return [DATA / "vllm_cpu_032_capture" / "base" / "capture" / "rank0.json"], _vllm_capture
    if target == "metrics":
        return [DATA / "vllm_cpu_032_watch" / "tp1_ngram" / "metrics_1.txt",
                sorted((DATA / "sglang_metrics_055").glob("page_*.txt"))[7]], _metrics
    if target == "watch_log":
        return [DATA / "logs_sglang_055" / "server.log", DATA / "vllm_cpu_032" / "tp1_ngram" / "server.log"], _watch_log
    if target == "accept_hist":
        h1 = tmp / "h1.csv"
        h1.write_text("value,count\n1,10\n2,30\n3,40\n4,20\n")
        h2 = tmp / "h2.json"
        h2.write_text('{"1": 10, "2": 30, "3": 40, "4": 20}')
        h3 = tmp / "h3.txt"
        h3.write_text("1:10,2:30,3:40,4:20")
        return [h1, h2, h3], _accept_hist
    # safetensors: a small drafter checkpoint's shard header and its index
    from tests.test_drafter_safetensors import write_drafter

    d = write_drafter(tmp / "drafter", shards=2)
    shard = sorted(d.glob("*.safetensors"))[0]
    small = tmp / "small.safetensors"  # header + a little data: mutations land in the header
    small.write_bytes(shard.read_bytes()[:4096])
    return [small, d / "model.safetensors.index.json"], _safetensors


@pytest.mark.slow  # a time-bounded fuzz: seconds per reader by design (make test runs it)
@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_reader_raises_only_specmodel_error(tmp_path: Path, target: str) -> None:
    seeds, reader = _seeds(target, tmp_path)
    if target == "safetensors":
        # shards named by the mutated index must resolve: keep them beside the index's directory
        ck = tmp_path / "work" / "ckpt"
        ck.mkdir(parents=True)
        for f in (tmp_path / "drafter").glob("*.safetensors"):
            shutil.copy(f, ck / f.name)
    res: FuzzResult = fuzz(target, seeds, reader, seconds=PER_TARGET_S, work=tmp_path / "work")  # type: ignore[arg-type]
    report = os.environ.get("SPECMODEL_FUZZ_REPORT")
    if report:
        with open(report, "a") as fh:
            fh.write(json.dumps({"target": target, "examples": res.examples, "seconds": round(res.seconds, 2),
                                 "examples_per_s": round(res.examples / max(res.seconds, 1e-9), 1),
                                 "rejected": res.rejected, "crashes": len(res.crashes),
                                 "slowest_cpu_s": round(res.slowest_cpu_s, 3)}) + "\n")
    assert res.examples > 0
    assert not res.crashes, "\n\n".join(f"{c.target} example {c.example} (seed {c.seed_file}, input kept at "
                                        f"{c.input_path}):\n{c.error[-3000:]}" for c in res.crashes)
    assert res.slowest_cpu_s < MAX_EXAMPLE_CPU_S, f"{target}: one input cost {res.slowest_cpu_s:.1f} s of CPU"


@pytest.mark.parametrize(("name", "path", "token"), PROFILE_MUTATIONS, ids=[m[0] for m in PROFILE_MUTATIONS])
def test_a_profile_field_at_an_extreme_is_refused_naming_file_and_field(name: str, path: tuple[str | int, ...],
                                                                      token: str) -> None:
    seed = MUTATED / f"{name}.json"
    # the seed is what its name says: the shipped reference with that one field changed (rewrite
    # the seeds with `python -m tests.fuzz` when the reference changes)
    assert seed.read_text() == mutated_profile_text((REFERENCE / "profile.json").read_text(), path, token)
    # every step `predict` takes (decode phase, a priced request, the printed and --json output):
    # before the field bounds, a spread_s of 1e+308 escaped as OverflowError from model/costs.py
    with pytest.raises(SpecmodelError) as e:
        _profile(seed)
    msg = str(e.value)
    where = f"costs[{path[1]}]" if path[0] == "costs" else str(path[0])
    assert "\n" not in msg and msg.startswith(str(seed)) and where in msg and str(path[-1]) in msg, msg
