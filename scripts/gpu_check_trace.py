"""The trace side of the GPU check (``scripts/gpu-check`` runs it): what Kineto, the SGLang hook
and NVML really do on this box, against what specmodel assumes.

    python scripts/gpu_check_trace.py --out gpu-check-trace.json      # on a CUDA box
    python scripts/gpu_check_trace.py --cpu-dry-run --out x.json       # the CPU-possible parts (or --dry-run)

Checks (each: expected, observed, ok):

* ``kineto_categories``: one annotated forward (a matmul + an all-reduce) under torch.profiler.
  GPU: categories ``kernel`` / ``gpu_user_annotation`` / ``cuda_runtime``; the collective kernel
  carries ``Collective name`` and a message size; the attribution engine finds it in the pass.
  CPU: the gloo op is classified and its message size read from ``Input Dims``.
* ``innermost_annotation``: nested ``record_function`` spans (outer > inner) around kernels:
  which device span each kernel lands in, and that ingest counts the nested pass spans once.
* ``sglang_hook_capture``: the SGLang hook on the stand-in runner (tests/data/sglang_standin)
  that captures a CUDA graph after two warm-ups inside SGLang's ``model_capture_mode()``:
  no warm-up or capture rows; replays recorded with their forward count (and CUDA-event time).
* ``vllm_hook_capture``: the vLLM hook's torch.profiler capture (engines/vllm/capture.py) around a
  stand-in forward -- a CUDA-graph replay on a GPU -- read back by engines/vllm/capture_ingest.py: on by default
  only where graphs run, one pass per captured step and phase, every replay's kernels mapped to
  its phase (one GPU shows no all-reduce share: no TP > 1 collective; docs/allreduce-capture.md).
* the hooks' clocks (``scripts/gpu_check_hooks.py``, on the stand-ins of ``tests/standins.py``):
  ``vllm_hook_graph_replay`` (the vLLM hook's ``forward_s`` around a CUDA-graph replay vs the
  check's own CUDA events), ``vllm_hook_clocks`` (``host_step_s`` ≈ ``gpu_step_s`` for a step that
  synchronises at its end; ``overhead_s`` on the GPU clock when the host returns first),
  ``vllm_hook_v2_runner`` (Model Runner V2's seams: steps recorded with ``model_runner: "v2"``),
  ``vllm_hook_never_blocks`` (a GPU kept busy while the host runs past the queue: no synchronise
  call on the step path, drops counted, the rest written once it catches up) and
  ``sglang_scheduler_step`` (the SGLang scheduler's step records on CUDA events: ``step_s`` ≥
  ``forwards_s``). The dry run runs them on a simulated device.
* ``nvml_topology``: profile/hardware.py on this box: the NVML device found by UUID is the CUDA
  device (GPU only).

Writes one JSON results file (``--out``, atomically) and exits 1 on any mismatch, 2 when asked
for the GPU checks without a CUDA device.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from specmodel.schema.formats import GPU_CHECK_TRACE  # noqa: E402  (the checkout, not an installed copy)

sys.path.insert(0, str(REPO / "scripts"))
import gpu_check_hooks  # noqa: E402  (beside this script)

STANDIN = REPO / "tests" / "data" / "sglang_standin"


def _check(name: str, expected: dict[str, Any], observed: dict[str, Any]) -> dict[str, Any]:
    ok = all(observed.get(k) == v for k, v in expected.items())
    return {"name": name, "ok": ok, "expected": expected, "observed": observed}


def _trace(tmp: Path, fn: Callable[[], None], cuda: bool) -> list[dict[str, Any]]:
    import torch
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts, record_shapes=True) as prof:
        fn()
        if cuda:
            torch.cuda.synchronize()
    path = tmp / "probe.trace.json"
    prof.export_chrome_trace(str(path))
    doc = json.loads(path.read_text())
    return list(doc["traceEvents"])


def _process_group(cuda: bool) -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 2000))
    kw: dict[str, Any] = {}
    if cuda:
        import torch

        kw["device_id"] = torch.device("cuda", 0)
    dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1, **kw)


def check_kineto_categories(tmp: Path, cuda: bool) -> dict[str, Any]:
    import torch
    import torch.distributed as dist

    from specmodel.schema.phases import phase_label
    from specmodel.trace import attribution as engine
    from specmodel.trace.collectives import classify_cpu_op, classify_kernel

    _process_group(cuda)
    dev = "cuda" if cuda else "cpu"
    x = torch.randn(256, 256, device=dev)
    buf = torch.zeros(1024, device=dev)
    label = phase_label("decode", 1, 1)

    # one GPU: NCCL's one-rank path (src/device/onerank.cu ncclLaunchOneRank) launches no kernel
    # for an in-place SUM, but does for AVG (PreMulSum: oneRankReduce<...>), which is what we need
    # to see Kineto put record_param_comms' args on a collective kernel. gloo has no AVG.
    op = dist.ReduceOp.AVG if cuda else dist.ReduceOp.SUM

    def fwd() -> None:
        with torch.profiler.record_function(label):
            y = x @ x
            dist.all_reduce(buf, op=op)
            (y + 1).sum()

    fwd()  # warm-up: NCCL communicator set-up stays out of the trace
    events = _trace(tmp, fwd, cuda)
    cats = Counter(e.get("cat") for e in events if e.get("ph") == "X")
    col = engine.Collector(path="probe", span_name=label.__eq__)
    for e in events:
        col.on_event(e)
    obs: dict[str, Any] = {"categories": sorted(c for c in cats if c)}
    if cuda:
        colls = [e for e in events if e.get("cat") == "kernel" and classify_kernel(str(e.get("name")), e.get("args"))]
        obs["collective_kernels"] = sorted({str(e.get("name"))[:80] for e in colls})
        obs["collective_name_arg"] = any("Collective name" in (e.get("args") or {}) for e in colls)
        gpu = engine.merge_gpu_spans(col.gpu_spans)
        phases = [engine.PhaseSpan(span=s, kind="decode", batch=1, tokens=1, label=label) for s in gpu]
        _, recs = engine.gpu_passes(col, phases, [])
        obs["passes"] = len(recs)
        obs["allreduce_in_pass"] = bool(recs) and recs[0].n_allreduce >= 1
        obs["msg_bytes"] = list(recs[0].msg_bytes) if recs else []
        exp: dict[str, Any] = {"has_kernel": True, "has_gpu_user_annotation": True, "has_cuda_runtime": True,
                               "collective_name_arg": True, "passes": 1, "allreduce_in_pass": True,
                               "msg_bytes": [1024 * 4]}
        obs.update({"has_kernel": "kernel" in cats, "has_gpu_user_annotation": "gpu_user_annotation" in cats,
                    "has_cuda_runtime": "cuda_runtime" in cats})
    else:
        gloo = [e for e in events if classify_cpu_op(str(e.get("name")), e.get("args"))]
        obs["collective_ops"] = sorted({str(e.get("name")) for e in gloo})
        recs = engine.cpu_passes(col, [engine.PhaseSpan(span=s, kind="decode", batch=1, tokens=1, label=label)
                                       for s in col.cpu_spans])
        obs["passes"] = len(recs)
        obs["allreduce_in_pass"] = bool(recs) and recs[0].n_allreduce == 1
        obs["msg_bytes"] = list(recs[0].msg_bytes) if recs else []
        obs["has_user_annotation"] = "user_annotation" in cats
        exp = {"has_user_annotation": True, "passes": 1, "allreduce_in_pass": True, "msg_bytes": [1024 * 4]}
    return _check("kineto_categories", exp, obs)


def check_innermost_annotation(tmp: Path, cuda: bool) -> dict[str, Any]:
    import torch

    from specmodel.trace.ingest import ingest
    from specmodel.trace.kineto import IngestOptions

    dev = "cuda" if cuda else "cpu"
    a = torch.randn(512, 512, device=dev)
    outer, inner = "specmodel.verify[bs=1,toks=4]", "step[VERIFY bs=1]"

    def fwd() -> None:
        for _ in range(2):
            with torch.profiler.record_function(outer):
                torch.mm(a, a)  # kernel A: outer only
                with torch.profiler.record_function(inner):
                    torch.relu(a)  # kernel B: inside both
                torch.sigmoid(a)  # kernel C: outer only

    fwd()
    events = _trace(tmp, fwd, cuda)
    obs: dict[str, Any] = {}
    exp: dict[str, Any] = {}
    if cuda:
        def windows(name: str) -> list[tuple[float, float]]:
            return [(e["ts"], e["ts"] + e["dur"]) for e in events
                    if e.get("cat") == "gpu_user_annotation" and e.get("name") == name]

        kern = [e for e in events if e.get("cat") == "kernel"]

        def where(pred: Callable[[str], bool]) -> dict[str, bool]:
            ks = [k for k in kern if pred(str(k.get("name", "")).lower())]
            mid = [(k["ts"] + k["ts"] + k["dur"]) / 2 for k in ks]
            return {n: bool(mid) and all(any(lo <= m <= hi for lo, hi in windows(n)) for m in mid)
                    for n in (outer, inner)}

        obs["outer_device_spans"] = len(windows(outer))
        obs["inner_device_spans"] = len(windows(inner))
        obs["relu_kernel_in"] = where(lambda n: "relu" in n or "clamp" in n or "threshold" in n)
        obs["gemm_kernel_in"] = where(lambda n: "gemm" in n or "sgemm" in n or "cutlass" in n or "nvjet" in n)
        # the fact ingest builds on: the inner span's device window holds the inner kernel; the
        # outer's device window (if Kineto emits one) is only observed, not assumed
        exp = {"inner_device_spans": 2}
        obs["inner_holds_its_kernel"] = obs["relu_kernel_in"][inner]
        exp["inner_holds_its_kernel"] = True
    path = tmp / "rank0.trace.json"
    path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    if not cuda:  # ingest needs collectives on a CPU trace: add one gloo op per inner span
        for e in [e for e in events if e.get("name") == inner and e.get("cat") == "user_annotation"]:
            events.append({"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": e["pid"],
                           "tid": e["tid"], "ts": e["ts"] + 0.1, "dur": max(e["dur"] - 0.2, 0.01)})
        path.write_text(json.dumps({"distributedInfo": {"rank": 0, "world_size": 1}, "traceEvents": events}))
    res = ingest([path], IngestOptions(num_draft_tokens=4), jobs=1)
    verify = [p for p in res.phases if p.kind == "verify"]
    obs["verify_passes_counted"] = sum(p.samples for p in verify)
    obs["verify_tokens"] = verify[0].tokens if verify else None
    exp.update({"verify_passes_counted": 2, "verify_tokens": 4})  # 2 forwards, not 4 spans
    return _check("innermost_annotation", exp, obs)


def check_sglang_hook_capture(tmp: Path, cuda: bool) -> dict[str, Any]:
    import importlib

    import torch

    saved = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.")}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(STANDIN))
    os.environ["SGLANG_STANDIN_FLAVOR"] = "0.5.23"
    from specmodel.engines.sglang import hook

    try:
        hook.install(tmp / "hook")
        fbi = importlib.import_module("sglang.srt.model_executor.forward_batch_info")
        mr = importlib.import_module("sglang.srt.model_executor.model_runner")
        dr = importlib.import_module("sglang.srt.speculative.eagle_draft_cuda_graph_runner")
        dev = "cuda" if cuda else "cpu"
        target = mr.ModelRunner(device=dev)
        draft = mr.ModelRunner(is_draft_worker=True, device=dev)
        for r in (target, draft):
            r.server_args.skip_server_warmup = True

        class Worker:
            model_runner = draft

        steps = draft.server_args.speculative_num_steps
        runner = dr.EAGLEDraftCudaGraphRunner(Worker(), capture_bs=(1, 2))  # 2 warm-ups + capture per bs

        def fb(mode: Any, bs: int, n: int) -> Any:
            return fbi.ForwardBatch(mode, bs, torch.zeros(n, dtype=torch.long, device=dev))

        target.forward(fb(fbi.ForwardMode.EXTEND, 2, 20))
        for _ in range(3):
            runner.execute(fb(fbi.ForwardMode.DECODE, 2, 2))
            target.forward(fb(fbi.ForwardMode.TARGET_VERIFY, 2, 8))
        if cuda:
            torch.cuda.synchronize()
        hook.flush(wait=True)
        (rank0,) = sorted((tmp / "hook").glob("rank0-*.jsonl"))  # this process's file (rank<tp>-dp-pp-pid)
        rows = [json.loads(x) for x in rank0.read_text().splitlines()]
        fw = [r for r in rows if r["type"] == "forward"]
        obs = {
            "rows": dict(Counter(f"{r['phase']}:{r['member']}" for r in fw)),
            "draft_forwards_per_replay": sorted({r["forwards"] for r in fw if r["phase"] == "draft"}),
            "timing_field": sorted({k for r in fw for k in ("gpu_s", "cpu_s") if k in r}),
            "graphs_captured": len(runner.graphs),
        }
        exp = {"rows": {"extend:ModelRunner.forward": 1, "draft:EAGLEDraftCudaGraphRunner.execute": 3,
                        "verify:ModelRunner.forward": 3},  # no row from the 2 x 2 x (steps-1) warm-ups
               "draft_forwards_per_replay": [steps - 1],
               "timing_field": ["gpu_s" if cuda else "cpu_s"],
               "graphs_captured": 2 if cuda else 0}
        return _check("sglang_hook_capture", exp, obs)
    finally:
        hook.uninstall()
        for k in [k for k in sys.modules if k == "sglang" or k.startswith("sglang.")]:
            del sys.modules[k]
        sys.modules.update(saved)
        sys.path.remove(str(STANDIN))


def check_vllm_hook_capture(tmp: Path, cuda: bool) -> dict[str, Any]:
    """The vLLM hook's capture (engines/vllm/capture.py) around a stand-in forward -- a CUDA graph
    replay on a GPU (a matmul and, where NCCL lets a one-rank all-reduce be captured, an AVG
    all-reduce inside the graph), eager ops and a gloo all-reduce on the CPU -- read back by
    engines/vllm/capture_ingest.py. One GPU (TP 1) shows that replays are captured and their kernels map to the
    phases; it shows no all-reduce share of a real TP > 1 collective (NCCL's one-rank AVG is a
    local kernel): that needs TP > 1 (docs/allreduce-capture.md)."""
    import types

    import torch
    import torch.distributed as dist

    from specmodel.engines.hook.annotate import phase
    from specmodel.engines.vllm import capture as vc
    from specmodel.engines.vllm.capture_ingest import read_capture
    from specmodel.schema.phases import phase_label
    from specmodel.trace.kineto import IngestOptions, parse_rank_file

    _process_group(cuda)
    dev = "cuda" if cuda else "cpu"
    x = torch.randn(256, 256, device=dev)
    buf = torch.ones(1024, device=dev)
    op = dist.ReduceOp.AVG if cuda else dist.ReduceOp.SUM
    graph_ar: Any = None

    def body(with_ar: bool) -> None:
        y = x @ x
        if with_ar:
            dist.all_reduce(buf, op=op)
        (y + 1).sum()

    step: Callable[[], None] = lambda: body(True)  # noqa: E731
    if cuda:
        def capture_graph(with_ar: bool) -> Any:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                body(with_ar)
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                body(with_ar)
            return g

        try:
            graph, graph_ar = capture_graph(True), True
        except Exception as exc:  # noqa: BLE001 - recorded: what this box's NCCL allows
            torch.cuda.synchronize()
            graph, graph_ar = capture_graph(False), f"not capturable here: {type(exc).__name__}"
        step = graph.replay
    runner = types.SimpleNamespace(device=torch.device(dev), model_config=types.SimpleNamespace(enforce_eager=False))
    saved = os.environ.pop(vc.ENV_STEPS, None)
    try:
        default = vc.Capture()
        default.begin(runner, "decode")  # the default: on where a worker replays graphs, off on the CPU
        default_on = default.steps > 0
        if not cuda:
            os.environ[vc.ENV_STEPS] = str(vc.GPU_DEFAULT_STEPS)
        cap = vc.Capture()
        for i in range(vc.WARMUP_STEPS + vc.GPU_DEFAULT_STEPS + 2):
            kind = ("decode", "verify")[i % 2]
            cap.begin(runner, kind)
            with phase(phase_label(kind, 1, 1 if kind == "decode" else 4)):
                step()
            if cuda:
                torch.cuda.synchronize()
            cap.end(kind, tmp, "0")
    finally:
        os.environ.pop(vc.ENV_STEPS, None)
        if saved is not None:
            os.environ[vc.ENV_STEPS] = saved
    files = sorted(p.name for p in (tmp / "capture").iterdir()) if (tmp / "capture").is_dir() else []
    res = read_capture(tmp) if files else None
    trace = tmp / "capture" / "rank0.pt.trace.json.gz"
    rt = parse_rank_file(str(trace), IngestOptions(), single=True) if files else None
    import gzip

    events = json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] if files else []
    obs: dict[str, Any] = {
        "default_on": default_on, "files": files,
        "passes": {f"{k[0]} b{k[1]} t{k[2]}": n for k, n in (res.passes if res else ())},
        "shares": {f"{k[0]} b{k[1]} t{k[2]}": round(v, 4) for k, v in (res.shares if res else ())},
        "attribution": res.attribution if res else None,
        "graph_launches": sum(1 for e in events if str(e.get("name", "")).startswith("cudaGraphLaunch")),
        "kernels_mapped_to_phases": bool(rt and rt.passes) and all(p.busy_s > 0 for p in rt.passes) if cuda else None,
        "allreduce_in_graph": graph_ar,
        "tp1_shows": "graph replays captured and their kernels mapped to the phases; no TP > 1 all-reduce share",
    }
    n = vc.GPU_DEFAULT_STEPS // 2
    exp: dict[str, Any] = {"default_on": cuda, "files": ["rank0.json", "rank0.pt.trace.json.gz"],
                           "passes": {"decode b1 t1": n, "verify b1 t4": n}}
    if cuda:
        exp.update({"graph_launches": vc.GPU_DEFAULT_STEPS, "kernels_mapped_to_phases": True})
    else:  # the gloo all-reduce inside each span: a share between 0 and 1
        obs["shares_in_0_1"] = bool(res) and all(0 < v < 1 for _, v in res.shares)  # type: ignore[union-attr]
        exp["shares_in_0_1"] = True
    return _check("vllm_hook_capture", exp, obs)


def check_nvml_topology(tmp: Path, cuda: bool) -> dict[str, Any]:
    import torch

    from specmodel.profile import hardware

    n = torch.cuda.device_count()
    hw = hardware.collect("cuda", n)
    nvml = hw.get("nvml") or {}
    gpus = nvml.get("gpus") or []
    uuids = hardware.cuda_uuids(list(range(n)))
    obs = {"nvml_available": nvml.get("available"), "error": nvml.get("error"),
           "lookup": sorted({g.get("nvml_lookup") for g in gpus}),
           "uuids_match": [g.get("uuid") for g in gpus] == uuids,
           "names_match": [g.get("name") for g in gpus] == [torch.cuda.get_device_name(i) for i in range(n)],
           "interconnect": nvml.get("interconnect"), "pairs": nvml.get("pairs"), "gpus": gpus}
    exp = {"nvml_available": True, "error": None, "lookup": ["uuid"], "uuids_match": True, "names_match": True}
    return _check("nvml_topology", exp, obs)


CHECKS: tuple[tuple[str, Callable[[Path, bool], dict[str, Any]], bool], ...] = (
    ("kineto_categories", check_kineto_categories, True),
    ("innermost_annotation", check_innermost_annotation, True),
    ("sglang_hook_capture", check_sglang_hook_capture, True),
    ("vllm_hook_capture", check_vllm_hook_capture, True),
    *gpu_check_hooks.CHECKS,  # the hooks' clocks on the device (scripts/gpu_check_hooks.py)
    ("nvml_topology", check_nvml_topology, False),  # (name, function, possible on a CPU)
)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check_trace.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cpu-dry-run", "--dry-run", dest="cpu_dry_run", action="store_true",
                    help="run the CPU-possible parts only (the hooks' checks on a simulated device)")
    ap.add_argument("--out", type=Path, default=None, help="write the results JSON here")
    a = ap.parse_args(argv)
    import torch

    from specmodel.io import atomic_write_json

    cuda = not a.cpu_dry_run
    if cuda and not torch.cuda.is_available():
        print("gpu_check_trace: error: no CUDA device (use --cpu-dry-run for the CPU-possible parts)",
              file=sys.stderr)
        return 2
    results = []
    with tempfile.TemporaryDirectory(prefix="specmodel-gpu-check-") as tmp:
        for name, fn, on_cpu in CHECKS:
            if not cuda and not on_cpu:
                results.append({"name": name, "ok": True, "skipped": "GPU only (--cpu-dry-run)"})
                continue
            d = Path(tmp) / name
            d.mkdir()
            t0 = time.monotonic()
            try:
                results.append(fn(d, cuda))
            except Exception as exc:  # a check that crashes is a mismatch, reported like one
                results.append({"name": name, "ok": False, "error": f"{type(exc).__name__}: {exc}",
                                "traceback": traceback.format_exc(limit=5)})
            results[-1]["wall_s"] = round(time.monotonic() - t0, 3)
    ok = all(r["ok"] for r in results)
    doc = {**GPU_CHECK_TRACE.header(), "mode": "gpu" if cuda else "cpu-dry-run",
           "created_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
           "torch": torch.__version__, "device": torch.cuda.get_device_name(0) if cuda else "cpu",
           "ok": ok, "checks": results}
    if a.out is not None:
        atomic_write_json(a.out, doc)
    for r in results:
        state = "skipped" if r.get("skipped") else ("ok" if r["ok"] else "MISMATCH")
        print(f"{r['name']:<22} {state}" + (f"  {r.get('error', '')}" if not r["ok"] else ""))
        if not r["ok"] and "expected" in r:
            for k, v in r["expected"].items():
                if r["observed"].get(k) != v:
                    print(f"    {k}: expected {v!r}, observed {r['observed'].get(k)!r}")
    try:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
    except Exception:
        pass
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
