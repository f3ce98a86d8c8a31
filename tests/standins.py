"""Stand-ins of the engine classes the hooks wrap, shared by the tests and ``scripts/gpu_check_trace.py``
(which runs them on a real GPU): vLLM's V1 runner (``vllm.v1.worker.gpu_model_runner``) and Model
Runner V2 (``vllm.v1.worker.gpu``), registered under vLLM's module names so ``install()`` finds them
the way it finds vLLM; the SGLang stand-in package (``tests/data/sglang_standin``) loaded under
SGLang's; and a simulated device (:class:`FakeGPU`) for the checks' CPU dry run.

The stand-ins' work is named by role (``allreduce``, ``prepare``, ``forward``, ``draft``,
``draft_step``, ``sample``) and sleeps the role's seconds unless a ``work`` mapping replaces it
(a test's device clock, the GPU check's CUDA-graph replay). Kept free of pytest: the GPU box runs
the check without it.
"""

from __future__ import annotations

import os
import sys
import time
import types
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from specmodel.engines.vllm import hook
from specmodel.engines.vllm import targets as vtargets

STANDIN = Path(__file__).parent / "data" / "sglang_standin"

AR_S = 0.002
FWD_COMPUTE_S = 0.003
DRAFT_COMPUTE_S = 0.002
HOST_S = 0.004
DRAFT_STEP_S = 0.001  # each drafter forward after the first (one token per request)

Work = Mapping[str, Callable[[float], None]]


def _busy(seconds: float) -> None:
    """The stand-in engine's work (host and device alike on the CPU); a test of the GPU clocks swaps
    it for device work the host does not wait for."""
    time.sleep(seconds)


def _do(work: Work | None, role: str, seconds: float) -> None:
    fn = work.get(role) if work is not None else None
    if fn is not None:
        fn(seconds)
    else:
        _busy(seconds)  # looked up at call time: a test may replace it


@dataclass
class Cached:
    num_computed_tokens: list[int]


@dataclass
class SO:
    """A SchedulerOutput with the fields the hook reads (names as in vllm/v1/core/sched/output.py)."""

    num_scheduled_tokens: dict[str, int]
    total_num_scheduled_tokens: int
    scheduled_spec_decode_tokens: dict[str, list[int]] = field(default_factory=dict)
    scheduled_new_reqs: list[Any] = field(default_factory=list)
    scheduled_cached_reqs: Cached = field(default_factory=lambda: Cached([]))
    # vllm 0.33 / 0.34 ``v1/core/sched/output.py:307``: no scheduled request can use the next drafts
    skip_drafts: bool = False


def so(batch: int, k: int = 0, ctx: int = 100, prefill: int = 0, skip_drafts: bool = False) -> SO:
    """A decode (``k`` = 0), verify (``k`` draft tokens per request) or prefill step's scheduler output."""
    per = {f"r{i}": 1 + k for i in range(batch)}
    spec = {f"r{i}": [7] * k for i in range(batch)} if k else {}
    if prefill:
        per["r0"] = prefill
    return SO(num_scheduled_tokens=per, total_num_scheduled_tokens=sum(per.values()),
              scheduled_spec_decode_tokens=spec, scheduled_cached_reqs=Cached([ctx] * batch), skip_drafts=skip_drafts)


@contextmanager
def _registered(modules: dict[str, ModuleType], out: Path) -> Iterator[list[str]]:
    """``modules`` under their names in ``sys.modules`` and the vLLM hook installed into ``out``;
    both undone on exit."""
    saved = {n: sys.modules.get(n) for n in modules}
    sys.modules.update(modules)
    try:
        yield hook.install(out)
    finally:
        hook.uninstall()
        for n, m in saved.items():
            if m is None:
                sys.modules.pop(n, None)
            else:
                sys.modules[n] = m


def _parallel_state(work: Work | None, tp_rank: int) -> tuple[types.ModuleType, Any]:
    """A fake ``vllm.distributed.parallel_state`` (both runners import it): its GroupCoordinator's
    all-reduce does the stand-in's all-reduce work; and the TP group."""
    ps = types.ModuleType(vtargets.PARALLEL_MODULE)

    class GroupCoordinator:
        def _all_reduce_out_place(self, x: Any) -> Any:
            _do(work, "allreduce", AR_S)
            return x

    ps.GroupCoordinator = GroupCoordinator  # type: ignore[attr-defined]
    ps.get_tensor_model_parallel_rank = lambda: tp_rank  # type: ignore[attr-defined]
    return ps, GroupCoordinator()


