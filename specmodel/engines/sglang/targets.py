"""What the SGLang hook wraps, by name (read in SGLang 0.5.5 and 0.5.23: see
:mod:`specmodel.engines.sglang.hook`), and the phase of a forward from its ``ForwardMode``. No SGLang
import: names only."""

from __future__ import annotations

import re
from dataclasses import dataclass

from specmodel.engines.sglang.seams import TABLE
from specmodel.schema.formats import SGLANG_FORWARD
from specmodel.schema.phases import SGLANG_IGNORED_MODES, SGLANG_MODE_KINDS

#: Environment variable naming the output directory (set by ``specmodel sglang --out``).
ENV_DIR = "SPECMODEL_SGLANG_DIR"
DEFAULT_DIR = "sglang-forward"
LINE_SCHEMA = SGLANG_FORWARD.name
LINE_SCHEMA_VERSION = SGLANG_FORWARD.version

MODEL_RUNNER_MODULE = "sglang.srt.model_executor.model_runner"
#: Where SGLang keeps ``get_is_capture_mode()`` (True inside ``model_capture_mode()``, around
#: every CUDA-graph ``capture()``): 0.5.23 and 0.5.5.
CAPTURE_MODE_MODULES = ("sglang.srt.model_executor.runner_utils.capture_mode",
                        "sglang.srt.model_executor.cuda_graph_runner")
DRAFT_RUNNER_MODULE = "sglang.srt.speculative.eagle_draft_cuda_graph_runner"
DRAFT_EXTEND_RUNNER_MODULE = "sglang.srt.speculative.eagle_draft_extend_cuda_graph_runner"


@dataclass(frozen=True, kw_only=True)
class Target:
    """One member to wrap: ``module.cls`` and the first of ``methods`` that the class has."""

    module: str
    cls: str
    methods: tuple[str, ...]
    role: str  # "model_runner" | "draft" | "draft_extend" | "mle_step" | "mle_one_graph" | "frozen_draft" | step roles
    what: str  # what the user loses when it is missing

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.cls}"


TARGETS: tuple[Target, ...] = (
    Target(module=MODEL_RUNNER_MODULE, cls="ModelRunner", methods=("forward",), role="model_runner",
           what="no forward will be timed"),
    # 0.5.23 (eagle_worker_v2) calls .execute; 0.5.5 calls .replay. execute first: where a
    # version has both, replay may wrap execute and would be counted twice.
    Target(module=DRAFT_RUNNER_MODULE, cls="EAGLEDraftCudaGraphRunner", methods=("execute", "replay"),
           role="draft", what="draft CUDA-graph replays will not be timed"),
    Target(module=DRAFT_EXTEND_RUNNER_MODULE, cls="EAGLEDraftExtendCudaGraphRunner", methods=("execute", "replay"),
           role="draft_extend", what="draft-extend CUDA-graph replays will not be timed"),
)

#: SGLang 0.5.23's other drafters' graph runners: their replays bypass ``ModelRunner.forward``
#: (eager forwards of these drafters go through it, on a runner with ``is_draft_worker``).
MLE_RUNNER_MODULE = "sglang.srt.speculative.multi_layer_eagle_draft_extend_cuda_graph_runner"
FROZEN_KV_MTP_RUNNER_MODULE = "sglang.srt.speculative.frozen_kv_mtp_cuda_graph_runner"
DRAFTER_TARGETS_0523: tuple[Target, ...] = (
    # multi-layer EAGLE (multi_layer_eagle_worker_v2.py l. 897-907: "Graph replay bypasses
    # ModelRunner.forward"): the per-step graphs, one MTP layer's draft-extend per replay(bs, ...)
    # (multi_layer_eagle_draft_extend_cuda_graph_runner.py l. 487-537, called by the composite
    # runner's replay(step), l. 932-952)
    Target(module=MLE_RUNNER_MODULE, cls="MultiLayerEagleDraftExtendCudaGraphRunner", methods=("replay",),
           role="mle_step", what="multi-layer EAGLE draft-extend graph replays will not be timed"),
    # SGLANG_ENABLE_SINGLE_CG_DRAFT: every step's layer in one graph, replayed at step 0 (l. 1105-1128)
    Target(module=MLE_RUNNER_MODULE, cls="OneGraphMultiLayerEagleMultiStepDraftExtendCudaGraphRunner",
           methods=("replay",), role="mle_one_graph",
           what="multi-layer EAGLE single-graph draft replays will not be timed"),
    # FROZEN_KV_MTP (frozen_kv_mtp_worker_v2.py l. 494-501): the whole draft (seed forward + steps - 1
    # recurrent forwards) in one graph, execute(forward_batch) (frozen_kv_mtp_cuda_graph_runner.py l. 391)
    Target(module=FROZEN_KV_MTP_RUNNER_MODULE, cls="FrozenKVMTPCudaGraphRunner", methods=("execute",),
           role="frozen_draft", what="FROZEN_KV_MTP draft graph replays will not be timed"),
)

