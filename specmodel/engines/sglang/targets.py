"""What the SGLang hook wraps, by name (read in SGLang 0.5.5 and 0.5.23: see
:mod:`specmodel.engines.sglang.hook`), and the phase of a forward from its ``ForwardMode``. No SGLang
import: names only."""

from __future__ import annotations

from dataclasses import dataclass

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
    role: str  # "model_runner" | "draft" | "draft_extend"
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

#: The scheduler's step (see "The scheduler's step" above): the loop's once-per-iteration call
#: bounds a step, ``run_batch`` names its batch. Kept apart from :data:`TARGETS` (forward seams).
SCHEDULER_MODULE = "sglang.srt.managers.scheduler"
STEP_TARGETS: tuple[Target, ...] = (
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("get_next_batch_to_run",), role="step_boundary",
           what="the scheduler's host work per step will not be timed (the profile counts GPU forwards only)"),
    Target(module=SCHEDULER_MODULE, cls="Scheduler", methods=("run_batch",), role="step_batch",
           what="the scheduler's host work per step will not be timed (the profile counts GPU forwards only)"),
)
STEP_ROLES = ("step_boundary", "step_batch")

#: ForwardMode name -> phase (``None``: deliberately not recorded). "DECODE" depends on the runner.
#: (from the forward-kind table, schema/phases.py; DLLM_EXTEND: 0.5.23 diffusion LLMs; PREBUILT:
#: 0.5.23 disaggregated decode, KV arrived, no model forward of its own)
MODE_PHASES: dict[str, str | None] = {
    **{m: k for m, k in SGLANG_MODE_KINDS.items() if m != "DECODE"},
    **dict.fromkeys(SGLANG_IGNORED_MODES),
}


def phase_for_mode(mode_name: str, *, is_draft: bool) -> str | None:
    """Phase of a ``ModelRunner.forward`` call; raises ``KeyError`` for a mode we do not know."""
    if mode_name == "DECODE":
        return "draft" if is_draft else "decode"
    return MODE_PHASES[mode_name]