@contextmanager
def vllm_v1(out: Path, work: Work | None = None, *, tp_rank: int = 1) -> Iterator[types.SimpleNamespace]:
    """Fake ``vllm.distributed.parallel_state`` + ``vllm.v1.worker.gpu_model_runner`` (+ the
    proposer module), the hook installed. A V1 step: ``execute_model`` (``_model_forward``: three
    all-reduces and the compute) then ``sample_tokens`` (sampling, then the proposal)."""
    ps, tp_group = _parallel_state(work, tp_rank)
    gmr = types.ModuleType(vtargets.RUNNER_MODULE)
    lbp = types.ModuleType(vtargets.PROPOSER_MODULE)

    class SpecDecodeBaseProposer:
        """propose as in vllm/v1/spec_decode/llm_base_proposer.py: the first forward (over the
        verified tokens, with the all-reduce), its sampling, then k - 1 single-token forwards."""

        def __init__(self, k: int) -> None:
            self.k = k

        def propose(self) -> list[int]:
            tp_group._all_reduce_out_place(1)
            _do(work, "draft", DRAFT_COMPUTE_S)
            out = [self._sample_draft_tokens()]
            for _ in range(self.k - 1):
                _do(work, "draft_step", DRAFT_STEP_S)
                out.append(self._sample_draft_tokens())
            return out

        def _sample_draft_tokens(self) -> int:
            return 1

    lbp.SpecDecodeBaseProposer = SpecDecodeBaseProposer  # type: ignore[attr-defined]

    class GPUModelRunner:
        device = "cpu"
        model_config = types.SimpleNamespace(model="/models/tiny")
        vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(tensor_parallel_size=2))

        def __init__(self, method: str | None, k: int = 3) -> None:
            self.speculative_config = (types.SimpleNamespace(method=method, num_speculative_tokens=k,
                                                             draft_model_config=None) if method else None)
            self.drafter = SpecDecodeBaseProposer(k)

        def execute_model(self, scheduler_output: Any, intermediate_tensors: Any = None) -> Any:
            self._model_forward()
            return None

        def _model_forward(self, **kw: Any) -> Any:
            for _ in range(3):
                tp_group._all_reduce_out_place(1)
            _do(work, "forward", FWD_COMPUTE_S)
            return 0

        def sample_tokens(self, grammar_output: Any) -> Any:
            _do(work, "sample", HOST_S)
            if self.speculative_config is not None:
                self.propose_draft_token_ids()
            return "output"

        def propose_draft_token_ids(self, *a: Any) -> Any:
            if self.speculative_config.method == "draft_model":
                return [self.drafter.propose()]
            _do(work, "draft", DRAFT_COMPUTE_S)  # a host lookup (ngram)
            return [[1, 2, 3]]

        def shutdown(self) -> None:
            return None

    gmr.GPUModelRunner = GPUModelRunner  # type: ignore[attr-defined]
    mods = {vtargets.PARALLEL_MODULE: ps, vtargets.RUNNER_MODULE: gmr, vtargets.PROPOSER_MODULE: lbp}
    with _registered(mods, out) as patched:
        yield types.SimpleNamespace(Runner=GPUModelRunner, group=tp_group, out=out, patched=patched)