#: The scheduler's step (see "The scheduler's step" above): the loop's once-per-iteration call
#: bounds a step, ``run_batch`` names its batch. Kept apart from :data:`TARGETS` (forward seams).
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
STEP_TARGETS: tuple[Target, ...] = (
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("get_next_batch_to_run",), role="step_boundary",
           what="the scheduler's host work per step will not be timed (the profile counts GPU forwards only)"),
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("run_batch",), role="step_batch",
           what="the scheduler's host work per step will not be timed (the profile counts GPU forwards only)"),
)
#: PD disaggregation: the prefill and decode servers' loops call these instead of
#: ``get_next_batch_to_run`` (0.5.23 ``disaggregation/prefill.py`` l. 648 / 700, 806;
#: ``disaggregation/decode.py`` l. 3241 / 3142, 3189; 0.5.5 ``decode.py`` l. 948 / 833, 881). 0.5.5's
#: prefill loop calls ``get_new_batch_prefill`` directly (l. 324, 359), which the normal loop
#: also calls inside ``get_next_batch_to_run``: no seam bounds its steps, so none is written there
#: and the summary says the host work was not measured.
DISAGG_STEP_TARGETS: tuple[Target, ...] = (
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("get_next_disagg_decode_batch_to_run",),
           role="step_boundary", what="a PD-disaggregated decode server's host work per step will not be timed"),
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("get_next_disagg_prefill_batch_to_run",),
           role="step_boundary", what="a PD-disaggregated prefill server's steps will not be timed"),
)
STEP_ROLES = ("step_boundary", "step_batch")

#: ForwardMode name -> phase (``None``: deliberately not recorded). "DECODE" depends on the runner.
#: (from the forward-kind table, schema/phases.py; DLLM_EXTEND: 0.5.23 diffusion LLMs; PREBUILT:
#: 0.5.23 disaggregated decode, KV arrived, no model forward of its own)
MODE_PHASES: dict[str, str | None] = {
    **{m: k for m, k in SGLANG_MODE_KINDS.items() if m != "DECODE"},
    **dict.fromkeys(SGLANG_IGNORED_MODES),
}


#: ForwardModes that, on the drafter's runner (``is_draft_worker``), are still the draft: a forward
#: there is never the target's. DFlash runs its draft block as TARGET_VERIFY on the draft runner
#: (0.5.23 ``dflash_worker_v2.py`` l. 2639-2689: ``forward_mode=ForwardMode.TARGET_VERIFY`` then
#: ``self.draft_model_runner.forward``), which must not pool into the target's verify rows.
DRAFT_RUNNER_MODES = ("DECODE", "TARGET_VERIFY")


def phase_for_mode(mode_name: str, *, is_draft: bool) -> str | None:
    """Phase of a ``ModelRunner.forward`` call; raises ``KeyError`` for a mode we do not know."""
    if mode_name in DRAFT_RUNNER_MODES and is_draft:
        return "draft"
    if mode_name == "DECODE":
        return "decode"
    return MODE_PHASES[mode_name]


def version_tuple(v: str) -> tuple[int, ...]:
    """``0.5.23`` -> (0, 5, 23); an unreadable part ends the tuple (``0.5.23rc1`` -> (0, 5, 23))."""
    out = []
    for part in v.split("."):
        m = re.match(r"\d+", part)
        if m is None:
            break
        out.append(int(m.group()))
        if m.end() != len(part):
            break
    return tuple(out)


def since(target: Target) -> str | None:
    """The first checked SGLang version that has any of the target's methods, read off the seam table
    (:mod:`specmodel.engines.sglang.seams`, the one record of which version has which member); None
    where one of them is in every checked version (lacking it is then always warned)."""
    firsts = []
    for m in target.methods:
        seam = TABLE.find(target.module, target.cls, m)
        first = TABLE.since(seam) if seam is not None else None
        if first is None:
            return None
        firsts.append(first)
    return min(firsts, key=version_tuple) if firsts else None


def expected_absent(target: Target, version: str) -> bool:
    """The installed SGLang is older than the version that brought the seam (:func:`since`): lacking
    it is expected, not warned."""
    have, first = version_tuple(version), since(target)
    return first is not None and bool(have) and have < version_tuple(first)