@contextmanager
def vllm_v2(out: Path, work: Work | None = None, *, tp_rank: int = 0,
            replace: Mapping[str, ModuleType] | None = None) -> Iterator[types.SimpleNamespace]:
    """Model Runner V2's step, registered under V2's module names, the hook installed:
    ``execute_model`` (input preparation, ``StepTimingCollector.forward_start``, the model with
    three all-reduces, return) + ``sample_tokens`` (sampling, ``speculator.propose``: k = 3 drafter
    forwards with an all-reduce each, an async output); ``_dummy_run`` calls
    ``execute_model(dummy_run=True)`` as V2's warm-up, capture and DP padding do. ``replace``: modules
    registered instead of the stand-in's own (a release whose module lacks a member)."""
    ps, group = _parallel_state(work, tp_rank)
    timing = types.ModuleType(vtargets.V2_TIMING_MODULE)

    class StepTimingCollector:
        def forward_start(self) -> None:
            return None

    timing.StepTimingCollector = StepTimingCollector  # type: ignore[attr-defined]
    spec_mod = types.ModuleType(f"{vtargets.V2_SPEC}.standalone_ar.speculator")

    class StandaloneARSpeculator:
        def propose(self, input_batch: Any, *a: Any, dummy_run: bool = False, **kw: Any) -> Any:
            for _ in range(3):  # k = 3 drafter forwards, one all-reduce each
                group._all_reduce_out_place(1)
            _do(work, "draft", DRAFT_COMPUTE_S)
            return "drafts"

    spec_mod.StandaloneARSpeculator = StandaloneARSpeculator  # type: ignore[attr-defined]
    suffix_mod = types.ModuleType(f"{vtargets.V2_SPEC}.suffix.speculator")

    class SuffixSpeculator:
        """vllm 0.34 ``v1/worker/gpu/spec_decode/suffix/speculator.py:500``; ``propose`` (:682) with its
        signature: a host-side suffix-tree lookup, no forward (no all-reduce), K drafts."""

        def propose(self, input_batch: Any, attn_metadata: Any, slot_mappings: Any, last_hidden_states: Any,
                    aux_hidden_states: Any, num_sampled: Any, num_rejected: Any, last_sampled: Any,
                    next_prefill_tokens: Any, temperature: Any, seeds: Any, dp_sync_state: Any = None,
                    dummy_run: bool = False, skip_attn_for_dummy_run: bool = False, mm_inputs: Any = None,
                    is_profile: bool = False, num_speculative_tokens: int | None = None) -> Any:
            if num_speculative_tokens:
                _do(work, "draft", DRAFT_COMPUTE_S)
            return "drafts"

    suffix_mod.SuffixSpeculator = SuffixSpeculator  # type: ignore[attr-defined]
    mr = types.ModuleType(vtargets.V2_RUNNER_MODULE)

    class GPUModelRunner:
        device = "cpu"
        model_config = types.SimpleNamespace(model="/models/tiny")
        vllm_config = types.SimpleNamespace(parallel_config=types.SimpleNamespace(tensor_parallel_size=1))

        def __init__(self, method: str | None, k: int = 3) -> None:
            self.speculative_config = (types.SimpleNamespace(method=method, num_speculative_tokens=k,
                                                             draft_model_config=None) if method else None)
            self.speculator: Any = (SuffixSpeculator() if method == "suffix" else StandaloneARSpeculator()) \
                if method else None
            self.k = k
            self.step_timing = StepTimingCollector()
            self.forwards = 0
            self.execute_model_state: Any = None

        def execute_model(self, scheduler_output: Any, intermediate_tensors: Any = None, dummy_run: bool = False,
                          skip_attn_for_dummy_run: bool = False) -> Any:
            _do(work, "prepare", HOST_S / 2)  # update states, prepare inputs
            self.step_timing.forward_start()
            for _ in range(3):
                group._all_reduce_out_place(1)
            _do(work, "forward", FWD_COMPUTE_S)
            self.forwards += 1
            # vllm 0.34 model_runner.py:2185-2202: K = 0 when the scheduler output says skip_drafts
            skip = bool(getattr(scheduler_output, "skip_drafts", False))
            self.execute_model_state = types.SimpleNamespace(num_spec_tokens_to_schedule=0 if skip else self.k)
            return None

        def sample_tokens(self, grammar_output: Any) -> Any:
            _do(work, "sample", HOST_S / 2)
            if self.speculator is not None:
                k = self.execute_model_state.num_spec_tokens_to_schedule if self.execute_model_state else self.k
                if isinstance(self.speculator, SuffixSpeculator):
                    out = self.speculator.propose("batch", None, None, None, None, None, None, None, None, None,
                                                  None, num_speculative_tokens=k)
                else:
                    out = self.speculator.propose("batch")
                assert out == "drafts"
            return "async-output"

        def _dummy_run(self, num_tokens: int) -> None:
            self.execute_model(so(num_tokens), dummy_run=True)
            if self.speculator is not None:
                self.speculator.propose("batch", dummy_run=True)

        def pool(self) -> Any:
            return "pooled"

        def shutdown(self) -> None:
            return None

    mr.GPUModelRunner = GPUModelRunner  # type: ignore[attr-defined]
    mods = {vtargets.PARALLEL_MODULE: ps, vtargets.V2_TIMING_MODULE: timing, spec_mod.__name__: spec_mod,
            suffix_mod.__name__: suffix_mod, vtargets.V2_RUNNER_MODULE: mr, **(replace or {})}
    with _registered(mods, out) as patched:
        yield types.SimpleNamespace(Runner=GPUModelRunner, group=group, out=out, patched=patched)


# --------------------------------------------------------------------------- SGLang


def drop_sglang_modules() -> dict[str, ModuleType]:
    """Remove every ``sglang`` module (and the stand-in's ``serve``) from ``sys.modules``; returns them."""
    gone = {k: v for k, v in sys.modules.items() if k == "sglang" or k.startswith("sglang.") or k == "serve"}
    for k in gone:
        del sys.modules[k]
    return gone


@contextmanager
def sglang(out: Path, flavor: str = "0.5.5") -> Iterator[ModuleType]:
    """The SGLang hook installed into ``out``, then the stand-in package (``flavor``) imported
    under SGLang's names, as a TP worker imports it; yields its ``serve`` module. Undone on exit."""
    from specmodel.engines.sglang import hook as sghook

    saved = drop_sglang_modules()
    saved_flavor = os.environ.get("SGLANG_STANDIN_FLAVOR")
    sys.path.insert(0, str(STANDIN))
    os.environ["SGLANG_STANDIN_FLAVOR"] = flavor
    try:
        sghook.install(out)
        import serve
        import sglang.srt.managers.scheduler  # noqa: F401 - patched as it is imported
        import sglang.srt.model_executor.model_runner  # noqa: F401
        import sglang.srt.speculative.eagle_draft_cuda_graph_runner  # noqa: F401
        import sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner  # noqa: F401

        yield serve
    finally:
        sghook.uninstall()
        drop_sglang_modules()
        sys.modules.update(saved)
        sys.path.remove(str(STANDIN))
        if saved_flavor is None:
            os.environ.pop("SGLANG_STANDIN_FLAVOR", None)
        else:
            os.environ["SGLANG_STANDIN_FLAVOR"] = saved_flavor


# --------------------------------------------------------------------------- a simulated device


class FakeClock:
    """``time.perf_counter`` under test: it moves only where the stand-in says work happens."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeGPU:
    """A device's timeline beside the host's fake clock: a launch queues its kernel on the stream
    (it starts when the stream is free and the host has launched it), an event's time is when its
    stream reaches it, and it has completed once the host's clock has passed that time (a kernel
    queued far ahead keeps every later event incomplete); a synchronise moves the host to the
    stream's end (the event's time, for an event). Stands in for ``torch.cuda.Event`` on a box
    without a GPU; ``sync_calls`` counts every synchronise, waiting or not."""

    def __init__(self, host: FakeClock) -> None:
        self.host = host
        self.free: dict[Any, float] = {}  # stream -> when its queued work ends
        self.streams: list[Any] = []  # the stream each event was recorded on
        self.sync_calls = 0

    def launch(self, seconds: float, stream: Any = None) -> None:
        self.free[stream] = max(self.free.get(stream, 0.0), self.host.t) + seconds

    def sync(self) -> None:
        self.sync_calls += 1
        self.host.t = max([self.host.t, *self.free.values()])

    def event_class(self) -> type:
        gpu = self

        class Event:
            def __init__(self, enable_timing: bool = False, **_: Any) -> None:
                self.t: float | None = None

            def record(self, stream: Any = None) -> None:
                gpu.streams.append(stream)
                self.t = max(gpu.free.get(stream, 0.0), gpu.host.t)

            def query(self) -> bool:
                return self.t is not None and self.t <= gpu.host.t

            def synchronize(self) -> None:
                gpu.sync_calls += 1
                if self.t is not None:
                    gpu.host.t = max(gpu.host.t, self.t)

            def elapsed_time(self, end: Any) -> float:
                if not (self.query() and end.query()):
                    raise RuntimeError("CUDA error: device not ready")  # cudaEventElapsedTime's answer
                return (end.t - self.t) * 1e3  # ms, as CUDA reports it

        return Event
